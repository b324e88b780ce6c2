"""A tiny Llama compiled with torch.compile (Inductor, on the CPU), traced over `generate` with
op records: it decodes compiled (the same graphs and graph breaks as untraced), gives the same
tokens, and every op of a decode token's compiled call is a kernel attributed to a module or
counted as `compiled_unattributed` (never given to a module by guess). Also under `tokentrace
run`, unmodified. Compiling takes minutes here: one model, one layer, a few tokens."""

import textwrap

import pytest
import torch

import tokentrace as tt
from tokentrace._compiled import join_kernels

NEW_TOKENS = 4

# The model, its prompt and generate's arguments `kwargs` (to which a test's own are added),
# as the job below runs them too.
LLAMA = """
import torch
from transformers import LlamaConfig, LlamaForCausalLM
import torch._inductor.config
torch._inductor.config.compile_threads = 1  # no worker pool on 2 cores
torch.manual_seed(0)
lm = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=4,
                                  num_key_value_heads=2)).eval()
prompt = torch.tensor([[3, 17, 42, 8, 99]])
kwargs = dict(max_new_tokens=%d, min_new_tokens=%d, do_sample=False,
              cache_implementation="static")
""" % (NEW_TOKENS, NEW_TOKENS)

MODEL = LLAMA + """
# transformers' documented way: a static cache and a compiled forward, one graph per shape
lm.forward = torch.compile(lm.forward, dynamic=False)
"""


def _model(text=MODEL):
    scope = {}
    exec(text, scope)  # noqa: S102 - the same text the job below runs
    return scope["lm"], scope["prompt"], scope["kwargs"]


