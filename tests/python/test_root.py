"""The root (one call = one token) is the model the job generates with, however the job is
written: encoder-decoders (the encoder runs first), assisted generation (the assistant runs
first), generate(inputs_embeds=...) after calling the embedding by hand; --root overrides.

Each job counts its main model's forward calls with a plain hook of its own and prints them
with its output; the trace's tokens must equal that count, and the traced output and exit
status the untraced ones."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tokentrace as tt
from tt_testutil import PYDIR

# Tiny random models; build(kind) -> (model, generate kwargs, assistant or None).
MODELS = textwrap.dedent("""
    import torch
    import transformers as tf
    torch.set_num_threads(1)

    def _llama(layers, seed):
        torch.manual_seed(seed)
        return tf.LlamaForCausalLM(tf.LlamaConfig(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=layers,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
            pad_token_id=0, bos_token_id=1, eos_token_id=63)).eval()

    def _gpt2(layers, seed):
        torch.manual_seed(seed)
        return tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=64, n_embd=16, n_layer=layers,
                                                n_head=2, n_positions=64,
                                                eos_token_id=63, pad_token_id=0)).eval()

    def build(kind):
        ids = torch.tensor([[5, 9, 17, 3]])
        pad = dict(input_ids=torch.tensor([[0, 0, 5, 9], [7, 8, 9, 10]]),
                   attention_mask=torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]))
        greedy = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
        torch.manual_seed(0)
        if kind.startswith("t5"):
            model = tf.T5ForConditionalGeneration(tf.T5Config(
                vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1,
                num_decoder_layers=1, num_heads=2, decoder_start_token_id=0,
                pad_token_id=0, eos_token_id=63)).eval()
            if kind == "t5_beam":
                return model, dict(input_ids=ids, num_beams=2, **greedy), None
            if kind == "t5_batch":
                return model, dict(pad, **greedy), None
            return model, dict(input_ids=ids, **greedy), None
        if kind == "bart":
            model = tf.BartForConditionalGeneration(tf.BartConfig(
                vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
                encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=1,
                bos_token_id=0, eos_token_id=63, decoder_start_token_id=2,
                forced_eos_token_id=None)).eval()
            return model, dict(input_ids=ids, num_beams=2, **greedy), None
        if kind == "whisper":
            model = tf.WhisperForConditionalGeneration(tf.WhisperConfig(
                vocab_size=64, num_mel_bins=8, d_model=16, encoder_layers=1,
                decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                encoder_ffn_dim=32, decoder_ffn_dim=32, max_source_positions=16,
                max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=63,
                decoder_start_token_id=1, suppress_tokens=None,
                begin_suppress_tokens=None)).eval()
            return model, dict(input_features=torch.randn(1, 8, 32), **greedy), None
        if kind == "llama_assisted":
            return (_llama(2, 0), dict(input_ids=ids, assistant_model=_llama(1, 1), **greedy),
                    "assistant")
        if kind == "gpt2_assisted":
            return (_gpt2(2, 0), dict(input_ids=ids, assistant_model=_gpt2(1, 1), **greedy),
                    "assistant")
        if kind == "mixtral":  # mixture of experts
            torch.manual_seed(0)
            model = tf.MixtralForCausalLM(tf.MixtralConfig(
                vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=2, num_local_experts=4,
                num_experts_per_tok=2, max_position_embeddings=64, pad_token_id=0,
                bos_token_id=1, eos_token_id=63)).eval()
            return model, dict(pad, **greedy), None
        if kind == "mamba":  # state-space: its cache is no KV cache
            torch.manual_seed(0)
            model = tf.MambaForCausalLM(tf.MambaConfig(
                vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2,
                expand=2, conv_kernel=4, pad_token_id=0, bos_token_id=1,
                eos_token_id=63)).eval()
            return model, dict(input_ids=ids, **greedy), None
        if kind == "llama_sample":  # sampling, seeded in the job
            torch.manual_seed(1)
            return (_llama(2, 0), dict(input_ids=ids, max_new_tokens=4, min_new_tokens=4,
                                       do_sample=True, top_k=8), None)
        if kind == "llama_static":  # a static cache (on the CPU, generate compiles nothing)
            return (_llama(2, 0), dict(input_ids=ids, cache_implementation="static", **greedy),
                    None)
        if kind == "llama_streamer":  # a streamer that gets each new token as it comes
            class Collect(tf.generation.BaseStreamer):
                def __init__(self):
                    self.seen = []
                def put(self, value):
                    self.seen.append(value.tolist())
                def end(self):
                    self.seen.append("end")
            return _llama(2, 0), dict(input_ids=ids, streamer=Collect(), **greedy), None
        if kind == "inputs_embeds":
            model = _llama(2, 0)
            with torch.no_grad():
                embeds = model.get_input_embeddings()(ids)  # by hand, before generate
            return model, dict(inputs_embeds=embeds, **greedy), None
        raise ValueError(kind)

    def edit_first(module, args, output):
        # A plain forward hook making the edit of the tests: -10 on the first feature of the
        # output's first tensor (a constant on every feature would pass through LayerNorm).
        first = output if isinstance(output, torch.Tensor) else output[0]
        first = first.clone()
        first[..., 0] -= 10.0
        return first if isinstance(output, torch.Tensor) else (first,) + tuple(output[1:])

    def run(kind, edit_site=None):
        model, kwargs, _ = build(kind)
        if edit_site:
            model.get_submodule(edit_site).register_forward_hook(edit_first)
        calls = {"main": 0, "assistant": 0}
        model.register_forward_pre_hook(lambda *a: calls.__setitem__("main", calls["main"] + 1))
        assistant = kwargs.get("assistant_model")
        if assistant is not None:
            assistant.register_forward_pre_hook(
                lambda *a: calls.__setitem__("assistant", calls["assistant"] + 1))
        with torch.no_grad():
            out = model.generate(**kwargs)
        if "streamer" in kwargs:
            calls["streamed"] = kwargs["streamer"].seen
        return out, calls
