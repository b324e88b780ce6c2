"""OpMode: the TorchFunctionMode that sees the ops a model calls, shared by saving op outputs
(_record/op_saver.py) and editing them (_edit/op_edits.py).

The mode sees each outermost torch function call (torch.relu, F.linear, x + 1, x[i]); nested
calls (the ones the function itself makes, and the mode's own work) run with it off. A call
is known by TorchLens's name of it: the function's, or the Python entry point's that torch
dispatched from under another name (x / y reaches the mode as Tensor.div, and is truediv;
op_groups.py marks these calls while a mode is on). After a
call, when the function may be one the selector chooses (by its type, may_save: tt.func("relu")
keeps relu calls only; a selector decided otherwise keeps every call), chosen(func, args,
kwargs, out) runs and returns what the caller gets. It is entered on the model's thread only
while a run that needs it is on: a run with no such selector installs none and pays nothing.

While it is on, code the job compiled (torch.compile) runs eagerly (the compiler's stance
"force_eager", process-wide, restored when the mode is removed): TorchDynamo would trace into
the mode and guard on its cache of decisions, which fills as calls run, so the guard fails on
the very frame that made it (an AssertionError out of the job's call); and a compiled graph
runs its ops where no mode sees them, so its ops would be neither saved nor edited.
"""

import torch
from torch.overrides import TorchFunctionMode

from . import op_groups
from .halt import HALT
from .op_selectors import op_types_of


class OpMode(TorchFunctionMode):
    def __init__(self, selector):
        super().__init__()
        self.selector = selector  # may_save(types) says which functions chosen() sees
        self._wanted = {}  # function -> whether chosen() sees its calls
        self.entered = False
        self._eager = None  # the compiler's stance while on (a set_stance), to restore

    def install(self):
        try:  # not from inside a compiled region (the stance is the caller's there)
            self._eager = torch.compiler.set_stance("force_eager")
        except RuntimeError:
            self._eager = None
        op_groups.install()  # the Python calls' names reach the mode (op_groups.py)
        self.__enter__()
        self.entered = True

    def remove(self):
        if self.entered:
            self.entered = False
            self.__exit__(None, None, None)
            op_groups.remove()
        if self._eager is not None:
            self._eager.__exit__(None, None, None)
            self._eager = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if HALT.pending:  # halt= chose the op before this one: the run ends here
            HALT.check()
        kwargs = kwargs or {}
        # The call's name: TorchLens's, of the Python entry point that made it where torch
        # dispatches under another (x / y reaches here as Tensor.div: op_groups.py)
        name = op_groups.claim() or getattr(func, "__name__", None)
        out = func(*args, **kwargs)
        if not isinstance(name, str):
            return out
        wanted = self._wanted.get(name)
        if wanted is None:
            wanted = self._wanted[name] = self._decide(name)
        return self.chosen(func, name, args, kwargs, out) if wanted else out

    def _decide(self, name):
        return self.selector.may_save(op_types_of(name))

    def chosen(self, func, name, args, kwargs, out):
        """What the call of `func` (by TorchLens's name `name`) returns, given its output `out`
        (a subclass's work)."""
        return out
