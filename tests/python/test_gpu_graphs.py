"""CUDA-graph replays: a replayed step is still a token, its kernels still calls' (mark `gpu`,
skipped without CUDA).

A tiny Llama decoding step with a static KV cache is captured with torch.cuda.graph inside a
traced run and replayed 16 times. Module hooks run only at capture time; the shim attributes
each replayed kernel through its graph node to the call that was open when the node was
captured, and counts each replay of the captured token graph as one token.
"""

import sqlite3

import pytest
import torch

import tokentrace as tt

pytestmark = pytest.mark.gpu

REPLAYS = 16


def _llama_cuda():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(cfg).eval().cuda()


def _decode_with_graph(lm):
    from transformers import StaticCache

    def run(ids):
        cache = StaticCache(config=lm.config, max_cache_len=64)
        n = ids.shape[1]
        with torch.no_grad():
            out = lm(ids, past_key_values=cache, use_cache=True,
                     cache_position=torch.arange(n, device="cuda"))           # token 1: prefill
            tok = out.logits[:, -1:].argmax(-1)
            pos = torch.tensor([n], device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):                                      # token 2: eager
                lm(tok, past_key_values=cache, use_cache=True, cache_position=pos)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):                                      # token 3: capture
                lm(tok, past_key_values=cache, use_cache=True, cache_position=pos)
            for _ in range(REPLAYS):                                           # tokens 4..19
                graph.replay()
            torch.cuda.synchronize()
        return tok

    return run


def _rows(path, sql, *args):
    with sqlite3.connect(path) as db:
        return db.execute(sql, args).fetchall()


def test_replayed_kernels_keep_their_modules_and_count_as_tokens(tmp_path):
    lm = _llama_cuda()
    ids = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    trace = tt.trace(_decode_with_graph(lm), ids, model=lm, kernels="full",
                     out=tmp_path / "graphs.sqlite")
    assert trace.kernels_recorded, trace.kernels_status
    path = str(trace.path)
    graph_tokens = _rows(path, "SELECT DISTINCT token FROM kernels WHERE graph_node_id != 0 "
                               "ORDER BY token")
    assert len(graph_tokens) == REPLAYS, graph_tokens
    # The eager decode step (token 2) and every replay launch the same kernels from the same
    # module sites.
    site_sql = ("SELECT s.name, COUNT(*) FROM kernels k JOIN calls c ON c.id = k.call_id "
                "JOIN sites s ON s.id = c.site_id WHERE k.token = ? AND k.kind = 0 "
                "GROUP BY s.name ORDER BY s.name")
    eager = _rows(path, site_sql, 2)
    assert eager and any(name.endswith("self_attn.v_proj") for name, _ in eager), eager
    for (token,) in graph_tokens:
        assert _rows(path, site_sql, token) == eager, f"token {token}"
    # Replayed kernels are never left without a call, and nothing was lost.
    assert _rows(path, "SELECT COUNT(*) FROM kernels WHERE graph_node_id != 0 AND "
                       "call_id IS NULL")[0][0] == 0
    assert _rows(path, "SELECT COALESCE(SUM(count), 0) FROM losses")[0][0] == 0
    tokens = _rows(path, "SELECT COUNT(*) FROM tokens")[0][0]
    assert tokens == 3 + REPLAYS


def test_generate_with_static_cache_traces_every_token(tmp_path):
    # HF generate with a static cache. On CUDA, transformers compiles the forward by itself
    # when the cache is static (GenerationMixin._valid_auto_compile_criteria); that is
    # torch.compile's path, where module calls inside the compiled region are not seen, and
    # the hand-captured CUDA graph above is the graph path. disable_compile keeps this eager.
    lm = _llama_cuda()
    ids = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")
    trace = tt.trace(lm.generate, ids, kernels="summary", out=tmp_path / "static.sqlite",
                     input_kwargs={"max_new_tokens": 6, "min_new_tokens": 6,
                                   "cache_implementation": "static", "do_sample": False,
                                   "disable_compile": True})
    assert trace["model.layers.0.self_attn.v_proj"].num_calls == 6
    assert all(trace[f"model.layers.0.mlp:{k}"].kernels > 0 for k in range(1, 7))
