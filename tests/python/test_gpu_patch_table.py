"""GPU checks of the native patch table behind bound models (mark `gpu`; skipped without
CUDA): the table lives on the model's device, num_fires under generate, a CUDA graph of one
decoding step that applies a token-3 edit exactly at step 3 on replay, and the companion that
shows a Python hook cannot."""

import pytest
import torch

import tokentrace as tt

pytestmark = pytest.mark.gpu


def _llama(dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2)).eval().to("cuda", dtype)


def test_generate_on_cuda_counts_on_the_device():
    lm = _llama()
    prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    bound = tt.when("model.layers.0.self_attn.v_proj", tt.scale(0.5)).bind(lm)
    assert bound.patch_table.device.type == "cuda"
    with torch.no_grad():
        bound.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    report = bound.last_report
    bound(prompt)  # a later run resets the device counters: the unread report is stale
    with pytest.raises(tt.TokentraceError, match="reset by a later run"):
        report.num_fires
    with torch.no_grad():
        bound.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert bound.last_report.num_fires == 6 and bound.last_report.num_skips == 0


def test_table_follows_the_model_to_another_device():
    lm = _llama().cpu()
    prompt = torch.tensor([[3, 17, 42, 8, 99]])
    spec = tt.when("model.layers.0.self_attn.v_proj", tt.add(torch.full((16,), 0.25)),
                   calls=tt.prefill)
    bound = spec.bind(lm)
    with torch.no_grad():
        on_cpu = bound(prompt).logits
        lm.cuda()
        on_cuda = bound(prompt.cuda()).logits
    assert bound.patch_table.device.type == "cuda" and bound.last_report.num_fires == 1
    assert torch.allclose(on_cuda.cpu(), on_cpu, atol=1e-5)


def _decode_steps(lm, run_step, steps=5, after_prefill=lambda: None):
    """Prefill into a fresh StaticCache, call `after_prefill`, then `run_step`, returning the
    logits of each step. Every step feeds token 7 at the next position."""
    from transformers import StaticCache
    cache = StaticCache(config=lm.config, max_cache_len=16)
    prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    tok = torch.tensor([[7]], device="cuda")
    pos = torch.tensor([5], device="cuda")
    with torch.no_grad():
        lm(prompt, past_key_values=cache, cache_position=torch.arange(5, device="cuda"),
           use_cache=True)
        after_prefill()

        def rewind():  # back to "just after the prefill" (this cache counts on the device)
            for layer in getattr(cache, "layers", ()):
                if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                    layer.cumulative_length.fill_(5)

        return run_step(lambda: lm(tok, past_key_values=cache, cache_position=pos,
                                   use_cache=True).logits, pos, steps, rewind)


def _eager(step, pos, steps, rewind):
    out = []
    for s in range(1, steps + 1):
        pos.fill_(4 + s)
        out.append(step().clone())
    return out


def _graphed(step, pos, steps, rewind, after_capture=lambda: None):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph recommends
        pos.fill_(5)
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        logits = step()
    rewind()  # the warm-up wrote position 5 and advanced the cache; the capture ran nothing
    after_capture()
    out = []
    for s in range(1, steps + 1):
        pos.fill_(4 + s)
        graph.replay()
        out.append(logits.clone())
    torch.cuda.synchronize()
    return out


def test_cuda_graph_replays_a_token_3_edit_at_step_3():
    lm = _llama()
    spec = tt.when("lm_head", tt.scale(2.0), calls=tt.token(3))
    clean = _decode_steps(lm, _eager)

    bound = spec.bind(lm)
    with bound.installed():  # each decode step is one root call: step s is token s
        eager = _decode_steps(lm, _eager, after_prefill=bound.reset_counters)
        assert bound.report().num_fires == 1
    with bound.installed():
        # the root pre-hook's advance_token and the hook's apply_patches_ are captured
        graphed = _decode_steps(lm, lambda step, pos, n, rewind: _graphed(
            step, pos, n, rewind, after_capture=bound.reset_counters))  # replay 1 = token 1
        report = bound.report()
        assert report.num_fires == 1 and report.num_skips == 0
    for s in range(5):
        assert torch.allclose(graphed[s], eager[s], atol=1e-5), s
        if s == 2:
            assert torch.allclose(graphed[s], 2 * clean[s], atol=1e-5)
        else:
            assert torch.allclose(graphed[s], clean[s], atol=1e-5), s
    assert torch.equal(eager[2], 2 * clean[2])


def test_a_python_hook_captured_in_a_graph_cannot_select_the_step():
    lm = _llama()
    clean = _decode_steps(lm, _eager)
    state = {"token": 0}

    def count(module, args):
        state["token"] += 1

    def edit_at_token_3(module, args, out):
        return out * 2 if state["token"] == 3 else None  # decided once, at capture

    handles = [lm.register_forward_pre_hook(count),
               lm.lm_head.register_forward_hook(edit_at_token_3)]
    try:
        graphed = _decode_steps(lm, lambda step, pos, n, rewind: _graphed(
            step, pos, n, rewind, after_capture=lambda: state.update(token=0)))
    finally:
        for h in handles:
            h.remove()
    # The hook decided once, at capture (the prefill was token 1, the warm-up 2, the capture 3):
    # the edit is baked into the graph and every replay applies it, not just step 3.
    for s in range(5):
        assert torch.allclose(graphed[s], 2 * clean[s], atol=1e-5), s


def test_cuda_graph_replays_a_token_3_input_edit_at_step_3():
    """An edit of a call's input (input=) runs from the device table like an output edit, so
    a captured decoding step applies it on the right replay. lm_head has no bias: doubling its
    input doubles the logits."""
    lm = _llama()
    spec = tt.when("lm_head", tt.scale(2.0), calls=tt.token(3), input="input")
    clean = _decode_steps(lm, _eager)
    bound = spec.bind(lm)
    with bound.installed():
        graphed = _decode_steps(lm, lambda step, pos, n, rewind: _graphed(
            step, pos, n, rewind, after_capture=bound.reset_counters))
        report = bound.report()
        assert report.num_fires == 1 and report.num_skips == 0
    for s in range(5):
        expected = 2 * clean[s] if s == 2 else clean[s]
        assert torch.allclose(graphed[s], expected, atol=1e-5), s