""")

JOB = MODELS + textwrap.dedent("""
    import json, os, sys
    out, calls = run(sys.argv[1], os.environ.get("EDIT_SITE"))
    print("RESULT", json.dumps({"out": out.tolist(), "calls": calls}))
""")

KINDS = ["t5", "t5_beam", "t5_batch", "bart", "whisper", "llama_assisted", "gpt2_assisted",
         "inputs_embeds"]
# Other families and generate modes, whose root is the only candidate: tokens = the model's
# forward calls, outputs as untraced
MORE_KINDS = ["mixtral", "mamba", "llama_sample", "llama_static", "llama_streamer"]
DECODER_SITE = {"mixtral": "model.layers.1.mlp", "mamba": "backbone.layers.1.mixer",
                "llama_sample": "model.layers.1", "llama_static": "model.layers.1",
                "llama_streamer": "model.layers.1",
                "t5": "decoder.block.0", "t5_beam": "decoder.block.0",
                "t5_batch": "decoder.block.0", "bart": "model.decoder.layers.0",
                "whisper": "model.decoder.layers.0", "llama_assisted": "model.layers.1",
                "gpt2_assisted": "transformer.h.1", "inputs_embeds": "model.layers.1"}
ENCODER_SITE = {"t5": "encoder", "t5_beam": "encoder", "t5_batch": "encoder",
                "bart": "model.encoder", "whisper": "model.encoder"}
ROOT_CLASS = {"mixtral": "MixtralForCausalLM", "mamba": "MambaForCausalLM",
              "llama_sample": "LlamaForCausalLM", "llama_static": "LlamaForCausalLM",
              "llama_streamer": "LlamaForCausalLM", "t5": "T5ForConditionalGeneration",
              "t5_beam": "T5ForConditionalGeneration",
              "t5_batch": "T5ForConditionalGeneration", "bart": "BartForConditionalGeneration",
              "whisper": "WhisperForConditionalGeneration", "llama_assisted": "LlamaForCausalLM",
              "gpt2_assisted": "GPT2LMHeadModel", "inputs_embeds": "LlamaForCausalLM"}


def _models():
    space = {}
    exec(compile(MODELS, "test_root_models", "exec"), space)
    return space


def _job(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    return job


def _result(stdout):
    line = next(x for x in stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _run(tmp_path, kind, traced, *cli_args, edit_site=None):
    from test_preload import _native_dir
    native = _native_dir()
    env = dict(os.environ, PYTHONPATH=PYDIR, TOKENTRACE_NATIVE_DIR=native)
    if edit_site:
        env["EDIT_SITE"] = edit_site
    cmd = [sys.executable, str(_job(tmp_path)), kind]
    if traced:
        cmd = [os.path.join(native, "tokentrace"), "run", "--out",
               str(tmp_path / f"{kind}.sqlite"), *cli_args, "--", *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)


def _check_trace(trace, kind, calls):
    assert len(trace.tokens) == calls["main"], (kind, len(trace.tokens), calls)
    assert trace["self"].num_calls == calls["main"]
    assert trace[DECODER_SITE[kind]].num_calls == calls["main"]
    assert trace.meta["root"].startswith(ROOT_CLASS[kind]), trace.meta["root"]
    if kind in ENCODER_SITE:
        # The encoder runs once, before the first decoder step: before token 1 (token 0).
        encoder = trace[ENCODER_SITE[kind]]
        assert encoder.num_calls == 1
        assert trace[ENCODER_SITE[kind] + ":1"].token == 0
    if calls["assistant"]:
        assert trace["assistant_model"].num_calls == calls["assistant"]
        assert trace["assistant_model.model.layers.0" if kind.startswith("llama") else
                     "assistant_model.transformer.h.0"].num_calls == calls["assistant"]
        assert "assistant" in trace.meta


@pytest.mark.parametrize("kind", KINDS)
def test_tokentrace_run_takes_the_model_the_job_generates_with(tmp_path, kind):
    plain = _run(tmp_path, kind, False)
    assert plain.returncode == 0, plain.stderr
    traced = _run(tmp_path, kind, True)
    assert traced.returncode == 0, traced.stderr
    expected, got = _result(plain.stdout), _result(traced.stdout)
    assert got == expected  # the same output tokens and the same calls, traced or not
    trace = tt.load(tmp_path / f"{kind}.sqlite")
    _check_trace(trace, kind, got["calls"])
    # The first module called was not the root: one line names the root and why.
    root_lines = [x for x in traced.stderr.splitlines() if x.startswith("tokentrace: root: ")]
    assert len(root_lines) == 1, traced.stderr
    assert ROOT_CLASS[kind] in root_lines[0] and "--root" in root_lines[0]
    # Hook objects the job's modules still hold at exit are not reported as leaks on its stderr.
    assert "nanobind" not in traced.stderr


@pytest.mark.parametrize("kind", MORE_KINDS)
def test_tokentrace_run_traces_other_families_and_generate_modes(tmp_path, kind):
    """Mixture of experts, a state-space model, sampling, a static cache and a streamer: the
    traced job generates (and streams) what the untraced one does, and each forward call of
    the model is one token."""
    plain = _run(tmp_path, kind, False)
    assert plain.returncode == 0, plain.stderr
    traced = _run(tmp_path, kind, True)
    assert traced.returncode == 0, traced.stderr[-3000:]
    got = _result(traced.stdout)
    assert got == _result(plain.stdout)
    _check_trace(tt.load(tmp_path / f"{kind}.sqlite"), kind, got["calls"])
    assert "streamed" not in got or got["streamed"][-1] == "end"


@pytest.mark.parametrize("kind", KINDS)
def test_tokentrace_run_edits_and_saves_the_decoders_sites(tmp_path, kind):
    """--edits and --save naming a decoder site act on every decoder step of the main model:
    the traced job generates what the untraced job generates with the same edit made by a
    plain forward hook, the edit fires once a main-model step, and each step's output is saved
    as edited. Were the encoder or the assistant the root, the site would be unknown
    or its calls would not be the main model's steps."""
    site = DECODER_SITE[kind]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([{"site": site, "op": "add", "value": -10.0,
                                 "index": ["...", 0]}]))
    hooked = _run(tmp_path, kind, False, edit_site=site)
    assert hooked.returncode == 0, hooked.stderr
    expected = _result(hooked.stdout)
    assert expected["out"] != _result(_run(tmp_path, kind, False).stdout)["out"]  # it edits
    traced = _run(tmp_path, kind, True, "--edits", str(spec), "--save", site)
    assert traced.returncode == 0, traced.stderr[-3000:]
    got = _result(traced.stdout)
    assert got == expected
    trace = tt.load(tmp_path / f"{kind}.sqlite")
    steps = got["calls"]["main"]
    assert len(trace.tokens) == trace[site].num_calls == steps
    assert json.loads(trace.meta["patch_fires"])["num_fires"] == steps
    for k in range(1, steps + 1):
        out = trace[f"{site}:{k}"].out
        assert isinstance(out, torch.Tensor) and out.numel() > 0, k
        assert (out[..., 0] <= -5).all(), k  # as edited (the features are O(1) before)


