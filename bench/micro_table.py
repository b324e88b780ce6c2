"""Turns Google Benchmark JSON files (run_cpu.sh, gpu_bench.sh) into one markdown table with
each enabled path next to its disabled one and the hot path's overhead targets marked met /
MISSED.

  python bench/micro_table.py NAME=FILE.json [NAME=FILE.json ...]

NAME is the program (bench_nvtx, bench_nvtx_notool, bench_hotpath, store_bench, patch_bench).
Per-operation costs come from each benchmark's own counter (ns_per_pair / ns_per_op: CPU time
per operation); rates from items_per_second or the named counter.
"""

import json
import sys


def load(arg):
    name, path = arg.split("=", 1)
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        return name, {}, f"{name}: no results ({exc})"
    rows = {b["name"]: b for b in data.get("benchmarks", []) if b.get("run_type") != "aggregate"}
    return name, rows, None


def ns(b, key):
    v = b.get(key)
    return None if v is None else v * 1e9  # inverted rate counters are seconds per op


def fmt(v, spec="{:.1f}"):
    return "—" if v is None else spec.format(v)


def verdict(value, limit, higher_is_better=False):
    if value is None:
        return "not measured"
    ok = value >= limit if higher_is_better else value <= limit
    return "met" if ok else "MISSED"


def main(argv):
    progs, problems = {}, []
    for arg in argv:
        name, rows, err = load(arg)
        progs[name] = rows
        if err:
            problems.append(err)
    nv, no, hp = progs.get("bench_nvtx", {}), progs.get("bench_nvtx_notool", {}), \
        progs.get("bench_hotpath", {})
    st, pb = progs.get("store_bench", {}), progs.get("patch_bench", {})
    out = ["| benchmark | no tool | tokentrace loaded, not recording | recording | target | |",
           "|---|---|---|---|---|---|"]

    def get(rows, name, key):
        b = rows.get(name)
        return ns(b, key) if b else None

    for label, bench in (("NVTX push+pop, registered string, `tokentrace` domain (ns/pair)",
                          "BM_NvtxRegisteredPushPop"),
                         ("NVTX push+pop, plain string `nvtxRangePushA` (ns/pair)",
                          "BM_NvtxAsciiPushPop")):
        on = get(nv, bench + "/enabled:1", "ns_per_pair")
        target = bench == "BM_NvtxRegisteredPushPop"
        out.append(f"| {label} | {fmt(get(no, bench + '/enabled:0', 'ns_per_pair'))} | "
                   f"{fmt(get(nv, bench + '/enabled:0', 'ns_per_pair'))} | {fmt(on)} | "
                   f"{'≤ 25 ns' if target else '—'} | {verdict(on, 25) if target else ''} |")
        b = nv.get(bench + "/enabled:1")
        if b is not None and b.get("losses"):
            problems.append(f"{bench}: {b['losses']:.0f} events lost while recording")
    naive = get(nv, "BM_NaiveHandlerPushPop", "ns_per_pair")
    out.append(f"| naive handler (mutex + string map), for scale (ns/pair) | — | — | {fmt(naive)} "
               f"| — | |")
    for label, bench, unit, target in (
            ("recorder::Launch, the launch-callback body (ns)", "BM_RecorderLaunch", "op", 50),
            ("recorder::Push + Pop, past NVTX (ns/pair)", "BM_RecorderPushPop", "op", None)):
        on = get(hp, bench + "/active:1", "ns_per_op")
        out.append(f"| {label} | — | {fmt(get(hp, bench + '/active:0', 'ns_per_op'))} | "
                   f"{fmt(on)} | {'≤ %d ns' % target if target else '—'} | "
                   f"{verdict(on, target) if target else ''} |")
    for label, bench in (("ThreadBuffer::Append, 48-byte event (ns)", "BM_RingAppend"),
                         ("  part: one raw clock read, rdtsc (ns)", "BM_PartRawTicks"),
                         ("  part: one relaxed atomic fetch_add (ns)", "BM_PartAtomicFetchAdd")):
        out.append(f"| {label} | — | — | {fmt(get(hp, bench, 'ns_per_op'))} | — | |")
    for mode, arg in (("summary", 1), ("full", 2)):
        b = hp.get(f"BM_JoinerToken/mode:{arg}")
        if b:
            rates = f"{b['events_per_s'] / 1e6:.2f} M, {b['kernels_per_s'] / 1e6:.2f} M"
            out.append(f"| Joiner, {mode} mode: events/s, kernel records/s (background thread) | — "
                       f"| — | {rates} | — | |")
    w = st.get("BM_WriteKernelRows/100000/real_time") or st.get("BM_WriteKernelRows/100000")
    if w:
        rate = w.get("items_per_second")
        out.append(f"| store writer, kernel rows/s (wall, 100k-row batches) | — | — | "
                   f"{fmt(rate / 1e6 if rate else None, '{:.2f} M')} | ≥ 1 M rows/s | "
                   f"{verdict(rate, 1e6, True)} |")
        bpr = w.get("bytes_per_row")
        out.append(f"| store, bytes per kernel row on disk | — | — | {fmt(bpr)} | ≤ 64 B | "
                   f"{verdict(bpr, 64)} |")
    c = st.get("BM_WriteCallRows/10000")
    if c:
        rate = c.get("items_per_second")
        out.append(f"| store writer, module calls/s with their output rows (CPU, 10k-call "
                   f"batches) | — | — | {fmt(rate / 1e3 if rate else None, '{:.0f} k')} | — | |")
    for name in sorted(pb):
        if not name.startswith("host/"):
            continue
        b = pb[name]
        t = b.get("cpu_time")
        unit = b.get("time_unit", "ns")
        out.append(f"| patch table `{name}` (host apply, {unit} CPU/iteration) | — | — | {fmt(t)} "
                   f"| — | |")
    if problems:
        out += [""] + [f"- {p}" for p in problems]
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
