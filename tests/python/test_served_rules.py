"""Rules for served requests without a serving engine: how a rule names requests and a request's
own tokens (tt.when(requests=...), tt.request_token, JSON "requests" / "request_token"), the
row masks a step's rows give (_edit/requests.py), the cache salts a spec asks for, and the
one-line errors where such a rule cannot run. tests/vllm/test_vllm_requests.py runs them in
vLLM."""

import json

import numpy as np
import pytest
import torch

import tokentrace as tt
from tokentrace._edit import ServedRules, SpecSalt
from tokentrace._engines import StepRow, request_tags

FILL = {"site": "model.layers.*.mlp", "op": "fill", "value": 1.0}


def _rules(tmp_path, rules):
    path = tmp_path / "edits.json"
    path.write_text(json.dumps(rules))
    return tt.load_spec(str(path)).rules


def _served(tmp_path, rules):
    def error(i, message):
        raise AssertionError(f"rule {i}: {message}")
    return ServedRules(_rules(tmp_path, rules), True, error)


def _row(request, n, computed, prompt, *tags):
    return StepRow(request, n, computed, prompt, frozenset(tags))


def test_masks_mark_the_rows_each_rule_selects_in_the_batchs_order(tmp_path):
    served = _served(tmp_path, [
        dict(FILL, requests="x"),                                      # every row of x
        dict(FILL, requests="x", calls="prefill"),                     # x's prompt rows
        dict(FILL, calls={"request_token": [1, 3]}),                   # anyone's 1st, 3rd
        dict(FILL, requests=["y", "z"], calls={"token": 2}),           # step 2, y or z
        dict(FILL, calls="every")])                                    # not per request
    assert served.slots == [0, 1, 2, 3]
    # a: a chunk of its 6-token prompt (positions 2..4); b: decoding its 3rd token (position
    # 4 of a 3-token prompt: its input is its 2nd token); c: its last prompt token + none
    rows = [_row("a", 3, 2, 6, "x"), _row("b", 1, 4, 3, "y"), _row("c", 2, 4, 5, "x", "z")]
    masks = dict(served.masks(2, rows))
    assert masks[0].tolist() == [1, 1, 1, 0, 1, 1]
    assert masks[1].tolist() == [1, 1, 1, 0, 1, 0]
    assert masks[2].tolist() == [1, 1, 1, 1, 1, 0]  # b at position 4 = prompt 3 + 3 - 2
    assert masks[3].tolist() == [0, 0, 0, 1, 1, 1]
    assert all(m.dtype == np.uint8 for m in masks.values())
    assert dict(served.masks(3, rows))[3].tolist() == [0] * 6  # step 3: not token 2
    rows_out = {r["request"]: json.loads(r["edits"]) for r in served.request_rows()}
    assert rows_out["a"] == {"0": [2, 6], "1": [2, 6], "2": [2, 6]}
    assert rows_out["b"] == {"2": [2, 2], "3": [1, 1]}
    assert rows_out["c"] == {"0": [2, 4], "1": [2, 2], "2": [2, 2], "3": [1, 2]}
    assert served.per_rule() == {0: 2, 1: 2, 2: 3, 3: 2}
    served.forget(["a", "b", "c"])
    assert served.request_rows() == []


def test_a_long_request_token_range_and_a_row_limit(tmp_path):
    served = _served(tmp_path, [dict(FILL, calls={"request_token": [2, 4]})])
    served.max_rows = 4
    masks = dict(served.masks(1, [_row("a", 3, 10, 10), _row("b", 3, 0, 3)]))
    # a: positions 10, 11, 12 = its tokens 2, 3, 4 (request_token [2, 4] is the list 2 and 4)
    assert masks[0].tolist() == [1, 0, 1, 0]
    assert served.rows_past_limit == 2  # b's rows past the 4 a mask holds


@pytest.mark.parametrize("value, tags", [("x", {"x"}), (["x", "y", 3], {"x", "y"}),
                                         (None, set()), (5, set())])