def _counts():
    from torch._dynamo.utils import counters
    return (sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"])


def _generate(traced, text=MODEL, warns="inside a compiled region", again=False):
    """(generated ids, (graph breaks, graphs), trace or None, and with again= the ids and
    counts of an untraced generate run right after, with the same model) of a fresh compile
    of `text`'s model (it defines lm, prompt and generate's kwargs); a trace warns `warns`."""
    import torch._inductor.config as config
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    lm, prompt, kwargs = _model(text)
    out = []

    def generate(prompt):
        with torch.no_grad():
            out.append(lm.generate(prompt, **kwargs))
    saved = config.force_disable_caches
    config.force_disable_caches = True  # every run compiles
    try:
        trace = None
        if traced:
            with pytest.warns(RuntimeWarning, match=warns):
                trace = tt.trace(generate, prompt, model=lm, kernels="off", ops=True)
        else:
            generate(prompt)
        counts = _counts()
        if not again:
            return out[0], counts, trace, None
        generate(prompt)  # again, untraced: compiled already, nothing new to compile
        return out[0], counts, trace, (out[1], _counts())
    finally:
        config.force_disable_caches = saved


@pytest.fixture(scope="module")
def plain():
    """The untraced compiled run."""
    return _generate(traced=False)


def check_decode_attribution(trace, tokens):
    """Every generated kernel that ran in a decode token is attributed to modules, and what
    the join leaves is counted; returns (kernels' share, compiled regions' share) of each
    decode token's wall time (its root call's CPU time)."""
    kernels, lost = join_kernels(trace._q)
    assert len(lost) == trace.losses.get("compiled_unattributed", 0)
    ran = trace._q("SELECT c.id, c.token FROM calls c JOIN sites s ON s.id = c.site_id "
                   "WHERE s.kind = 'op' AND s.name LIKE 'graph\\_%' ESCAPE '\\'")
    regions = trace._q("SELECT c.token, c.cpu_begin_ns, c.cpu_end_ns FROM calls c JOIN sites s "
                       "ON s.id = c.site_id WHERE s.name LIKE 'Torch-Compiled Region%'")
    shares = []
    for t in range(2, tokens + 1):
        mine = [k for k in kernels if k.token == t]
        assert {cid for cid, tok in ran if tok == t} == {k.call_id for k in mine
                                                         if k.name.startswith("graph_")}
        assert any(k.name.startswith("aten::") for k in mine)  # library calls (mm) too
        assert all(k.modules for k in mine)
        modules = {m for k in mine for m in k.modules}
        assert {"model.layers.0.mlp.down_proj", "lm_head"} <= modules, sorted(modules)
        # Kernels inside the compiled region, the region inside the token's call.
        region = sum(e - b for tok, b, e in regions if tok == t)
        wall = trace[f"self:{t}"].cpu_ms * 1e6
        assert 0 < sum(k.cpu_ns for k in mine) <= region <= wall
        shares.append((sum(k.cpu_ns for k in mine) / wall, region / wall))
    return shares


@pytest.mark.slow
def test_a_compiled_llama_decodes_compiled_and_each_kernel_has_its_modules(plain):
    plain_ids, plain_counts, _, _ = plain
    ids, counts, trace, _ = _generate(traced=True)
    assert plain_counts == (0, 2)  # prefill and decode graphs, no break
    assert counts == plain_counts  # no added graph break, no added graph: no eager fallback
    assert torch.equal(ids, plain_ids)  # the same tokens
    assert trace["self"].num_calls == NEW_TOKENS
    assert trace.losses.get("compiled_unattributed", 0) == 0
    shares = check_decode_attribution(trace, NEW_TOKENS)
    print("kernels', regions' share of decode wall time:", [(round(k, 3), round(r, 3))
                                                             for k, r in shares])


@pytest.mark.slow
def test_tokentrace_run_ops_on_a_job_that_compiles(tmp_path, plain):
    from test_preload import _run_cli, _write_job
    job, own = _write_job(tmp_path, textwrap.dedent(MODEL) + textwrap.dedent("""
        with torch.no_grad():
            out = lm.generate(prompt, **kwargs)
        print("IDS", out.tolist())
        """))
    res = _run_cli(tmp_path, job, own, ("--ops", "--kernels", "off"),
                   TOKENTRACE_OUT=str(tmp_path / "c.sqlite"))
    assert res.returncode == 0, res.stderr[-3000:]
    ids = [line for line in res.stdout.splitlines() if line.startswith("IDS")]
    assert ids == [f"IDS {plain[0].tolist()}"]  # the same tokens as the untraced run
    trace = tt.load(tmp_path / "c.sqlite")
    assert trace["self"].num_calls == NEW_TOKENS
    assert trace.losses.get("compiled_unattributed", 0) == 0
    shares = check_decode_attribution(trace, NEW_TOKENS)
    print("tokentrace run: kernels', regions' share of decode wall time:",
          [(round(k, 3), round(r, 3)) for k, r in shares])


@pytest.mark.slow
def test_a_llama_compiled_before_the_trace_has_its_library_calls_attributed():
    """Compiled and run before the trace (its C++ kernels unprofiled): the map is recovered
    from the compiled graphs (python/tokentrace/_compiled/precompiled.py), nothing compiles
    again, every library call of each token (the projections' mm, attention) is attributed
    and the generated kernels are named as unrecorded."""
    import json

    import torch._inductor.config as config
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    lm, prompt, kwargs = _model()
    saved = config.force_disable_caches
    config.force_disable_caches = True
    try:
        with torch.no_grad():
            plain = lm.generate(prompt, **kwargs)  # compiled here, before the trace
            before = _counts()
            out = []
            with pytest.warns(RuntimeWarning, match="inside a compiled region"):
                trace = tt.trace(lambda p: out.append(lm.generate(p, **kwargs)), prompt,
                                 model=lm, kernels="off", ops=True)
    finally:
        config.force_disable_caches = saved
    assert _counts() == before  # nothing compiled under the trace
    assert torch.equal(out[0], plain)
    assert trace.losses.get("compiled_unattributed", 0) == 0
    assert "compiled_unmapped" not in trace.meta
    assert len(json.loads(trace.meta["compiled_unrecorded"])) == 2  # prefill, decode graphs
    kernels, lost = join_kernels(trace._q)
    assert lost == []
    for t in range(1, NEW_TOKENS + 1):
        mine = [k for k in kernels if k.token == t]
        assert all(k.name.startswith("aten::") and k.modules for k in mine)
        modules = {m for k in mine for m in k.modules}
        assert {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn",
                "model.layers.0.mlp.down_proj", "lm_head"} <= modules, sorted(modules)
