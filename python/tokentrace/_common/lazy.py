"""The faces of the subpackages: each `__init__.py` names what the subpackage offers, and a name
is imported from its file on first use.

A face stays as cheap as an empty module: `import tokentrace._common` (what `tokentrace
--version` and `tt.load` need first) imports none of its files, so neither torch nor the
extension comes with it. The names a face offers are its `__all__`; tests/python/
test_contracts.py checks that code outside the subpackage imports only those.
"""

import importlib
import sys


def lazy_face(package, exports):
    """(__getattr__, __dir__) for the face of `package` (its __name__). exports maps each name
    the face offers to the file of the subpackage that defines it ("store" for store.py); a
    name that is the file's own name is the module itself (for callers that use it as a
    namespace, loader.load(), or tests that reach into its state)."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name):
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{where}")
        value = module if name == where else getattr(module, name)
        namespace[name] = value  # once: later lookups are plain attribute reads
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
