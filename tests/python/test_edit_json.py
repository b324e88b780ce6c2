"""Edit specs as JSON: tt.load_spec(path), EditSpec.to_json(), and every load error."""

import json

import pytest
import torch

import tokentrace as tt
from tokentrace.edits import load_spec

V = "model.layers.0.self_attn.v_proj"


def _write(tmp_path, data, name="spec.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _gen(model, prompt, n=4):
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              output_logits=True, return_dict_in_generate=True)


def test_load_spec_runs_like_the_python_spec(tmp_path, llama, prompt):
    torch.save(torch.full((16,), 0.25), tmp_path / "delta.pt")
    path = _write(tmp_path, [
        {"site": V, "op": "zero", "index": [None, 1], "calls": "prefill"},
        {"site": "model.layers.*.mlp", "op": "scale", "factor": 0.5, "calls": {"tokens": [2, 3]}},
        {"site": V, "op": "add", "operand": "delta.pt", "calls": [{"call": 2}, {"token": 4}]},
        {"site": ["model.layers.1.mlp"], "op": "clamp", "lo": -0.1, "index": [[0, None, 1], "..."]},
    ])
    spec = load_spec(path)
    python = (tt.when(V, tt.zero(index=(slice(None), 1)), calls=tt.prefill)
              + tt.when("model.layers.*.mlp", tt.scale(0.5), calls=tt.token(range(2, 4)))
              + tt.when(V, tt.add(torch.full((16,), 0.25)), calls=tt.call(2) | tt.token(4))
              + tt.when("model.layers.1.mlp", tt.clamp(-0.1, None,
                                                     index=(slice(0, None, 1), Ellipsis))))
    a, b = spec.bind(llama), python.bind(llama)
    out_a, out_b = _gen(a, prompt), _gen(b, prompt)
    assert all(torch.equal(x, y) for x, y in zip(out_a.logits, out_b.logits))
    assert a.last_report.num_fires == b.last_report.num_fires == 1 + 4 + 2 + 4
    assert not torch.equal(out_a.logits[0], _gen(llama, prompt).logits[0])


def test_round_trip(tmp_path):
    from safetensors.torch import save_file
    save_file({"a": torch.ones(4), "b": torch.zeros(4)}, str(tmp_path / "ops.safetensors"))
    rules = [
        {"site": "a.*", "op": "zero"},
        {"site": "a.b", "op": "fill", "value": 2.5, "index": [0, -1], "calls": {"call": 3}},
        {"site": ["a.c", "d"], "op": "add", "value": 1, "calls": {"token": [1, 4]}},
        {"site": "a.c", "op": "add", "operand": "ops.safetensors", "operand_key": "b",
         "calls": {"calls": [2, 5]}},
        {"site": "x", "op": "scale", "factor": -2.0, "index": [None, [1, None, 2], "..."],
         "calls": ["prefill", {"tokens": [3, 4]}]},
        {"site": "x", "op": "clamp", "hi": 3.0, "calls": "every"},
        {"site": "x", "op": "clamp", "lo": -1, "hi": 1},
        {"site": "y", "op": "replace", "value": 0.5, "index": 2},
    ]
    spec = load_spec(_write(tmp_path, rules))
    text = spec.to_json(tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text()) == json.loads(text)
    again = load_spec(tmp_path / "out.json")
    assert again.to_json() == text
    assert repr(again) == repr(spec)
    dumped = json.loads(text)
    assert dumped[0] == {"site": "a.*", "op": "zero"}
    assert dumped[1]["index"] == [0, -1] and dumped[1]["calls"] == {"call": 3}
    assert dumped[3]["operand"] == str(tmp_path / "ops.safetensors")
    assert dumped[3]["operand_key"] == "b" and dumped[3]["calls"] == {"calls": [2, 5]}
    assert dumped[4]["index"] == [None, [1, None, 2], "..."]
    assert dumped[4]["calls"] == ["prefill", {"tokens": [3, 4]}]
    assert "calls" not in dumped[5] and dumped[7]["index"] == [2]
    assert torch.equal(again.rules[3].action.operand, torch.zeros(4))


