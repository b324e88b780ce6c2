"""The recorder behind a trace: the native shim (through _native) or the pure-Python one.

Both expose the same small interface (see PyRecorder): start/stop/active/out_path, site(),
pre_hook()/post_hook() hook objects, current(), escape(), take_outputs(), kernels_status.
With the extension loaded, the hooks are C++ objects that push/pop NVTX ranges in the
"tokentrace" domain; the shim turns those into calls and tokens and joins kernels to them.
"""

import os

from . import _loader
from ._errors import fail
from ._pyrecorder import KIND_MODULE, KIND_RANGE, KIND_ROOT, PyRecorder  # noqa: F401

_KERNEL_MODES = ("off", "summary", "full")


def check_kernel_mode(kernels):
    if kernels is None:
        return "summary"
    if isinstance(kernels, str):
        if kernels in _KERNEL_MODES:
            return kernels
        if kernels.startswith("sample:"):
            n = kernels[len("sample:"):]
            if n.isdigit() and int(n) >= 1:
                return kernels
    fail(f"kernels={kernels!r} is not a kernel mode; accepted: 'off', 'summary', 'full', "
         f"'sample:N' (N >= 1)")


class NativeBackend:
    name = "native"

    def __init__(self, native):
        self._n = native
        import torch
        native.set_tensor_type(torch.Tensor)

    @property
    def kernels_status(self):
        return self._n.kernels_status()

    def start(self, out_path, kernels="summary"):
        try:
            self._n.start(out_path, kernels, None)
        except RuntimeError as exc:
            fail(str(exc))
        return self._n.out_path()

    def stop(self):
        try:
            self._n.stop()
        except RuntimeError as exc:
            fail(str(exc))

    def active(self):
        return self._n.active()

    def out_path(self):
        return self._n.out_path()

    def flush(self):
        self._n.flush()

    def site(self, name, kind):
        return self._n.site(name, kind)

    def push(self, site_id):
        self._n.push(site_id)

    def pop(self):
        self._n.pop()

    def current(self):
        return self._n.current()

    def escape(self, kind=4):
        self._n.escape(kind)

    def pre_hook(self, site_id, name, kind):
        return self._n.PreHook(site_id, name, kind)

    def post_hook(self, site_id, record=True):
        return self._n.PostHook(site_id, record)

    def take_outputs(self):
        return self._n.take_outputs()


class _PyAdapter(PyRecorder):
    """PyRecorder with the native hook signatures."""

    def pre_hook(self, site_id, name=None, kind=None):
        return PyRecorder.pre_hook(self, site_id)


_python = None


def get_backend():
    """The native backend when the extension loads (unless TOKENTRACE_BACKEND=python)."""
    global _python
    choice = os.environ.get("TOKENTRACE_BACKEND", "").lower()
    if choice not in ("", "native", "python"):
        fail(f"TOKENTRACE_BACKEND={choice!r} is not accepted; use 'native' or 'python'")
    native = _loader.load() if choice != "python" else None
    if native is not None:
        return NativeBackend(native)
    if choice == "native":
        fail("TOKENTRACE_BACKEND=native but " + _loader.unavailable_reason())
    if _python is None:
        _python = _PyAdapter(_loader.unavailable_reason())
    return _python
