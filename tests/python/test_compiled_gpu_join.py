"""The join of a compiled model's GPU kernels with their modules (python/tokentrace/_compiled/
join.py), on trace files built by hand in the shapes the shim writes on a GPU:
Inductor's Triton kernels have no op of their own, so CUPTI's kernel records (launched in
TorchDynamo's compiled region) are matched by name, in the graph the region ran; library calls
(an aten::mm and its cuBLAS kernel) by their order among them; kernels replayed from a CUDA
graph (mode="reduce-overhead") through the calls their graph nodes were captured in.
"""

import json
import sqlite3

import pytest

import tokentrace as tt
from tokentrace._common import schema
from tokentrace._compiled import NOT_STORED, compiled_rows, join_kernels, kernel_map
from tokentrace._file import write_schema

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
        write_schema(self.con)
        self.sites, self.calls, self.kernels, self.strings = {}, [], [], {}
        self.call_gpu = []  # an op's own kernel (the shim's per-call totals)
        self.corr = 100

    def _site(self, name, kind):
        return self.sites.setdefault(name, (len(self.sites) + 1, kind))[0]

    def _kernel(self, call, token, name, t, graph=0, corr=None):
        sid = self.strings.setdefault(name, len(self.strings) + 1)
        if corr is None:
            self.corr += 1
            corr = self.corr
        self.kernels.append((call, token, sid, t, t + 1000, corr, graph))

    def _region(self, region):
        """A new token: its root call and its compiled region's call; (token, region call)."""
        tok = len([c for c in self.calls if c[1] == self._site("self", "root")]) + 1
        base = tok * 1_000_000
        root = len(self.calls) + 1
        self.calls.append((root, self._site("self", "root"), tok, tok, None, base, base + 90_000))
        self.calls.append((root + 1, self._site(f"Torch-Compiled Region: {region}", "op"), tok,
                           tok, root, base + 1000, base + 80_000))
        return tok, root + 1

    def _op(self, name, tok, marker, t):
        cid = len(self.calls) + 1
        self.calls.append((cid, self._site(name, "op"), 1, tok, marker, t, t + 500))
        return cid

    def token(self, region, launches, graph=0):
        tok, marker = self._region(region)
        for j, name in enumerate(launches):
            t = tok * 1_000_000 + 2000 + 1000 * j
            if "::" in name:  # an op of the wrapper, its library kernel launched in it
                cid = self._op(name, tok, marker, t)
                self._kernel(cid, tok, GEMM, t)
                self.call_gpu.append((cid, 1, 1000, t, t + 1000))
            else:
                self._kernel(marker, tok, name, t, graph)
        self.call_gpu.append((marker, len(launches), 1000 * len(launches), tok * 1_000_000,
                              tok * 1_000_000 + 80_000))
        return tok

    def capture(self, region, launches):
        """A token whose compiled region is captured into a CUDA graph (cudagraph trees'
        recording run): its ops are called, nothing runs, then the graph is replayed once in
        the same call (cudagraph trees replay what they recorded). (token, region call,
        [(capturing call, kernel name)] of the graph's kernel nodes in capture order); an
        op's library call captures a gemm and its split-K reduction."""
        tok, marker = self._region(region)
        nodes = []
        for j, name in enumerate(launches):
            if "::" in name:
                cid = self._op(name, tok, marker, tok * 1_000_000 + 2000 + 1000 * j)
                nodes += [(cid, GEMM), (cid, SPLITK)]
            else:
                nodes.append((marker, name))
        self._replayed(tok, nodes, 7, 40_000)
        return tok, marker, nodes

    def _replayed(self, tok, nodes, graph, at):
        """One launch of a graph (one correlation id): each kernel record on the call its node
        was captured in, as the shim's joiner writes it, and that call's GPU totals growing
        by it."""
        self.corr += 1
        for j, (call, name) in enumerate(nodes):
            t = tok * 1_000_000 + at + 1000 * j
            self._kernel(call, tok, name, t, graph, corr=self.corr)
            self.call_gpu.append((call, 1, 1000, t, t + 1000))

    def replay(self, region, nodes, graph=7, extra=()):
        """A token that replays the graph of `nodes`; (token, its region call). `extra`: ops
        run in the region before the replay (cudagraph trees' copies of new inputs into the
        graph's), with a kernel each."""
        tok, marker = self._region(region)
        for j, name in enumerate(extra):
            t = tok * 1_000_000 + 1500 + 10 * j
            cid = self._op(name, tok, marker, t)
            self._kernel(cid, tok, "vectorized_elementwise_kernel", t)
            self.call_gpu.append((cid, 1, 1000, t, t + 1000))
        self._replayed(tok, nodes, graph, 2000)
        return tok, marker

    def write(self, graphs=GRAPHS, regions=REGIONS):
        c = self.con
        c.executemany("INSERT INTO sites(id, name, kind, is_token) VALUES (?,?,?,?)",
                      [(i, n, k, int(n == "self")) for n, (i, k) in self.sites.items()])
        c.executemany("INSERT INTO calls(id, site_id, k, token, parent_id, thread, "
                      "cpu_begin_ns, cpu_end_ns) VALUES (?,?,?,?,?,0,?,?)", self.calls)
        c.executemany("INSERT INTO strings VALUES (?,?)", [(i, n) for n, i in self.strings.items()])
        c.executemany("INSERT INTO kernels VALUES (?,?,?,0,0,7,?,?,?,?,0)", self.kernels)
        totals = {}  # the shim's per-call totals: summed over drains
        for cid, n, busy, b, e in self.call_gpu:
            t = totals.setdefault(cid, [cid, 0, 0, b, e])
            t[1], t[2], t[3], t[4] = t[1] + n, t[2] + busy, min(t[3], b), max(t[4], e)
        c.executemany("INSERT INTO call_gpu VALUES (?,?,?,?,?,0)", list(totals.values()))
        meta = {"schema_version": str(schema().SCHEMA_VERSION), "kernel_mode": "full",
                "kernels_status": "", kernel_map.META_KEY: json.dumps(graphs)}
        if regions is not None:
            meta[kernel_map.REGIONS_KEY] = json.dumps(regions)
        c.executemany("INSERT INTO meta(key, value) VALUES (?,?)", meta.items())
        c.commit()
        c.close()
        kernel_map._state.update(graphs=dict(graphs), regions=dict(regions or {}))
        try:
            _write_compiled_rows(self.path)  # writes the map again, counts what the join leaves
        finally:
            kernel_map._state.update(graphs={}, regions={})
        return tt.load(self.path)


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
SPLITK = "splitKreduce_kernel"
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