def test_tokentrace_run_edits_ops_named_in_a_json_spec(tmp_path):
    """An op-level rule in a JSON spec ("ops" in place of "site") under `tokentrace run`: the
    SiLU of one Llama layer's MLP, edited where the model calls it, as a plain forward hook
    on that layer's act_fn module would; it fires once a step."""
    kind, act = "inputs_embeds", "model.layers.0.mlp.act_fn"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([{"ops": {"func": "silu", "in_module": "model.layers.0.mlp"},
                                 "op": "add", "value": -10.0, "index": ["...", 0]}]))
    hooked = _run(tmp_path, kind, False, edit_site=act)
    assert hooked.returncode == 0, hooked.stderr
    expected = _result(hooked.stdout)
    assert expected["out"] != _result(_run(tmp_path, kind, False).stdout)["out"]  # it edits
    traced = _run(tmp_path, kind, True, "--edits", str(spec))
    assert traced.returncode == 0, traced.stderr[-3000:]
    got = _result(traced.stdout)
    assert got == expected
    trace = tt.load(tmp_path / f"{kind}.sqlite")
    assert json.loads(trace.meta["patch_fires"])["num_fires"] == got["calls"]["main"]


def test_tokentrace_run_says_when_a_label_rule_chose_no_op(tmp_path):
    """A JSON rule naming an op label no op of the run had edits nothing; `tokentrace run`
    says so in one line (not a warning's traceback), and the job is untouched."""
    kind = "inputs_embeds"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([{"ops": {"label": "silu_9_999"}, "op": "zero"}]))
    traced = _run(tmp_path, kind, True, "--edits", str(spec))
    assert traced.returncode == 0, traced.stderr[-3000:]
    assert _result(traced.stdout) == _result(_run(tmp_path, kind, False).stdout)
    lines = [x for x in traced.stderr.splitlines() if "chose no op" in x]
    assert len(lines) == 1 and "tt.label('silu_9_999')" in lines[0], traced.stderr[-2000:]
    assert lines[0].startswith("tokentrace: TOKENTRACE_EDITS: 1 rule(s) selecting ops by label")


