"""tt.when(...).bind(model): real forward/generate with edits, num_fires, call selectors."""

import math

import pytest
import torch

import tokentrace as tt

V = "model.layers.0.self_attn.v_proj"


def _gen(model, prompt, n=4):
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              output_logits=True, return_dict_in_generate=True)


def test_num_fires_every_call_prefill_and_token(llama, prompt):
    bound = tt.when(tt.module(V), tt.scale(0.5)).bind(llama)
    _gen(bound, prompt, 5)
    assert bound.last_report.num_fires == 5
    bound = tt.when(tt.module(V), tt.scale(0.5), calls=tt.prefill).bind(llama)
    _gen(bound, prompt, 5)
    assert bound.last_report.num_fires == 1
    bound = tt.when(tt.module(V), tt.scale(0.0), calls=tt.token(3)).bind(llama)
    out = _gen(bound, prompt, 5)
    assert bound.last_report.num_fires == 1
    plain = _gen(llama, prompt, 5)
    # logits of tokens 1 and 2 are untouched; token 3's differ
    assert torch.equal(out.logits[0], plain.logits[0])
    assert torch.equal(out.logits[1], plain.logits[1])
    assert not torch.allclose(out.logits[2], plain.logits[2])


def test_callable_ctx_and_combined_specs(llama, prompt):
    seen = []

    def spy(values, *, ctx):
        seen.append((ctx.site, ctx.call, ctx.token))

    spec = tt.when(V, spy) + tt.when("model.layers.1.mlp", tt.scale(1.0), calls=range(2, 4))
    bound = spec.bind(llama)
    _gen(bound, prompt, 4)
    assert seen == [(V, k, k) for k in range(1, 5)]
    assert bound.last_report.num_fires == 4 + 2
    assert [n for _, n in bound.last_report.per_rule] == [4, 2]
    # the bound model still looks like the model, and the model is left without hooks
    assert bound.config is llama.config
    assert all(not m._forward_hooks for m in llama.modules())


def test_edits_during_trace(llama, prompt):
    import warnings
    spec = tt.when(V, tt.zero(), calls=tt.prefill)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = tt.trace(llama.generate, prompt, input_kwargs={"max_new_tokens": 2},
                         save=tt.module(V), edits=spec)
    assert trace[f"{V}:1"].out.abs().sum() == 0
    assert trace[f"{V}:2"].out.abs().sum() > 0


def test_old_intervene_keyword_still_works_and_warns(llama, prompt):
    spec = tt.when(V, tt.zero(), calls=tt.prefill)
    with pytest.warns(DeprecationWarning, match="intervene= is deprecated; use edits=") as seen:
        trace = tt.trace(llama, prompt, save=tt.module(V), kernels="off", intervene=spec)
    assert trace[f"{V}:1"].out.abs().sum() == 0
    assert seen[0].filename == __file__  # points at the caller
    with pytest.raises(tt.TokentraceError, match="edits= only"), \
            pytest.warns(DeprecationWarning):
        tt.trace(llama, prompt, edits=spec, intervene=spec)
    with pytest.raises(tt.TokentraceError, match="edits= takes an edit spec"):
        tt.record(llama, prompt, save=tt.module(V), edits="zero")


@pytest.mark.parametrize("make, message", [
    (lambda: tt.fill(float("nan")), "NaN would make every edited element NaN"),
    (lambda: tt.scale(math.nan), "NaN would make"),
    (lambda: tt.clamp(lo=math.nan), "NaN would make"),
    (lambda: tt.zero(index=(2**63,)), "index value 9223372036854775808 is outside the 64-bit"),
    (lambda: tt.zero(index=(slice(0, 10**30),)), "is outside the 64-bit range"),
    (lambda: tt.zero(index=(list(range(10**6)),)), r"got \[0, 1, 2, .*\.\.\.$"),
    (lambda: tt.add(10**400), "is too large for a float"),
])
def test_edit_values_the_table_cannot_take_are_one_short_line(make, message):
    """Values that once passed silently (NaN), wrapped or reached torch (2**63: "Expected a
    value of type List[int]"), or printed a 25 MB message (a list of 10**6 indices)."""
    with pytest.raises(tt.TokentraceError, match=message) as err:
        make()
    assert len(str(err.value)) < 300 and "\n" not in str(err.value)
    tt.fill(-math.inf)  # -inf (masking) is a number the table takes


def test_too_many_entries_names_the_sites_and_rules_not_calls():
    model = torch.nn.Sequential(*[torch.nn.Linear(2, 2) for _ in range(5000)])
    with pytest.raises(tt.TokentraceError, match="the rules and the sites they select need "
                                                 "more entries than the patch table takes"):
        tt.when("*", tt.zero()).bind(model)

