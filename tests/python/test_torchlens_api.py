"""TorchLens's names in tokentrace: the intervention helpers with TorchLens's arguments, edit
callables taking `hook` or `ctx`, the report's fire_count/rule_fire_counts, site.out,
trace.summary(), tt.save/tt.load, record of a plain forward, and the one clear AttributeError
for a TorchLens name tokentrace lacks."""

import os
import re

import pytest
import torch

import tokentrace as tt
from tokentrace import _common as torchlens_names
from tt_testutil import ROOT

SITE = "transformer.h.0.mlp"


@pytest.fixture(scope="module")
def lm():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64)
    return transformers.GPT2LMHeadModel(cfg).eval()


IDS = torch.tensor([[1, 2, 3, 4]])


def _mlp_out(lm, spec):
    """The edited output of SITE in one bound forward, and the bound model."""
    got = []
    handle = lm.transformer.h[0].mlp.register_forward_hook(
        lambda m, a, out: got.append(out.detach().clone()))
    try:
        bound = spec.bind(lm)
        bound(IDS)
    finally:
        handle.remove()
    return got[0], bound


def _plain_mlp(lm):
    got = []
    handle = lm.transformer.h[0].mlp.register_forward_hook(
        lambda m, a, out: got.append(out.detach().clone()))
    try:
        lm(IDS)
    finally:
        handle.remove()
    return got[0]


# --- helpers -----------------------------------------------------------------------------
def test_steer_adds_a_direction_along_the_feature_axis(lm):
    base = _plain_mlp(lm)
    d = torch.randn(32)
    out, bound = _mlp_out(lm, tt.when(SITE, tt.steer(d, 3.0, feature_axis=-1)))
    # the edit is registered before ours, so ours sees the steered output
    torch.testing.assert_close(out, base + 3.0 * d)
    assert bound.last_report.fire_count == 1
    out, _ = _mlp_out(lm, tt.when(SITE, tt.steer(d, coef=-1.0, feature_axis=2)))
    torch.testing.assert_close(out, base - d)
    full = torch.randn_like(base)
    out, _ = _mlp_out(lm, tt.when(SITE, tt.steer(full)))
    torch.testing.assert_close(out, base + full)


def test_steer_refuses_what_it_cannot_align(lm):
    with pytest.raises(tt.TokentraceError, match="needs feature_axis="):
        _mlp_out(lm, tt.when(SITE, tt.steer(torch.randn(32))))
    with pytest.raises(tt.TokentraceError, match="the direction has 31 elements"):
        _mlp_out(lm, tt.when(SITE, tt.steer(torch.randn(31), feature_axis=-1)))
    with pytest.raises(tt.TokentraceError, match="takes a direction tensor"):
        tt.steer([1.0, 2.0])
    with pytest.raises(tt.TokentraceError, match="force_shape_change"):
        tt.steer(torch.ones(32), force_shape_change=True)


def test_zero_ablate_and_mean_ablate(lm):
    base = _plain_mlp(lm)
    op = tt.zero_ablate()
    assert op.name == "zero"  # declarative: the patch table runs it
    out, bound = _mlp_out(lm, tt.when(SITE, op))
    assert torch.count_nonzero(out) == 0 and bound.patch_table is not None
    out, _ = _mlp_out(lm, tt.when(SITE, tt.mean_ablate()))
    torch.testing.assert_close(out, torch.full_like(base, base.mean().item()))
    source = torch.tensor([1.0, 2.0, 6.0])
    out, bound = _mlp_out(lm, tt.when(SITE, tt.mean_ablate(source)))
    torch.testing.assert_close(out, torch.full_like(base, 3.0))
    assert bound.patch_table is not None
    with pytest.raises(tt.TokentraceError, match="only accepted value is 'self'"):
        tt.mean_ablate(over="batch")


def test_noise_with_a_seed_is_the_same_every_run(lm):
    a, _ = _mlp_out(lm, tt.when(SITE, tt.noise(0.5, seed=7)))
    b, _ = _mlp_out(lm, tt.when(SITE, tt.noise(0.5, seed=7)))
    c, _ = _mlp_out(lm, tt.when(SITE, tt.noise(0.5, seed=8)))
    base = _plain_mlp(lm)
    assert torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, base)
    with pytest.raises(tt.TokentraceError, match="number >= 0"):
        tt.noise(-1.0)


def test_project_onto_and_off_split_the_output(lm):
    base = _plain_mlp(lm)
    d = torch.randn(32)
    onto, _ = _mlp_out(lm, tt.when(SITE, tt.project_onto(d, feature_axis=-1)))
    off, _ = _mlp_out(lm, tt.when(SITE, tt.project_off(d, feature_axis=-1)))
    expected = (base @ d / (d @ d)).unsqueeze(-1) * d
    torch.testing.assert_close(onto, expected)
    torch.testing.assert_close(onto + off, base)
    with pytest.raises(tt.TokentraceError, match="all zeros"):
        tt.project_onto(torch.zeros(32), feature_axis=-1)


