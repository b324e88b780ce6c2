"""Where an op's index box lands in a site's values, and what can be checked before a call.

A box with an Ellipsis is applied through a view of the values (view_key, apply_view); the
checks (validate) use what the module type fixes (Linear's out_features, Embedding's
embedding_dim) so a box or operand that cannot fit is an error at bind time, not a skip later.
"""

import torch

from .._backend import torch_library
from .._common import dtype_name


def view_key(index):
    """(key, box): key None for a left-aligned box (dims after the box are whole), or
    (p, q) when an Ellipsis has p entries before and q after it; the box is then applied to
    the output viewed with rank p + 1 + q (the dims the Ellipsis covers flattened into one)."""
    if index is None:
        return None, ()
    if Ellipsis not in index:
        return None, tuple(index)
    p = index.index(Ellipsis)
    pre, post = index[:p], index[p + 1:]
    if not post:  # a trailing Ellipsis changes nothing: dims past the box are whole
        return None, tuple(pre)
    return (p, len(post)), tuple(pre) + (slice(None),) + tuple(post)


def apply_view(values, key, handle, site):
    """apply_patches_ on `values` in place, through the (p, q) view of an Ellipsis box."""
    p, q = key
    n = values.dim()
    if n < p + q:  # the box cannot fit: the table skips and counts it
        torch.ops.tokentrace.apply_patches_(values, handle, site)
    elif n == p + q:
        torch.ops.tokentrace.apply_patches_(values.unsqueeze(p), handle, site)
    elif values.is_contiguous():
        torch.ops.tokentrace.apply_patches_(values.flatten(p, n - q - 1), handle, site)
    else:  # flatten may copy a strided tensor: edit the copy, write it back
        tmp = values.flatten(p, n - q - 1)
        torch.ops.tokentrace.apply_patches_(tmp, handle, site)
        values.copy_(tmp.view(values.shape))


def _last_dim(module):
    """The size of the output's last dimension when the module type fixes it, else None."""
    if isinstance(module, torch.nn.Linear):
        return module.out_features, f"out_features of {type(module).__name__}"
    if isinstance(module, torch.nn.Embedding):
        return module.embedding_dim, "embedding_dim of Embedding"
    return None, None


def float_dtype(module):
    for p in module.parameters():
        if p.is_floating_point():
            return p.dtype
    return None


def _slice_len(part, size):
    return len(range(*part.indices(size)))


def validate(rule_error, op, site, module, dtype, key, box, output, device):
    """Checks op rule `op` at `site` against what is known before any call: the module's
    dtype, the operand's device, dtype and rank, the box's rank, and, when the module type
    fixes the output's last dimension (_last_dim), the box and operand along it. A problem is
    rule_error(message). output: False for an input edit (shapes known only at the call)."""
    max_dims = torch_library.abi()["max_dims"]
    if len(box) > max_dims:  # an Ellipsis box counts the one dimension the ... stands for
        rule_error(f"index= spans {len(box)} dimensions; the patch table takes up to "
                   f"{max_dims}")
    editable = torch_library.editable_dtypes()  # the library's list (cuda/patch_table.h)
    names = [dtype_name(d) for d in editable]
    if dtype is not None and dtype not in editable:
        rule_error(f"{site} computes in {dtype_name(dtype)}; the "
                   f"patch table edits {', '.join(names[:-1])} and {names[-1]} outputs")
    t = op.operand_tensor()
    if t is not None:
        if t.numel() == 0:
            rule_error(f"the operand is empty (shape {list(t.shape)}); an edit with it would "
                       f"change nothing")
        if t.device != device:
            rule_error(f"the operand is on {t.device} but the model is on "
                       f"{device}; move it with .to({str(device)!r}) "
                       f"(or load_spec(path, device=...))")
        if t.dtype not in editable + (torch.float64,):  # float64 is cast to float32 first
            rule_error(f"the operand has dtype {dtype_name(t.dtype)}"
                       f"; accepted: {', '.join(names)}")
        if t.dim() > max_dims:
            rule_error(f"the operand has {t.dim()} dimensions; the patch table takes up to "
                       f"{max_dims}")
    if t is not None and key is not None:
        after = sum(isinstance(e, slice) for e in box[key[0] + 1:])
        lead = t.shape[:max(t.dim() - after, 0)]
        if any(n != 1 for n in lead):
            rule_error(f"with ... in index=, the operand may vary only along the "
                       f"{after} box dimension(s) after the ... (they are applied "
                       f"to every position the ... covers); its shape is "
                       f"{list(t.shape)}")
    size, what = _last_dim(module) if output else (None, None)  # inputs: known at the call
    if size is None:
        return
    last_box = None  # the box's size along the output's last dim, when known
    if key is not None:  # (..., e): e is the output's last dimension
        e = box[-1]
        if isinstance(e, int):
            if not -size <= e < size:
                rule_error(f"index {e} is outside the last dimension of {site}'s "
                           f"output (size {size}, the {what}); accepted: "
                           f"{-size}..{size - 1}")
        else:
            last_box = {_slice_len(e, size)}
    elif not box:
        last_box = {size}
    elif isinstance(box[-1], slice):  # the box's last entry is the last dim, or dims follow
        last_box = {size, _slice_len(box[-1], size)}
    if t is not None and t.dim() >= 1 and last_box is not None:
        n = t.shape[-1]
        if n != 1 and n not in last_box:
            want = " or ".join(str(v) for v in sorted(last_box | {1}))
            rule_error(f"operand shape {list(t.shape)} does not broadcast over the "
                       f"box: its last dimension has {n} elements, the box's last "
                       f"dimension at {site} has {want} ({what} = {size})")
