"""GPU checks (mark `gpu`; skipped without CUDA): kernels attributed to site:k and tokens,
escapes counted per token by the shim, record through pinned staging, edits on CUDA."""

import warnings

import pytest
import torch

import tokentrace as tt

pytestmark = pytest.mark.gpu


def _gpt2_cuda():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2)).eval().cuda()


def _native_or_skip():
    ok, why = tt.native_available()
    assert ok, f"kernel attribution needs the native extension: {why}"


def test_seed_example_on_cuda_with_kernels(tmp_path):
    _native_or_skip()
    lm = _gpt2_cuda()
    prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    with pytest.warns(tt.ScalarEscapeWarning):
        trace = tt.trace(lm.generate, prompt, input_kwargs={"max_new_tokens": 3},
                         kernels="full", out=tmp_path / "g.sqlite")
    mlp = "transformer.h.1.mlp"
    assert [trace[mlp].num_calls, list(trace[f"{mlp}:1"].out.shape),
            list(trace[f"{mlp}:2"].out.shape)] == [3, [1, 5, 32], [1, 1, 32]]
    assert trace.kernels_recorded, trace.kernels_status
    for k in (1, 2, 3):
        call = trace[f"{mlp}:{k}"]
        assert call.kernels > 0 and call.gpu_ms > 0
        assert call.token == k
    assert trace[f"{mlp}.c_fc:2"].kernel_list  # a leaf launched its own kernels
    tokens = trace.tokens
    assert len(tokens) == 3 and all(t.kernels > 0 and t.gpu_ms > 0 for t in tokens)
    # generate's stopping check reads the device every decode step
    assert sum(t.escapes for t in tokens) >= 2
    assert "gpu self ms" in trace.report()


def test_record_on_cuda_matches_plain_hook(tmp_path):
    lm = _gpt2_cuda()
    ids = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    seen = []
    h = lm.transformer.h[1].mlp.register_forward_hook(lambda m, a, o: seen.append(o.cpu()))
    try:
        with torch.no_grad():
            lm.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    finally:
        h.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rec = tt.record(lm, ids, save=tt.module("transformer.h.1.mlp"),
                        generate_kwargs={"max_new_tokens": 32, "min_new_tokens": 32,
                                         "do_sample": False},
                        out=tmp_path / "r.sqlite", shard_mb=0.01)
    assert rec.steps == 32
    outs = rec["transformer.h.1.mlp"].outs
    assert all(torch.equal(a, b) for a, b in zip(outs, seen))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_declarative_edit_on_cuda_matches_hook(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    lm = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2)).eval().to("cuda", dtype)
    prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    nxt = torch.tensor([[7]], device="cuda")

    def blank(m, a, out):
        out = out.clone()
        out[:, 1] = 0.0
        return out

    with torch.no_grad():
        h = lm.model.layers[0].self_attn.v_proj.register_forward_hook(blank)
        try:
            cache = lm(prompt, use_cache=True).past_key_values
        finally:
            h.remove()
        reference = lm(nxt, past_key_values=cache, use_cache=True).logits
        bound = tt.when(tt.module("model.layers.0.self_attn.v_proj"),
                        tt.zero(index=(slice(None), 1)), calls=tt.prefill).bind(lm)
        cache = bound(prompt, use_cache=True).past_key_values
        edited = lm(nxt, past_key_values=cache, use_cache=True).logits
    assert torch.equal(edited, reference)


def test_op_records_on_cuda_carry_their_kernels(tmp_path):
    """ops=True on CUDA: the ATen ops are calls inside their module calls, so the kernels they
    launch are attributed to them (not only to the module call around them), and generate's
    host reads are
    escapes named by the op that read."""
    _native_or_skip()
    lm = _gpt2_cuda()
    prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tt.ScalarEscapeWarning)
        trace = tt.trace(lm.generate, prompt, input_kwargs={"max_new_tokens": 3},
                         kernels="full", ops=True, out=tmp_path / "ops.sqlite")
    assert trace.kernels_recorded, trace.kernels_status
    decode = {t.name: t for t in trace.top_ops(token=2, n=100)}
    assert decode["aten::addmm"].kernels > 0 and decode["aten::addmm"].gpu_ms > 0, decode
    fc_ops = [op for op in trace["transformer.h.1.mlp.c_fc:2"].ops if op.name == "aten::addmm"]
    assert fc_ops and fc_ops[0].shape == [1, 128]
    assert not trace.losses


def test_op_labels_on_cuda_are_the_live_labels_and_python_call_ops_carry_kernels(tmp_path):
    """On CUDA, as on the CPU (tests/python/test_op_edits.py): an op edit's labels, numbered
    while GPT-2 generates, are the trace's, op for op; and a Python call kept as an op of its
    own (x[i], x / y: _common/op_groups.py) holds the kernels its ATen ops launched."""
    _native_or_skip()
    lm = _gpt2_cuda()
    prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    seen = []

    def log(op):
        seen.append((op.label, op.layer_type, op.module, op.output_index))
        return False

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore", tt.ScalarEscapeWarning)
        trace = tt.trace(lm.generate, prompt, input_kwargs={"max_new_tokens": 3},
                         kernels="full", ops=True, out=tmp_path / "labels.sqlite",
                         edits=tt.when(tt.where(log), tt.zero()))
    read = [(s.label, s.layer_type, s.module, s.output_index)
            for s in trace.find_sites(tt.where(lambda op: True))]
    assert len(read) > 50 and seen == read
    ops = {t.name: t for t in trace.top_ops(n=200)}
    python_ops = [n for n in ops if n.startswith("python::") and ops[n].kernels]
    assert python_ops, sorted(ops)
    assert not trace.losses
