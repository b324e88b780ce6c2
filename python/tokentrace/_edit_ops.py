"""Declarative edit ops: tt.zero/fill/add/scale/clamp/replace.

An op says what to do to an index box of a site's output. It is a description only: the work
is done by the native patch table (libtokentrace_torch_ops, cuda/torch/, driven by edits.py),
in place on the output, on the CPU by the host implementation and on CUDA by the device
kernel. Every op computes in float32 and rounds once to the output's dtype (float32, float16
or bfloat16); numbers are float32. (tests/python/patch_reference.py is a plain-torch
statement of the same semantics, used by the tests only.)

Index box: None (the whole output), or what Python indexing takes per dimension of the
output (batch, position, feature, ...): ints (negative allowed), slices with open ends and
steps >= 1, and one Ellipsis. Example: index=(slice(None), 1) is "every batch row, position 1".
Dimensions after the last entry are whole; (..., 3) is "feature 3 of every row". The patch
table's dimension limit is the library's (_torch_ops.abi()["max_dims"]), checked at bind.
"""

import math

import torch

from ._errors import fail


def _check_index(index, what):
    if index is None:
        return None
    if not isinstance(index, tuple):
        index = (index,)
    for part in index:
        if part is Ellipsis or isinstance(part, slice):
            for v in (part.start, part.stop, part.step) if isinstance(part, slice) else ():
                if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                    fail(f"{what}: slice bounds must be ints or None, got {part!r}")
            if isinstance(part, slice) and part.step is not None and part.step <= 0:
                fail(f"{what}: slice steps must be positive, got {part!r}")
        elif not isinstance(part, int) or isinstance(part, bool):
            fail(f"{what}: index= takes ints, slices and ... per dimension, got {part!r}")
    if sum(p is Ellipsis for p in index) > 1:
        fail(f"{what}: index= takes at most one ..., got {index!r}")
    return index


class Op:
    """Base of the declarative ops: a name, an index box and the table's parameters."""

    name = "op"

    def __init__(self, index=None):
        self.index = _check_index(index, f"tt.{self.name}")

    def describe(self):
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

    def __init__(self, value, index=None):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            fail(f"tt.fill(value) takes a number, got {type(value).__name__}")
        self.value = float(value)
        super().__init__(index)

    def table_args(self):
        return {"value": self.value}


class add(Op):  # noqa: N801
    name = "add"

    def __init__(self, operand, index=None):
        if not isinstance(operand, (torch.Tensor, int, float)) or isinstance(operand, bool):
            fail(f"tt.add(operand) takes a tensor or a number, got {type(operand).__name__}")
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

    def __init__(self, factor, index=None):
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            fail(f"tt.scale(factor) takes a number, got {type(factor).__name__}")
        self.factor = float(factor)
        super().__init__(index)

    def table_args(self):
        return {"value": self.factor}


class clamp(Op):  # noqa: N801
    name = "clamp"

    def __init__(self, lo=None, hi=None, index=None):
        if lo is None and hi is None:
            fail("tt.clamp(lo, hi) needs at least one bound")
        for v in (lo, hi):
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                fail(f"tt.clamp bounds must be numbers or None, got {v!r}")
        if lo is not None and hi is not None and lo > hi:
            fail(f"tt.clamp: lo={lo} is above hi={hi}")
        self.lo, self.hi = lo, hi
        super().__init__(index)

    def table_args(self):
        return {"lo": -math.inf if self.lo is None else float(self.lo),
                "hi": math.inf if self.hi is None else float(self.hi)}


class replace(Op):  # noqa: N801
    name = "replace"

    def __init__(self, tensor, index=None):
        if not isinstance(tensor, torch.Tensor):
            fail(f"tt.replace(tensor) takes a tensor, got {type(tensor).__name__}")
        self.tensor = tensor
        super().__init__(index)

    def operand_tensor(self):
        return self.tensor

    def table_args(self):
        return {"operand": self.tensor}
