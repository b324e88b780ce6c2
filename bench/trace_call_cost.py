"""What one tt.trace call costs on its own, and where it goes.

Traces a model whose only module returns its input (so nothing but tokentrace's own work is
timed), `--calls` times in one process after a first, warm-up call, and prints the median of
the whole call and of its parts: the native session's start (creates the file) and stop (final
drain, checkpoint, close), the Python layer's rows, opening the returned Trace, and the rest
(hooks on and off, the escape counter). A plain call of the same model is printed for scale.

    python bench/trace_call_cost.py [--calls 30] [--kernels off|summary] [--dir DIR]

The parts are file I/O, so they follow the disk: on a shared VM, run it a few times.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict

import torch

import tokentrace as tt
from tokentrace._backend import get_backend
from tokentrace._record import Attachment


class Identity(torch.nn.Module):
    def forward(self, x):
        return x


def _timed(parts, label, fn):
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            parts[label].append((time.perf_counter() - t0) * 1e3)
    return wrapper


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--kernels", default="off")
    parser.add_argument("--dir", default=None, help="where the trace file goes (default: TMPDIR)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    directory = args.dir or tempfile.mkdtemp(prefix="tt-trace-cost-")
    out = os.path.join(directory, "t.sqlite")
    model, x = Identity(), torch.zeros(1)

    parts = defaultdict(list)
    backend = get_backend()
    backend.start = _timed(parts, "session start (file created)", backend.start)
    backend.stop = _timed(parts, "session stop (drain, checkpoint, close)", backend.stop)
    api = sys.modules[tt.trace.__module__]  # where tt.trace looks up get_backend and Trace
    api.get_backend = lambda: backend
    Attachment.write_rows = _timed(parts, "Python layer's rows", Attachment.write_rows)
    api.Trace = _timed(parts, "open the returned Trace", api.Trace)

    first = time.perf_counter()
    tt.trace(model, x, out=out, kernels=args.kernels)
    first = (time.perf_counter() - first) * 1e3
    parts.clear()
    totals = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        tt.trace(model, x, out=out, kernels=args.kernels)
        totals.append((time.perf_counter() - t0) * 1e3)
    plain = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        model(x)
        plain.append((time.perf_counter() - t0) * 1e3)

    total = statistics.median(totals)
    print(f"tt.trace of a one-module model, kernels={args.kernels}, {args.calls} calls "
          f"(file in {directory})")
    print(f"| part | median ms |\n|---|---|\n| whole call | {total:.2f} |")
    named = 0.0
    for label, values in parts.items():
        median = statistics.median(values)
        named += median
        print(f"| {label} | {median:.2f} |")
    print(f"| the rest (hooks, escape counter) | {max(total - named, 0):.2f} |")
    print(f"| first call in the process | {first:.2f} |")
    print(f"| the model called without tokentrace | {statistics.median(plain):.3f} |")


if __name__ == "__main__":
    main()
