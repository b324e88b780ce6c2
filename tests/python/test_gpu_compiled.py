"""A tiny Llama compiled with torch.compile (default mode) on CUDA, traced over `generate` with
op records and kernel records: every Triton kernel CUPTI recorded in a decode token is
attributed to modules (by name, in its region's graph) or counted as compiled_unattributed;
compiled by transformers' generate itself (on CUDA with a static cache it compiles the
model's __call__ with mode="reduce-overhead": cudagraph trees), every kernel replayed from the
decode's CUDA graph is attributed through the node it was captured from, or counted (never
given to a module by guess). Needs a GPU; scripts/gpu-check.sh runs this file as a step of its
own (three Inductor compiles with Triton: ~1.5 minutes there, estimated)."""

import collections

import pytest
import torch

import tokentrace as tt
from tokentrace._compiled import join_kernels

NEW_TOKENS = 4


def _traced_generate(auto=False, warm=False):
    """auto: generate compiles the model itself (transformers' auto-compile, reduce-overhead);
    else the test compiles lm.forward (default mode) and turns generate's own compile off.
    warm: the compiled model generates once before the trace (its graphs are compiled before
    tt.trace starts: their kernel map is recovered, _compiled/precompiled.py)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch._dynamo.reset()
    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2)).eval().cuda()
    # As test_compiled_llama.py on the CPU: a static cache and a compiled forward, one graph
    # per shape (prefill, decode), so decode tokens run one graph.
    if not auto:
        lm.forward = torch.compile(lm.forward, dynamic=False)
    prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")

    def generate(prompt):
        with torch.no_grad():
            lm.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                        do_sample=False, cache_implementation="static", disable_compile=not auto)
    if warm:
        generate(prompt)
    return tt.trace(generate, prompt, model=lm, kernels="full", ops=True)


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_each_triton_kernel_of_a_decode_token_is_attributed_or_counted():
    _expect_triton_kernels_attributed_or_counted(warm=False)


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_triton_kernels_of_a_model_compiled_before_the_trace_are_attributed_or_counted():
    _expect_triton_kernels_attributed_or_counted(warm=True)


def _expect_triton_kernels_attributed_or_counted(warm):
    trace = _traced_generate(warm=warm)
    assert trace.kernels_recorded, trace.kernels_status
    kernels, lost = join_kernels(trace._q)
    assert len(lost) == trace.losses.get("compiled_unattributed", 0)
    ran = collections.Counter(trace._q(
        "SELECT k.token FROM kernels k JOIN strings s ON s.id = k.name_id "
        "WHERE s.text LIKE 'triton\\_%' ESCAPE '\\'"))
    attributed = 0
    for t in range(2, NEW_TOKENS + 1):
        mine = [k for k in kernels if k.token == t and k.name.startswith("triton_")]
        counted = [n for _, tok, n in lost if tok == t and n.startswith("triton_")]
        assert ran[(t,)] > 0, "no Triton kernel recorded in a decode token"
        assert len(mine) + len(counted) == ran[(t,)]
        assert all(k.modules for k in mine)
        attributed += len(mine)
        modules = {m for k in kernels if k.token == t for m in k.modules}
        # Both layers' kernels (Inductor reuses one kernel for identical code in each layer).
        assert any(m.startswith("model.layers.0") for m in modules), sorted(modules)
        assert any(m.startswith("model.layers.1") for m in modules), sorted(modules)
    total = sum(ran[(t,)] for t in range(2, NEW_TOKENS + 1))
    when = "compiled before the trace" if warm else "compiled under it"
    print(f"decode Triton kernels attributed ({when}): {attributed} of {total}")
    assert attributed > 0


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_each_kernel_replayed_from_a_compiled_decodes_cuda_graph_is_attributed_or_counted():
    trace = _traced_generate(auto=True)
    assert trace["model.layers.0.mlp"].num_calls == 1  # the eager prefill; decode: compiled
    assert trace.kernels_recorded, trace.kernels_status
    kernels, lost = join_kernels(trace._q)
    assert len(lost) == trace.losses.get("compiled_unattributed", 0)
    # The kernels replayed from a graph in each decode token (cudagraph trees warm up, record
    # and replay the recording, then replay): each is a kernel of the join, or counted.
    ran = collections.defaultdict(collections.Counter)
    for token, name in trace._q("SELECT k.token, s.text FROM kernels k JOIN strings s "
                                "ON s.id = k.name_id WHERE k.graph_id != 0"):
        ran[token][name] += 1
    decode = [t for t in range(2, NEW_TOKENS + 1) if ran[t]]
    assert decode, "no kernel of a decode token was replayed from a CUDA graph"
    for t in decode:
        joined = collections.Counter(k.name for k in kernels if k.token == t and k.gpu_ns)
        counted = collections.Counter(n for _, tok, n in lost if tok == t)
        missing = ran[t] - (joined + counted)
        assert not missing, f"token {t}: replayed kernels neither attributed nor counted"
        modules = {m for k in kernels if k.token == t and k.gpu_ns for m in k.modules}
        assert any(m.startswith("model.layers.0") for m in modules), sorted(modules)
        assert any(m.startswith("model.layers.1") for m in modules), sorted(modules)
        print(f"token {t}: replayed {sum(ran[t].values())}, attributed "
              f"{sum(joined.values())}, counted {dict(counted)}")
    assert trace.losses.get("unknown_graph_node", 0) == 0
