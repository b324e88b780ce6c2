"""TorchLens's op labels while the model runs, numbered as the trace's reader numbers them
(_read/op_sites.py), for op-level edits that select by label (op_edits.py).

The reader numbers the outermost ops of each root call: ATen ops, and the Python calls that
op records keep as ops of their own (_common/op_groups.py: x[i], x[i] = v, torch.tensor,
x.contiguous(), x.float(), x / y, x += y, ...). The op mode sees the outermost torch function
calls, each by TorchLens's name (op_groups.py gives it the Python entry point's where torch
dispatched under another: x / y is truediv, not div). Most functions run one ATen op of their
own name (torch.relu is aten::relu, F.linear aten::linear, x + 1 aten::add), or are one op of
their own, so each call is one op of its type. The ones that are not:
- Python functions that run other ATen ops (FUNCTION_ATEN): 2 / x is aten::reciprocal then
  aten::mul, x // y aten::floor_divide, F.cross_entropy aten::cross_entropy_loss.
- An attribute (`__get__`): x.T runs aten::numpy_T (type t), x.data and the others none.
- Outputs: an op takes one label per tensor it returns (max with dim= two, a split one a
  piece), as op records keep each; but a Python call kept as an op of its own whose output is
  an nn.Parameter (a float parameter's p.float()) takes none, as TorchLens logs none and
  op_groups.py records no output for it. x[i] = v returns None: its op (setitem) has no value
  an edit can change.
A Python function that runs several ATen ops yet is one call to the mode (F.normalize runs
aten::linalg_vector_norm, clamp_min, expand_as, div) is numbered as one op of its own name:
the labels after it in that root call then differ from the trace's (docs/ops.md says so).
"""

import torch

from .._common import FUNCTION_ATEN, op_groups, op_type


def _split_type(args, kwargs):
    sizes = args[1] if len(args) > 1 else kwargs.get("split_size",
                                                     kwargs.get("split_size_or_sections"))
    return "splitwithsizes" if isinstance(sizes, (list, tuple)) else "split"


def live_ops(func, name, args, kwargs, out):
    """The labelled ops of one call of `func` (named `name`) that returned `out`, as the
    reader counts them: [(type, output index, tensor or None, its path in out or None)]."""
    kind = op_type(name)
    if kind == "setitem":  # its output is x (x[i] = v), which may be a parameter
        return [] if args and isinstance(args[0], torch.nn.Parameter) else [(kind, 0, None, None)]
    if name == "__get__":  # an attribute: x.T runs aten::numpy_T, x.data and others none
        owner = getattr(getattr(func, "__self__", None), "__name__", None)
        types = [op_type("numpy_T")] if owner == "T" else []
    elif kind == "split":
        types = [_split_type(args, kwargs)]
    else:
        types = list(FUNCTION_ATEN.get(kind, (kind,)))
    if isinstance(out, torch.nn.Parameter) and name in op_groups.NAMES:
        tensors = []
    elif isinstance(out, torch.Tensor):
        tensors = [(out, "")]
    elif isinstance(out, (tuple, list)):
        tensors = [(t, f"[{i}]") for i, t in enumerate(out) if isinstance(t, torch.Tensor)]
    else:
        tensors = []
    if not tensors or not types:
        return []
    last = types.pop()
    return [(t, 0, None, None) for t in types] + [(last, i) + t for i, t in enumerate(tensors)]


_Tensor = torch.Tensor


def _is_param(value):
    return isinstance(value, torch.nn.Parameter)


class LiveLabels:
    """The numbering of one run. With `known`, the LabelMap of the last trace of the same
    model whose op labels were read (label_memory.py): op n of root call k takes the
    labels that trace gave op n of its root call k, TorchLens's loops and orphans included (an
    orphan there takes none), while the run's ops agree with it in type and the root call is
    one the trace had. Otherwise, and from the first op that disagrees, as the reader numbers
    a model without loops: per pass (root call), step_index counts every op from 1 and
    type_index each type's, a later pass taking the step_index of the first pass's op of the
    same type and type_index, and the pass is the root call.

    Loops and orphans take the data flow of the whole root call, which a run numbering ops as
    they run does not have; without a map its labels differ from the trace's from the first
    loop or orphan on. looped() finds the first loop that parameters anchor: an op that runs
    parameters an op of the same function and module ran already in this root call."""

    def __init__(self, known=None):
        self._passes = {}  # pass -> ({type: ops so far}, [ops so far])
        self._first = {}   # (type, type_index) -> step_index in the first pass that ran it
        self._ran = {}     # pass -> {(function, module addresses, parameter ids)}
        self._looped = False
        self.known = known  # LabelMap, until an op disagrees with it
        self.left = None    # why the numbering left the map: one line, once
        # (pass, its n-th op) -> (type, (type_index, step_index, pass)) given it, or None (no
        # label), for drift(); made into a label only there (a string an op costs ~0.3 µs)
        self.given = {}

    def looped(self, pass_index, name, modules, args):
        """True once a run: for the first op that runs again, in root call `pass_index`, the
        parameters an op of function `name` in the same modules ran already (a loop). Never
        while the numbering follows a trace's labels, whose loops they are."""
        if self._looped or self.known is not None:
            return False
        for a in args:  # most calls read no parameter: one pass, no generator, and a plain
            if type(a) is not _Tensor and _is_param(a):  # tensor skips Parameter's slow
                break                                     # __instancecheck__
        else:
            return False
        params = tuple(id(a) for a in args if type(a) is not _Tensor and _is_param(a))
        key = (name, tuple(m.rsplit(":", 1)[0] for m in modules), params)
        ran = self._ran.setdefault(pass_index, set())
        if key in ran:
            self._looped = True
            return True
        ran.add(key)
        return False

    def number(self, pass_index, kind):
        """(type_index, step_index, pass) of the next op of type `kind` in root call
        `pass_index`, or None for an op the known trace labels none (an orphan)."""
        by_type, step = self._passes.setdefault(pass_index, ({}, [0]))
        step[0] += 1
        type_index = by_type[kind] = by_type.get(kind, 0) + 1
        first = self._first.setdefault((kind, type_index), step[0])
        known = self.known
        if known is not None and pass_index in known.roots:
            key = (pass_index, step[0])
            found = known.labels.get(key)
            if found is None or found[0] == kind:
                self.given[key] = found
                return None if found is None else found[1]
            self.known = None
            self.left = (f"op {step[0]} of root call {pass_index} is {kind} here but "
                         f"{found[0]}_{found[1][0]}_{found[1][1]} in {known.path}, whose "
                         f"labels this run's edits by label followed")
        labels = (type_index, first, pass_index)
        self.given[(pass_index, step[0])] = (kind, labels)
        return labels

    def drift(self, read):
        """(how many ops this run numbered have another layer_label, or none, in the same
        run's trace, one of them as 'live -> trace'): TorchLens's loops and orphans, which take
        the whole run, renumber the trace's. read: {(root call k, its n-th op): layer_label}
        of that trace's op sites; (0, None) when it has none."""
        if not read:
            return 0, None
        given = {key: None if g is None else f"{g[0]}_{g[1][0]}_{g[1][1]}"
                 for key, g in self.given.items()}
        wrong = [(live or "no label", read.get(key, "no label (an orphan)"))
                 for key, live in given.items() if read.get(key) != live]
        return len(wrong), (f"{wrong[0][0]} -> {wrong[0][1]}" if wrong else None)
