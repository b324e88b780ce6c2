"""Declarative patch ops (tt.zero/fill/add/scale/clamp/replace) with a host reference.

An op edits an index box of a site's output. This file holds the *semantics* as a pure-torch
reference on a copy of the values; the native patch table (cuda/, issue 4) implements the same
semantics in place on the device and on the host. `Op.apply` dispatches through
`set_native_apply()`, so swapping the native implementation in changes no caller.

Index box: None (the whole output), or what Python indexing takes per dimension of the
output (batch, position, feature, ...): ints (negative allowed), slices with open ends and
steps, and Ellipsis. Example: index=(slice(None), 1) is "every batch row, position 1".
"""

import torch

from ._errors import fail

_native_apply = None  # fn(op, values, ctx) -> tensor | NotImplemented


def set_native_apply(fn):
    """Installs the native patch apply (cuda/ bindings); None restores the host reference."""
    global _native_apply
    _native_apply = fn


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
    return index


class Op:
    """Base of the declarative ops. Subclasses define _host(region) -> new region."""

    name = "op"
    takes_float_only = True

    def __init__(self, index=None):
        self.index = _check_index(index, f"tt.{self.name}")

    def describe(self):
        return f"tt.{self.name}(index={self.index!r})"

    def __repr__(self):
        return self.describe()

    def apply(self, values, ctx=None):
        """Returns the edited output (a new tensor on the host path)."""
        if not isinstance(values, torch.Tensor):
            fail(f"{self.describe()} edits tensors; the site's output has no tensor")
        if self.takes_float_only and not values.is_floating_point():
            fail(f"{self.describe()} takes float outputs (float32, float16, bfloat16), got "
                 f"{values.dtype}")
        self._check_box(values)
        if _native_apply is not None:
            result = _native_apply(self, values, ctx)
            if result is not NotImplemented:
                return result
        out = values.clone()
        key = self.index if self.index is not None else (Ellipsis,)
        out[key] = self._host(out[key])
        return out

    def _check_box(self, values):
        if self.index is None:
            return
        dims = [p for p in self.index if p is not Ellipsis]
        if len(dims) > values.dim():
            fail(f"{self.describe()}: the box has {len(dims)} dimensions but the output has "
                 f"shape {list(values.shape)}")
        if Ellipsis in self.index:
            return
        for d, part in enumerate(self.index):
            if isinstance(part, int) and not -values.shape[d] <= part < values.shape[d]:
                fail(f"{self.describe()}: index {part} is outside dimension {d} of the output "
                     f"(shape {list(values.shape)})")

    def _operand(self, t, region):
        if not isinstance(t, torch.Tensor):
            return t
        if t.device != region.device:
            fail(f"{self.describe()}: the operand is on {t.device} but the output is on "
                 f"{region.device}; move it with .to({str(region.device)!r})")
        try:
            torch.broadcast_shapes(t.shape, region.shape)
        except RuntimeError:
            fail(f"{self.describe()}: operand shape {list(t.shape)} does not broadcast over "
                 f"the box {list(region.shape)}")
        return t.to(region.dtype)


class zero(Op):  # noqa: N801  (user-facing lowercase names, like torch functions)
    name = "zero"

    def _host(self, region):
        return torch.zeros_like(region)


class fill(Op):  # noqa: N801
    name = "fill"

    def __init__(self, value, index=None):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            fail(f"tt.fill(value) takes a number, got {type(value).__name__}")
        self.value = float(value)
        super().__init__(index)

    def _host(self, region):
        return torch.full_like(region, self.value)


class add(Op):  # noqa: N801
    name = "add"

    def __init__(self, operand, index=None):
        if not isinstance(operand, (torch.Tensor, int, float)) or isinstance(operand, bool):
            fail(f"tt.add(operand) takes a tensor or a number, got {type(operand).__name__}")
        self.operand = operand
        super().__init__(index)

    def _host(self, region):
        return region + self._operand(self.operand, region)


class scale(Op):  # noqa: N801
    name = "scale"

    def __init__(self, factor, index=None):
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            fail(f"tt.scale(factor) takes a number, got {type(factor).__name__}")
        self.factor = float(factor)
        super().__init__(index)

    def _host(self, region):
        return region * self.factor


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

    def _host(self, region):
        return region.clamp(min=self.lo, max=self.hi)


class replace(Op):  # noqa: N801
    name = "replace"

    def __init__(self, tensor, index=None):
        if not isinstance(tensor, torch.Tensor):
            fail(f"tt.replace(tensor) takes a tensor, got {type(tensor).__name__}")
        self.tensor = tensor
        super().__init__(index)

    def _host(self, region):
        return self._operand(self.tensor, region).expand(region.shape).clone()
