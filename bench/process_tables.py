"""Markdown tables for gpu_bench.sh's per-process benchmarks, from the lines they print
(`<program> setup=<name> ... median_ns=<x> min_ns=<y>`, one per process) and the trace files
the tokentrace runs left:

  python bench/process_tables.py launch DIR   # DIR/launch.txt, DIR/launch-*.sqlite
  python bench/process_tables.py nvtx DIR     # DIR/nvtx.txt, DIR/nvtx-*.sqlite
"""

import glob
import os
import re
import sqlite3
import statistics
import sys


def read_runs(path):
    """{setup: [(median_ns, min_ns) per process]}"""
    runs = {}
    for line in open(path):
        m = re.search(r"setup=(\S+) .*median_ns=([\d.]+) min_ns=([\d.]+)", line)
        if m:
            runs.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3))))
    return runs


def scalar(path, sql):
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return None
    finally:
        con.close()


def medians_table(runs, setups, log, fmt, target=None):
    """Rows of setup / median of process medians / min / processes [/ target]; returns the
    medians. target: (setup, limit, text) checked as median <= limit."""
    head = ("| setup | median of process medians | min | processes |"
            + (" target | |" if target else ""))
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    med = {}
    for s in setups:
        v = runs.get(s, [])
        if not v:
            print(f"| {s} | failed (see {log}) | | 0 |" + (" | |" if target else ""))
            continue
        med[s] = statistics.median(x[0] for x in v)
        row = f"| {s} | {fmt.format(med[s])} | {fmt.format(min(x[1] for x in v))} | {len(v)} |"
        if target:
            name, limit, text = target
            verdict = "met" if med[s] <= limit else "MISSED"
            row += f" {text} | {verdict} |" if s == name else " | |"
        print(row)
    print()
    return med


def launch(d):
    runs = read_runs(os.path.join(d, "launch.txt"))
    print("## Empty-kernel launch cost (ns per launch)\n")
    print("Each process: 5 rounds of 20000 launches inside one NVTX range, median round; three "
          "processes per setup, interleaved.\n")
    med = medians_table(runs, ("none", "bare-cupti", "tokentrace-full"), "launch.log", "{:.0f}")
    if all(k in med for k in ("none", "bare-cupti", "tokentrace-full")):
        n, b, t = med["none"], med["bare-cupti"], med["tokentrace-full"]
        ratio = t / b
        added = (t - b) / (b - n) if b > n else float("nan")
        print(f"- tokentrace full / bare subscriber: **{ratio:.3f}** (target ≤ 1.10: "
              f"{'met' if ratio <= 1.10 else 'MISSED'}); tokentrace's own addition is "
              f"{t - b:.0f} ns per launch = {added:.0%} of what the bare subscriber adds over "
              f"no tool ({b - n:.0f} ns).")
    for path in sorted(glob.glob(os.path.join(d, "launch-*.sqlite"))):
        k = scalar(path, "SELECT count(*) FROM kernels") or 0
        kb = scalar(path, "SELECT sum(pgsize) FROM dbstat WHERE name='kernels'")
        losses = scalar(path, "SELECT coalesce(sum(count),0) FROM losses")
        if k == 0:
            print(f"- {os.path.basename(path)}: no kernel rows (see launch.log), losses {losses}")
            continue
        size = os.path.getsize(path)
        print(f"- {os.path.basename(path)}: {k} kernel rows, file {size / k:.1f} B per kernel"
              + (f", kernels table {kb / k:.1f} B per row" if kb else "")
              + f" (target ≤ 64 B), losses {losses}")
    print()


def nvtx(d):
    runs = read_runs(os.path.join(d, "nvtx.txt"))
    print("## NVTX push+pop on this host (ns per pair)\n")
    print("Our hooks' pair (domain `tokentrace`, registered string), 200 rounds of 4096 pairs per "
          "process, rings drained between rounds; three processes per setup, interleaved.\n")
    medians_table(runs, ("none", "tokentrace"), "nvtx.log", "{:.1f}",
                  target=("tokentrace", 25.0, "≤ 25 ns"))
    losses = sum(scalar(p, "SELECT coalesce(sum(count),0) FROM losses") or 0
                 for p in glob.glob(os.path.join(d, "nvtx-*.sqlite")))
    print(f"- losses in the tokentrace runs: {losses}\n")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("launch", "nvtx"):
        sys.exit(__doc__)
    {"launch": launch, "nvtx": nvtx}[sys.argv[1]](sys.argv[2])
