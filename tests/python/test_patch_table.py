"""Declarative edits run through the native patch table (libtokentrace_torch_ops): results
against a plain hook and the plain-torch reference, num_fires, skips, bind-time errors,
torch.compile, mixed specs, and the library being missing."""

import os

import pytest
import torch

import tokentrace as tt
from patch_reference import apply_reference

V = "model.layers.0.self_attn.v_proj"


def _gen(model, prompt, n=5):
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              output_scores=True, output_logits=True,
                              return_dict_in_generate=True)


# --- the seed's recipe, declaratively ------------------------------------------------------
def test_zero_on_v_proj_prefill_equals_the_plain_hook(llama, prompt):
    def blank(m, a, out):
        out = out.clone()
        out[:, 1] = 0.0
        return out

    nxt = torch.tensor([[7]])
    with torch.no_grad():
        h = llama.model.layers[0].self_attn.v_proj.register_forward_hook(blank)
        try:
            cache = llama(prompt, use_cache=True).past_key_values
        finally:
            h.remove()
        reference = llama(nxt, past_key_values=cache, use_cache=True).logits
        bound = tt.when(tt.module(V), tt.zero(index=(slice(None), 1)),
                        calls=tt.prefill).bind(llama)
        assert bound.patch_table is not None  # the native table, not a Python fallback
        cache = bound(prompt, use_cache=True).past_key_values
        edited = llama(nxt, past_key_values=cache, use_cache=True).logits
        clean = llama(nxt, past_key_values=llama(prompt, use_cache=True).past_key_values,
                      use_cache=True).logits
    assert torch.equal(edited, reference)
    assert not torch.allclose(edited, clean)
    assert bound.last_report.num_fires == 1 and bound.last_report.num_skips == 0


# --- generate: num_fires per selector, and which step changes ---------------------------------
def test_generate_fires_per_selector(llama, prompt):
    n = 5
    for calls, want in [(None, n), (tt.prefill, 1), (tt.token(3), 1), (tt.call(range(2, 4)), 2),
                        (tt.token([1, 4]) | tt.call(5), 3)]:
        bound = tt.when(V, tt.scale(0.5), calls=calls).bind(llama)
        _gen(bound, prompt, n)
        assert bound.last_report.num_fires == want, calls
        assert bound.last_report.per_rule[0][1] == want


def test_token_3_changes_only_step_3(llama, prompt):
    # lm_head: the edit reaches step 3's scores and nothing else (a positive scale keeps the
    # greedy token, so later steps see the same inputs).
    bound = tt.when("lm_head", tt.scale(2.0), calls=tt.token(3)).bind(llama)
    out = _gen(bound, prompt, 5)
    clean = _gen(llama, prompt, 5)
    assert bound.last_report.num_fires == 1
    assert torch.equal(out.sequences, clean.sequences)
    for step in range(5):
        if step == 2:
            assert torch.equal(out.logits[step], 2 * clean.logits[step])
        else:
            assert torch.equal(out.logits[step], clean.logits[step]), step
            assert torch.equal(out.scores[step], clean.scores[step]), step


# --- every op against the plain-torch reference ------------------------------------------------
SHAPE = (2, 5, 8)  # a Linear's output: (batch, position, feature)
INDEXES = [None, (slice(None), 1), (0, slice(-2, None)), (Ellipsis, slice(0, None, 2)),
           (Ellipsis, 3), (slice(None), slice(1, None, 2), slice(None, -1)), (-1,),
           (1, Ellipsis, slice(2, 6))]


def _ops(shape, index):
    box = torch.empty(shape, device="meta")[index if index is not None else (Ellipsis,)].shape
    if index is not None and Ellipsis in index[:-1]:  # operands vary after the ... only
        after = sum(isinstance(e, slice) for e in index[index.index(Ellipsis) + 1:])
        box = box[len(box) - after:] if after else torch.Size([1])
    g = torch.Generator().manual_seed(1)
    yield tt.zero(index=index)
    yield tt.fill(2.5, index=index)
    yield tt.add(1.5, index=index)
    yield tt.add(torch.randn(box[-1:], generator=g), index=index)
    yield tt.scale(-0.5, index=index)
    yield tt.clamp(-0.25, 0.5, index=index)
    yield tt.clamp(None, 0.1, index=index)
    yield tt.replace(torch.randn(box, generator=g), index=index)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("index", INDEXES, ids=[str(i) for i in range(len(INDEXES))])
