"""tokentrace preload boot (put on PYTHONPATH by `tokentrace run`).

It does two things at interpreter start, and imports nothing heavy:
  1. runs the sitecustomize this one shadows, if there is one further down sys.path;
  2. waits for torch's module body to finish (however torch is first imported: `import
     torch`, `from transformers import ...`, importlib, after find_spec probes), then hands
     over to tokentrace.preload, which hooks the first model whose forward runs (its first
     root call). The waiting is _tokentrace_after_import.py's, beside this file.
A job that never imports torch is untouched. Nothing here may stop the job: every failure is
one line on stderr.
"""

import os
import sys

_BOOT = os.path.dirname(os.path.abspath(__file__))


def _chain():
    """Import the next sitecustomize on sys.path (the one we shadow), under its own name."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _BOOT]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    ours = sys.modules.get("sitecustomize")
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules["sitecustomize"] = ours


def _ensure_package_importable():
    import importlib.util

    if importlib.util.find_spec("tokentrace") is None:
        # Source tree / package layout: <root>/tokentrace/boot/sitecustomize.py
        sys.path.append(os.path.dirname(os.path.dirname(_BOOT)))


_hooked: list[bool] = []  # holds True once _torch_ready ran


def _torch_ready():
    _hooked.append(True)
    try:
        _ensure_package_importable()
        from tokentrace import preload

        preload.install()
    except Exception as exc:  # never stop the job
        print(f"tokentrace: preload hooks not installed: {exc}", file=sys.stderr)


def _say_if_never_hooked():
    """At exit: a job that imported torch past the watcher (nothing was hooked) is told."""
    if "torch" in sys.modules and not _hooked:
        print("tokentrace: torch was imported but tokentrace's hooks were never installed, so "
              "nothing was recorded (the import went past the boot's watcher)", file=sys.stderr)


def _boot():
    try:
        _chain()
    except Exception as exc:
        print(f"tokentrace: the job's own sitecustomize failed: {exc!r}", file=sys.stderr)
    if os.environ.get("TOKENTRACE_DISABLE"):
        return
    try:
        if "torch" in sys.modules:
            _torch_ready()
        else:
            import atexit

            from _tokentrace_after_import import after_import

            after_import("torch", lambda module: None if _hooked else _torch_ready())
            atexit.register(_say_if_never_hooked)
    except Exception as exc:
        print(f"tokentrace: preload boot failed: {exc}", file=sys.stderr)


_boot()
