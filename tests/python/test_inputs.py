"""The inputs of calls: recorded by path (caches included), read, saved, and bad paths."""

import dataclasses
import os
import shutil
import sqlite3
import warnings

import pytest
import torch
from torch import nn

import tokentrace as tt
from tokentrace._common import schema
from tokentrace._record import InputRecorder


def _trace(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tt.trace(*args, **kwargs)


def _prefill_cache(llama, prompt):
    with torch.no_grad():
        return llama(prompt, use_cache=True).past_key_values


def _decode_step(llama, cache, **kwargs):
    return _trace(llama, torch.tensor([[7]]), {"past_key_values": cache, "use_cache": True},
                  kernels="off", **kwargs)


def test_root_inputs_by_path_with_the_cache_per_layer(llama, prompt):
    trace = _decode_step(llama, _prefill_cache(llama, prompt))
    inputs = trace["self:1"].inputs
    assert list(inputs.entry("input_ids").shape) == [1, 1]  # positional, named by forward
    for layer in (0, 1):
        for part in ("keys", "values"):
            entry = inputs[f"past_key_values.layers[{layer}].{part}"]
            assert entry.kind == "tensor" and not entry.saved
            # What the step was given: the prefill's 5 positions (it appends the 6th).
            assert list(entry.shape) == [1, 2, 5, 8]
            assert entry.dtype == torch.float32 and entry.device == "cpu"
    assert inputs["use_cache"].kind == "value" and inputs["use_cache"].value is True
    assert trace.schema_version == schema().SCHEMA_VERSION


@pytest.mark.parametrize("given", ["past_key_values", "cache"])
def test_the_cache_is_found_by_either_of_its_names(given):
    """transformers 5.24 calls the cache argument `cache` (its generate passes cache=); older
    ones `past_key_values`. A lookup or an input edit by either name finds it, and
    inputs.cache_name says which the call used."""
    class Step(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x, **kwargs):
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            return self.proj(x) + cache["keys"].sum()

    step = Step().eval()
    kwargs = {given: {"keys": torch.ones(2, 3)}}
    trace = _trace(step, torch.ones(1, 4), kwargs, kernels="off")
    inputs = trace["self:1"].inputs
    assert inputs.cache_name == given
    for name in ("past_key_values", "cache"):
        assert f"{name}.keys" in inputs
        assert list(inputs.entry(f"{name}.keys").shape) == [2, 3]
    spec = tt.when("self", tt.zero(), input=("cache" if given == "past_key_values"
                                             else "past_key_values") + ".keys")
    with torch.no_grad():
        edited = spec.bind(step)(torch.ones(1, 4), **{given: {"keys": torch.ones(2, 3)}})
        plain = step.proj(torch.ones(1, 4))
    assert torch.equal(edited, plain)  # the cache's keys were zeroed through the other name


def test_other_sites_on_request_only(llama, prompt):
    site = "model.layers.0.self_attn"
    trace = _decode_step(llama, _prefill_cache(llama, prompt), inputs_of=tt.module(site))
    attn = trace[f"{site}:1"].inputs
    assert list(attn["hidden_states"].shape) == [1, 1, 32]
    assert list(attn["past_key_values.layers[0].keys"].shape) == [1, 2, 5, 8]
    with pytest.raises(tt.TokentraceError, match="inputs_of=tt.module"):
        trace["model.layers.1.self_attn:1"].inputs


def test_saved_inputs_are_the_tensors_the_call_was_given(llama, prompt):
    cache = _prefill_cache(llama, prompt)
    before = cache.layers[0].values.clone()
    trace = _decode_step(llama, cache, save=tt.module("self"))
    saved = trace["self:1"].inputs["past_key_values.layers[0].values"]
    assert isinstance(saved, torch.Tensor) and torch.equal(saved, before)
    assert cache.layers[0].values.shape[2] == 6  # the step appended after it was recorded
    assert trace["self:1"].inputs.entry("past_key_values.layers[0].values").kind == "tensor"


def test_an_unknown_path_names_the_nearest(llama, prompt):
    trace = _decode_step(llama, _prefill_cache(llama, prompt))
    with pytest.raises(tt.TokentraceError) as err:
        trace["self:1"].inputs["past_key_values.layer[0].keys"]
    message = str(err.value)
    assert "self:1 has no input at 'past_key_values.layer[0].keys'" in message
    assert "'past_key_values.layers[0].keys'" in message


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    label: str


class Opaque:
    pass


class Takes(nn.Module):
    def forward(self, x, pair, extra=None, *rest, flag=False, scale=1.0, **more):
        return x


def test_containers_values_and_objects():
    model = Takes()
    big = "x" * 100
    trace = _trace(model, (torch.zeros(2, 3), Pair(torch.ones(4), "hi"),
                           {"a": [torch.zeros(1), 3]}, Opaque()),
                   {"flag": True, "scale": 0.5, "note": big}, kernels="off")
    inputs = trace["self:1"].inputs
    assert list(inputs) == ["x", "pair.left", "pair.label", "extra.a[0]", "extra.a[1]", "[3]",
                            "flag", "scale", "note"]
    assert list(inputs["pair.left"].shape) == [4]
    assert (inputs["pair.label"].type, inputs["pair.label"].value) == ("str", "hi")
    assert (inputs["extra.a[1]"].type, inputs["extra.a[1]"].value) == ("int", 3)
    opaque = inputs["[3]"]
    assert opaque.kind == "object" and opaque.type.endswith("test_inputs.Opaque")
    assert inputs["scale"].value == 0.5
    assert inputs["note"].value == "<100 characters>"  # long strings: type and length only


def test_long_sequences_are_one_entry():
    trace = _trace(Takes(), (torch.zeros(1), list(range(1000)), [torch.zeros(2)] * 3),
                   kernels="off")
    inputs = trace["self:1"].inputs
    assert list(inputs) == ["x", "pair", "extra[0]", "extra[1]", "extra[2]"]
    assert (inputs["pair"].kind, inputs["pair"].type, inputs["pair"].value) == (
        "object", "builtins.list", "<1000 items>")


def test_hook_pair_sites_record_inputs_too(llama, prompt):
    site = llama.model.layers[0].mlp
    handle = site.register_forward_pre_hook(lambda m, a: None)  # the hook pair, not a wrapper
    try:
        trace = _decode_step(llama, _prefill_cache(llama, prompt),
                             inputs_of=tt.module("model.layers.0.mlp"))
    finally:
        handle.remove()
    assert list(trace["model.layers.0.mlp:1"].inputs["x"].shape) == [1, 1, 32]


def test_record_streams_saved_inputs(llama, prompt):
    site = "model.layers.0.self_attn"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = tt.record(llama, prompt, save=tt.module(site), inputs_of=tt.module(site),
                        generate_kwargs={"max_new_tokens": 3, "do_sample": False},
                        shard_mb=0.001)
    assert rec[site].num_calls == 3
    step2 = rec[f"{site}:2"].inputs
    assert isinstance(step2["hidden_states"], torch.Tensor)
    assert list(step2["hidden_states"].shape) == [1, 1, 32]
    assert list(step2["past_key_values.layers[0].keys"].shape) == [1, 2, 5, 8]
    with sqlite3.connect(rec.path) as con:
        files = {r[0] for r in con.execute("SELECT file FROM call_inputs WHERE file IS NOT NULL")}
    assert len(files) > 1  # streamed over several shards, not held until the end


def test_previous_schema_version_opens(llama, prompt, tmp_path):
    trace = _decode_step(llama, _prefill_cache(llama, prompt))
    assert trace.meta["schema_version"] == str(schema().SCHEMA_VERSION)  # kSchemaVersion
    old = str(tmp_path / "v1.sqlite")
    shutil.copy(trace.path, old)
    with sqlite3.connect(old) as con:
        con.execute("DROP TABLE call_inputs")
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    v1 = tt.load(old)
    assert v1.schema_version == 1 and v1["self"].num_calls == 1
    with pytest.raises(tt.TokentraceError, match="schema version 1 files record no inputs"):
        v1["self:1"].inputs
    newest = schema().SCHEMA_VERSION
    with sqlite3.connect(old) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(newest + 1),))
    with pytest.raises(tt.TokentraceError, match=f"reads versions 1 to {newest}"):
        tt.load(old)
    assert os.path.exists(old)