def test_autotuning_launches_beyond_the_graphs_are_counted(tmp_path):
    f = _File(tmp_path)
    # A first run benchmarks a kernel's configs before its real launch: 3 launches, 1 entry.
    f.token("0/1", ["triton_red_fused_mean_pow_0"] * 3 + DECODE[1:])
    trace = f.write()
    assert trace.losses["compiled_unattributed"] == 2
    got = [(k.name, k.modules) for k in trace.compiled_kernels()]
    assert got == [("triton_red_fused_mean_pow_0", ["model.norm"]), ("aten::mm", ["lm_head"]),
                   ("triton_poi_fused_add_mul_1", ["model.layers.0.mlp"])]


DECODE_MODULES = [["model.norm"], ["lm_head"], ["lm_head"], ["model.layers.0.mlp"]]


def test_cuda_graph_replays_are_attributed_through_the_calls_their_nodes_were_captured_in(
        tmp_path):
    # reduce-overhead: prefill runs eagerly (warm-up), the decode graph is captured at token 2
    # and replayed at tokens 3 and 4. Graph 0 has the same kernel names as graph 1: the
    # capturing region's compile id (0/1) says which graph a replay is.
    f = _File(tmp_path)
    f.token("0/0", PREFILL)
    capture_token, capture_call, nodes = f.capture("0/1", DECODE)
    replays = [f.replay("0/1", nodes) for _ in range(2)]
    prefill_again, _, prefill_nodes = f.capture("0/0", PREFILL)
    trace = f.write()
    assert trace.losses.get("compiled_unattributed", 0) == 0
    for token, region_call in [(capture_token, capture_call)] + replays:
        got = [(k.call_id, k.name, k.modules, k.gpu_ns) for k in trace.compiled_kernels(token)
               if k.gpu_ns]
        # Both kernels of the captured mm are the mm's; each is under the replay's region.
        assert got == [(region_call, n, m, 1000) for (_, n), m in zip(nodes, DECODE_MODULES)]
    # The captured run is listed as it ran, before the replay that follows it: its ops with
    # no GPU time (the mm call's GPU totals sum its replays, which have their own rows).
    got = [(k.name, k.modules, k.gpu_ns) for k in trace.compiled_kernels(capture_token)]
    assert got[0] == ("aten::mm", ["lm_head"], 0)
    totals = {t.module: (t.kernels, t.gpu_ms) for t in trace.compiled_modules(replays[0][0])}
    assert totals == {"lm_head": (2, 2e-3), "model.norm": (1, 1e-3),
                      "model.layers.0.mlp": (1, 1e-3)}
    run = {t.module: t.gpu_ms for t in trace.compiled_modules()}
    # prefill's mm, 2 kernels in each decode replay, 2 in the prefill replay below
    assert run["lm_head"] == pytest.approx(1e-3 + 3 * 2e-3 + 2e-3)
    # A second generate's prefill (graph 0 runs again: cudagraph trees record it) replays a
    # graph that ends in an mm: both its kernels are that mm's, though no Triton kernel
    # follows them.
    got = [(n, k.name, k.modules) for k, (_, n) in zip(
        [k for k in trace.compiled_kernels(prefill_again) if k.gpu_ns], prefill_nodes)]
    assert [m for _, _, m in got] == [["model.layers.0.input_layernorm"],
                                      ["model.layers.0.self_attn.q_proj"],
                                      ["model.layers.0.self_attn.q_proj"], LAYER0,
                                      ["model.layers.1.input_layernorm"], ["lm_head"],
                                      ["lm_head"]]
    assert all(n == name for n, name, _ in got)


