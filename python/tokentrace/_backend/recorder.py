"""The recorder behind a trace: the native shim, through the extension tokentrace._native.

NativeBackend is the small interface the rest of the package uses: start/stop/active/out_path,
site(), wrap_forward() (a module's forward, wrapped) and pre_hook()/post_hook() hook objects,
current() and current_token(), escape(), kernels_status. The hooks are C++ objects that push/pop
NVTX ranges in the "tokentrace" domain; the shim turns those into calls and tokens and joins
kernels to them. There is no other recorder: without the extension, get_backend() raises and
says how to build it.
"""

from .._common import loader
from .._errors import fail


def check_kernel_mode(kernels):
    """The kernel mode to record with; C++ (src/core/config.cc) judges it. None stays None:
    the shim then takes TOKENTRACE_KERNELS, or its default when that is unset."""
    native = loader.load()
    if native is None:
        get_backend()  # raises: without the extension there is nothing to record with
    if kernels is None:
        return None
    if not isinstance(kernels, str):
        fail(f"kernels={kernels!r} is not a kernel mode ({native.KERNEL_MODES_ACCEPTED})")
    try:
        native.parse_kernel_mode(kernels, "kernels")
    except ValueError as exc:
        fail(str(exc))
    return kernels


class NativeBackend:
    name = "native"

    def __init__(self, native):
        self._n = native
        import torch
        native.set_tensor_type(torch.Tensor)

    @property
    def kernels_status(self):
        return self._n.kernels_status()

    def start(self, out_path, kernels=None):
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

    def settled_path(self):
        """The trace file's name, once the shim has created the file (a flush does, as soon
        as calls were recorded): another process of the same run may own the requested name."""
        self._n.flush()
        return self._n.out_path()

    def set_forward_identity(self, fn):
        """What a pickled or deep-copied forward wrapper reduces to (the hooks'
        original_forward, pickled by its module path): handed to the extension, which names no
        module of the package."""
        self._n.set_forward_identity(fn)

    def site_kind(self, name):
        """The code of site kind `name` ('root', 'module', 'range', 'op'):
        include/tokentrace/kinds.h, through the extension."""
        return self._n.SITE_KINDS[name]

    def site(self, name, kind):
        return self._n.site(name, kind)

    def push(self, site_id):
        """Opens a call of `site_id` on this thread (the c10d collectives' wrappers)."""
        self._n.push(site_id)

    def pop(self):
        self._n.pop()

    def pop_output(self, output, read=None):
        """Closes the innermost open call with `output`'s first tensor as its output; `read`:
        the tensor the call read and returned as it is (its data flow, for op records)."""
        self._n.pop_output(output, read)

    def link(self, output, slot, handle):
        """Op data flow: the innermost open call read (output 0: argument `slot`) or returned
        (output 1) the tensor of `handle`, torch._C._tensor_impl_raw_handle(tensor)
        (include/tokentrace/tokentrace.h tokentrace_link)."""
        self._n.link(output, slot, handle)

    def current(self):
        """(call id, token) of the innermost open call on this thread ((0, 0) when none)."""
        return self._n.current()

    def current_token(self):
        """The token of the innermost open call on this thread (0 when none)."""
        return self._n.current()[1]

    def escape(self):
        """Counts a host read of a tensor value (escape kind host_read)."""
        self._n.escape(self._n.ESCAPE_KINDS["host_read"])

    def first_tensor(self, output):
        """(tensor, path) of the first tensor in a module output, or (None, None): the search
        the recorded output comes from (FindTensor, python/src/native.cc)."""
        return self._n.first_tensor(output)

    def wrap_forward(self, site_id, name, kind, forward, on_output=None, on_input=None):
        return self._n.wrap_forward(site_id, name, kind, forward, True, on_output, on_input)

    def hide_attributes(self, entries, missing):
        """For each (dict, key, wrapper, previous) whose key holds the wrapper: puts back
        previous (`missing`: deletes the key); returns those entries (python/src/
        attribute_swap.cc)."""
        return self._n.hide_attributes(entries, missing)

    def show_attributes(self, hidden):
        """Puts back the wrappers of hide_attributes' entries."""
        self._n.show_attributes(hidden)

    @property
    def ops_buffer_events(self):
        return self._n.OPS_BUFFER_EVENTS

    def api_address(self):
        """The address of libtokentrace.so's versioned entry table (tokentrace_get_api), which
        the op observer calls through and checks (see cuda/torch/op_observer.cc)."""
        return self._n.api_address()

    def pre_hook(self, site_id, name, kind):
        return self._n.PreHook(site_id, name, kind)

    def post_hook(self, site_id, record=True):
        return self._n.PostHook(site_id, record)


def get_backend():
    """The native backend; raises TokentraceError when the extension cannot be loaded."""
    native = loader.load()
    if native is None:
        fail(f"the native recorder is unavailable: {loader.unavailable_reason()}; build it: "
             f"pip install . , or scripts/setup.sh and PYTHONPATH=python "
             f"TOKENTRACE_NATIVE_DIR=build")
    return NativeBackend(native)