class SeesItsFile(nn.Module):
    """Counts, inside each call, the input rows in the trace file once the writer has committed
    what it was handed (a flush: the writer's next commit)."""

    def __init__(self, path):
        super().__init__()
        self.path = path
        self.seen = []

    def forward(self, x):
        from tokentrace._common import loader
        loader.load().flush()
        with sqlite3.connect(self.path) as con:
            self.seen.append(con.execute("SELECT count(*) FROM call_inputs").fetchone()[0])
        return x


def test_rows_go_to_the_file_during_the_run(tmp_path):
    path = str(tmp_path / "t.sqlite")
    model = SeesItsFile(path)

    def three_steps(x):
        for _ in range(3):
            model(x)

    trace = _trace(three_steps, torch.zeros(2), model=model, kernels="off", out=path)
    assert model.seen == [1, 2, 3]  # each call's row was handed over before its forward ran
    assert [list(c.inputs["x"].shape) for c in trace["self"]] == [[2]] * 3  # once each


def test_saved_rows_wait_for_their_shard(llama, prompt, monkeypatch):
    monkeypatch.setattr(InputRecorder, "flush_rows", 3)
    cache = _prefill_cache(llama, prompt)
    before = cache.layers[1].keys.clone()
    trace = _decode_step(llama, cache, save=tt.module("self"))
    inputs = trace["self:1"].inputs
    assert torch.equal(inputs["past_key_values.layers[1].keys"], before)
    assert list(inputs)[:2] == ["input_ids", "past_key_values.layers[0].keys"]  # call order
    assert list(inputs)[-1] == "use_cache"  # a value, written before the tensors' shard
    with sqlite3.connect(trace.path) as con:
        assert con.execute("SELECT count(*), count(DISTINCT path) FROM call_inputs").fetchone() \
            == (len(trace["self:1"].inputs),) * 2


