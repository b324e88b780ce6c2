"""TorchLens's op labels while the model runs, numbered as the trace's reader numbers them
(_read/op_sites.py), for op-level edits that select by label (op_edits.py).

The reader numbers the outermost ATen ops of each root call; the op mode sees the outermost
torch function calls. Most functions run one ATen op of their own name (torch.relu is
aten::relu, F.linear aten::linear, x + 1 aten::add), so each call is one op of its type. The
ones that are not, counted here the way the reader sees them:
- Python operators whose ATen op has another name: x / y is aten::div, 2 / x is
  aten::reciprocal then aten::mul, x // y aten::floor_divide, x % y aten::remainder;
  x.float() (and the other dtype methods) aten::to; F.cross_entropy aten::cross_entropy_loss.
- x[index] (__getitem__): one ATen op per part of the index, as torch's indexing runs them: an
  int is aten::select, a slice aten::slice (a full `:` among others runs none), None
  aten::unsqueeze, a list aten::empty, aten::to, aten::lift_fresh (making it a tensor), and
  any tensor or list index a last aten::index; an index that runs none (x[:, :], x[...]) is
  aten::alias. Only the last op's output is the call's: the others have no value to edit.
- x[index] = v (__setitem__, which returns None): aten::lift_fresh first when v is no tensor
  (on torches that make it one: setitem_rules), the index's ops, then aten::masked_fill_ (a
  bool mask and a number, on torches that fill so), aten::index_put_ (a tensor or list index),
  aten::fill_ (v a number or a 0-dim tensor) or aten::copy_. None of them has a value an edit
  can change.
- torch.tensor(data): aten::empty, aten::to, aten::lift_fresh, aten::detach_ (on the CPU).
- x.contiguous() of a contiguous tensor, x.data and other attributes but x.T: no ATen op.
- Outputs: an op of _common's LIST_OPS takes one label per tensor it returns
  (x.split([1, 3]), aten::split_with_sizes, takes one, as the reader's count of its pieces
  gives), one of TUPLE_OPS its count, any other one label (its first output tensor).
A Python function that runs several ATen ops yet is one call to the mode (F.normalize runs
aten::linalg_vector_norm, clamp_min, expand_as, div) is numbered as one op of its own name:
the labels after it in that root call then differ from the trace's (docs/python.md says so).
"""

import torch

from .._common import FUNCTION_ATEN, LIST_OPS, TUPLE_OPS, op_type

_LIST_TYPES = frozenset(op_type(n) for n in LIST_OPS)
_TUPLE_TYPES = {op_type(n): count for n, count in TUPLE_OPS.items()}

_LIST_INDEX = ("empty", "to", "liftfresh")  # a Python list made an index tensor


def _is_int(item):
    if isinstance(item, bool):
        return False
    if isinstance(item, torch.Tensor):
        return item.dim() == 0 and not item.is_floating_point() and item.dtype != torch.bool
    return isinstance(item, int) or (hasattr(item, "__index__") and not hasattr(item, "__len__"))


def _full(item, size):
    start, stop, step = item.start, item.stop, item.step
    return (start in (None, 0) and step in (None, 1) and
            (stop is None or (size is not None and isinstance(stop, int) and stop >= size)))


def _index_types(tensor, index, setting):
    """(the types of the ATen ops x[index] runs, whether it is an advanced index)."""
    single = not isinstance(index, tuple)
    items = (index,) if single else index
    types, advanced = [], False
    used = sum(1 for i in items if i is not None and i is not Ellipsis and not isinstance(i, bool))
    ndim = tensor.dim() if isinstance(tensor, torch.Tensor) else 0
    dim = 0
    for item in items:
        if item is None:
            types.append("unsqueeze")
            dim += 1
        elif item is Ellipsis:
            dim += max(ndim - used, 0)
        elif isinstance(item, bool):
            types.append("unsqueeze")
            types += ["empty", "fill"]
            advanced = True
            dim += 1
        elif _is_int(item):
            types.append("select")
        elif isinstance(item, slice):
            size = tensor.shape[dim] if dim < ndim else None
            if single or not _full(item, size):
                types.append("slice")
            dim += 1
        elif isinstance(item, torch.Tensor):
            advanced = True
            dim += item.dim() if item.dtype == torch.bool else 1
        else:  # a list (or another sequence) of indices
            types += _LIST_INDEX
            advanced = True
            dim += 1
    if not types and not advanced and not setting:
        types.append("alias")
    return types, advanced