def test_a_requests_tags_come_from_its_extra_args(value, tags):
    assert request_tags({"tokentrace": value}) == tags
    assert request_tags(None) == frozenset()


def test_requests_and_request_token_round_trip_through_json(tmp_path):
    spec = (tt.when(tt.module("model.layers.*.mlp"), tt.zero(), calls=tt.request_token(3),
                    requests="a") +
            tt.when(tt.module("model.layers.*.mlp"), tt.scale(2.0), calls=tt.prefill,
                    requests=["b", "a"]))
    text = spec.to_json()
    assert json.loads(text)[0]["requests"] == "a"
    assert json.loads(text)[0]["calls"] == {"request_token": 3}
    assert json.loads(text)[1]["requests"] == ["a", "b"]
    path = tmp_path / "spec.json"
    path.write_text(text)
    back = tt.load_spec(str(path))
    assert back.to_json() == text
    assert [r.requests for r in back.rules] == [("a",), ("a", "b")]


@pytest.mark.parametrize("rule, says", [
    (dict(FILL, requests=""), "requests= takes a request tag"),
    (dict(FILL, requests=[]), "requests= takes a request tag"),
    (dict(FILL, requests="x", calls={"call": 2}), "counts a site's calls"),
    (dict(FILL, calls={"request_token": 0}), "k is 1-based"),
    (dict(FILL, calls={"request_token": "x"}), "takes an int k"),
    ({"ops": {"func": "relu"}, "op": "zero", "requests": "x"}, "edits module outputs"),
])
def test_a_bad_rule_for_requests_is_one_line(tmp_path, rule, says):
    with pytest.raises(tt.TokentraceError) as info:
        _rules(tmp_path, [rule])
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_callable_cannot_name_requests():
    with pytest.raises(tt.TokentraceError, match="declarative op"):
        tt.when(tt.module("a"), lambda values, *, ctx: values, requests="x")


def test_outside_a_serving_engine_a_rule_for_requests_is_refused_at_bind():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    for calls, requests in ((None, "x"), (tt.request_token(2), None)):
        spec = tt.when(tt.module("0"), tt.zero(), calls=calls, requests=requests)
        with pytest.raises(tt.TokentraceError, match="not served by one"):
            spec.bind(model)
    # tt.prefill without requests is the run's first call, as ever
    bound = tt.when(tt.module("0"), tt.zero(), calls=tt.prefill).bind(model)
    assert bound(torch.ones(1, 4)).abs().sum() == 0


class _Request:
    def __init__(self, request_id, tags=None, salt=None):
        self.request_id, self.cache_salt = request_id, salt
        self.sampling_params = type("P", (), {"extra_args": (
            {"tokentrace": tags} if tags is not None else None)})()


def test_cache_salts_keep_apart_what_edits_make_differ(tmp_path):
    path = tmp_path / "edits.json"
    path.write_text(json.dumps([dict(FILL, requests="x", calls="prefill"),
                                dict(FILL, requests="y", calls={"request_token": 3})]))
    salt = SpecSalt(str(path))
    assert salt.needed
    assert salt.of(_Request("1")) is None  # no rule applies: the job's salt, untouched
    a, b = salt.of(_Request("1", "x")), salt.of(_Request("2", "x"))
    assert a == b and a.startswith("tokentrace-")  # the same edits share blocks
    own = salt.of(_Request("3", "x", salt="user"))
    assert own.startswith("tokentrace-") and own.endswith(":user")
    # a request's later tokens: its own blocks, never shared
    assert salt.of(_Request("1", "y")) != salt.of(_Request("2", "y"))
    assert salt.of(_Request("1", ["x", "y"])) not in (a, salt.of(_Request("1", "y")))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps([dict(FILL, calls="prefill")]))
    assert not SpecSalt(str(plain)).needed  # every request edited alike: no salt
