"""Edits of a call's input by path (tt.when(..., input=path)), applied before forward runs."""

import json
import warnings

import pytest
import torch

import tokentrace as tt

V_PROJ = "model.layers.0.self_attn.v_proj"


def _blank_input(module, args):
    return (torch.zeros_like(args[0]),)


def _logits(lm, ids, **kwargs):
    with torch.no_grad():
        return lm(ids, **kwargs).logits


def test_declarative_input_edit_matches_a_plain_pre_hook(llama, prompt):
    spec = tt.when(tt.module(V_PROJ), tt.zero(), input="input")  # Linear.forward(input)
    edited = _logits(spec.bind(llama), prompt)
    handle = llama.get_submodule(V_PROJ).register_forward_pre_hook(_blank_input)
    try:
        reference = _logits(llama, prompt)
    finally:
        handle.remove()
    assert torch.equal(edited, reference)
    assert not torch.equal(edited, _logits(llama, prompt))


def test_the_callers_tensor_is_left_alone(llama, prompt):
    """q_proj and k_proj read the same hidden states as v_proj: only v_proj's copy changes."""
    seen = {}
    hooks = [llama.get_submodule(f"model.layers.0.self_attn.{p}").register_forward_pre_hook(
        lambda m, a, p=p: seen.__setitem__(p, a[0].clone())) for p in ("q_proj", "k_proj")]
    spec = tt.when(tt.module(V_PROJ), tt.fill(3.0), input="input")
    try:
        _logits(spec.bind(llama), prompt)
    finally:
        for h in hooks:
            h.remove()
    assert torch.equal(seen["q_proj"], seen["k_proj"])
    assert not torch.all(seen["q_proj"] == 3.0)


def test_callable_input_edit_on_chosen_tokens(llama, prompt):
    calls = []

    def double(values, *, ctx):
        calls.append((ctx.call, ctx.token, list(values.shape)))
        return values * 2

    bound = tt.when(tt.module(V_PROJ), double, calls=tt.token(2), input="input").bind(llama)
    with torch.no_grad():
        bound.generate(prompt, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    assert calls == [(2, 2, [1, 1, 32])]
    assert bound.last_report.num_fires == 1


def test_an_edit_of_a_cached_entry_reaches_the_step(llama, prompt):
    box = (slice(None), slice(None), 1)  # position 1 of every head
    with torch.no_grad():
        cache = llama(prompt, use_cache=True).past_key_values
        spec = tt.when("self", tt.zero(index=box), input="past_key_values.layers[0].values")
        edited = spec.bind(llama)(torch.tensor([[7]]), past_key_values=cache).logits
        # The cache is shared state: the entry is edited in the cache itself.
        assert torch.count_nonzero(cache.layers[0].values[:, :, 1]) == 0

        cache = llama(prompt, use_cache=True).past_key_values
        cache.layers[0].values[:, :, 1] = 0.0
        reference = llama(torch.tensor([[7]]), past_key_values=cache).logits
    assert torch.equal(edited, reference)


def test_a_path_that_names_nothing_lists_the_nearest(llama, prompt):
    spec = tt.when("self", tt.zero(), input="past_key_values.layer[0].values")
    with torch.no_grad():
        cache = llama(prompt, use_cache=True).past_key_values
        with pytest.raises(tt.TokentraceError) as err:
            spec.bind(llama)(torch.tensor([[7]]), past_key_values=cache)
    message = str(err.value)
    assert "no input at 'past_key_values.layer[0].values'" in message
    assert "'past_key_values.layers[0].values'" in message
    with pytest.raises(tt.TokentraceError, match="input= takes a path"):
        tt.when("self", tt.zero(), input=3)


def test_the_trace_records_the_edited_input(llama, prompt, tmp_path):
    spec = tt.when(tt.module(V_PROJ), tt.fill(1.5), input="input")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = tt.trace(llama, prompt, edits=spec, kernels="off",
                         inputs_of=tt.module(V_PROJ), save=tt.module(V_PROJ))
    given = trace[f"{V_PROJ}:1"].inputs["input"]
    assert list(given.shape) == [1, 5, 32] and torch.all(given == 1.5)


def test_json_form_keeps_the_input_path(tmp_path):
    spec = tt.when(tt.module(V_PROJ), tt.scale(0.5), input="input")
    text = spec.to_json(str(tmp_path / "spec.json"))
    assert json.loads(text)[0]["input"] == "input"
    assert tt.load_spec(str(tmp_path / "spec.json")).rules[0].input == "input"


def test_a_box_that_does_not_fit_the_input_is_skipped_and_counted(llama):
    bound = tt.when(tt.module(V_PROJ), tt.zero(index=(..., 40)), input="input").bind(llama)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bound(torch.tensor([[1, 2, 3]]))
    report = bound.last_report
    assert (report.num_fires, report.num_skips) == (0, 1)
    assert "index 40 is out of range" in report.last_skip_reason


@pytest.mark.parametrize("calls,fires", [(tt.token(2), 1), (tt.call(3), 1), (None, 4)])
def test_table_counters_select_the_same_calls_as_python(llama, prompt, calls, fires):
    """The declarative input edit's site in the patch table counts its own calls and tokens,
    and picks the calls a Python callable picks."""
    def generate(action):
        bound = tt.when(tt.module(V_PROJ), action, calls=calls, input="input").bind(llama)
        with torch.no_grad():
            out = bound.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True)
        return out.logits, bound.last_report.num_fires

    table, table_fires = generate(tt.scale(2.0))
    python, python_fires = generate(lambda values, *, ctx: values * 2)
    assert table_fires == python_fires == fires
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(table, python))
