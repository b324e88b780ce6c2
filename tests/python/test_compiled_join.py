"""The join of compiled kernels with their modules (python/tokentrace/_compiled/join.py), on a
trace file built by hand: generated kernels by name, library calls by their order in the
wrapper, fused kernels marked, and what matches nothing counted."""

import json
import sqlite3

import tokentrace as tt
from tokentrace._common import schema
from tokentrace._compiled import compiled_rows, kernel_map
from tokentrace._file import write_schema

# Two graphs, as Inductor emitted them: graph 0 ends at a graph break, graph 1 starts with a
# library call (an mm before any generated kernel).
GRAPHS = {
    "0": [["aten::addmm", ["a.lin"]],
          ["graph_0_cpp_fused_relu_0", ["a", "a.ln"]],
          ["aten::addmm", ["b.lin"]]],
    "1": [["aten::mm", ["head"]],
          ["graph_1_cpp_fused_mul_0", [""]]],
}


def _file(tmp_path, ops, graphs=GRAPHS):
    """A trace of one token: the root `self` (a compiled module) ran aten::detach (as its
    compile does), then TorchDynamo's compiled region with `ops` in it, each taking 10 ns; an
    eager module `eager` ran aten::add."""
    path = str(tmp_path / "t.sqlite")
    con = sqlite3.connect(path)
    write_schema(con)
    region = "Torch-Compiled Region: 0/0"
    names = ["self", "eager"] + sorted(set(ops) | {"aten::add", "aten::detach", region})
    for i, name in enumerate(names, 1):
        kind = "root" if name == "self" else "module" if name == "eager" else "op"
        con.execute("INSERT INTO sites(id, name, kind, is_token) VALUES (?,?,?,?)",
                    (i, name, kind, int(name == "self")))
    sid = {n: i for i, n in enumerate(names, 1)}
    rows = [(1, sid["self"], 1, None, 0, 1000), (2, sid["aten::detach"], 1, 1, 10, 20),
            (3, sid[region], 1, 1, 50, 800)]
    for j, op in enumerate(ops):
        rows.append((4 + j, sid[op], j + 1, 3, 100 + 10 * j, 110 + 10 * j))
    rows.append((100, sid["eager"], 1, 1, 900, 950))
    rows.append((101, sid["aten::add"], 1, 100, 910, 920))
    con.executemany("INSERT INTO calls(id, site_id, k, token, parent_id, thread, cpu_begin_ns, "
                    "cpu_end_ns) VALUES (?,?,?,1,?,0,?,?)", rows)
    con.executemany("INSERT INTO meta(key, value) VALUES (?,?)",
                    [(kernel_map.META_KEY, json.dumps(graphs)),
                     ("schema_version", str(schema().SCHEMA_VERSION))])
    con.commit()
    con.close()
    return path


def test_generated_kernels_by_name_library_calls_by_order_fused_marked(tmp_path):
    ops = ["aten::addmm", "graph_0_cpp_fused_relu_0", "aten::addmm", "aten::mm",
           "graph_1_cpp_fused_mul_0"]
    trace = tt.load(_file(tmp_path, ops))
    got = [(k.name, k.modules, k.fused) for k in trace.compiled_kernels(token=1)]
    assert got == [("aten::addmm", ["a.lin"], False),
                   ("graph_0_cpp_fused_relu_0", ["a", "a.ln"], True),
                   ("aten::addmm", ["b.lin"], False),
                   ("aten::mm", ["head"], False),  # graph 1's, found back from its kernel
                   ("graph_1_cpp_fused_mul_0", ["self"], False)]
    totals = {t.module: (t.kernels, t.fused, t.cpu_ms) for t in trace.compiled_modules(1)}
    assert totals["a"] == (1, 1, 1e-5) and totals["a.ln"] == (1, 1, 1e-5)
    assert totals["self"] == (1, 0, 1e-5) and "eager" not in totals


def test_ops_that_match_no_kernel_are_counted(tmp_path):
    # In the region: an op no graph has (a copy_ between them) and an mm where graph 1 has
    # none after its kernel. Outside it (the compile's aten::detach): not compiled code.
    ops = ["aten::addmm", "graph_0_cpp_fused_relu_0", "aten::addmm", "aten::copy_",
           "graph_1_cpp_fused_mul_0", "aten::mm"]
    path = _file(tmp_path, ops)
    kernel_map._state["graphs"] = dict(GRAPHS)
    try:
        _write_compiled_rows(path)
    finally:
        kernel_map._state["graphs"] = {}
    trace = tt.load(path)
    assert trace.losses == {"compiled_unattributed": 2}
    assert [k.name for k in trace.compiled_kernels()] == ops[:3] + [ops[4]]


def test_a_call_of_library_calls_only_is_matched_as_a_whole_graph(tmp_path):
    graphs = {"0": [["aten::mm", ["head"]], ["aten::addmm", ["out"]]]}
    trace = tt.load(_file(tmp_path, ["aten::mm", "aten::addmm"], graphs))
    assert [k.modules for k in trace.compiled_kernels()] == [["head"], ["out"]]


def test_module_paths_from_dynamo_names():
    assert kernel_map.module_path("L['self'].model.layers[0].mlp") == "model.layers.0.mlp"
    assert kernel_map.module_path("L['self']._modules['model']._modules['norm']") == "model.norm"
    assert kernel_map.module_path("L['self']") == ""
    # transformers 5.24 wraps forward in a *args function: the module is L['args'][0]
    assert kernel_map.module_path("L['args'][0].model.layers[0].mlp") == "model.layers.0.mlp"
    assert kernel_map.module_path("L['args'][0]._modules['lm_head']") == "lm_head"
    assert kernel_map.module_path("L['args'][0]") == ""
    assert kernel_map.module_path("L['kwargs']['model'].layers[1]") == "layers.1"
    assert kernel_map.module_path("G['model'].model.norm") == "model.norm"
    assert kernel_map.module_path("self.model.layers[2]") == "model.layers.2"


def _write_compiled_rows(path):
    """What a recording adds at its end (compiled_rows), written into a hand-made file."""
    from tt_testutil import add_rows_by_hand
    noted, losses = compiled_rows(path)
    if noted:
        add_rows_by_hand(path, meta=noted, losses=losses)
