"""What reading a long run costs: `tokentrace plot`, `tt.load(...).tokens` and
`tokentrace report` on one trace of many tokens (plots and Python views of long runs should
cost about what the report costs).

    python bench/plot_cost.py [--tokens 50000] [--trace FILE] [--cli build/tokentrace]
                              [--out table.md]

Without --trace it writes a trace shaped like `nvtx_generate hooks N` under the shim (per
token: self > transformer.h.{0,1} > .mlp > aten::addmm, 7 calls) with the package's own
schema. Each reader runs in a fresh process; the table gives its wall time, its CPU time
(user + system: on a shared machine the honest figure) and its peak RSS.
"""

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYDIR = os.path.join(ROOT, "python")


def write_trace(path, tokens):
    sys.path.insert(0, PYDIR)
    import sqlite3

    from tokentrace._common import schema
    from tokentrace._file import write_schema
    con = sqlite3.connect(path)
    write_schema(con)
    con.executemany("INSERT OR REPLACE INTO meta VALUES (?,?)",
                    [("schema_version", schema().SCHEMA_VERSION), ("kernel_mode", "off"),
                     ("kernels_status", "kernel mode off"), ("pid", "1")])
    names = ["self", "transformer.h.0", "transformer.h.0.mlp", "aten::addmm",
             "transformer.h.1", "transformer.h.1.mlp"]
    con.executemany("INSERT INTO sites VALUES (?,?,?,?)",
                    [(i + 1, n, "root" if i == 0 else "module", int(i == 0))
                     for i, n in enumerate(names)])
    k = [0] * (len(names) + 1)

    def rows():
        cid = 0
        t = 1_000_000
        for tok in range(1, tokens + 1):
            root = cid = cid + 1
            k[1] += 1
            begin = t
            out = []
            for layer, mlp in ((2, 3), (5, 6)):
                lid = cid = cid + 1
                mid = cid = cid + 1
                aid = cid = cid + 1
                for s in (layer, mlp, 4):
                    k[s] += 1
                out += [(lid, layer, k[layer], tok, root, 1, t + 100, t + 9_000),
                        (mid, mlp, k[mlp], tok, lid, 1, t + 1_000, t + 8_000),
                        (aid, 4, k[4], tok, mid, 1, t + 2_000, t + 5_000)]
                t += 10_000
            t += 500
            yield (root, 1, k[1], tok, None, 1, begin, t)
            yield from out
            t += 1_000
    con.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?)", rows())
    con.commit()
    con.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=50000)
    ap.add_argument("--trace", help="an existing trace instead of a written one")
    ap.add_argument("--cli", help="the tokentrace binary, to time `report` too")
    ap.add_argument("--out", help="also write the table here")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="plot_cost.")
    path = args.trace or os.path.join(tmp, "long.sqlite")
    if not args.trace:
        write_trace(path, args.tokens)
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    py = sys.executable
    # One reader per process and one process per measurement, each started from a fresh
    # interpreter: the peak RSS comes from a wrapper that reports its own child's.
    wrap = ("import resource,subprocess,sys,time;t=time.perf_counter();"
            "r=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
            "w=time.perf_counter()-t;u=resource.getrusage(resource.RUSAGE_CHILDREN);"
            "sys.exit(r.stderr) if r.returncode else "
            "print(w, u.ru_utime + u.ru_stime, u.ru_maxrss / 1024)")
    readers = [("tokentrace plot", [py, "-m", "tokentrace.plot", path, "-o",
                                    os.path.join(tmp, "long.png")]),
               ("tt.load(path).tokens", [py, "-c", "import sys, tokentrace as tt; "
                                         "print(len(tt.load(sys.argv[1]).tokens))", path]),
               ("python startup + import tokentrace", [py, "-c", "import tokentrace"])]
    if args.cli:
        readers.append(("tokentrace report", [args.cli, "report", path]))
    lines = [f"trace: {args.trace or 'written by plot_cost.py'}, "
             f"{os.path.getsize(path) / 2**20:.1f} MiB"
             + ("" if args.trace else f", {args.tokens} tokens"),
             "", "| reader | wall (s) | CPU (s) | peak RSS (MiB) |", "|---|---|---|---|"]
    for label, argv in readers:
        res = subprocess.run([py, "-c", wrap, *argv], env=env, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"plot_cost: {label} failed: {res.stderr.strip()}")
        wall, cpu, rss = map(float, res.stdout.split())
        lines.append(f"| {label} | {wall:.2f} | {cpu:.2f} | {rss:.0f} |")
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