def test_every_op_matches_the_reference(dtype, index):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, SHAPE[-1])).to(dtype).eval()
    x = torch.randn(*SHAPE[:-1], 4).to(dtype)
    with torch.no_grad():
        plain = model(x)
        for op in _ops(SHAPE, index):
            bound = tt.when("0", op).bind(model)
            got = bound(x)
            want = apply_reference(op, plain)
            assert torch.equal(got, want), op
            assert bound.last_report.num_fires == 1


def test_rule_order_with_callables_and_ops(llama, prompt):
    def plus_one(values, *, ctx):
        return values + 1

    spec = (tt.when(V, tt.scale(2.0)) + tt.when(V, plus_one) + tt.when(V, tt.scale(3.0))
            + tt.when(V, tt.zero(index=(Ellipsis, 0)), calls=tt.prefill))

    def hook(m, a, out):
        out = (out * 2 + 1) * 3
        if state["k"] == 0:
            out[..., 0] = 0
        state["k"] += 1
        return out

    state = {"k": 0}
    with torch.no_grad():
        h = llama.model.layers[0].self_attn.v_proj.register_forward_hook(hook)
        try:
            want = llama.generate(prompt, max_new_tokens=3, do_sample=False,
                                  output_logits=True, return_dict_in_generate=True)
        finally:
            h.remove()
    bound = spec.bind(llama)
    with torch.no_grad():
        got = bound.generate(prompt, max_new_tokens=3, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    assert all(torch.equal(a, b) for a, b in zip(got.logits, want.logits))
    assert [n for _, n in bound.last_report.per_rule] == [3, 3, 3, 1]


def test_module_returning_its_input_is_not_edited_in_place():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5), torch.nn.Linear(3, 3)).eval()
    x = torch.ones(2, 3)
    keep = x.clone()
    with torch.no_grad():
        out = tt.when("0", tt.zero()).bind(model)(x)
        assert torch.equal(out, model[1](torch.zeros(2, 3)))
    assert torch.equal(x, keep)


class _DictOut(torch.nn.Module):
    def forward(self, x):
        return {"hidden": (x * 2, "kept"), "n": 1}


def test_edited_tensor_goes_back_at_its_path_in_a_dict_output():
    model = torch.nn.Sequential(_DictOut()).eval()
    x = torch.ones(2, 3)
    out = tt.when("0", lambda v, *, ctx: v + 1).bind(model)(x)
    assert torch.equal(out["hidden"][0], torch.full((2, 3), 3.0))
    assert out["hidden"][1] == "kept" and out["n"] == 1


# --- skips, reports ---------------------------------------------------------------------------
def test_runtime_misfit_is_skipped_counted_and_warned(llama, prompt):
    bound = tt.when(V, tt.fill(1.0, index=(slice(None), 4))).bind(llama)
    with pytest.warns(tt.EditSkipWarning, match="out of range for dimension 1 of size 1"):
        _gen(bound, prompt, 3)  # position 4 exists at the prefill (5 tokens), not in decode
    report = bound.last_report
    assert report.num_fires == 1 and report.num_skips == 2
    assert "index 4 is out of range for dimension 1 of size 1" in report.last_skip_reason
    assert list(report.skip_reasons) == [bound._hooks.spec.rules[0].describe()]
    assert "num_skips=2" in repr(report)


def test_installed_block_counts_across_calls(llama, prompt):
    bound = tt.when(V, tt.scale(0.5), calls=tt.token(2)).bind(llama)
    with torch.no_grad(), bound.installed():
        llama(prompt)             # token 1 (the model itself: the hooks are on it)
        a = bound(prompt).logits  # token 2: fires
        b = llama(prompt).logits  # token 3
        assert bound.report().num_fires == 1
    assert bound.last_report.num_fires == 1
    assert not torch.allclose(a, b)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in llama.modules())
    earlier = bound.last_report
    bound(prompt)  # token 1 only: no fire; a CPU table's counters are read when a run ends
    assert bound.last_report.num_fires == 0 and earlier.num_fires == 1