def test_swap_with_takes_a_tensor_or_a_call_and_refuses_a_label(lm, tmp_path):
    donor = tt.trace(lm, IDS, save=SITE, out=str(tmp_path / "donor.sqlite"))
    other = torch.randn(1, 4, 32)
    out, _ = _mlp_out(lm, tt.when(SITE, tt.swap_with(other)))
    assert torch.equal(out, other)
    out, _ = _mlp_out(lm, tt.when(SITE, tt.swap_with(donor[f"{SITE}:1"])))
    assert torch.equal(out, donor[f"{SITE}:1"].out)
    with pytest.raises(tt.TokentraceError, match="not a label"):
        tt.swap_with(f"{SITE}:1")


def test_splice_module_runs_a_replacement(lm):
    base = _plain_mlp(lm)
    lin = torch.nn.Linear(32, 32)
    out, _ = _mlp_out(lm, tt.when(SITE, tt.splice_module(lin, input="out")))
    torch.testing.assert_close(out, lin(base))
    seen = []

    class Echo(torch.nn.Module):
        def forward(self, hidden):  # the site's own argument
            seen.append(hidden.shape)
            return hidden * 2

    out, _ = _mlp_out(lm, tt.when(SITE, tt.splice_module(Echo(), input="in")))
    assert seen == [torch.Size([1, 4, 32])]
    with pytest.raises(tt.TokentraceError, match="'in' .* and 'out'"):
        tt.splice_module(lin, input="args")


def test_clamp_takes_torchlens_min_and_max(lm):
    base = _plain_mlp(lm)
    out, _ = _mlp_out(lm, tt.when(SITE, tt.clamp(min=-0.01, max=0.02)))
    torch.testing.assert_close(out, base.clamp(-0.01, 0.02))
    with pytest.raises(tt.TokentraceError, match="each bound once"):
        tt.clamp(-1.0, min=-2.0)


# --- callables and the report ------------------------------------------------------------
def test_a_callable_takes_hook_or_ctx_as_its_signature_says(lm):
    told = []

    def by_hook(out, *, hook):
        told.append(("hook", hook.name, hook.pass_index, hook.layer_log["module_address"]))
        return out

    def by_ctx(out, *, ctx):
        told.append(("ctx", ctx.site, ctx.call, ctx.token))
        return out

    bound = (tt.when(SITE, by_hook) + tt.when(SITE, by_ctx)).bind(lm)
    bound(IDS)
    assert told == [("hook", SITE, 1, SITE), ("ctx", SITE, 1, 1)]
    assert bound.last_report.fire_count == 2
    assert list(bound.last_report.rule_fire_counts.values()) == [1, 1]


def test_a_callable_with_neither_keyword_is_refused_at_when():
    with pytest.raises(tt.TokentraceError, match="takes neither ctx nor hook"):
        tt.when(SITE, lambda out: out)


# --- the trace object --------------------------------------------------------------------
def test_site_out_summary_save_and_load(lm, tmp_path):
    trace = tt.trace(lm.generate, IDS, {"max_new_tokens": 3, "do_sample": False,
                                        "pad_token_id": 0},
                     save=SITE, out=str(tmp_path / "gen.sqlite"))
    with pytest.raises(tt.TokentraceError, match=r"has 3 calls, so it has no one \.out"):
        trace[SITE].out
    text = trace.summary()
    row = next(line for line in text.splitlines() if line.startswith(SITE + " "))
    assert row.split()[1:3] == ["module", "3"] and row.endswith("[1, 4, 32]")
    dest = tmp_path / "elsewhere" / "copy.sqlite"
    dest.parent.mkdir()
    assert tt.save(trace, dest) == str(dest)
    copy = tt.load(dest)
    assert copy.num_tokens == 3
    for k in (1, 2, 3):
        assert torch.equal(copy[f"{SITE}:{k}"].out, trace[f"{SITE}:{k}"].out)
    with pytest.raises(tt.TokentraceError, match="exists; pass overwrite=True"):
        tt.save(trace, dest)
    tt.save(trace, dest, overwrite=True)
    with pytest.raises(tt.TokentraceError, match="takes a trace"):
        tt.save(str(dest), tmp_path / "x.sqlite")


