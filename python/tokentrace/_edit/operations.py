"""Declarative edit ops: tt.zero/fill/add/scale/clamp/replace.

An op says what to do to an index box of a site's output. It is a description only: the work
is done by the native patch table (libtokentrace_torch_ops, cuda/torch/, driven by hooks.py),
in place on the output, on the CPU by the host implementation and on CUDA by the device
kernel. Every op computes in float32 and rounds once to the output's dtype (float32, float16
or bfloat16); numbers are float32. (tests/python/patch_reference.py is a plain-torch
statement of the same semantics, used by the tests only.)

Index box: None (the whole output), or what Python indexing takes per dimension of the
output (batch, position, feature, ...): ints (negative allowed), slices with open ends and
steps >= 1, and one Ellipsis. Example: index=(slice(None), 1) is "every batch row, position 1".
Dimensions after the last entry are whole; (..., 3) is "feature 3 of every row". The patch
table's dimension limit is the library's (torch_library.abi()["max_dims"]), checked at bind.
"""

from __future__ import annotations

import math

import torch

from .._errors import fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Index values are 64-bit in the patch table (cuda/patch_table.h DimSlice).
_INT64 = range(-2**63, 2**63)


def show(value, limit=80):
    """repr(value), cut to `limit` characters: an error quoting a huge value stays one line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_int(v, what):
    if v not in _INT64:
        fail(f"{what}: index value {show(v)} is outside the 64-bit range the patch table "
             f"holds (accepted: -2**63 .. 2**63-1; a real output is far smaller)")


def _check_index(index, what):
    if index is None:
        return None
    if not isinstance(index, tuple):
        index = (index,)
    for part in index:
        if part is Ellipsis or isinstance(part, slice):
            for v in (part.start, part.stop, part.step) if isinstance(part, slice) else ():
                if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                    fail(f"{what}: slice bounds must be ints or None, got {show(part)}")
                if v is not None:
                    _check_int(v, what)
            if isinstance(part, slice) and part.step is not None and part.step <= 0:
                fail(f"{what}: slice steps must be positive, got {show(part)}")
        elif not isinstance(part, int) or isinstance(part, bool):
            fail(f"{what}: index= takes ints, slices and ... per dimension, got {show(part)}")
        else:
            _check_int(part, what)
    if sum(p is Ellipsis for p in index) > 1:
        fail(f"{what}: index= takes at most one ..., got {show(index)}")
    return index


def _number(value, what):
    """`value` as a float; NaN is refused (every edited element would become NaN)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        fail(f"{what} takes a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        fail(f"{what}: {show(value)} is too large for a float")
    if math.isnan(number):
        fail(f"{what}: NaN would make every edited element NaN; pass a number (inf and -inf "
             f"are accepted)")
    return number


class Op:
    """Base of the declarative ops: a name, an index box and the table's parameters."""

    name = "op"

    def __init__(self, index: int | slice | tuple[Any, ...] | None = None) -> None:
        self.index = _check_index(index, f"tt.{self.name}")

    def describe(self) -> str:
        return f"tt.{self.name}(index={self.index!r})"

    def __repr__(self):
        return self.describe()

    def operand_tensor(self):
        """The tensor operand (add/replace with a tensor), else None."""
        return None

    def table_args(self):
        """Keyword arguments of PatchTable.add_entry for this op (besides site/index/calls)."""
        return {}


class zero(Op):  # noqa: N801  (user-facing lowercase names, like torch functions)
    name = "zero"


class fill(Op):  # noqa: N801
    name = "fill"

    def __init__(self, value: float, index: int | slice | tuple[Any, ...] | None = None) -> None:
        self.value = _number(value, "tt.fill(value)")
        super().__init__(index)

    def table_args(self):
        return {"value": self.value}


class add(Op):  # noqa: N801
    name = "add"

    def __init__(self, operand: torch.Tensor | float,
                 index: int | slice | tuple[Any, ...] | None = None) -> None:
        if not isinstance(operand, (torch.Tensor, int, float)) or isinstance(operand, bool):
            fail(f"tt.add(operand) takes a tensor or a number, got {type(operand).__name__}")
        if not isinstance(operand, torch.Tensor):
            _number(operand, "tt.add(operand)")
        self.operand = operand
        super().__init__(index)

    def operand_tensor(self):
        return self.operand if isinstance(self.operand, torch.Tensor) else None

    def table_args(self):
        if isinstance(self.operand, torch.Tensor):
            return {"operand": self.operand}
        return {"value": float(self.operand)}


class scale(Op):  # noqa: N801
    name = "scale"

    def __init__(self, factor: float, index: int | slice | tuple[Any, ...] | None = None) -> None:
        self.factor = _number(factor, "tt.scale(factor)")
        super().__init__(index)

    def table_args(self):
        return {"value": self.factor}


class clamp(Op):  # noqa: N801
    name = "clamp"

    def __init__(self, lo: float | None = None, hi: float | None = None,
                 index: int | slice | tuple[Any, ...] | None = None, *,
                 min: float | None = None, max: float | None = None,
                 force_shape_change: bool = False) -> None:
        # min=/max= are TorchLens's names for lo/hi
        if (min is not None and lo is not None) or (max is not None and hi is not None):
            fail("tt.clamp: give each bound once (lo or min=, hi or max=)")
        lo = min if min is not None else lo
        hi = max if max is not None else hi
        if force_shape_change:
            fail("tt.clamp(force_shape_change=True): tokentrace's edits keep the output's "
                 "shape; drop force_shape_change (accepted: False)")
        if lo is None and hi is None:
            fail("tt.clamp(lo, hi) needs at least one bound (or min=, max=)")
        for v in (lo, hi):
            if v is not None:
                _number(v, "tt.clamp(lo, hi)")
        if lo is not None and hi is not None and lo > hi:
            fail(f"tt.clamp: lo={lo} is above hi={hi}")
        self.lo, self.hi = lo, hi
        super().__init__(index)

    def table_args(self):
        return {"lo": -math.inf if self.lo is None else float(self.lo),
                "hi": math.inf if self.hi is None else float(self.hi)}


class replace(Op):  # noqa: N801
    name = "replace"

    def __init__(self, tensor: torch.Tensor,
                 index: int | slice | tuple[Any, ...] | None = None) -> None:
        if not isinstance(tensor, torch.Tensor):
            fail(f"tt.replace(tensor) takes a tensor, got {type(tensor).__name__}")
        self.tensor = tensor
        super().__init__(index)

    def operand_tensor(self):
        return self.tensor

    def table_args(self):
        return {"operand": self.tensor}
