"""Per-module-call cost of tokentrace's hooks, next to a plain no-op Python hook.

A model of N small modules runs R times inside one root call (so session start/stop and the
file are amortised). Three setups, interleaved, each repeated: no hooks; a plain no-op forward
pre+post hook on every module (what a Python tool pays at minimum); tokentrace (tt.trace,
kernels off: each module's forward wrapped natively, NVTX push/pop and the output's shape
recorded per call, torch's hook-free call path kept). Prints a markdown table: median ns per
module call and the cost over no hooks.

    python bench/hook_overhead.py [--modules 200] [--iters 50] [--repeats 7]
"""

import argparse
import statistics
import time

import torch
from torch import nn

import tokentrace as tt


class Chain(nn.Module):
    def __init__(self, n, iters):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(n))
        self.iters = iters

    def forward(self, x):
        t0 = time.perf_counter_ns()
        for _ in range(self.iters):
            for b in self.blocks:
                x = b(x)
        self.forward_ns = time.perf_counter_ns() - t0  # the hooked calls only
        return x


def run_plain(model, x):
    t0 = time.perf_counter_ns()
    with torch.no_grad():
        model(x)
    return time.perf_counter_ns() - t0, model.forward_ns


def run_noop_hooks(model, x):
    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(lambda mod, args: None))
        handles.append(m.register_forward_hook(lambda mod, args, out: None))
    try:
        return run_plain(model, x)
    finally:
        for h in handles:
            h.remove()


def run_tokentrace(model, x, path):
    t0 = time.perf_counter_ns()
    with torch.no_grad():
        tt.trace(model, x, kernels="off", out=path)
    return time.perf_counter_ns() - t0, model.forward_ns


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--modules", type=int, default=200)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="/tmp/tt-hook-overhead.sqlite")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = Chain(args.modules, args.iters).eval()
    x = torch.zeros(4)
    calls = args.modules * args.iters + 1  # + the root call
    setups = {
        "no hooks": lambda: run_plain(model, x),
        "plain no-op Python hooks": lambda: run_noop_hooks(model, x),
        "tokentrace hooks (kernels off)": lambda: run_tokentrace(model, x, args.out),
    }
    for fn in setups.values():  # warm-up
        fn()
    total = {name: [] for name in setups}
    inside = {name: [] for name in setups}
    for _ in range(args.repeats):
        for name, fn in setups.items():
            t_all, t_fwd = fn()
            total[name].append(t_all / calls)
            inside[name].append(t_fwd / (calls - 1))
    base = statistics.median(inside["no hooks"])
    print(f"## Hook cost per module call ({args.modules} modules x {args.iters} iterations, "
          f"median of {args.repeats}, wall clock)\n")
    print("| setup | ns/call while running (median) | min | over no hooks | "
          "ns/call incl. session start/stop and opening the Trace |")
    print("|---|---|---|---|---|")
    for name in setups:
        med = statistics.median(inside[name])
        print(f"| {name} | {med:.0f} | {min(inside[name]):.0f} | {med - base:+.0f} | "
              f"{statistics.median(total[name]):.0f} |")


if __name__ == "__main__":
    main()