def test_record_of_a_plain_forward_is_one_step(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    x = torch.randn(2, 4)
    rec = tt.record(model, x, save=tt.module("1"), out=str(tmp_path / "r.sqlite"))
    assert rec.steps == 1
    assert torch.equal(rec["1"].out, torch.relu(model[0](x)))

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale

    m = Scaled()
    rec = tt.record(m, x, save="lin", input_kwargs={"scale": 2.0},
                    out=str(tmp_path / "s.sqlite"))
    assert torch.equal(rec["lin"].out, m.lin(x))
    with pytest.raises(tt.TokentraceError, match="give the keyword arguments once"):
        tt.record(m, x, save="lin", input_kwargs={}, generate_kwargs={})


# --- names tokentrace lacks --------------------------------------------------------------
def test_a_torchlens_name_says_it_is_a_torchlens_feature(lm, tmp_path):
    with pytest.raises(AttributeError, match=r"show_model_graph is TorchLens's graph drawing, "
                                             r"a TorchLens feature tokentrace does not have; "
                                             r"instead: .*tokentrace plot"):
        tt.show_model_graph
    with pytest.raises(AttributeError, match=r"^module 'tokentrace' has no attribute 'nope'$"):
        tt.nope
    trace = tt.trace(lm, IDS, out=str(tmp_path / "t.sqlite"))
    with pytest.raises(AttributeError, match=r"Trace has no attribute 'fork': fork is "
                                             r"TorchLens's"):
        trace.fork
    with pytest.raises(AttributeError, match=r"^Trace has no attribute 'nope'$"):
        trace.nope


def test_the_docs_list_the_same_names_as_the_errors():
    with open(os.path.join(ROOT, "docs", "from-torchlens.md"), encoding="utf-8") as f:
        text = f.read()
    listed = set(re.findall(r"^\| `tl\.(\w+)` \|", text, re.M))
    methods = set(re.findall(r"^\| `trace\.(\w+)` \|", text, re.M))
    assert listed == set(torchlens_names.MODULE_NAMES)
    assert methods == set(torchlens_names.TRACE_METHODS)
    for name in listed:  # none of them is something tokentrace has after all
        assert name not in tt.__all__, name


# --- options, episodes, chunks, steer_generate, Recorder ---------------------------------
def _mlp2():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())


def test_capture_options_map_onto_trace_arguments(tmp_path):
    m = _mlp2()
    x = torch.randn(3, 4)
    opts = tt.options.CaptureOptions(layers_to_save=["1"], random_seed=5, inference_only=True)
    trace = tt.trace(m, x, capture=opts, out=str(tmp_path / "a.sqlite"))
    assert torch.equal(trace["1"].out, torch.relu(m[0](x)))
    grad_modes = []
    m[0].register_forward_hook(lambda mod, a, o: grad_modes.append(torch.is_grad_enabled()))
    tt.trace(m, x, capture=opts, out=str(tmp_path / "a2.sqlite"))
    tt.trace(m, x, out=str(tmp_path / "a3.sqlite"))
    assert grad_modes == [False, True]  # inference_only=True: the run under no_grad
    every = tt.trace(m, x, capture=tt.options.CaptureOptions(layers_to_save="all"),
                     out=str(tmp_path / "b.sqlite"))
    assert isinstance(every["0"].out, torch.Tensor) and isinstance(every["1"].out, torch.Tensor)
    with pytest.raises(tt.TokentraceError, match=r"CaptureOptions\(save_grads=\.\.\.\) is a "
                                                 r"TorchLens option tokentrace does not have"):
        tt.trace(m, x, capture=tt.options.CaptureOptions(save_grads=True))
    with pytest.raises(tt.TokentraceError, match="TorchLens has no such option either"):
        tt.options.CaptureOptions(layers_to_keep="all")
    with pytest.raises(tt.TokentraceError, match="give the sites to save once"):
        tt.trace(m, x, save="1", capture=tt.options.CaptureOptions(layers_to_save=["0"]))
    # a field left at TorchLens's default is no error
    tt.trace(m, x, capture=tt.options.CaptureOptions(save_grads=None, verbose=False),
             out=str(tmp_path / "c.sqlite"))


def test_random_seed_seeds_the_run(tmp_path):
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + torch.randn_like(x)

    x = torch.zeros(4)
    seeded = tt.options.CaptureOptions(random_seed=3, layers_to_save="all")
    a = tt.trace(Noisy(), x, capture=seeded, out=str(tmp_path / "a.sqlite"))
    b = tt.trace(Noisy(), x, capture=seeded, out=str(tmp_path / "b.sqlite"))
    assert torch.equal(a["self"].out, b["self"].out)