def test_to_json_of_python_specs(tmp_path):
    spec = (tt.when(tt.module("a", "b"), tt.scale(2), calls=range(1, 6, 2))
            + tt.when("c", tt.replace(torch.arange(3.0)), calls=tt.token([2, 7])))
    with pytest.raises(tt.TokentraceError, match=r"rule 1 .*in-memory tensor.*operand_dir"):
        spec.to_json()
    text = spec.to_json(operand_dir=tmp_path / "ops")
    dumped = json.loads(text)
    assert dumped[0] == {"site": ["a", "b"], "op": "scale", "factor": 2.0,
                         "calls": {"call": [1, 3, 5]}}
    assert dumped[1]["calls"] == {"token": [2, 7]}
    again = load_spec(_write(tmp_path, text))
    assert torch.equal(again.rules[1].action.tensor, torch.arange(3.0))
    with pytest.raises(tt.TokentraceError, match="rule 0 .*Python callable.*declarative ops"):
        tt.when("a", lambda v, ctx: v).to_json()


def test_op_rules_round_trip(tmp_path):
    """Op-level rules have a JSON form: "ops" with func (one or a list), in_module, label,
    contains, regex, all holding; what JSON cannot say is one error naming the rule."""
    spec = (tt.when(tt.func("relu") & tt.in_module("block:2"), tt.zero(), calls=tt.token(3))
            + tt.when(tt.func("relu") | tt.func("gelu"), tt.scale(0.5))
            + tt.when(tt.label("relu_1_2") & tt.contains("relu") & tt.regex("^relu_"),
                      tt.fill(1.0)))
    dumped = json.loads(spec.to_json())
    assert dumped == [
        {"ops": {"func": "relu", "in_module": "block:2"}, "op": "zero",
         "calls": {"token": 3}},
        {"ops": {"func": ["relu", "gelu"]}, "op": "scale", "factor": 0.5},
        {"ops": {"label": "relu_1_2", "contains": "relu", "regex": "^relu_"}, "op": "fill",
         "value": 1.0}]
    again = load_spec(_write(tmp_path, dumped))
    assert [r.describe() for r in again.rules] == [r.describe() for r in spec.rules]
    for selector in (tt.where(lambda op: True), ~tt.func("relu"), tt.func("max", output=0),
                     tt.func("relu") & tt.func("gelu")):
        with pytest.raises(tt.TokentraceError, match=r"rule 0 .*selects ops in a way JSON "
                                                     r"cannot say"):
            tt.when(selector, tt.zero()).to_json()


def test_an_op_rule_from_json_edits_as_the_python_one(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()),
                                torch.nn.Linear(4, 2)).eval()
    x = torch.randn(3, 4)
    spec = load_spec(_write(tmp_path, [{"ops": {"func": "relu", "in_module": "2"},
                                        "op": "scale", "factor": 0.0}]))
    bound = spec.bind(model)
    with torch.no_grad():
        got = bound(x)
        expected = model[3](torch.zeros(3, 4))
    assert torch.equal(got, expected) and bound.last_report.fire_count == 1


def test_operand_on_a_device(tmp_path):
    torch.save({"t": torch.ones(2)}, tmp_path / "t.pt")
    spec = load_spec(_write(tmp_path, [{"site": "a", "op": "replace", "operand": "t.pt"}]),
                     device="meta")
    assert spec.rules[0].action.tensor.device.type == "meta"


