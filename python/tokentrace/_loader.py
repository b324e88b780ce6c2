"""Finds the native extension `_native` (nanobind, python/src/native.cc).

Two layouts are supported:
  * an installed package (pip install .): `tokentrace/_native*.so` sits next to this file,
    with libtokentrace.so and the `tokentrace` program beside it (RPATH $ORIGIN);
  * a development tree: PYTHONPATH=python and TOKENTRACE_NATIVE_DIR=<cmake build dir>, the
    directory that holds `_native*.so` and libtokentrace.so.

`load()` returns the module, or None with the reason in `unavailable_reason()`. A missing
extension is not an error: tokentrace then records calls and tokens with its pure-Python
recorder (no kernels). Set TOKENTRACE_BACKEND=python to force that recorder, or
TOKENTRACE_BACKEND=native to make a missing extension an error.
"""

import glob
import importlib.machinery
import importlib.util
import os
import sys

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_state = {"tried": False, "module": None, "reason": ""}


def _candidates():
    native_dir = os.environ.get("TOKENTRACE_NATIVE_DIR")
    dirs = []
    if native_dir:
        dirs.append(os.path.abspath(native_dir))
    dirs.append(_PKG_DIR)
    for d in dirs:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(d, "_native" + suffix)
            if os.path.exists(path):
                yield path
        # nanobind may name it _native.cpython-311-x86_64-linux-gnu.so or _native.abi3.so
        for path in sorted(glob.glob(os.path.join(d, "_native*.so"))):
            yield path


def load():
    """The native extension module, or None (see unavailable_reason())."""
    if _state["tried"]:
        return _state["module"]
    _state["tried"] = True
    if os.environ.get("TOKENTRACE_BACKEND", "").lower() == "python":
        _state["reason"] = "TOKENTRACE_BACKEND=python"
        return None
    errors = []
    seen = set()
    for path in _candidates():
        if path in seen:
            continue
        seen.add(path)
        try:
            spec = importlib.util.spec_from_file_location("tokentrace._native", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception as exc:  # a broken build must not break `import tokentrace`
            errors.append(f"{path}: {exc}")
            continue
        sys.modules["tokentrace._native"] = module
        _state["module"] = module
        return module
    if errors:
        _state["reason"] = "the native extension failed to load (" + "; ".join(errors) + ")"
    else:
        _state["reason"] = ("the native extension is not built (no _native*.so in the package "
                            "or in $TOKENTRACE_NATIVE_DIR)")
    return None


def unavailable_reason():
    load()
    return _state["reason"]


def native_dir():
    """The directory holding the loaded extension (and libtokentrace.so, tokentrace), or None."""
    module = load()
    if module is None:
        return None
    return os.path.dirname(os.path.abspath(module.__file__))


def find_program():
    """Path of the `tokentrace` CLI program, or None."""
    dirs = []
    if os.environ.get("TOKENTRACE_NATIVE_DIR"):
        dirs.append(os.path.abspath(os.environ["TOKENTRACE_NATIVE_DIR"]))
    dirs.append(_PKG_DIR)
    for d in dirs:
        path = os.path.join(d, "tokentrace")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def find_shim():
    """Path of libtokentrace.so, or None."""
    dirs = []
    if os.environ.get("TOKENTRACE_NATIVE_DIR"):
        dirs.append(os.path.abspath(os.environ["TOKENTRACE_NATIVE_DIR"]))
    dirs.append(_PKG_DIR)
    for d in dirs:
        path = os.path.join(d, "libtokentrace.so")
        if os.path.isfile(path):
            return path
    return None
