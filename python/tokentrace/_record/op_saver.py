"""Saved outputs of ops: save= with an op selector (tt.func("relu"), ...). An op has no
forward hook, so its output is taken where the model called it: an OpMode
(_common/op_mode.py, a TorchFunctionMode), entered on the model's thread only while such a run
records (a trace whose save= names no op installs none and pays nothing for it).

The functions it keeps are the ones the selector may choose (by their type: save=tt.func("relu")
keeps relu calls only; a selector decided by labels, modules or a predicate keeps every call,
as the label is numbered only when the trace is read). A kept call's first output tensor goes
to the TensorSink inside a call of the range site OP_SAVE_SITE: that call comes right after the
op calls the function ran, under the same parent (or, for a Python call op records keep as an
op of its own, _common/op_groups.py, inside that op's call, after its ops), and holds the
copy's own ops (detach, clone) apart from the model's. Reading it back (_read/op_sites.py),
the saved tensor belongs to the last op call before it, or to the op it is inside, when their
shapes agree.
"""

from .._common import HALT, OP_SAVE_SITE, OpMode


class OpSaver(OpMode):
    def __init__(self, backend, sink, selector):
        super().__init__(selector)
        self.backend, self.sink = backend, sink
        self.site = backend.site(OP_SAVE_SITE, backend.site_kind("range"))
        self.errors = 0    # outputs that could not be saved (counted in save_failed)

    def chosen(self, func, name, args, kwargs, out):
        HALT.busy += 1  # the copy's own calls are not the model's next op (halt=)
        try:
            self._save(out)
        finally:
            HALT.busy -= 1
        return out

    def _save(self, out):
        backend = self.backend
        try:
            tensor, _ = backend.first_tensor(out)
        except Exception:
            return
        if tensor is None:
            return
        backend.push(self.site)
        try:
            self.sink.save(backend.current()[0], tensor)
        except Exception:  # never crash the traced job: counted, as a module's failed save
            self.errors += 1
        finally:
            backend.pop()
