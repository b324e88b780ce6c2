"""tt.trace(fn) for any function that calls a model, without model=: the first module fn calls
is the model (as in a preloaded job), and a warning says which one when fn refers to others."""

import warnings

import pytest
import torch

import tokentrace as tt

GEN = {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False}


def _doubts(caught):
    return [str(w.message) for w in caught if "tokentrace: traced" in str(w.message)]


def test_a_closure_over_generate_finds_the_model(gpt2, prompt):
    def run(ids):
        return gpt2.generate(ids, **GEN)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = tt.trace(run, prompt, kernels="off")
    assert not _doubts(caught)  # run refers to one model only
    assert trace.meta["model"] == "GPT2LMHeadModel"
    assert trace["self"].num_calls == 3  # the first root call (in progress when found) counts
    assert list(trace["transformer.h.1.mlp:1"].out.shape) == [1, 5, 32]
    assert list(trace["transformer.h.1.mlp:3"].out.shape) == [1, 1, 32]
    # The first call is recorded like the others, keyword arguments included.
    assert list(trace["self:1"].inputs["input_ids"].shape) == [1, 5]
    assert list(trace["self:2"].inputs["input_ids"].shape) == [1, 1]
    assert torch.nn.Module.__call__ is torch.nn.Module._wrapped_call_impl  # given back


def test_a_helper_running_two_forwards_is_two_tokens(gpt2, prompt):
    def two(ids):
        with torch.no_grad():
            gpt2(ids)
            return gpt2(ids[:, :2])

    trace = tt.trace(two, prompt, kernels="off")
    assert trace.num_tokens == 2
    assert list(trace["transformer.h.0.mlp:2"].out.shape) == [1, 2, 32]


def test_record_takes_a_function_too(gpt2, prompt):
    rec = tt.record(lambda ids: gpt2.generate(ids, **GEN), prompt,
                    save=tt.module("transformer.h.0.mlp"), kernels="off")
    assert rec.steps == 3
    assert list(rec["transformer.h.0.mlp:2"].out.shape) == [1, 1, 32]


def test_another_model_called_first_is_traced_and_named(gpt2, prompt):
    encoder = torch.nn.Embedding(128, 8)

    def pipeline(ids):
        with torch.no_grad():
            encoder(ids)
            return gpt2(ids)

    with pytest.warns(RuntimeWarning) as caught:
        trace = tt.trace(pipeline, prompt, kernels="off")
    doubts = _doubts(caught)
    assert len(doubts) == 1, doubts
    assert "traced Embedding" in doubts[0] and "GPT2LMHeadModel" in doubts[0]
    assert "pass model=" in doubts[0]
    assert trace.meta["model"] == "Embedding" and trace.num_tokens == 1
    # model= settles it: no warning, the model asked for.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = tt.trace(pipeline, prompt, kernels="off", model=gpt2)
    assert not _doubts(caught) and trace.meta["model"] == "GPT2LMHeadModel"


def test_a_part_called_before_its_model_makes_the_model_the_root(gpt2, prompt):
    def embed_then_run(ids):
        with torch.no_grad():
            gpt2.transformer.wte(ids)
            return gpt2(ids)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = tt.trace(embed_then_run, prompt, kernels="off")
    # The model the function holds is the root, not its embedding called first by hand: that
    # call is before token 1, and the one inside the model's forward is in it.
    assert not _doubts(caught)
    assert trace.meta["model"] == "GPT2LMHeadModel" and trace.num_tokens == 1
    assert trace["transformer.wte"].num_calls == 2
    assert [trace[f"transformer.wte:{k}"].token for k in (1, 2)] == [0, 1]
    assert "is part of" in trace.meta["root"]


def test_a_compiled_function_calling_an_uncompiled_model_is_traced_with_its_warning():
    # TorchDynamo traces the function and, inside it, the first module call: the attach must
    # run outside its tracing (it failed there with TorchDynamo's internal AssertionError).
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def helper(x):
        return model(x) * 2, model(x + 1)
    compiled = torch.compile(helper, backend="eager")  # TorchDynamo only: fast
    x = torch.randn(3, 4)
    with pytest.warns(RuntimeWarning, match="recording wrappers inside the compiled region"):
        trace = tt.trace(compiled, x, kernels="off")
    assert trace.meta["model"] == "Sequential"
    assert trace["self"].num_calls == 2 and trace["0"].num_calls == 2
    assert list(trace["2:1"].out.shape) == [3, 2]
    expected = helper(x)
    assert all(torch.equal(a, b) for a, b in zip(compiled(x), expected))  # after the trace
