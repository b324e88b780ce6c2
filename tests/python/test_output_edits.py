"""Edits of an output leaf by path (tt.when(..., output=path)) and TorchLens's tt.output_at /
tt.input_at selectors (the model's own output or input at a path), in bind, trace and the
JSON form."""

import json
import warnings

import pytest
import torch
from torch import nn

import tokentrace as tt


class Pair(nn.Module):
    """Returns (a, b): the first tensor is a, the leaf at "[1]" is b."""

    def forward(self, x):
        return x + 1, x * 2


class Net(nn.Module):
    """Its output is a dict: {"x": tensor, "kv": [(k, v)]}; its input has a mask."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.pair = Pair()

    def forward(self, x, mask=None):
        if mask is not None:
            x = x * mask
        a, b = self.pair(self.lin(x))
        return {"x": a, "kv": [(a * 3, b)]}


def _net():
    torch.manual_seed(0)
    return Net().eval()


def test_an_output_path_edits_that_leaf_only():
    net, x = _net(), torch.ones(2, 4)
    plain = net(x)
    first = tt.when("pair", tt.zero()).bind(net)(x)  # the first tensor: a
    assert torch.equal(first["x"], torch.zeros(2, 4))
    second = tt.when("pair", tt.zero(), output="[1]").bind(net)(x)  # b only
    assert torch.equal(second["x"], plain["x"])
    assert torch.equal(second["kv"][0][1], torch.zeros(2, 4))
    assert torch.equal(second["kv"][0][0], plain["kv"][0][0])


def test_output_at_edits_the_models_output_with_torchlens_tuple_paths():
    net, x = _net(), torch.ones(2, 4)
    plain = net(x)
    seen = []

    def halve(values, *, hook):
        seen.append(hook.call)
        return values / 2
    bound = tt.when(tt.output_at(("kv", 0, 1)), halve).bind(net)
    out = bound(x)
    bound(x)
    assert torch.allclose(out["kv"][0][1], plain["kv"][0][1] / 2)
    assert torch.equal(out["x"], plain["x"]) and torch.equal(out["kv"][0][0], plain["kv"][0][0])
    assert seen == [1, 1] and bound.last_report.num_fires == 1  # each call of bound is a run
    # the same rule spelled with a string path and output= on the root site
    again = tt.when("self", halve, output="kv[0][1]").bind(net)(x)
    assert torch.allclose(again["kv"][0][1], out["kv"][0][1])


def test_a_site_edited_at_its_output_and_at_a_path_counts_each_call_once():
    net, x = _net(), torch.ones(2, 4)
    calls = {"first": [], "path": []}

    def note(name):
        def fn(values, *, ctx):
            calls[name].append(ctx.call)
            return values
        return fn
    spec = tt.when("pair", note("first")) + tt.when("pair", note("path"), output="[1]")

    def three_calls(x):
        return [net(x) for _ in range(3)]
    trace = tt.trace(three_calls, x, model=net, edits=spec, kernels="off")
    assert calls == {"first": [1, 2, 3], "path": [1, 2, 3]}
    assert trace["pair"].num_calls == 3


def test_input_at_edits_the_models_input():
    net, x = _net(), torch.ones(2, 4)
    mask = torch.ones(2, 4)
    plain = net(x, mask=mask)
    out = tt.when(tt.input_at("mask"), tt.zero()).bind(net)(x, mask=mask)
    assert torch.equal(mask, torch.ones(2, 4))  # the caller's tensor is left as it was
    assert torch.equal(out["x"], net(x * 0)["x"]) and not torch.equal(out["x"], plain["x"])


def test_output_at_in_a_trace_of_generate():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                  bos_token_id=0, eos_token_id=0)
    lm = transformers.GPT2LMHeadModel(cfg).eval()
    prompt = torch.tensor([[5, 6, 7]])
    # Steer the logits toward token 9 at every step: greedy decoding then emits only 9s.
    bias = torch.zeros(64)
    bias[9] = 1e4
    generated = []

    def generate(prompt):
        generated.append(lm.generate(prompt, max_new_tokens=4, min_new_tokens=4,
                                     do_sample=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = tt.trace(generate, prompt, model=lm, kernels="off",
                         edits=tt.when(tt.output_at("logits"), tt.add(bias)))
    assert trace.num_tokens == 4
    assert generated[0][0, 3:].tolist() == [9, 9, 9, 9]


def test_output_path_in_the_json_form(tmp_path):
    spec = tt.when("pair", tt.scale(0.5), output="[1]") + tt.when(tt.output_at("x"), tt.zero())
    path = tmp_path / "spec.json"
    spec.to_json(path)
    rules = json.loads(path.read_text())
    assert [r.get("output") for r in rules] == ["[1]", "x"]
    assert [r["site"] for r in rules] == ["pair", "self"]
    net, x = _net(), torch.ones(2, 4)
    a = spec.bind(net)(x)
    b = tt.load_spec(path).bind(net)(x)
    assert torch.equal(a["kv"][0][1], b["kv"][0][1]) and torch.equal(b["x"], torch.zeros(2, 4))


def test_output_paths_that_name_nothing_say_what_there_is():
    net, x = _net(), torch.ones(2, 4)
    nothing = r"finds nothing at 'kv\[0\]\[2\]'.*'kv\[0\]\[1\]'"
    with pytest.raises(tt.TokentraceError, match=nothing):
        tt.when(tt.output_at("kv[0][2]"), tt.zero()).bind(net)(x)
    with pytest.raises(tt.TokentraceError, match="input= or its output= , not both|not both"):
        tt.when("pair", tt.zero(), input="x", output="[1]")
    with pytest.raises(tt.TokentraceError, match="names its path already"):
        tt.when(tt.output_at("x"), tt.zero(), output="x")
    with pytest.raises(tt.TokentraceError, match="takes a path"):
        tt.output_at(("kv", 1.5))
    with pytest.raises(tt.TokentraceError, match="selects ops"):
        tt.when(tt.func("relu"), tt.zero(), output="[0]")
    with pytest.raises(tt.TokentraceError, match=r"tt.output_at\('logits'\) selects a leaf"):
        tt.trace(net, x, save=tt.output_at("logits"), kernels="off")