def test_chunk_size_runs_one_token_per_chunk(tmp_path):
    m = _mlp2()
    x = torch.randn(10, 4)
    trace = tt.trace(m, x, chunk_size=4, save="1", out=str(tmp_path / "c.sqlite"))
    assert trace.num_tokens == 3
    assert [trace[f"1:{k}"].out.shape[0] for k in (1, 2, 3)] == [4, 4, 2]
    assert torch.equal(trace["1:3"].out, torch.relu(m[0](x[8:])))
    with pytest.raises(tt.TokentraceError, match="chunk_size= takes an int >= 1"):
        tt.trace(m, x, chunk_size=0)
    with pytest.raises(tt.TokentraceError, match="chunk_paths= takes a list of paths"):
        tt.trace(m, x, chunk_size=2, chunk_paths="0")


class _Mix(torch.nn.Module):
    def forward(self, a, b, scale):
        return a * b["w"] + scale


def test_chunk_paths_split_several_inputs_together(tmp_path):
    a, w = torch.randn(5, 3), torch.randn(5, 3)
    trace = tt.trace(_Mix(), (a, {"w": w}, torch.ones(3)), chunk_size=2,
                     chunk_paths=["0", '1["w"]'], save="self", out=str(tmp_path / "p.sqlite"))
    assert trace.num_tokens == 3
    assert torch.equal(trace["self:3"].out, a[4:] * w[4:] + 1)
    # chunk_paths=: the tensors to split (without it, three tensors are one too many)
    with pytest.raises(tt.TokentraceError, match="name the ones to split with chunk_paths="):
        tt.trace(_Mix(), (a, {"w": w}, torch.ones(3)), chunk_size=2)
    with pytest.raises(tt.TokentraceError, match="must have one batch size"):
        tt.trace(_Mix(), (a, {"w": w[:4]}, torch.ones(3)), chunk_size=2,
                 chunk_paths=["0", "1.w"])
    with pytest.raises(tt.TokentraceError, match="start with a positional argument's index"):
        tt.trace(_Mix(), (a, {"w": w}, torch.ones(3)), chunk_size=2, chunk_paths=["w"])


def test_episode_spec_names_the_root_and_the_steps(tmp_path):
    m = _mlp2()

    def loop(x):
        for _ in range(3):
            x = torch.cat([m(x)[:, :4]], 1)
        return x

    spec = tt.options.EpisodeSpec(stepped_module=m, n_steps=3)
    trace = tt.trace(loop, torch.randn(2, 4), episode=spec, out=str(tmp_path / "e.sqlite"))
    assert trace.num_tokens == 3 and trace.meta["root"].startswith("Sequential")
    with pytest.warns(RuntimeWarning, match=r"n_steps=5\) but the run had 3 steps"):
        tt.trace(loop, torch.randn(2, 4), episode=tt.options.EpisodeSpec(stepped_module=m,
                                                                         n_steps=5),
                 out=str(tmp_path / "f.sqlite"))
    with pytest.raises(tt.TokentraceError, match=r"EpisodeSpec\(forced_tokens=\.\.\.\)"):
        tt.trace(loop, torch.randn(2, 4),
                 episode=tt.options.EpisodeSpec(stepped_module=m, forced_tokens=[1]))


def test_steer_generate_returns_the_outputs_and_the_report(lm):
    spec = tt.when(SITE, tt.intervention.steer(torch.randn(32), feature_axis=-1),
                   calls=tt.prefill)
    gen = {"max_new_tokens": 3, "do_sample": False, "pad_token_id": 0}
    result = tt.intervention.steer_generate(lm, IDS, spec, **gen)
    assert result.outputs.shape == (1, 7) and result.report.fire_count == 1
    idle = tt.when(SITE, tt.zero(), calls=tt.call(9))
    with pytest.raises(tt.TokentraceError, match="1 rule.s. never fired"):
        tt.intervention.steer_generate(lm, IDS, idle, **gen)
    quiet = tt.intervention.steer_generate(lm, IDS, idle, on_zero_fire="disclose", **gen)
    assert quiet.report.fire_count == 0


def test_fastlog_recorder_logs_forwards_into_one_recording(tmp_path):
    m = _mlp2()
    xs = [torch.randn(2, 4), torch.randn(5, 4)]
    with tt.fastlog.Recorder(m, save=tt.module("1"), out=str(tmp_path / "r.sqlite")) as rec:
        outs = [rec.log(x) for x in xs]
    assert rec.recording.steps == 2
    assert torch.equal(rec.recording["1:2"].out, outs[1])
    with pytest.raises(tt.TokentraceError, match="entered once"):
        with rec:
            pass
    with pytest.raises(tt.TokentraceError, match="inside `with Recorder"):
        rec.log(xs[0])


# --- containers --------------------------------------------------------------------------
class _Pair:
    def __init__(self, left, right):
        self.left, self.right = left, right


class _Joins(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, pair):
        return self.lin(pair.left) + pair.right


