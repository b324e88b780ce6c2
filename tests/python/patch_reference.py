"""Plain-torch statement of the declarative ops' semantics, for the tests only (the package
runs them through the native patch table): every op computes over values[index] in float32
and rounds once to the output's dtype; numbers are float32."""

import torch


def _f32(v):
    return torch.tensor(float(v), dtype=torch.float32).item()


def apply_reference(op, values):
    """A patched copy of `values`, as one firing of the tt.* op `op` leaves it."""
    v = values.float().clone()
    key = op.index if op.index is not None else (Ellipsis,)
    box = v[key]
    if op.name == "zero":
        new = torch.zeros_like(box)
    elif op.name == "fill":
        new = torch.full_like(box, _f32(op.value))
    elif op.name == "add":
        t = op.operand
        new = box + (t.float() if isinstance(t, torch.Tensor) else _f32(t))
    elif op.name == "scale":
        new = box * _f32(op.factor)
    elif op.name == "clamp":
        new = box.clamp(min=None if op.lo is None else _f32(op.lo),
                        max=None if op.hi is None else _f32(op.hi))
    elif op.name == "replace":
        new = op.tensor.float().expand(box.shape).clone()
    else:
        raise ValueError(op.name)
    v[key] = new
    return v.to(values.dtype)
