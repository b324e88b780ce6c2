"""The faces of the subpackages: each `__init__.py` names what the subpackage offers, once, in
its `if TYPE_CHECKING:` imports, and a name is imported from its file on first use.

The TYPE_CHECKING imports are the one statement of a face: type checkers read them as real
imports, and lazy_face reads the same lines (the file's own source, parsed with the compiler's
`_ast`) into the map of name -> file that runs, so the two cannot disagree.

A face stays as cheap as an empty module: `import tokentrace._common` (what `tokentrace
--version` and `tt.load` need first) imports none of its files, so neither torch nor the
extension comes with it; its TYPE_CHECKING blocks are parsed on the first name asked for, and
only they (`import ast` would cost ten times `import tokentrace`). The names a face offers are
its `__all__`; tests/python/test_contracts.py checks that code outside the subpackage imports
only those, and that every name resolves.
"""

import importlib
import sys


def lazy_face(package, otherwise=None):
    """(__getattr__, __dir__) for the face of `package` (its __name__).

    The face's names are those its module-level `if TYPE_CHECKING:` blocks import: `from .store
    import add_rows` offers add_rows from store.py, `from . import loader` the module loader.py
    itself (for callers that use it as a namespace, loader.load(), or tests that reach into its
    state), `from ._read import Trace` (the top package) Trace from the face of _read. Its
    `__all__` adds the public functions and classes the file itself defines (native_available
    on the top's face). The blocks are parsed once, when the first name (or `__all__`) is
    asked for, not at import: the compiler's `_ast` module alone costs more than `import
    tokentrace` does. `otherwise(name)`, if given, answers (or raises for) a name the face
    lacks; else AttributeError."""
    namespace = sys.modules[package].__dict__
    parsed = []  # [the map], once

    def exports():
        if not parsed:
            parsed.append(face_imports(namespace["__file__"]))
        return parsed[0]

    def __getattr__(name):
        if name == "__all__":
            own = [n for n, value in list(namespace.items()) if not n.startswith("_")
                   and getattr(value, "__module__", None) == package
                   and (isinstance(value, type) or hasattr(value, "__code__"))]
            value = sorted(set(exports()) | set(own))
        elif name in exports():
            module_name, attribute = exports()[name]
            module = importlib.import_module(f"{package}.{module_name}")
            value = module if attribute is None else getattr(module, attribute)
        elif otherwise is not None:
            return otherwise(name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value  # once: later lookups are plain attribute reads
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports()) | {"__all__"})

    return __getattr__, __dir__


def face_imports(path):
    """{name: (file relative to the package, the name in it, or None for the file itself)} from
    the module-level `if TYPE_CHECKING:` blocks of the `__init__.py` at `path`."""
    import _ast  # here: its classes cost 1 ms to make, twice what `import tokentrace` costs
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    blocks, keep = [], False
    for line in lines:  # the blocks' lines only: a whole face would cost ten times as much
        if line.startswith("if TYPE_CHECKING:"):
            keep = True
        elif line and not line[0].isspace():
            keep = False
        blocks.append(line if keep else "")  # blank: the line numbers stay the file's
    exports = {}
    for block in compile("\n".join(blocks), path, "exec", _ast.PyCF_ONLY_AST).body:
        for node in block.body:
            if not isinstance(node, _ast.ImportFrom) or node.level != 1:
                raise ImportError(f"{path}: a face's TYPE_CHECKING block holds only "
                                  f"`from .x import a` and `from . import x` (line {node.lineno})")
            for alias in node.names:
                name = alias.asname or alias.name
                exports[name] = ((node.module, alias.name) if node.module
                                 else (alias.name, None))
    return exports