def test_register_container_makes_a_users_container_walkable_and_editable(tmp_path):
    torch.manual_seed(0)
    m = _Joins()
    pair = _Pair(torch.randn(2, 3), torch.randn(2, 3))
    before = tt.trace(m, (pair,), out=str(tmp_path / "a.sqlite"))
    assert list(before["self:1"].inputs) == ["pair"]  # one object, not looked into
    tt.register_container(_Pair, lambda v: ([v.left, v.right], None),
                          lambda aux, children: _Pair(*children))
    after = tt.trace(m, (pair,), out=str(tmp_path / "b.sqlite"))
    inputs = after["self:1"].inputs
    assert list(inputs) == ["pair[0]", "pair[1]"]
    assert inputs["pair[1]"].shape == torch.Size([2, 3]) and inputs["pair[1]"].kind == "tensor"
    bound = tt.when("self", tt.zero(), input="pair[1]").bind(m)
    assert torch.equal(bound(pair), m.lin(pair.left))
    assert bound.last_report.fire_count == 1
    assert torch.count_nonzero(pair.right) > 0  # the caller's container is left as it was
    with pytest.raises(tt.TokentraceError, match="takes a class first"):
        tt.register_container("Pair", lambda v: ([], None))


# --- issue 47: the rest of what TorchLens's documented examples use ----------------------
class _ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(1, 2, 3), torch.nn.Conv2d(2, 2, 3)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x))).sigmoid()


def test_ops_are_recorded_by_default_with_torchlens_labels(tmp_path):
    m = _mlp2()
    trace = tt.trace(m, torch.randn(3, 4), out=str(tmp_path / "t.sqlite"))
    assert trace["relu_1_2"].module == "1:1" and trace["linear_1_1"].layer_type == "linear"
    assert trace.find_sites(tt.func("relu")).labels() == ("relu_1_2",)
    off = tt.trace(m, torch.randn(3, 4), ops=False, out=str(tmp_path / "o.sqlite"))
    with pytest.raises(tt.TokentraceError, match="no op records"):
        off.num_ops


def test_followed_by_and_preceded_by_choose_ops_by_their_data_flow(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(1, 1, 8, 8)
    fed = tt.func("conv2d") & tt.followed_by(tt.func("relu"))
    trace = tt.trace(_ConvNet(), x, save=fed, out=str(tmp_path / "c.sqlite"))
    assert trace.find_sites(fed).labels() == ("conv2d_1_1",)  # conv2d_2_3 feeds a sigmoid
    assert trace.find_sites(tt.preceded_by(tt.func("conv2d"))).labels() == ("relu_1_2",
                                                                            "sigmoid_1_4")
    assert trace.find_sites(tt.func("sigmoid") & tt.preceded_by(tt.label("conv2d_2_3"))
                            ).labels() == ("sigmoid_1_4",)
    assert trace["relu_1_2"].parent_layers == ["conv2d_1_1"]
    assert trace["conv2d_1_1"].child_layers == ["relu_1_2"]
    assert list(trace["conv2d_1_1"].out.shape) == [1, 2, 6, 6]  # saved: a tensor
    assert not trace.find_sites(tt.followed_by(tt.func("tanh")))
    with pytest.raises(tt.TokentraceError, match=r"takes an op selector .* selects modules"):
        tt.followed_by(tt.module("c1"))
    with pytest.raises(tt.TokentraceError, match="known when the trace is read"):
        tt.when(tt.followed_by(tt.func("relu")), tt.zero()).bind(_ConvNet())(x)


def test_capture_options_fields_are_trace_keyword_arguments(tmp_path):
    m = _mlp2()
    x = torch.randn(3, 4)
    trace = tt.trace(m, x, capture_container_structure=True, intervention_ready=True,
                     save_code_context=True, layers_to_save=["1"], out=str(tmp_path / "k.sqlite"))
    assert torch.equal(trace["1"].out, torch.relu(m[0](x)))
    ready = tt.trace(m, x, capture=tt.options.CaptureOptions(intervention_ready=True),
                     out=str(tmp_path / "r.sqlite"))
    assert ready.num_tokens == 1
    with pytest.raises(tt.TokentraceError, match="unexpected keyword argument 'bogus'"):
        tt.trace(m, x, bogus=1)
    with pytest.raises(tt.TokentraceError, match=r"CaptureOptions\(save_grads=\.\.\.\) is a "
                                                 r"TorchLens option"):
        tt.trace(m, x, save_grads=True)
    with pytest.raises(tt.TokentraceError, match="give it once"):
        tt.trace(m, x, random_seed=1, capture=tt.options.CaptureOptions(random_seed=2))


def test_num_ops_annotations_and_cleanup(tmp_path):
    m = _mlp2()
    trace = tt.trace(m, torch.randn(3, 4), out=str(tmp_path / "n.sqlite"))
    assert trace.num_ops == 2  # linear, relu
    ledger = trace.annotations["episode"]
    assert ledger["header"]["capture_kind"] == "episode" and ledger["header"]["n_steps"] == 1
    assert [(r["episode_step"], r["role"], r["status"]) for r in ledger["rows"]] == [
        (0, "prefill", "complete")]
    trace.cleanup()
    assert tt.load(trace.path).num_tokens == 1  # the file stays
    with pytest.raises(tt.TokentraceError, match=r"was closed \(trace.close\(\) or "
                                                 r"trace.cleanup\(\)\); open it again"):
        trace.tokens


def test_annotations_of_a_generation_and_an_episode(lm, tmp_path):
    trace = tt.trace(lm.generate, IDS, {"max_new_tokens": 3, "do_sample": False,
                                        "pad_token_id": 0}, out=str(tmp_path / "g.sqlite"))
    rows = trace.annotations["episode"]["rows"]
    assert [r["role"] for r in rows] == ["prefill", "decode", "decode"]
    assert [r["step_output"] for r in rows] == [t.id for t in trace.tokens]
    m = _mlp2()
    spec = tt.options.EpisodeSpec(stepped_module=m, n_steps=2)
    ep = tt.trace(lambda x: [m(x) for _ in range(2)], torch.randn(2, 4), episode=spec,
                  out=str(tmp_path / "e.sqlite"))
    header = ep.annotations["episode"]["header"]
    assert header["n_steps_declared"] == 2 and header["stepped_module"] == "Sequential"

    class Greedy(torch.nn.Module):  # TorchLens's episode example: a loop returning its ids
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, ids):
            out = []
            for _ in range(3):
                step = self.inner(ids).argmax(-1, keepdim=True)
                out.append(step)
                ids = torch.cat([ids, step], 1)
            return torch.cat(out, 1)

    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8))
    greedy = Greedy(_LastPosition(inner))
    ids = torch.tensor([[1, 2]])
    expected = greedy(ids)
    got = tt.trace(greedy, ids, episode=tt.options.EpisodeSpec(stepped_module=greedy.inner,
                                                               n_steps=3),
                   out=str(tmp_path / "g2.sqlite")).annotations["episode"]["rows"]
    assert [r["step_output"] for r in got] == [expected[:, i].tolist() for i in range(3)]