def test_inputs_that_cannot_be_saved_are_counted():
    meta = torch.empty(3, device="meta")
    trace = _trace(Takes(), (torch.zeros(1), Pair(meta, "m")), save=tt.module("self"),
                   kernels="off")
    entry = trace["self:1"].inputs["pair.left"]  # not saved: its metadata is still there
    assert entry.kind == "tensor" and entry.device == "meta" and list(entry.shape) == [3]
    assert isinstance(trace["self:1"].inputs["x"], torch.Tensor)
    assert trace.losses["inputs_failed"] == 1


def test_a_cache_is_read_afresh_at_every_step_and_its_paths_are_shared():
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), 0)
    recorder = InputRecorder(lambda: (1, 1, 1))
    on_input = recorder.hook(lambda input_ids, past_key_values=None: None, False)
    on_input(torch.zeros(1, 1), past_key_values=cache)
    cache.update(torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4), 0)  # a position more
    half = torch.zeros(1, 2, 5, 4, dtype=torch.float16)
    cache.update(half, half, 1)  # and a layer more
    on_input(torch.zeros(1, 1), past_key_values=cache)
    first, second = recorder.rows[:3], recorder.rows[3:]
    assert [(r[1], r[4], r[5]) for r in second] == [
        ("input_ids", (1, 1), "float32"),
        ("past_key_values.layers[0].keys", (1, 2, 4, 4), "float32"),
        ("past_key_values.layers[0].values", (1, 2, 4, 4), "float32"),
        ("past_key_values.layers[1].keys", (1, 2, 5, 4), "float16"),
        ("past_key_values.layers[1].values", (1, 2, 5, 4), "float16")]
    assert [r[4] for r in first[1:]] == [(1, 2, 3, 4)] * 2
    # one string per path for the whole run, not one per row (a long run holds many rows)
    assert all(a[1] is b[1] for a, b in zip(first, second))