@pytest.mark.parametrize("kind", ["t5_batch", "bart", "whisper", "gpt2_assisted"])
def test_record_of_generate_saves_and_edits_the_decoders_sites(kind):
    """tt.record of an encoder-decoder's or an assisted generate: its tokens are the main
    model's steps, and save=/edits= on a decoder site act on each of them."""
    space = _models()
    site = DECODER_SITE[kind]
    model, kwargs, _ = space["build"](kind)
    with torch.no_grad():
        expected, calls = space["run"](kind, site)  # the edit as a plain forward hook
    steps = {"n": 0}
    model.register_forward_pre_hook(lambda *a: steps.__setitem__("n", steps["n"] + 1))
    box = {}

    def job():
        with torch.no_grad():
            box["out"] = model.generate(**kwargs)
    edit = tt.when(site, tt.add(-10.0, index=(..., 0)))
    rec = tt.record(job, save=tt.module(site), edits=edit, model=model, kernels="off")
    assert torch.equal(box["out"], expected)
    assert steps["n"] == calls["main"] == len(rec.tokens) == rec[site].num_calls > 0
    assert all((rec[f"{site}:{k}"].out[..., 0] <= -5).all() for k in range(1, steps["n"] + 1))


@pytest.mark.parametrize("kind", ["t5", "llama_assisted", "inputs_embeds"])
def test_trace_of_a_function_takes_the_model_it_generates_with(kind):
    space = _models()
    model, kwargs, _ = space["build"](kind)
    with torch.no_grad():
        plain = model.generate(**kwargs)
    calls = {"n": 0}
    model.register_forward_pre_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    model, kwargs, _ = space["build"](kind)  # the same weights again, with a counting hook
    model.register_forward_pre_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    box = {}

    def job():
        with torch.no_grad():
            if kind == "inputs_embeds":
                model.get_input_embeddings()(kwargs["input_ids"] if "input_ids" in kwargs
                                             else torch.tensor([[5, 9, 17, 3]]))
            box["out"] = model.generate(**kwargs)
    trace = tt.trace(job, kernels="off")
    assert torch.equal(box["out"], plain)
    assert len(trace.tokens) == calls["n"] > 0
    assert trace.meta["root"].startswith(ROOT_CLASS[kind])


def test_trace_of_generate_records_the_assistant_beside_the_model():
    space = _models()
    model, kwargs, _ = space["build"]("gpt2_assisted")
    with torch.no_grad():
        trace = tt.trace(model.generate, kwargs, kernels="off")
    assert trace["assistant_model"].num_calls > 0
    assert trace["assistant_model.transformer.h.0"].num_calls == \
        trace["assistant_model"].num_calls
    assert len(trace.tokens) == trace["self"].num_calls
    assert "GPT2LMHeadModel" in trace.meta["assistant"]


