"""Op-level edits: tt.when(tt.func("relu") & tt.in_module("block"), action) edits the output of
the ops the selector chooses, while the model runs.

An op has no forward hook, so its output is edited where the model called it: OpEdits, an
OpMode (_common/op_mode.py, the TorchFunctionMode that saving op outputs uses too), entered by
EditHooks (hooks.py) only when some rule selects ops: a run with no op rule installs no mode
and pays nothing. After an outermost torch function returns (torch.relu, F.linear, x + 1),
each op rule whose selector chooses it (matches_live, asked of a LiveOp: the function, the
module calls open around it, the token) edits a copy of its first output tensor, and the copy
is what the model gets (the output may be a view of the op's input, or kept for backward).
Ops outside the root's calls (generate's own, between tokens) are no op sites and are left
alone, as _read/op_sites.py gives them no label.

What can be decided while the op runs: tt.func(...) (by the function's type, as saving
decides: x / y is tt.func("div") and tt.func("truediv")), tt.in_module(...) (the module calls
open around the op, counted per run as the module rules count them), tt.where(pred) (pred gets
a LiveOp), and &, |, ~ of those. Labels (tt.label, tt.contains, tt.regex) are numbered only
when the trace is read: tt.when refuses them (rules.py).

The call number k of an op rule is the number of ops its selector has chosen so far in the run
(1-based; a declarative op counts in the patch table like a module site, a callable in Python);
the token is the root call, as for module rules; calls= selects among them in the same way.
"""

import functools
import operator

from .._common import OpMode, first_tensor, op_type, op_types_of, replace_in_output
from .._errors import fail

_READ_ONLY = ("layer_label", "label", "label_short", "type_index", "step_index", "key",
              "num_passes", "call_id")


class LiveOp:
    """The op running now, as an op-level edit's tt.where predicate sees it: func_name (the
    torch function's name, "relu", "linear", "__add__"), layer_type (its TorchLens type),
    types (the types it may run as), modules (the module calls open around it, "site:k",
    the root call first), module (the innermost), token and pass_index (the root call),
    output_index (0), out and shape (its first output tensor), args, kwargs. Its labels are
    not known yet: reading layer_label, label, ... is an error."""

    output_index = 0

    def __init__(self, func_name, modules, token, out, args, kwargs):
        self.func_name, self.modules, self.token = func_name, modules, token
        self.layer_type = op_type(func_name)
        self.types = op_types_of(func_name)
        self.out, self.args, self.kwargs = out, args, kwargs

    @property
    def module(self):
        return self.modules[-1] if self.modules else None

    @property
    def pass_index(self):
        return self.token

    @property
    def shape(self):
        return list(self.out.shape)

    def __getattr__(self, name):
        if name in _READ_ONLY:
            fail(f"an op-level edit's tt.where predicate read op.{name}: op labels are "
                 f"numbered only when the trace is read; decide by op.layer_type, "
                 f"op.func_name, op.modules, op.shape (or use tt.func(...) & "
                 f"tt.in_module(...))")
        raise AttributeError(name)

    def __repr__(self):
        return f"<live op {self.func_name} in {self.module}>"


class OpEdits(OpMode):
    """The mode of one EditHooks' op rules: rules, [(rule index, selector, apply)] in rule
    order, apply(values, op) -> the edited values (hooks.py counts and applies)."""

    def __init__(self, hooks, rules):
        super().__init__(functools.reduce(operator.or_, [sel for _, sel, _ in rules]))
        self.hooks, self.rules = hooks, rules

    def chosen(self, func, args, kwargs, out):
        values, path = first_tensor(out)
        if values is None:
            return out
        hooks = self.hooks
        modules = hooks.open_calls()
        if not modules:  # outside the root's calls (generate's own ops): not an op site
            return out
        op = LiveOp(func.__name__, modules, hooks.token, values, args, kwargs)
        new = values
        for _, selector, apply in self.rules:
            if not selector.matches_live(op):
                continue
            with hooks.op_scope():
                if new is values:
                    new = values.clone()
                new = apply(new, op)
        return replace_in_output(out, path, new) if new is not values else out