# --- bind-time errors ---------------------------------------------------------------------------
@pytest.mark.parametrize("make,message", [
    (lambda: tt.when("model.layers.0.self_attn.v_prj", tt.zero()),
     r"did you mean .*model\.layers\.0\.self_attn\.v_proj"),
    (lambda: tt.when(V, tt.zero(index=(Ellipsis, 16))),
     r"rule 0 \(.*\): index 16 is outside the last dimension of model\.layers\.0\.self_attn"
     r"\.v_proj's output \(size 16, the out_features of Linear\); accepted: -16\.\.15"),
    (lambda: tt.when("model.embed_tokens", tt.fill(0.0, index=(Ellipsis, -33))),
     r"index -33 is outside the last dimension .*embedding_dim of Embedding"),
    (lambda: tt.when(V, tt.add(torch.ones(5))),
     r"rule 0 .*operand shape \[5\] does not broadcast over the box: its last dimension has "
     r"5 elements, the box's last dimension at model\.layers\.0\.self_attn\.v_proj has 1 or 16"),
    (lambda: tt.when(V, tt.replace(torch.ones(3), index=(Ellipsis, slice(0, 4)))),
     r"operand shape \[3\] does not broadcast.* has 1 or 4"),
    (lambda: tt.when("lm_head", tt.scale(1.0)) + tt.when(V, tt.add(torch.ones(16, device="meta"))),
     r"rule 1 .*the operand is on meta but the model is on cpu; move it with \.to\('cpu'\)"),
    (lambda: tt.when(V, tt.replace(torch.ones(5, 2), index=(Ellipsis, slice(0, 2)))),
     r"with \.\.\. in index=, the operand may vary only along the 1 box dimension\(s\) after "
     r"the \.\.\. .*its shape is \[5, 2\]"),
    (lambda: tt.when(V, tt.add(torch.ones(16, dtype=torch.int64))),
     r"the operand has dtype int64; accepted: float32, float16, bfloat16"),
    (lambda: tt.when(V, tt.zero(), calls=tt.call(range(1, 20000, 2))),
     r"its calls= selects 10000 separate runs of calls or tokens at each site"),
    (lambda: tt.when(V, tt.add(torch.ones(0))),
     r"rule 0 .*the operand is empty \(shape \[0\]\); an edit with it would change nothing"),
])
def test_bind_time_errors(llama, make, message):
    with pytest.raises(tt.TokentraceError, match=message) as err:
        make().bind(llama)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("change", ["fill_", "resize_", "set_"])
def test_an_operand_changed_after_bind_does_not_change_the_edit(llama, prompt, change):
    """The table owns a copy of each operand from bind on: an operand resized or set_() after
    bind was once read after free (valgrind: an invalid read in ApplyRow), adding ~1e14."""
    delta = torch.linspace(-1, 1, 16)
    with torch.no_grad():
        reference = tt.when(V, tt.add(delta.clone())).bind(llama)(prompt).logits
        bound = tt.when(V, tt.add(delta)).bind(llama)
        if change == "fill_":
            delta.fill_(1e6)
        elif change == "resize_":
            delta.resize_(1 << 20).fill_(1e6)  # a new block: the old one is freed
        else:
            delta.set_(torch.full((16,), 1e6))
        junk = [torch.full((16,), 1e6) for _ in range(64)]  # reuses freed blocks
        edited = bound(prompt).logits
    del junk
    assert torch.equal(edited, reference)


def test_bind_rejects_a_dtype_the_table_cannot_take():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3)).double()
    with pytest.raises(tt.TokentraceError, match=r"rule 0 .*: 0 computes in float64; the patch "
                                                 r"table edits float32, float16 and bfloat16"):
        tt.when("0", tt.zero()).bind(model)
    tt.when("0", lambda v, *, ctx: v).bind(model)  # callables take anything