ERRORS = [
    ("{not json", r"spec\.json is not valid JSON: .* at line 1 column 2"),
    ({"site": "a", "op": "zero"}, r"the top level must be a JSON list of rules.*got dict"),
    (["zero"], r"rule 0: a rule is a JSON object"),
    ([{"site": "a"}], r'rule 0: has no "op"; accepted: zero, fill, add, scale, clamp, replace'),
    ([{"site": "a", "op": "zero"}, {"site": "a", "op": "zap"}],
     r'rule 1: unknown op "zap"; accepted: zero, fill, add, scale, clamp, replace'),
    ([{"site": "a", "op": "scale", "factor": 2, "value": 1}],
     r'rule 0: unknown key "value" for op \'scale\'; accepted keys: site, ops, op, index, '
     r"calls, input, output, requests, factor"),
    ([{"op": "zero"}], r'rule 0: "site" must be a module address or glob .*, or "ops" an '
                       r"object choosing ops .*got neither"),
    ([{"ops": {"fnc": "relu"}, "op": "zero"}],
     r'rule 0: unknown key "fnc" in "ops"; accepted: func, in_module, label, contains, regex'),
    ([{"ops": {}, "op": "zero"}], r'rule 0: "ops" must be an object .*got \{\}'),
    ([{"ops": "relu", "op": "zero"}], r'rule 0: "ops" must be an object .*got "relu"'),
    ([{"ops": {"func": 3}, "op": "zero"}],
     r'rule 0: "ops" key "func" takes a name or a non-empty list of names; got 3'),
    ([{"ops": {"label": ""}, "op": "zero"}], r'rule 0: "ops" key "label" takes a string'),
    ([{"ops": {"func": "relu"}, "site": "a", "op": "zero"}],
     r'rule 0: a rule edits module calls \("site"\) or ops \("ops"\), not both'),
    ([{"ops": {"func": "relu"}, "op": "zero", "input": "x"}],
     r"rule 0: tt.when\(..., input=\) edits a module call's input"),
    ([{"ops": {"regex": "("}, "op": "zero"}],
     r"rule 0: tt.regex\('\('\) is not a regular expression"),
    ([{"site": 3, "op": "zero"}], r'rule 0: "site" must be .*got 3'),
    ([{"site": "a", "op": "fill"}], r'rule 0: op \'fill\' needs "value" \(a number\)'),
    ([{"site": "a", "op": "scale", "factor": "2"}], r'rule 0: "factor" must be a number, got "2"'),
    ([{"site": "a", "op": "clamp"}], r'rule 0: op "clamp" needs "lo", "hi" or both'),
    ([{"site": "a", "op": "clamp", "lo": 2, "hi": 1}], r"rule 0: tt.clamp: lo=2 is above hi=1"),
    ([{"site": "a", "op": "add"}], r'rule 0: op \'add\' needs exactly one of "value"'),
    ([{"site": "a", "op": "add", "value": 1, "operand": "x.pt"}],
     r'rule 0: op \'add\' needs exactly one of "value"'),
    ([{"site": "a", "op": "add", "operand": "missing.pt"}],
     r'rule 0: "operand" file .*missing\.pt does not exist'),
    ([{"site": "a", "op": "add", "operand": "spec.json"}],
     r"accepted formats are \.safetensors and \.pt"),
    ([{"site": "a", "op": "replace", "operand": "two.pt"}],
     r"holds 2 tensors; pick one with \"operand_key\" \(one of 'x', 'y'\)"),
    ([{"site": "a", "op": "replace", "operand": "two.pt", "operand_key": "z"}],
     r"\"operand_key\" 'z' is not in .*two\.pt; it holds 'x', 'y'"),
    ([{"site": "a", "op": "zero", "index": "all"}],
     r'rule 0: "index" must be null, an int, or a list'),
    ([{"site": "a", "op": "zero", "index": [0, [1]]}],
     r'rule 0: "index" entry 1 must be an int, null \(the whole dimension\), \[start, stop\]'),
    ([{"site": "a", "op": "zero", "index": [[0, 4, -1]]}],
     r"rule 0: .*slice steps must be positive"),
    ([{"site": "a", "op": "zero", "calls": "first"}],
     r'rule 0: "calls" must be "every", "prefill", \{"call": k\}, \{"token": k\}, '
     r'\{"request_token": k\}, '
     r'\{"calls": \[first, last\]\}, \{"tokens": \[first, last\]\}, or a list of these; '
     r'got "first"'),
    ([{"site": "a", "op": "zero", "calls": {"call": 0}}], r"rule 0: tt.call\(k\): k is 1-based"),
    ([{"site": "a", "op": "zero", "calls": {"calls": [3, 2]}}],
     r'rule 0: "calls": \{"calls": \[first, last\]\} takes two ints, 1 <= first <= last'),
    ([{"site": "a", "op": "zero", "calls": {"token": "2"}}],
     r'rule 0: "calls": \{"token": k\} takes an int k >= 1'),
    ([{"site": "a", "op": "zero", "calls": []}], r'rule 0: "calls" is an empty list'),
]


@pytest.mark.parametrize("data,message", ERRORS)
def test_load_errors(tmp_path, data, message):
    torch.save({"x": torch.ones(1), "y": torch.ones(1)}, tmp_path / "two.pt")
    path = _write(tmp_path, data)
    with pytest.raises(tt.TokentraceError, match=message) as err:
        load_spec(path)
    text = str(err.value)
    assert text.startswith("tokentrace: ") and "\n" not in text
    assert text.count("tokentrace:") == 1
    if isinstance(data, list):
        assert f"edit spec {path}, rule " in text


def test_missing_file_and_bad_path(tmp_path):
    with pytest.raises(tt.TokentraceError, match=r"no edit spec file at .*nope\.json; pass the "
                                                 r"path of a JSON list of rules"):
        load_spec(tmp_path / "nope.json")
    with pytest.raises(tt.TokentraceError, match="takes the path of a JSON edit spec file"):
        load_spec(3)


def test_unknown_site_names_the_rule_at_bind(tmp_path, llama):
    spec = load_spec(_write(tmp_path, [{"site": "model.layers.9.mlp", "op": "zero"}]))
    with pytest.raises(tt.TokentraceError, match="no site named 'model.layers.9.mlp'"):
        spec.bind(llama)
