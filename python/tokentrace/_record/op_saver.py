"""Saved outputs of ops: save= with an op selector (tt.func("relu"), ...). An op has no
forward hook, so its output is taken where the model called it: a TorchFunctionMode, entered
on the model's thread only while such a run records (a trace whose save= names no op installs
none and pays nothing for it).

The mode sees each outermost torch function call (torch.relu, F.linear, x + 1, x[i]); nested
calls run with it off. After the call, when the function may be one the selector chooses
(by its type: save=tt.func("relu") keeps relu calls only; a selector decided by labels,
modules or a predicate keeps every call, as the label is numbered only when the trace is
read), its first output tensor goes to the TensorSink inside a call of the range site
OP_SAVE_SITE: that call comes right after the op calls the function ran, under the same
parent, and holds the copy's own ops (detach, clone) apart from the model's. Reading it back
(_read/op_sites.py), the saved tensor belongs to the last op call before it, when their
shapes agree.
"""

from torch.overrides import TorchFunctionMode

from .._common import OP_SAVE_SITE, op_types_of


class OpSaver(TorchFunctionMode):
    def __init__(self, backend, sink, selector):
        super().__init__()
        self.backend, self.sink, self.selector = backend, sink, selector
        self.site = backend.site(OP_SAVE_SITE, backend.site_kind("range"))
        self._wanted = {}  # function -> whether its outputs are kept
        self.errors = 0    # outputs that could not be saved (counted in save_failed)
        self.entered = False

    def install(self):
        self.__enter__()
        self.entered = True

    def remove(self):
        if self.entered:
            self.entered = False
            self.__exit__(None, None, None)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        try:
            wanted = self._wanted.get(func)
        except TypeError:  # an unhashable callable: decided each time
            wanted = self._decide(func)
        if wanted is None:
            wanted = self._wanted[func] = self._decide(func)
        if wanted:
            self._save(out)
        return out

    def _decide(self, func):
        name = getattr(func, "__name__", None)
        return isinstance(name, str) and self.selector.may_save(op_types_of(name))

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