_SETITEM: list[tuple[bool, bool]] = []  # [(lift, masked)] once probed: how x[i] = v runs


def setitem_rules():
    """(lift, masked): whether this torch makes a Python number assigned by x[index] = v a
    tensor first (aten::lift_fresh: torch 2.11 does, 2.15 does not), and whether x[mask] = v,
    a bool mask and a number, fills in place (aten::masked_fill_: 2.15) rather than through
    aten::index_put_ (2.11). Seen once a process, on a 2x2 tensor, through a
    TorchDispatchMode (which sees these ATen ops as the trace's op records do). tt.when of a
    rule selecting by label asks first (rules.py), so the probe's own ops run before any
    recording, never inside a root call where the trace would number them."""
    if not _SETITEM:
        from torch.utils._python_dispatch import TorchDispatchMode

        class Seen(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.names = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.names.append(func.overloadpacket.__name__)
                return func(*args, **(kwargs or {}))

        z, mask = torch.zeros(2, 2), torch.tensor([[True, False], [False, True]])
        with torch.no_grad(), Seen() as number:
            z[0] = 1.0
        with torch.no_grad(), Seen() as masked:
            z[mask] = 0.0
        _SETITEM.append(("lift_fresh" in number.names, "masked_fill_" in masked.names))
    return _SETITEM[0]


def _split_type(args, kwargs):
    sizes = args[1] if len(args) > 1 else kwargs.get("split_size",
                                                     kwargs.get("split_size_or_sections"))
    return "splitwithsizes" if isinstance(sizes, (list, tuple)) else "split"


def live_ops(func, name, args, kwargs, out):
    """The labelled ops of one call of `func` (named `name`) that returned `out`, as the
    reader counts them: [(type, output index, tensor or None, its path in out or None)]."""
    kind = op_type(name)
    if kind == "getitem" and len(args) == 2:
        types, advanced = _index_types(args[0], args[1], False)
        if advanced:
            types.append("index")
    elif kind == "setitem" and len(args) == 3:
        value, index = args[2], args[1]
        lift, masked = setitem_rules()
        types, advanced = _index_types(args[0], index, True)
        number = not isinstance(value, torch.Tensor)
        if number and lift:
            types.insert(0, "liftfresh")
        if (number and masked and isinstance(index, torch.Tensor)
                and index.dtype == torch.bool):
            types.append("maskedfill")
        else:
            types.append("indexput" if advanced else "fill" if (
                number or value.dim() == 0) else "copy")
        return [(t, 0, None, None) for t in types]
    elif kind == "contiguous" and args and out is args[0]:
        return []  # already contiguous: no ATen op ran
    elif name == "__get__":  # an attribute: x.T runs aten::numpy_T, x.data and others none
        owner = getattr(getattr(func, "__self__", None), "__name__", None)
        types = ["numpyt"] if owner == "T" else []
    elif kind == "split":
        types = [_split_type(args, kwargs)]
    else:
        types = list(FUNCTION_ATEN.get(kind, (kind,)))
    if isinstance(out, torch.Tensor):
        tensors = [(out, "")]
    elif isinstance(out, (tuple, list)):
        tensors = [(t, f"[{i}]") for i, t in enumerate(out) if isinstance(t, torch.Tensor)]
    else:
        tensors = []
    if not tensors or not types:
        return []
    last = types.pop()
    if last in _LIST_TYPES:
        count = 1 if last == "splitwithsizes" else len(tensors)
    else:
        count = _TUPLE_TYPES.get(last, 1)
    ops = [(t, 0, None, None) for t in types]
    for i in range(count):
        tensor, path = tensors[i] if i < len(tensors) else (None, None)
        ops.append((last, i, tensor, path))
    return ops


class LiveLabels:
    """The numbering of one run, as the reader's: per pass (root call), step_index counts every
    op from 1 and type_index each type's; a later pass takes the step_index of the first pass's
    op of the same type and type_index."""

    def __init__(self):
        self._passes = {}  # pass -> ({type: ops so far}, [ops so far])
        self._first = {}   # (type, type_index) -> step_index in the first pass that ran it

    def number(self, pass_index, kind):
        """(type_index, step_index) of the next op of type `kind` in pass `pass_index`."""
        by_type, step = self._passes.setdefault(pass_index, ({}, [0]))
        step[0] += 1
        type_index = by_type[kind] = by_type.get(kind, 0) + 1
        return type_index, self._first.setdefault((kind, type_index), step[0])