def test_an_entry_the_library_refuses_is_reported_on_its_rule():
    """The library returns the refused entry's index (data, not text); rule 0 has 3 entries
    (3 separate calls), so entry 4 is rule 2's."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)).eval()
    bad = tt.clamp(0.0, 1.0)
    bad.lo = float("nan")  # past tt.clamp's own check, so the library's check refuses it
    spec = (tt.when("0", tt.zero(), calls=tt.call([1, 3, 5])) + tt.when("1", tt.scale(2.0))
            + tt.when("1", bad))
    with pytest.raises(tt.TokentraceError) as err:
        spec.bind(model)
    text = str(err.value)
    assert text.startswith(f"tokentrace: rule 2 ({spec.rules[2].describe()}): clamp bounds "
                           f"lo=nan"), text
    assert "patch entry" not in text and "\n" not in text


def test_errors_come_before_any_model_work(llama, prompt):
    calls = []
    h = llama.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        with pytest.raises(tt.TokentraceError):
            tt.when(V, tt.add(torch.ones(7))).bind(llama)
    finally:
        h.remove()
    assert calls == []


def test_missing_library_is_a_clear_error_and_callables_still_work(llama, prompt, monkeypatch):
    from tokentrace._backend import torch_library
    monkeypatch.setitem(torch_library._state, "loaded", None)
    monkeypatch.setenv("TOKENTRACE_TORCH_OPS_LIB", "/nonexistent/libtokentrace_torch_ops.so")
    with pytest.raises(tt.TokentraceError) as err:
        tt.when(V, tt.zero()).bind(llama)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("tokentrace: the patch table library libtokentrace_torch_ops.so is "
                           "not built (looked in: $TOKENTRACE_TORCH_OPS_LIB=/nonexistent/")
    assert "scripts/setup.sh" in text and "Python callables do not need it" in text
    bound = tt.when(V, lambda v, *, ctx: v * 0).bind(llama)
    with torch.no_grad():
        bound(prompt)
    assert bound.last_report.num_fires == 1 and bound.patch_table is None


def test_library_is_found_next_to_the_build(monkeypatch, tmp_path):
    from tokentrace._backend import torch_library
    lib = torch_library.load_library()
    monkeypatch.delenv("TOKENTRACE_TORCH_OPS_LIB", raising=False)
    (tmp_path / "torch-ops").mkdir()
    os.symlink(lib, tmp_path / "torch-ops" / torch_library.LIB_NAME)
    monkeypatch.setenv("TOKENTRACE_NATIVE_DIR", str(tmp_path))
    path, looked = torch_library.find_library()
    assert path == str(tmp_path / "torch-ops" / torch_library.LIB_NAME)
    assert str(tmp_path / torch_library.LIB_NAME) in looked  # next to the native files first


# --- torch.compile ----------------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_forward_gives_the_same_logits(llama, prompt, backend):
    torch._dynamo.reset()
    spec = (tt.when(V, tt.zero(index=(slice(None), 1)), calls=tt.prefill)
            + tt.when("model.layers.1.mlp.down_proj", tt.scale(0.5, index=(Ellipsis, 3)),
                      calls=tt.token(2)))
    bound = spec.bind(llama)
    with torch.no_grad():
        eager = [bound(prompt, use_cache=False).logits for _ in range(1)]
        with bound.installed():
            first = llama(prompt, use_cache=False).logits
            second = llama(prompt, use_cache=False).logits
        reference = [first, second]
        with bound.installed():
            compiled = torch.compile(llama, backend=backend, fullgraph=True)
            got = [compiled(prompt, use_cache=False).logits for _ in range(2)]
            assert bound.report().num_fires == 2
    clean = llama(prompt, use_cache=False).logits
    assert torch.equal(eager[0], first)
    assert torch.equal(got[0], reference[0]) and torch.equal(got[1], reference[1])
    assert not torch.allclose(got[0], clean) and not torch.allclose(got[1], clean)
    assert not torch.allclose(got[0], got[1])
    torch._dynamo.reset()
