"""The native walk of a call's inputs (python/src/inputs_walk.cc) against the Python one
(InputRecorder's, the reference): the same rows for every kind of container and value."""

import dataclasses
import gc
import weakref

import pytest
import torch

from tokentrace._common import loader
from tokentrace._record import InputRecorder, tensor_meta

pytestmark = pytest.mark.skipif(loader.load() is None, reason="the native extension is not built")


@dataclasses.dataclass
class Pair:
    left: object
    label: object = None


class Opaque:
    def __init__(self):
        self.hidden = torch.zeros(2)


class Sub(torch.Tensor):
    pass


def _forward(input_ids, past_key_values=None, extra=None):
    return None


def _caches():
    from transformers import DynamicCache, EncoderDecoderCache, StaticCache
    from transformers.models.llama import LlamaConfig

    dynamic = DynamicCache()
    for i in range(3):
        kv = torch.zeros(1, 2, 3 + i, 4, dtype=torch.float16 if i else torch.float32)
        dynamic.update(kv, kv, i)
    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         hidden_size=8)
    static = StaticCache(config=config, max_cache_len=6)
    static.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4), 0,
                  {"cache_position": torch.tensor([0])})
    empty = DynamicCache()
    return [dynamic, static, empty, EncoderDecoderCache(DynamicCache(), DynamicCache())]


def _arguments():
    """(args, kwargs) of calls covering every container kind, value and depth limit."""
    from transformers.modeling_outputs import BaseModelOutputWithPast
    nested = torch.zeros(1)
    for _ in range(10):  # deeper than _MAX_DEPTH: the deep end is one object entry
        nested = [nested]
    calls = [((torch.zeros(1, 1, dtype=torch.long),), {}),
             ((torch.zeros(2, 3), (torch.ones(4), [torch.zeros(1), 3, None])),
              {"extra": {"a": torch.zeros(5), 7: 1.5, (1, 2): "k", True: "b"}}),
             ((Pair(torch.ones(4), "hi"), Opaque(), {"flag": False}, "x" * 100, 2.5, b"raw"),
              {}),
             ((torch.nn.Parameter(torch.zeros(3)), torch.zeros(2).as_subclass(Sub),
               torch.empty(2, 0, device="meta"), torch.zeros((), dtype=torch.bfloat16)), {}),
             ((torch.zeros(1), list(range(1000)), nested), {}),
             ((BaseModelOutputWithPast(last_hidden_state=torch.zeros(1, 2, 3)),), {}),
             ((), {"input_ids": torch.zeros(1, 1), "use_cache": True, "note": "short"})]
    for cache in _caches():
        calls.append(((torch.zeros(1, 1),), {"past_key_values": cache, "use_cache": True}))
    return calls


def _rows(native, **options):
    recorder = InputRecorder(lambda: (5, 1, 1), native=native, **options)
    on_input = recorder.hook(_forward, False)
    assert (type(on_input).__name__ == "InputWalker") == native
    for args, kwargs in _arguments():
        on_input(*args, **kwargs)
    return recorder.rows


def test_native_rows_are_the_python_rows_for_every_container_kind():
    python, native = _rows(False), _rows(True)
    assert len(python) > 40
    assert native == python
    if tensor_meta():  # the torch ops library is built: without it, the same rows
        assert _rows(True, tensor_meta=False) == python
    paths = [r[1] for r in native]  # a few the reference is known to make
    assert "past_key_values.layers[2].values" in paths
    assert "extra[(1, 2)]" in paths and "extra[True]" in paths and "extra[7]" in paths
    assert "input_ids.left" in paths and "[3]" in paths


def test_a_failed_walk_keeps_no_row_of_its_call():
    class Broken(torch.Tensor):
        @property
        def shape(self):
            raise RuntimeError("no shape")

    recorder = InputRecorder(lambda: (5, 1, 1))
    on_input = recorder.hook(_forward, False)
    with pytest.raises(RuntimeError, match="no shape"):
        on_input(torch.zeros(1), [torch.zeros(2), torch.zeros(3).as_subclass(Broken)])
    on_input(torch.zeros(4))
    assert [(r[1], r[4]) for r in recorder.rows] == [("input_ids", (4,))]


def test_pending_rows_keep_no_tensor_alive_and_no_call_outside_a_call_is_recorded():
    calls = iter([(0, 0, 0), (9, 1, 1)])
    recorder = InputRecorder(lambda: next(calls))
    on_input = recorder.hook(_forward, False)
    held = torch.zeros(3, 2)
    gone = weakref.ref(held)
    on_input(held)  # call id 0: no call is open, nothing recorded
    on_input(held, extra=[held, 1])
    del held
    gc.collect()
    assert gone() is None  # the pending rows hold its metadata only
    assert [(r[0], r[1], r[4]) for r in recorder.rows] == [
        (9, "input_ids", (3, 2)), (9, "extra[0]", (3, 2)), (9, "extra[1]", None)]
