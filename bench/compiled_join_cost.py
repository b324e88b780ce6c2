"""What the compiled-kernel join costs when a trace is read: join_kernels (python/tokentrace/
_compiled/join.py) over a trace file of a synthetic compiled decode, per token, for decode
tokens that ran their kernels where they launched them (mode="default") and for decode tokens
that replay a CUDA graph (mode="reduce-overhead", cudagraph trees: captured once, then
replayed).

The graph: L layers, each a norm (Triton), 4 library mm calls (each a gemm kernel, captured
in replays with its split-K reduction) and 3 more Triton kernels, then the final norm and
lm_head. The file has the shapes the shim writes (see tests/python/test_compiled_gpu_join.py).
This runs when a trace is read (Trace.compiled_kernels, at the end of an ops=True trace), not
in the traced job. Prints a markdown table: median ms per decode token over R repeats.

    python bench/compiled_join_cost.py [--layers 32] [--tokens 64] [--repeats 5]
"""

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time

from tokentrace._common import schema
from tokentrace._compiled import REGION, join_kernels, kernel_map
from tokentrace._file import write_schema


def _graph(layers):
    entries = []
    for i in range(layers):
        entries.append([f"triton_red_fused_norm_{i % 2}", [f"model.layers.{i}.input_layernorm"]])
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            entries.append(["aten::mm", [f"model.layers.{i}.self_attn.{proj}"]])
        entries.append([f"triton_poi_fused_rope_{i % 3}", [f"model.layers.{i}.self_attn"]])
        entries.append([f"triton_per_fused_softmax_{i % 5}", [f"model.layers.{i}.self_attn"]])
        entries.append([f"triton_poi_fused_silu_{i % 7}", [f"model.layers.{i}.mlp"]])
    entries.append(["triton_red_fused_norm_99", ["model.norm"]])
    entries.append(["aten::mm", ["lm_head"]])
    return entries


def _write(path, layers, tokens, replay):
    """A trace of `tokens` decode tokens of the graph; returns the kernel records written."""
    entries = _graph(layers)
    con = sqlite3.connect(path)
    write_schema(con)
    sites = {"self": (1, "root"), f"{REGION}: 0/1": (2, "op"), "aten::mm": (3, "op")}
    calls, kernels, names = [], [], {}
    nodes = None  # the capture's nodes: (capturing call, kernel name)

    def kernel(call, token, name, t, corr, graph):
        sid = names.setdefault(name, len(names) + 1)
        kernels.append((call, token, sid, t, t + 1000, corr, graph))

    corr = 0
    for token in range(1, tokens + 1):
        base = token * 10_000_000
        root, marker = len(calls) + 1, len(calls) + 2
        calls.append((root, 1, token, token, None, base, base + 9_000_000))
        calls.append((marker, 2, token, token, root, base + 1000, base + 8_000_000))
        captured = []
        replaying = replay and nodes is not None  # nothing of the wrapper runs: one launch
        for j, (name, _) in enumerate([] if replaying else entries):
            t = base + 2000 + 1000 * j
            corr += 1
            call = marker
            if name == "aten::mm":
                call = len(calls) + 1
                calls.append((call, 3, j + 1, token, marker, t, t + 500))
            if replay and token > 1:
                if nodes is None and name == "aten::mm":
                    captured += [(call, "gemm"), (call, "splitKreduce")]
                elif nodes is None:
                    captured.append((call, name))
            else:
                kernel(call, token, "gemm" if name == "aten::mm" else name, t, corr, 0)
        if replay and token > 1:
            nodes = nodes or captured  # the first decode token captures, every one replays
            corr += 1
            for j, (call, name) in enumerate(nodes):
                kernel(call, token, name, base + 2000 + 1000 * j, corr, 5)
    con.executemany("INSERT INTO sites(id, name, kind, is_token) VALUES (?,?,?,?)",
                    [(i, n, k, int(n == "self")) for n, (i, k) in sites.items()])
    con.executemany("INSERT INTO calls(id, site_id, k, token, parent_id, thread, cpu_begin_ns,"
                    " cpu_end_ns) VALUES (?,?,?,?,?,0,?,?)", calls)
    con.executemany("INSERT INTO strings VALUES (?,?)", [(i, n) for n, i in names.items()])
    con.executemany("INSERT INTO kernels VALUES (?,?,?,0,0,7,?,?,?,?,0)", kernels)
    meta = {"schema_version": str(schema().SCHEMA_VERSION), "kernel_mode": "full",
            kernel_map.META_KEY: json.dumps({"0": entries}),
            kernel_map.REGIONS_KEY: json.dumps({"0": "0/1"})}
    con.executemany("INSERT INTO meta(key, value) VALUES (?,?)", meta.items())
    con.commit()
    con.close()
    return len(kernels)


def _measure(path, repeats):
    con = sqlite3.connect(path)
    q = lambda sql, args=(): con.execute(sql, args).fetchall()  # noqa: E731
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = join_kernels(q)
        times.append(time.perf_counter() - t0)
    con.close()
    return statistics.median(times), result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    if a.layers < 1 or a.tokens < 2 or a.repeats < 1:
        ap.error("--layers and --repeats must be at least 1, --tokens at least 2")
    print("| decode tokens | layers | kernel records | join ms per token | attributed | "
          "counted |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for replay in (False, True):
            path = os.path.join(d, f"t{int(replay)}.sqlite")
            records = _write(path, a.layers, a.tokens, replay)
            seconds, (kernels, lost) = _measure(path, a.repeats)
            kind = "replayed from a CUDA graph" if replay else "run where launched"
            print(f"| {kind} | {a.layers} | {records} | {1e3 * seconds / a.tokens:.3f} | "
                  f"{len(kernels)} | {len(lost)} |")


if __name__ == "__main__":
    main()
