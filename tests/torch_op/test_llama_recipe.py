"""The seed's KV-cache recipe through the operator: zeroing values[:, 1] of layer 0's v_proj at
the prefill writes edited values into the cache, the next decoding step reads them, and the
logits equal those of a plain Python hook (and differ from a clean run)."""
import pytest
import torch

transformers = pytest.importorskip("transformers")

PROMPT = [[3, 17, 42, 9, 100]]
NEXT = [[7]]


def _model(device="cpu", dtype=torch.float32):
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval().to(device=device, dtype=dtype)


def _run(model, device):
    with torch.no_grad():
        prefill = model(torch.tensor(PROMPT, device=device), use_cache=True)
        step = model(torch.tensor(NEXT, device=device), past_key_values=prefill.past_key_values,
                     use_cache=True)
    return prefill.logits, step.logits


def plain_hook_logits(device="cpu", dtype=torch.float32):
    model = _model(device, dtype)
    calls = [0]

    def hook(module, args, values):
        calls[0] += 1
        if calls[0] == 1:  # the prefill
            values[:, 1] = 0

    model.model.layers[0].self_attn.v_proj.register_forward_hook(hook)
    return _run(model, device)


def _site_hook(table, site):
    def hook(module, args, values):
        table.apply_(values, site)  # in place; returns nothing so the output stays `values`
    return hook


def op_logits(tto, device="cpu", dtype=torch.float32):
    model = _model(device, dtype)
    table = tto.PatchTable(1)
    table.add_entry(0, "zero", index=(slice(None), 1), calls="prefill")
    table.upload(device)
    # The root call starts a token; the site hook applies the table in place.
    model.register_forward_pre_hook(lambda module, args: table.advance_token())
    model.model.layers[0].self_attn.v_proj.register_forward_hook(_site_hook(table, 0))
    out = _run(model, device)
    return out, table


def clean_logits(device="cpu", dtype=torch.float32):
    return _run(_model(device, dtype), device)


def test_recipe_cpu(tto):
    (prefill, step), table = op_logits(tto)
    want_prefill, want_step = plain_hook_logits()
    clean_prefill, clean_step = clean_logits()
    assert torch.allclose(prefill, want_prefill, atol=1e-6)
    assert torch.allclose(step, want_step, atol=1e-6)
    assert not torch.allclose(step, clean_step, atol=1e-4)
    assert table.fires() == (1, [1])
    c = table.counters()
    assert c["site_calls"] == [2] and c["token"] == 2


def test_recipe_cpu_compiled(tto):
    torch._dynamo.reset()
    model = _model()
    table = tto.PatchTable(1)
    table.add_entry(0, "zero", index=(slice(None), 1), calls="prefill")
    table.upload("cpu")
    v_proj = model.model.layers[0].self_attn.v_proj
    v_proj.register_forward_hook(_site_hook(table, 0))
    compiled = torch.compile(v_proj, backend="aot_eager", fullgraph=True)
    x = torch.randn(1, 5, 32)
    table.advance_token()
    with torch.no_grad():
        got = compiled(x)
        want = v_proj(x)  # call 2: no edit
    want[:, 1] = 0
    assert torch.equal(got, want)
    assert table.fires() == (1, [1])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_recipe_cuda(tto, dtype):
    (prefill, step), table = op_logits(tto, "cuda", dtype)
    want_prefill, want_step = plain_hook_logits("cuda", dtype)
    assert torch.equal(prefill, want_prefill)  # zeroing is exact: bit-identical to the hook
    assert torch.equal(step, want_step)
    assert not torch.equal(step, clean_logits("cuda", dtype)[1])
    assert table.fires() == (1, [1])