class _LastPosition(torch.nn.Module):  # the last position's logits of a model
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids)[:, -1]


def test_record_return_output_and_to_trace(tmp_path):
    m = _mlp2()
    x = torch.randn(3, 4)
    spec = tt.when(tt.module("1"), tt.scale(2.0))
    output, rec = tt.record(m, x, save=tt.func("linear"), edits=spec, return_output=True,
                            out=str(tmp_path / "r.sqlite"))
    assert torch.equal(output, spec.bind(m)(x))
    assert isinstance(rec, tt.Recording) and rec.n_records == 1
    as_trace = rec.to_trace()
    assert type(as_trace) is tt.Trace and as_trace.path == rec.path
    assert torch.equal(as_trace["linear_1_1"].out, m[0](x))
    with pytest.raises(tt.TokentraceError, match=r"return_output=\) takes True or False"):
        tt.record(m, x, save="1", return_output="yes")


def test_bundle_compares_traces_at_a_site(tmp_path):
    m = _mlp2()
    x = torch.randn(3, 4)
    clean = tt.trace(m, x, save=tt.func("relu"), out=str(tmp_path / "a.sqlite"))
    patched = tt.trace(m, x, save=tt.func("relu"), out=str(tmp_path / "b.sqlite"),
                       edits=tt.when(tt.func("relu"), tt.zero_ablate()))
    bundle = tt.bundle({"clean": clean, "patched": patched}, baseline="clean")
    assert bundle.names == ["clean", "patched"] and bundle.baseline == "clean"
    assert bundle["patched"] is patched
    matrix = bundle.compare_at("relu_1_2")
    assert matrix.shape == (2, 2) and matrix[0, 0] == 0 and matrix[0, 1] == 1  # zeroed
    assert torch.equal(bundle.compare_at(tt.func("relu")), matrix)
    assert bundle.most_changed()[0] == ("relu_1_2", 1.0)
    assert tt.Bundle([clean, clean]).compare_at("relu_1_2").sum() == 0
    with pytest.raises(tt.TokentraceError, match="has no saved output tensor"):
        bundle.compare_at("linear_1_1")
    with pytest.raises(tt.TokentraceError, match="names no member"):
        tt.bundle({"clean": clean}, baseline="other")


