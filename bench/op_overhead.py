"""Per-op cost of op records (ops=True), next to the same trace without them.

One root module runs N small ATen ops (an in-place add of two 4-element tensors: one
aten::add_, about the cheapest dispatched op) R times inside one root call, so session
start/stop and the file are amortised.
Setups, interleaved, each repeated: no trace; tt.trace with ops off (the default: no
RecordFunction observer registered, torch's dispatcher skips RecordFunction); tt.trace with
ops=True (each op: RecordFunction with outputs, our callback pushes a call of its op site,
records the output's shape and dtype, pops); op sites: sites=tt.func("add") (op records
turned on by the selector: the same as ops=True), save=tt.func("mul") (the TorchFunctionMode
that saves op outputs is on, and keeps none of these ops: what the mode costs a torch call)
and save=tt.func("add") (each op's output is also copied, in a call of tokentrace::save);
op-level edits that edit none of these ops: by function (the mode on, each call decided by
its type once) and by label (every call numbered as the trace would label it).
Prints a markdown table: median ns per op and the cost over no trace.

--op getitem runs x[1:3] instead (a Python call op records keep as an op of its own,
python::__getitem__, around its aten::slice: _common/op_groups.py), with the setups that
record no more than op records, and ops=True with op_groups not installed (x[1:3] recorded as
its ATen ops only): what the Python call's own op adds.

    python bench/op_overhead.py [--ops 200] [--iters 50] [--repeats 7] [--op add_|getitem]
"""

import argparse
import statistics
import time
import warnings

import torch
from torch import nn

import tokentrace as tt
from tokentrace._common import op_groups

SITES = {"add_": "aten::add_", "getitem": "python::__getitem__"}


class OpLoop(nn.Module):
    def __init__(self, n, iters, op="add_"):
        super().__init__()
        self.n, self.iters, self.op = n, iters, op

    def forward(self, x):
        one = torch.ones_like(x)  # a tensor operand: a Python scalar would add 4 more ops
        t0 = time.perf_counter_ns()
        if self.op == "getitem":
            for _ in range(self.iters):
                for _ in range(self.n):
                    x[1:3]
        else:
            for _ in range(self.iters):
                for _ in range(self.n):
                    x.add_(one)
        self.forward_ns = time.perf_counter_ns() - t0  # the ops only
        return x


def run_plain(model, x):
    with torch.no_grad():
        model(x)
    return model.forward_ns


def run_trace(model, x, path, ops, **selectors):
    with torch.no_grad():
        trace = tt.trace(model, x, kernels="off", out=path, ops=ops, **selectors)
    if ops or set(selectors) - {"edits"}:  # every op recorded, nothing else inside the loop
        site = SITES[model.op] if op_groups.install is _INSTALL else "aten::slice"
        assert trace[site].num_calls == model.n * model.iters, trace.losses
    if selectors.get("save") is not None and "add" in repr(selectors["save"]):
        assert len(trace.find_sites(tt.func("add"))) == model.n * model.iters
    assert not trace.losses, trace.losses
    return model.forward_ns


_INSTALL = op_groups.install


def run_without_python_call_ops(model, x, path):
    """ops=True with x[i] left as its ATen ops (op_groups not installed): what the Python call
    op itself adds."""
    op_groups.install = lambda backend: None
    try:
        return run_trace(model, x, path, True)
    finally:
        op_groups.install = _INSTALL


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=200)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default="/tmp/tt-op-overhead.sqlite")
    parser.add_argument("--op", choices=sorted(SITES), default="add_")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # the label rule's "chose no op" warning, each run
    model = OpLoop(args.ops, args.iters, args.op).eval()
    x = torch.zeros(4)
    n = args.ops * args.iters
    setups = {
        "no trace": lambda: run_plain(model, x),
        "tt.trace, ops off (default)": lambda: run_trace(model, x, args.out, False),
        "tt.trace, ops=True": lambda: run_trace(model, x, args.out, True),
        "tt.trace, sites=tt.func('add')": lambda: run_trace(model, x, args.out, False,
                                                            sites=tt.func("add")),
        "tt.trace, save=tt.func('mul') (mode on, nothing kept)": lambda: run_trace(
            model, x, args.out, False, save=tt.func("mul")),
        "tt.trace, save=tt.func('add') (each op kept)": lambda: run_trace(
            model, x, args.out, False, save=tt.func("add")),
        "tt.trace, edits=tt.when(tt.func('mul'), ...) (mode on, no op edited)": lambda:
            run_trace(model, x, args.out, False, edits=tt.when(tt.func("mul"), tt.zero())),
        "tt.trace, edits=tt.when(tt.label('mul_1_1'), ...) (every op numbered, none edited)":
            lambda: run_trace(model, x, args.out, False,
                              edits=tt.when(tt.label("mul_1_1"), tt.zero())),
    }
    if args.op == "getitem":
        setups = {name: fn for name, fn in list(setups.items())[:3]}
        setups["tt.trace, sites=tt.func('getitem')"] = lambda: run_trace(
            model, x, args.out, False, sites=tt.func("getitem"))
        setups["tt.trace, ops=True, x[i] not an op of its own (its ATen ops only)"] = (
            lambda: run_without_python_call_ops(model, x, args.out))
    for fn in setups.values():  # warm-up
        fn()
    samples = {name: [] for name in setups}
    for _ in range(args.repeats):
        for name, fn in setups.items():
            samples[name].append(fn() / n)
    base = statistics.median(samples["no trace"])
    low = min(samples["no trace"])
    what = "x[1:3] of 4 floats" if args.op == "getitem" else "aten::add_ on 4 floats"
    print(f"{n} ops ({what}) per run, {args.repeats} runs each, interleaved\n")
    print("| setup | ns per op: median (min, max) | added per op: median, min |")
    print("|---|---|---|")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.0f} ({min(values):.0f}, {max(values):.0f}) "
              f"| {med - base:+.0f}, {min(values) - low:+.0f} |")


if __name__ == "__main__":
    main()