def test_replayed_kernels_that_match_no_entry_are_counted_and_outside_graphs_are_not_ours(
        tmp_path):
    f = _File(tmp_path)
    _, _, nodes = f.capture("0/1", DECODE)
    # cudagraph trees copy a new input into the graph's before each replay: an eager op in
    # the region that no kernel Inductor generated explains.
    token, region_call = f.replay("0/1", nodes, extra=["aten::copy_"])
    # A node the shim did not see captured: its kernel lands on the replay's region call. A
    # Triton name still finds its entry; a gemm outside any op cannot.
    upcoming = len(f.calls) + 2  # the region call replay() makes next
    stray, _ = f.replay("0/1", [nodes[0], (upcoming, GEMM)])
    # A graph captured outside compiled code (by hand, in a module call): not the join's.
    f._kernel(1, token, "eager_graph_kernel", token * 1_000_000 + 50_000, graph=9, corr=1)
    trace = f.write()
    lost = sorted((tok, name) for _, tok, name in join_kernels(trace._q)[1])
    assert lost == [(token, "aten::copy_"), (stray, GEMM)]
    assert trace.losses["compiled_unattributed"] == 2
    assert [k.name for k in trace.compiled_kernels(token)] == [n for _, n in nodes]
    assert [(k.name, k.modules) for k in trace.compiled_kernels(stray)] == [
        ("triton_red_fused_mean_pow_0", ["model.norm"])]


def test_kernels_without_rows_are_counted(tmp_path):
    # kernels="summary": the region's GPU totals count its kernels, no row names them.
    f = _File(tmp_path)
    f.token("0/1", DECODE)
    f.kernels = []
    trace = f.write()
    lost = join_kernels(trace._q)[1]
    assert sorted(n for _, _, n in lost) == [NOT_STORED] * 2 + ["aten::mm"]
    assert trace.losses["compiled_unattributed"] == 3


def test_triton_kernels_are_noted_under_their_own_names():
    name = kernel_map._runtime_name
    assert name("triton_poi_fused_add_0", True, 3, profiled=False) == "triton_poi_fused_add_0"
    assert name("cpp_fused_add_0", True, 3, profiled=True) == "graph_3_cpp_fused_add_0"
    assert name("extern_kernels.mm", False, 3, profiled=False) == "aten::mm"


def _write_compiled_rows(path):
    """What a recording adds at its end (compiled_rows), written into a hand-made file."""
    from tt_testutil import add_rows_by_hand
    noted, losses = compiled_rows(path)
    if noted:
        add_rows_by_hand(path, meta=noted, losses=losses)