def test_utils_list_modules_and_list_ops():
    m = _mlp2()
    assert tt.utils.list_modules(m) == [("self", torch.nn.Sequential),
                                        ("0", torch.nn.Linear), ("1", torch.nn.ReLU)]
    m.train()
    assert tt.utils.list_ops(m, torch.randn(2, 4)) == [("linear", 1), ("relu", 1)]
    both = tt.utils.list_ops(m, torch.randn(2, 4), mode="both")
    assert set(both) == {"eval", "train"} and m.training  # the modes are restored
    with pytest.raises(tt.TokentraceError, match=r"mode=\) takes"):
        tt.utils.list_ops(m, torch.randn(2, 4), mode="fast")


def test_trace_run_reruns_the_capture_with_its_edits_on_new_inputs(tmp_path):
    m = _mlp2()
    spec = tt.when(tt.module("1"), tt.scale(3.0))
    trace = tt.trace(m, torch.randn(2, 4), save="1", edits=spec, out=str(tmp_path / "r.sqlite"))
    first = trace.path
    x = torch.randn(5, 4)
    assert trace.run(m, x) is trace
    assert trace.path != first and trace.last_run["engine"] == "guarded_fast"
    assert trace.last_run["fast_refused"] is None
    assert torch.equal(trace["1"].out, spec.bind(m)(x))  # the edit, on the new input
    trace.run(inputs=torch.randn(1, 4), fast=True)
    assert trace["1"].out.shape == (1, 8)
    with pytest.raises(tt.TokentraceError, match="has no model to run"):
        tt.load(first).run(m, x)


def test_short_names_ordinals_and_lookback(tmp_path):
    torch.manual_seed(0)
    trace = tt.trace(_ConvNet(), torch.randn(1, 1, 8, 8), out=str(tmp_path / "s.sqlite"))
    assert trace["conv2d_2"].layer_label == "conv2d_2_3"  # the ordinal suffix left out
    assert trace[3].layer_label == "conv2d_2_3" and trace[2].layer_type == "relu"
    # TorchLens's layer list: input_1, the ops, output_1
    assert trace[0].layer_label == "input_1" and trace[0].shape == [1, 1, 8, 8]
    assert trace[-1].layer_label == "output_1" and trace[-1].shape == [1, 2, 4, 4]
    assert trace[-2].layer_label == "sigmoid_1_4" and trace["output_1"].shape == [1, 2, 4, 4]
    with pytest.raises(tt.TokentraceError, match=r"runs 0 \(input_1\) to 5 \(output_1\)"):
        trace[9]
    with pytest.raises(tt.TokentraceError, match="no site named 'conv2d_9'"):
        trace["conv2d_9"]
    kept = tt.trace(_ConvNet(), torch.randn(1, 1, 8, 8), lookback=4,
                    lookback_payload_policy="detached_raw", out=str(tmp_path / "l.sqlite"),
                    save=tt.func("conv2d") & tt.followed_by(tt.func("relu")))
    assert kept.find_sites(tt.preceded_by(tt.func("conv2d"))).labels()[0] == "relu_1_2"
    with pytest.raises(tt.TokentraceError, match=r"trace\(input_size=\) is a TorchLens "
                                                 r"argument tokentrace does not have"):
        tt.trace(_ConvNet(), torch.randn(1, 1, 8, 8), input_size=(1, 1, 8, 8))
    with pytest.raises(tt.TokentraceError, match=r"lookback=\) takes an int >= 0"):
        tt.trace(_ConvNet(), torch.randn(1, 1, 8, 8), lookback=-1)


class _Blocked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.block(x)) + torch.relu(self.lin(x))


def test_preceded_by_chooses_ops_while_the_model_runs(tmp_path):
    torch.manual_seed(0)
    m, x = _Blocked(), torch.randn(2, 4)
    fed = tt.func("relu") & tt.preceded_by(tt.in_module("block"))
    trace = tt.trace(m, x, save=tt.func("relu"), edits=tt.when(fed, tt.zero_ablate()),
                     lookback=4, out=str(tmp_path / "p.sqlite"))
    assert trace["relu_1_2"].out.abs().max() == 0  # fed by block's linear: zeroed
    assert torch.equal(trace["relu_2_4"].out, torch.relu(m.lin(x)))  # fed by lin: kept
    assert trace.find_sites(fed).labels() == ("relu_1_2",)
    bound = tt.when(fed, tt.scale(2.0)).bind(m)
    torch.testing.assert_close(bound(x), 2 * torch.relu(m.block(x)) + torch.relu(m.lin(x)))
    assert bound.last_report.fire_count == 1


