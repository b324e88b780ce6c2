"""The join of a compiled model's GPU kernels with their modules (python/tokentrace/
_compiled_join.py), on trace files built by hand in the shapes the shim writes on a GPU:
Inductor's Triton kernels have no op of their own, so CUPTI's kernel records (launched in
TorchDynamo's compiled region) are matched by name, in the graph the region ran; library calls
(an aten::mm and its cuBLAS kernel) by their order among them (issue 16, section 2, GPU side).
"""

import json
import sqlite3

import tokentrace as tt
from tokentrace import _compiled_join, _compiled_map, _store

LAYER0 = ["model.layers.0.self_attn", "model.layers.0.mlp"]
# Two graphs numbering their kernels from 0 (prefill, compile 0/0; decode, compile 0/1);
# graph 0 reuses its norm kernel for two layers (Inductor reuses a kernel for identical code).
GRAPHS = {
    "0": [["triton_red_fused_mean_pow_0", ["model.layers.0.input_layernorm"]],
          ["aten::mm", ["model.layers.0.self_attn.q_proj"]],
          ["triton_poi_fused_add_mul_1", LAYER0],
          ["triton_red_fused_mean_pow_0", ["model.layers.1.input_layernorm"]],
          ["aten::mm", ["lm_head"]]],
    "1": [["triton_red_fused_mean_pow_0", ["model.norm"]],
          ["aten::mm", ["lm_head"]],
          ["triton_poi_fused_add_mul_1", ["model.layers.0.mlp"]]],
}
REGIONS = {"0": "0/0", "1": "0/1"}


class _File:
    """A trace file: root `self` calls, each one token, each with a compiled region of
    `launches` (op names, or kernel names launched in the region itself)."""

    def __init__(self, tmp_path):
        self.path = str(tmp_path / "t.sqlite")
        self.con = sqlite3.connect(self.path)
        _store.write_schema(self.con)
        self.sites, self.calls, self.kernels, self.strings = {}, [], [], {}
        self.call_gpu = []  # an op's own kernel (the shim's per-call totals)
        self.corr = 100

    def _site(self, name, kind):
        return self.sites.setdefault(name, (len(self.sites) + 1, kind))[0]

    def _kernel(self, call, token, name, t, graph=0):
        sid = self.strings.setdefault(name, len(self.strings) + 1)
        self.corr += 1
        self.kernels.append((call, token, sid, t, t + 1000, self.corr, graph))

    def token(self, region, launches, graph=0):
        tok = len([c for c in self.calls if c[1] == self._site("self", "root")]) + 1
        base = tok * 1_000_000
        root = len(self.calls) + 1
        self.calls.append((root, self._site("self", "root"), tok, tok, None, base, base + 90_000))
        marker = root + 1
        self.calls.append((marker, self._site(f"Torch-Compiled Region: {region}", "op"), tok,
                           tok, root, base + 1000, base + 80_000))
        for j, name in enumerate(launches):
            t = base + 2000 + 1000 * j
            if "::" in name:  # an op of the wrapper, its library kernel launched in it
                cid = len(self.calls) + 1
                self.calls.append((cid, self._site(name, "op"), j + 1, tok, marker, t, t + 500))
                self._kernel(cid, tok, "sm90_xmma_gemm_bf16bf16_bf16f32", t)
                self.call_gpu.append((cid, 1, 1000, t, t + 1000))
            else:
                self._kernel(marker, tok, name, t, graph)
        self.call_gpu.append((marker, len(launches), 1000 * len(launches), base, base + 80_000))
        return tok

    def write(self, graphs=GRAPHS, regions=REGIONS):
        c = self.con
        c.executemany("INSERT INTO sites(id, name, kind, is_token) VALUES (?,?,?,?)",
                      [(i, n, k, int(n == "self")) for n, (i, k) in self.sites.items()])
        c.executemany("INSERT INTO calls(id, site_id, k, token, parent_id, thread, "
                      "cpu_begin_ns, cpu_end_ns) VALUES (?,?,?,?,?,0,?,?)", self.calls)
        c.executemany("INSERT INTO strings VALUES (?,?)", [(i, n) for n, i in self.strings.items()])
        c.executemany("INSERT INTO kernels VALUES (?,?,?,0,0,7,?,?,?,?,0)", self.kernels)
        c.executemany("INSERT INTO call_gpu VALUES (?,?,?,?,?,0)", self.call_gpu)
        meta = {"schema_version": str(_store.schema().SCHEMA_VERSION), "kernel_mode": "full",
                "kernels_status": "", _compiled_map.META_KEY: json.dumps(graphs)}
        if regions is not None:
            meta[_compiled_map.REGIONS_KEY] = json.dumps(regions)
        c.executemany("INSERT INTO meta(key, value) VALUES (?,?)", meta.items())
        c.commit()
        c.close()
        _compiled_map._state.update(graphs=dict(graphs), regions=dict(regions or {}))
        try:
            _compiled_join.write(self.path)  # writes the map again, counts what the join leaves
        finally:
            _compiled_map._state.update(graphs={}, regions={})
        return tt.load(self.path)


