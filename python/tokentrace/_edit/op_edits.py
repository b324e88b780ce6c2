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
open around the op, counted per run as the module rules count them), TorchLens's labels
(tt.label, tt.contains, tt.regex), tt.where(pred) (pred gets a LiveOp), and &, |, ~ of those.
A rule that selects by label or tt.where makes the mode see every call and number its ops as
the trace's reader (_read/op_sites.py) numbers them: op_labels.py says how a call counts and
where the two can differ. Such a rule is asked of each labelled op of a call (a split's
pieces each; the piece is what it edits), the others once a call, of the first output tensor.
A spec without one numbers nothing. What depends on the whole run (op.num_passes, op.key) is
an error to read.

The call number k of an op rule is the number of ops its selector has chosen so far in the run
(1-based; a declarative op counts in the patch table like a module site, a callable in Python);
the token is the root call, as for module rules; calls= selects among them in the same way.
"""

import collections
import functools
import operator
import warnings

import torch

from .._common import ROOT, OpMode, first_tensor, op_type, op_types_of, replace_in_output
from .._errors import fail
from .op_labels import live_ops

_LABELS = ("layer_label", "label", "label_short", "type_index", "step_index")
_UNKNOWABLE = ("key", "num_passes", "call_id")
_ROOT_CALL = ROOT + ":"  # the root's call, outermost in hooks.open_calls(): "self:k"


class LiveOp:
    """The op running now, as an op-level edit's selector sees it: func_name (the torch
    function's name, "relu", "linear", "__add__"), layer_type (its TorchLens type; with labels,
    its ATen op's, as the trace's: x / y is "div"), types (the types it may run as), modules
    (the module calls open around it, "site:k", the root call first), module (the innermost),
    token and pass_index (the root call), output_index (which output tensor of the op), out
    and shape (that tensor; None for an op whose output the model never gets, op_labels.py),
    args, kwargs. In a run that numbers labels (a rule selects by label or tt.where):
    layer_label, label, label_short, type_index, step_index, as the trace's reader gives them.
    key, num_passes and call_id depend on the whole run: reading them is an error."""

    def __init__(self, func_name, modules, token, out, args, kwargs, labels=None):
        self.func_name, self.modules, self.token = func_name, modules, token
        self.parents = []  # the recent ops whose output it read (tt.preceded_by's runs only)
        self.types = op_types_of(func_name)
        self.out, self.args, self.kwargs = out, args, kwargs
        if labels is None:
            self.layer_type, self.output_index = op_type(func_name), 0
            return
        kind, self.output_index, self.type_index, self.step_index, self._pass = labels
        self.layer_type = kind
        self.types = self.types | {kind}
        self.layer_label = f"{kind}_{self.type_index}_{self.step_index}"
        self.label = f"{self.layer_label}:{self._pass}"
        self.label_short = f"{kind}_{self.type_index}:{self._pass}"

    @property
    def module(self):
        return self.modules[-1] if self.modules else None

    @property
    def pass_index(self):
        """Its layer's pass: the root call, or, for a loop's layer in a trace whose labels the
        run follows, the count of its runs."""
        return getattr(self, "_pass", self.token)

    @property
    def shape(self):
        return None if self.out is None else list(self.out.shape)

    def __getattr__(self, name):
        if name in _UNKNOWABLE:
            fail(f"an op-level edit's selector read op.{name}, which depends on the whole run "
                 f"(how many root calls run the op): unknown while the model runs; decide by "
                 f"op.layer_label, op.label (pass-qualified), op.pass_index, op.modules")
        if name in _LABELS:
            fail(f"an op-level edit's selector read op.{name}: op labels are numbered while "
                 f"the model runs only for a rule that selects by label (tt.label, "
                 f"tt.contains, tt.regex) or by tt.where")
        raise AttributeError(name)

    def __repr__(self):
        return f"<live op {self.func_name} in {self.module}>"


class OpEdits(OpMode):
    """The mode of one EditHooks' op rules: rules, [(rule index, selector, apply)] in rule
    order, apply(values, op) -> the edited values (hooks.py counts and applies). When a rule
    selects by label (or tt.where) the mode sees every call and numbers its ops
    (op_labels.py); such a rule is asked of each labelled op of a call, the others once a
    call, of its first output tensor."""

    def __init__(self, hooks, rules):
        super().__init__(functools.reduce(operator.or_, [sel for _, sel, _ in rules]))
        self.hooks, self.rules = hooks, rules
        self.by_label = [sel.needs_labels() for _, sel, _ in rules]
        self.numbered = any(self.by_label)
        # tt.preceded_by: each op's parents, the recent ops whose output it read
        self.recent = RecentOps() if any(sel.needs_history() for _, sel, _ in rules) else None

    def _decide(self, name):
        return True if self.numbered or self.recent is not None else super()._decide(name)

    def chosen(self, func, name, args, kwargs, out):
        if self.numbered:
            return self._chosen_numbered(func, name, args, kwargs, out)
        values, path = first_tensor(out)
        if values is None:
            return out
        hooks = self.hooks
        modules = hooks.open_calls()
        if not modules:  # outside the root's calls (generate's own ops): not an op site
            return out
        op = LiveOp(name, modules, hooks.token, values, args, kwargs)
        if self.recent is not None:
            op.parents = self.recent.parents(args, kwargs)
        new = values
        for _, selector, apply in self.rules:
            if not selector.matches_live(op):
                continue
            with hooks.op_scope():
                if new is values:
                    new = values.clone()
                new = apply(new, op)
        if self.recent is not None:
            self.recent.add(new, op)
        return replace_in_output(out, path, new) if new is not values else out

    def _chosen_numbered(self, func, name, args, kwargs, out):
        hooks = self.hooks
        modules = hooks.open_calls()
        # Outside the root's calls (generate's own ops; an encoder-decoder's encoder, which
        # runs before token 1; an assistant's calls between two tokens): no op site, no label
        if not modules or not modules[0].startswith(_ROOT_CALL):
            return out
        found = live_ops(func, name, args, kwargs, out)
        if not found:
            return out
        token, numbering = hooks.token, hooks.live_labels
        numbers = [numbering.number(token, kind) for kind, _, _, _ in found]
        if numbering.left:
            if not hooks.said_left:  # once per hooks: a bound model runs again and again
                hooks.said_left = True
                warnings.warn(f"tokentrace: {numbering.left}; from this op on, ops are "
                              f"numbered as they run (docs/ops.md, \"Labels in edits\")",
                              RuntimeWarning, stacklevel=2)
            numbering.left = ""
        if numbering.looped(token, name, modules, args):
            warnings.warn(
                f"tokentrace: {name} in {modules[-1]} runs parameters it ran already in root "
                f"call {token} (a loop): the trace numbers such ops as TorchLens does, passes "
                f"of one layer, while an op-level edit that selects by label numbers each op "
                f"as it runs, so from this op on the labels it selects by are not the trace's "
                f"(select by tt.func(...) & tt.in_module(...) instead; docs/ops.md)",
                RuntimeWarning, stacklevel=2)
        # Numbered; when no rule can choose an op of these types (a label names its type, a
        # function its own), nothing more to do: most calls end here
        types = op_types_of(name).union([kind for kind, _, _, _ in found])
        if self.recent is None and not any(selector.may_save(types) for _, selector, _ in
                                           self.rules):
            return out
        ops = []
        parents = self.recent.parents(args, kwargs) if self.recent is not None else []
        for (kind, index, tensor, path), labels in zip(found, numbers):
            if labels is None:  # an orphan of the trace whose labels these are: no label
                continue
            type_index, step_index, pass_index = labels
            ops.append((LiveOp(name, modules, token, tensor, args, kwargs,
                               (kind, index, type_index, step_index, pass_index)), path))
            ops[-1][0].parents = parents
        values, first_path = first_tensor(out)
        first = next(((op, p) for op, p in ops if p == first_path and p is not None), None)
        edited = {}  # path -> the edited copy
        for (_, selector, apply), by_label in zip(self.rules, self.by_label):
            for op, path in (ops if by_label else [first] if first is not None else []):
                if not selector.matches_live(op):
                    continue
                if op.out is None and op.layer_type == "setitem":
                    fail(f"{selector!r} chose {op.label} (x[index] = v, op {op.step_index} of "
                         f"pass {token}), which returns nothing: it changes x in place and the "
                         f"model gets no output of it, so an op-level edit cannot change it; "
                         f"choose the op that made the value, or narrow the selector")
                if op.out is None:
                    fail(f"{selector!r} chose {op.label} (aten {op.layer_type}, op "
                         f"{op.step_index} of pass {token}), which {name} runs inside one "
                         f"Python call with other ATen ops: the model never gets its output, "
                         f"so an op-level edit cannot change it; choose the call's last op, or "
                         f"narrow the selector")
                with hooks.op_scope():
                    new = edited.get(path)
                    if new is None:
                        new = op.out.clone()
                    edited[path] = apply(new, op)
        for path, new in edited.items():
            out = replace_in_output(out, path, new)
        if self.recent is not None:
            for op, path in ops:
                tensor = edited.get(path, op.out)
                if tensor is not None:
                    self.recent.add(tensor, op)
        return out


class RecentOps:
    """The last WINDOW ops' output tensors (held, so that their ids stay theirs) and their
    LiveOps: an op's parents are the ones whose output it reads (tt.preceded_by while the
    model runs; the trace's reader has every op's, op_loops.py)."""

    WINDOW = 256

    def __init__(self):
        self._ring = collections.deque()
        self._by_id = {}

    def add(self, tensor, op):
        self._ring.append((tensor, op))
        self._by_id[id(tensor)] = op
        if len(self._ring) > self.WINDOW:
            old, old_op = self._ring.popleft()
            if self._by_id.get(id(old)) is old_op:
                del self._by_id[id(old)]

    def parents(self, args, kwargs):
        found = []
        for value in _tensors_in((args, kwargs)):
            op = self._by_id.get(id(value))
            if op is not None and op not in found:
                found.append(op)
        return found


def _tensors_in(value, depth=0):
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 3 and isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item, depth + 1)
    elif depth < 3 and isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item, depth + 1)