def test_at_step_chooses_the_ops_of_episode_steps(lm, tmp_path):
    kwargs = {"max_new_tokens": 3, "do_sample": False, "pad_token_id": 0}
    norms2 = tt.func("layer_norm") & tt.at_step(2)
    trace = tt.trace(lm.generate, IDS, kwargs, out=str(tmp_path / "a.sqlite"))
    assert [op.token for op in trace.find_sites(norms2)] == [3] * 5  # step 2: the 3rd token
    assert len(trace.find_sites(tt.at_step(0, 2))) == len(
        trace.find_sites(tt.at_step(0))) + len(trace.find_sites(tt.at_step(2)))
    from tokentrace.intervention import at_step
    bound = tt.when(tt.func("layer_norm") & at_step(1), tt.scale(1.0)).bind(lm)
    bound.generate(IDS, **kwargs)
    assert bound.last_report.fire_count == 5  # 2 layers' two norms and ln_f, at step 1
    with pytest.raises(tt.TokentraceError, match="step indexes >= 0"):
        tt.at_step(-1)


def test_storage_to_disk_is_the_trace_files_path(tmp_path):
    m = _mlp2()
    path = tmp_path / "run.tlspec"
    trace = tt.trace(m, torch.randn(2, 4), storage=tt.to_disk(str(path), async_writes=True))
    assert trace.path == str(path) and tt.load(path).num_tokens == 1
    with pytest.raises(tt.TokentraceError, match="the path exists"):
        tt.trace(m, torch.randn(2, 4), storage=tt.to_disk(str(path)))
    with pytest.raises(tt.TokentraceError, match="give the trace file's path once"):
        tt.trace(m, torch.randn(2, 4), out=str(tmp_path / "a.sqlite"),
                 streaming=tt.to_disk(str(tmp_path / "b")))
    with pytest.raises(tt.TokentraceError, match=r"storage=\) takes tt.to_disk\(path\)"):
        tt.trace(m, torch.randn(2, 4), storage=str(tmp_path / "c"))
    with pytest.raises(tt.TokentraceError, match="no such option either"):
        tt.to_disk(str(tmp_path / "d"), compress=True)


def test_halt_ends_the_run_after_the_first_site_it_chooses(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3)),
        torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64, 3))
    x = torch.randn(1, 3, 8, 8)
    log = tt.trace(model, x, save=tt.in_module("0.2"), halt=tt.in_module("0.2"),
                   out=str(tmp_path / "h.sqlite"))
    assert log.halted and log.find_sites(tt.where(lambda op: True)).labels() == (
        "conv2d_1_1", "relu_1_2", "conv2d_2_3")  # nothing after the halting op ran
    assert torch.equal(log["conv2d_2_3"].out, model[0](x))  # the halting op is saved
    by_module = tt.trace(model, x, halt=tt.module("0"), out=str(tmp_path / "m.sqlite"))
    assert by_module.halted and "1" not in by_module.sites
    whole = tt.trace(model, x, halt=tt.func("tanh"), out=str(tmp_path / "w.sqlite"))
    assert not whole.halted and whole.num_ops == 6  # it never chose: the whole run
    after = tt.trace(model, x, out=str(tmp_path / "a.sqlite"))  # nothing left asking to halt
    assert not after.halted and after.num_ops == 6
    with pytest.raises(tt.TokentraceError, match=r"halt=tt.followed_by"):
        tt.trace(model, x, halt=tt.followed_by(tt.func("relu")))


def test_ops_table_and_the_output_layers_container(tmp_path):
    m = _mlp2()
    trace = tt.trace(m, torch.randn(2, 4), capture_container_structure=True,
                     out=str(tmp_path / "o.sqlite"))
    assert list(trace.ops) == trace.layer_labels == ["input_1", "linear_1_1", "relu_1_2",
                                                     "output_1"]
    assert trace.output_layers == ["output_1"] and trace.input_layers == ["input_1"]
    assert trace.ops[trace.output_layers[0]].container is None  # a plain tensor, as TorchLens
    assert trace.ops["relu_1_2"].layer_type == "relu"

    class Nested(torch.nn.Module):
        def forward(self, x):
            return {"a": x * 2, "b": (x + 1, x - 1)}

    nested = tt.trace(Nested(), torch.randn(2, 4), out=str(tmp_path / "n.sqlite"))
    with pytest.raises(tt.TokentraceError, match="tensor at 'a' of the model's output; "
                                                 "tokentrace keeps that path"):
        nested.ops["output_1"].container


def test_resolve_sites_must_resolve(tmp_path):
    trace = tt.trace(_mlp2(), torch.randn(2, 4), out=str(tmp_path / "r.sqlite"))
    assert trace.resolve_sites(tt.func("relu")).labels() == ("relu_1_2",)
    with pytest.raises(tt.TokentraceError, match="resolves to no site of this trace"):
        trace.resolve_sites(tt.func("tanh"))