PREFILL = ["triton_red_fused_mean_pow_0", "aten::mm", "triton_poi_fused_add_mul_1",
           "triton_red_fused_mean_pow_0", "aten::mm"]
DECODE = ["triton_red_fused_mean_pow_0", "aten::mm", "triton_poi_fused_add_mul_1"]


def test_triton_kernels_by_name_in_their_regions_graph_library_calls_by_order(tmp_path):
    f = _File(tmp_path)
    f.token("0/0", PREFILL)
    f.token("0/1", DECODE)
    trace = f.write()
    assert trace.losses.get("compiled_unattributed", 0) == 0
    got = [(k.name, k.modules, k.fused) for k in trace.compiled_kernels(token=1)]
    assert got == [("triton_red_fused_mean_pow_0", ["model.layers.0.input_layernorm"], False),
                   ("aten::mm", ["model.layers.0.self_attn.q_proj"], False),
                   ("triton_poi_fused_add_mul_1", LAYER0, True),
                   # the same kernel again: the graph's next entry of that name
                   ("triton_red_fused_mean_pow_0", ["model.layers.1.input_layernorm"], False),
                   ("aten::mm", ["lm_head"], False)]
    # The decode token's names are graph 0's too: its region (compile 0/1) says graph 1.
    got = [(k.name, k.modules) for k in trace.compiled_kernels(token=2)]
    assert got == [("triton_red_fused_mean_pow_0", ["model.norm"]), ("aten::mm", ["lm_head"]),
                   ("triton_poi_fused_add_mul_1", ["model.layers.0.mlp"])]
    # Each kernel record's own GPU time (1 us), a fused one towards both its modules.
    totals = {t.module: (t.kernels, t.fused, t.gpu_ms) for t in trace.compiled_modules(1)}
    assert totals["model.layers.0.mlp"] == (1, 1, 1e-3)
    assert totals["model.layers.0.self_attn"] == (1, 1, 1e-3)
    assert totals["lm_head"] == (1, 0, 1e-3)


def test_without_compile_ids_the_set_of_names_decides_or_the_kernels_are_counted(tmp_path):
    graphs = dict(GRAPHS, **{"1": GRAPHS["1"] + [["triton_poi_fused_cat_2", ["lm_head"]]]})
    f = _File(tmp_path)
    f.token("0/0", DECODE)  # names both graphs have: ambiguous, never given to one
    f.token("0/1", DECODE + ["triton_poi_fused_cat_2"])  # only graph 1 has all of them
    trace = f.write(graphs, regions=None)
    assert trace.losses["compiled_unattributed"] == 3  # token 1: its kernels and its mm
    assert [k.name for k in trace.compiled_kernels(token=1)] == []
    got = [(k.name, k.modules) for k in trace.compiled_kernels(token=2)]
    assert got == [("triton_red_fused_mean_pow_0", ["model.norm"]), ("aten::mm", ["lm_head"]),
                   ("triton_poi_fused_add_mul_1", ["model.layers.0.mlp"]),
                   ("triton_poi_fused_cat_2", ["lm_head"])]


def test_autotuning_launches_and_cuda_graph_replays_are_counted(tmp_path):
    f = _File(tmp_path)
    # A first run benchmarks a kernel's configs before its real launch: 3 launches, 1 entry.
    f.token("0/1", ["triton_red_fused_mean_pow_0"] * 3 + DECODE[1:])
    f.token("0/1", ["triton_red_fused_mean_pow_0", "triton_poi_fused_add_mul_1"], graph=7)
    trace = f.write()
    assert trace.losses["compiled_unattributed"] == 2 + 2
    got = [(k.name, k.modules) for k in trace.compiled_kernels()]
    assert got == [("triton_red_fused_mean_pow_0", ["model.norm"]), ("aten::mm", ["lm_head"]),
                   ("triton_poi_fused_add_mul_1", ["model.layers.0.mlp"])]


def test_kernels_without_rows_are_counted(tmp_path):
    # kernels="summary": the region's GPU totals count its kernels, no row names them.
    f = _File(tmp_path)
    f.token("0/1", DECODE)
    f.kernels = []
    trace = f.write()
    lost = _compiled_join.join(trace._q)[1]
    assert sorted(n for _, _, n in lost) == [_compiled_join.NOT_STORED] * 2 + ["aten::mm"]
    assert trace.losses["compiled_unattributed"] == 3


def test_triton_kernels_are_noted_under_their_own_names():
    name = _compiled_map._runtime_name
    assert name("triton_poi_fused_add_0", True, 3, profiled=False) == "triton_poi_fused_add_0"
    assert name("cpp_fused_add_0", True, 3, profiled=True) == "graph_3_cpp_fused_add_0"
    assert name("extern_kernels.mm", False, 3, profiled=False) == "aten::mm"
