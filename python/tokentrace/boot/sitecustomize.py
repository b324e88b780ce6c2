"""tokentrace preload boot (put on PYTHONPATH by `tokentrace run`).

It does two things at interpreter start, and imports nothing heavy:
  1. runs the sitecustomize this one shadows, if there is one further down sys.path;
  2. waits for `import torch` to finish, then hands over to tokentrace.preload, which hooks
     the first model whose forward runs (its first root call).
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


def _torch_ready():
    try:
        _ensure_package_importable()
        from tokentrace import preload

        preload.install()
    except Exception as exc:  # never stop the job
        print(f"tokentrace: preload hooks not installed: {exc}", file=sys.stderr)


class _TorchWatcher:
    """A one-shot meta path finder: runs _torch_ready right after torch's module body."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_hook(module):
            exec_module(module)
            _torch_ready()

        spec.loader.exec_module = exec_then_hook
        return spec


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
            sys.meta_path.insert(0, _TorchWatcher())
    except Exception as exc:
        print(f"tokentrace: preload boot failed: {exc}", file=sys.stderr)


_boot()
