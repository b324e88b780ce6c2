"""Finds the native extension `_native` (nanobind, python/src/native.cc).

Two layouts are supported:
  * an installed package (pip install .): `tokentrace/_native*.so` sits in the package
    folder (PACKAGE_DIR, next to __init__.py), with libtokentrace.so and the `tokentrace`
    program beside it (RPATH $ORIGIN);
  * a development tree: PYTHONPATH=python and TOKENTRACE_NATIVE_DIR=<cmake build dir>, the
    directory that holds `_native*.so` and libtokentrace.so.

`load()` returns the module, or None with the reason in `unavailable_reason()`. Importing
tokentrace never needs the extension; recording does (_backend/recorder.py's get_backend()
raises with that reason and how to build it). This file imports nothing of the package: the
trace file's schema (store.py) comes through it, so it sits in _common, under every layer
that needs the extension.
"""

import glob
import importlib.machinery
import importlib.util
import os
import sys

# The package folder (python/tokentrace, or where pip put it): the installed native files
# are there, next to __init__.py.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_state = {"tried": False, "module": None, "reason": ""}


def _candidates(native_dir):
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(native_dir, "_native" + suffix)
        if os.path.exists(path):
            yield path
    # nanobind may name it _native.cpython-311-x86_64-linux-gnu.so or _native.abi3.so
    for path in sorted(glob.glob(os.path.join(native_dir, "_native*.so"))):
        yield path


def _load_from(native_dir, errors):
    seen = set()
    for path in _candidates(native_dir):
        if path in seen:
            continue
        seen.add(path)
        try:
            spec = importlib.util.spec_from_file_location("tokentrace._native", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except Exception as exc:  # a broken build must not break `import tokentrace`
            errors.append(f"{path}: {exc}")
    return None


def load():
    """The native extension module, or None (see unavailable_reason())."""
    if _state["tried"]:
        return _state["module"]
    _state["tried"] = True
    errors = []
    module = None
    native_dir = os.environ.get("TOKENTRACE_NATIVE_DIR")
    if native_dir:  # a development build wins over anything installed
        module = _load_from(os.path.abspath(native_dir), errors)
    if module is None:
        try:  # installed or editable package: the regular import system knows where it is
            module = importlib.import_module("tokentrace._native")
        except ImportError as exc:
            if "No module named" not in str(exc):
                errors.append(f"tokentrace._native: {exc}")
    if module is not None:
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


def search_dirs():
    """Where the native files are looked for, first hit wins: $TOKENTRACE_NATIVE_DIR, the
    directory of the loaded extension, the package folder."""
    dirs = []
    if os.environ.get("TOKENTRACE_NATIVE_DIR"):
        dirs.append(os.path.abspath(os.environ["TOKENTRACE_NATIVE_DIR"]))
    module = _state["module"]
    if module is not None and getattr(module, "__file__", None):
        dirs.append(os.path.dirname(os.path.abspath(module.__file__)))
    dirs.append(PACKAGE_DIR)
    return dirs


def find_program():
    """Path of the `tokentrace` CLI program, or None."""
    for d in search_dirs():
        path = os.path.join(d, "tokentrace")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None
