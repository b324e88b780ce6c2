"""The first tensor of a module output: one table of rules, checked against both searches.

The recording searches in C (`_native.first_tensor`, FindTensor in python/src/native.cc: the
recorded output shape and the saved tensor); the edits search in Python
(python/tokentrace/_common/outputs.py, which TorchDynamo can trace). Both must find the same tensor
at the same path, or an edit and the trace would name different outputs.
"""

import collections

import pytest
import torch

import tt_testutil  # noqa: F401  (puts python/ on sys.path)
from tokentrace._backend import get_backend
from tokentrace._common import first_tensor

T = torch.arange(6.0).reshape(2, 3)
U = torch.zeros(1)
Pair = collections.namedtuple("Pair", "first second")


class Cache:
    """An opaque object holding tensors, as a transformers cache does: not looked into."""

    def __init__(self):
        self.keys = [U]


def _nested(depth):
    value = T
    for _ in range(depth):
        value = (value,)
    return value


def _model_output():
    from transformers.modeling_outputs import CausalLMOutputWithPast
    return CausalLMOutputWithPast(logits=T, past_key_values=Cache())


CASES = {
    "bare tensor": (lambda: T, ""),
    "tuple with a cache": (lambda: (T, Cache()), "[0]"),
    "tuple, tensor second": (lambda: (Cache(), None, T), "[2]"),
    "list": (lambda: [1, T, U], "[1]"),
    "named tuple": (lambda: Pair(None, T), "[1]"),
    "dict": (lambda: {"loss": None, "hidden": T}, "hidden"),
    "dict, key not a string": (lambda: {3: T}, "3"),
    "ModelOutput": (_model_output, "logits"),
    "nested": (lambda: (Cache(), [None, {"a": 1, "b": T}]), "[1][1].b"),
    "four levels deep": (lambda: _nested(4), "[0][0][0][0]"),
    "five levels deep": (lambda: _nested(5), None),
    "none found": (lambda: (None, 1, "text", Cache(), {"k": [2.0]}), None),
    "empty": (lambda: (), None),
}


def _native_search(value):
    return get_backend().first_tensor(value)


@pytest.mark.parametrize("search", [_native_search, first_tensor],
                         ids=["native", "python"])
@pytest.mark.parametrize("case", list(CASES))
def test_first_tensor_rules(search, case):
    make, path = CASES[case]
    tensor, found = search(make())
    assert found == path
    assert tensor is (T if path is not None else None)  # every case holds T where found
