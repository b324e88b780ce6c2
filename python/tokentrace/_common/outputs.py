"""The first tensor in a module output, and its path inside the container.

Paths read like Python access: "" for a bare tensor, "[0]" for a tuple item, "logits" for a
ModelOutput/dict key, "[0].hidden" for nesting. Caches (DynamicCache and friends) are opaque
objects and skipped: the first tensor is searched in tuples, lists and mappings only, so
`(attn_out, cache)` yields "[0]" and a CausalLMOutput yields "logits".

The recording searches in C (FindTensor in python/src/native.cc, `_native.first_tensor`): the
output shape of every recorded call and the saved tensors come from there. This Python copy
is the edits' (python/tokentrace/_edit/hooks.py): TorchDynamo traces it inside a compiled model
(torch.compile(fullgraph=True) cannot trace into the extension), and `bind` works without the
extension. tests/python/test_first_tensor.py runs both through one table of cases.
"""

import torch

_MAX_DEPTH = 4


def first_tensor(value, path="", depth=0):
    """(tensor, path) of the first tensor in `value`, or (None, None)."""
    if isinstance(value, torch.Tensor):
        return value, path
    if depth >= _MAX_DEPTH:
        return None, None
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            t, p = first_tensor(item, f"{path}[{i}]", depth + 1)
            if t is not None:
                return t, p
        return None, None
    if isinstance(value, dict):  # ModelOutput is an OrderedDict
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            t, p = first_tensor(item, sub, depth + 1)
            if t is not None:
                return t, p
    return None, None


def dtype_name(dtype):
    """'float32' for torch.float32."""
    return str(dtype).replace("torch.", "")


def parse_dtype(name):
    if name is None:
        return None
    return getattr(torch, name, None) or name
