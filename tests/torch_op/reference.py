"""Plain-torch reference for the patch ops: compute in float32 over values[index], round once."""
import torch


def apply_reference(x, index, op, value=0.0, lo=0.0, hi=0.0, operand=None):
    """Returns a patched copy of x, as one firing of (op, index) would leave it."""
    v = x.float()  # a copy for f16/bf16; the round trip back is exact outside the box
    v = v.clone()
    box = v[index]

    def f32(s):  # params are float32 in the table
        return torch.tensor(s, dtype=torch.float32)

    if op == "zero":
        new = torch.zeros_like(box)
    elif op == "fill":
        new = torch.full_like(box, f32(value).item())
    elif op == "add":
        new = box + (operand.float() if operand is not None else f32(value))
    elif op == "scale":
        new = box * f32(value)
    elif op == "clamp":
        new = torch.clamp(box, f32(lo).item(), f32(hi).item())
    elif op == "replace":
        new = operand.float().expand_as(box).clone()
    else:
        raise ValueError(op)
    v[index] = new
    return v.to(x.dtype)


def box_shape(shape, index):
    return torch.empty(shape, device="meta")[index].shape