def test_record_of_a_function_takes_model_as_its_root():
    space = _models()
    model, kwargs, _ = space["build"]("t5")

    def job(ids):
        model.get_encoder()(input_ids=ids)  # a module of the model, called first by hand
        return model.generate(input_ids=ids, max_new_tokens=3, min_new_tokens=3,
                              do_sample=False)
    with torch.no_grad():
        rec = tt.record(job, kwargs["input_ids"], save=tt.module("decoder.block.0"),
                        model=model, kernels="off")
    assert rec.meta["root"] == "T5ForConditionalGeneration (model=)"
    assert rec["decoder.block.0"].num_calls == 3
    assert len(rec.tokens) == 3


def test_record_refuses_two_models():
    space = _models()
    model, _, _ = space["build"]("t5")
    other, _, _ = space["build"]("bart")
    with pytest.raises(tt.TokentraceError, match="two models"):
        tt.record(model, torch.tensor([[1, 2]]), save=tt.module("encoder"), model=other)


def test_root_option_takes_a_path_or_a_class(tmp_path):
    """--root model: the LlamaModel inside is the root (one token per call of it);
    --root LlamaDecoderLayer: the first module of that class (model.layers.0)."""
    for root, site, calls_of in (("model", "layers.1", "model"),
                                 ("LlamaDecoderLayer", "self_attn", "model.layers.0")):
        traced = _run(tmp_path, "inputs_embeds", True, "--root", root)
        assert traced.returncode == 0, traced.stderr
        trace = tt.load(tmp_path / "inputs_embeds.sqlite")
        calls = _result(traced.stdout)["calls"]["main"]
        assert len(trace.tokens) == calls, (root, calls_of)
        assert trace[site].num_calls == calls
        assert trace.meta["root"].endswith(f"(TOKENTRACE_ROOT={root})")


def test_root_option_that_names_nothing_says_so(tmp_path):
    traced = _run(tmp_path, "t5", True, "--root", "NoSuchModule")
    assert traced.returncode == 0, traced.stderr
    lines = [x for x in traced.stderr.splitlines() if "NoSuchModule" in x]
    assert len(lines) == 2, traced.stderr  # waiting for it, then: never called
    assert "nothing was recorded" in lines[1]
    assert _result(traced.stdout) == _result(_run(tmp_path, "t5", False).stdout)


def test_a_held_model_is_the_root_when_its_part_is_called_first():
    """No generate: the first module called (an embedding) is part of a model the calling
    code holds; the model is the root and the embedding's call is before token 1."""
    space = _models()
    model = space["_llama"](1, 0)
    ids = torch.tensor([[5, 9, 17]])

    def job():
        with torch.no_grad():
            embeds = model.get_input_embeddings()(ids)
            for _ in range(3):
                model(inputs_embeds=embeds)
    trace = tt.trace(job, kernels="off")
    assert len(trace.tokens) == 3
    assert trace["model.embed_tokens"].num_calls == 1  # the by-hand call
    assert trace["model.embed_tokens:1"].token == 0
    assert "is part of" in trace.meta["root"]


def test_edits_may_name_the_assistants_sites():
    """An edit rule naming an assisted generation's assistant site ("assistant_model.*", as
    the trace names it) runs on the assistant's calls. Before, the rule's site was looked up in
    the main model only: "no site named 'assistant_model.transformer.h.0' in this model"."""
    space = _models()
    model, kwargs, _ = space["build"]("gpt2_assisted")
    fired = []

    def note(values, *, ctx):
        fired.append(ctx)
        return None
    edits = tt.when("assistant_model.transformer.h.0", note)
    with torch.no_grad():
        trace = tt.trace(model.generate, kwargs, kernels="off", edits=edits)
    assert len(fired) == trace["assistant_model.transformer.h.0"].num_calls > 0


def test_tokentrace_run_edits_the_assistants_sites(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([{"site": "assistant_model.transformer.h.0", "op": "zero"}]))
    res = _run(tmp_path, "gpt2_assisted", True, "--edits", str(spec))
    assert res.returncode == 0, res.stderr[-3000:]
    calls = _result(res.stdout)["calls"]
    trace = tt.load(str(tmp_path / "gpt2_assisted.sqlite"))
    fires = json.loads(trace.meta["patch_fires"])
    assert fires["num_fires"] == calls["assistant"] == \
        trace["assistant_model.transformer.h.0"].num_calls > 0


def test_a_bound_model_says_assistant_sites_are_edited_by_a_recording():
    space = _models()
    model, _, _ = space["build"]("gpt2_assisted")
    edits = tt.when("assistant_model.transformer.h.0", tt.zero())
    with pytest.raises(tt.TokentraceError, match="a bound model edits its own sites only"):
        edits.bind(model)
