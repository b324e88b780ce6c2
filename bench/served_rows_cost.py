"""What rules for served requests cost a serving engine per step: the row masks of one step
(_edit/requests.py ServedRules.masks: each rule's rows, counted per request) and their writes
into the patch table (torch.ops.tokentrace.set_row_mask), on the host, for the batches a vLLM
step has: all decode (one row per request), and a mixed step (some prefill chunks, the rest
decode). The worker pays it once per step, before the model runs; a decode step of a 1B model
on an H100 takes about 5 ms (gpu-machine.md), so the target is 2% of that: 100 us a step with
4 rules at 64 requests.

    python bench/served_rows_cost.py [--repeats N]      (prints a markdown table)
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

TARGET_US = 100.0


def _rules(n):
    site = "model.layers.*.mlp"
    kinds = [{"requests": "a"}, {"requests": ["b", "c"], "calls": "prefill"},
             {"calls": {"request_token": [2, 5]}}, {"requests": "d", "calls": {"token": 3}}]
    return [dict({"site": site, "op": "zero"}, **kinds[i % len(kinds)]) for i in range(n)]


def _step(requests, prefills, chunk):
    from tokentrace._engines import StepRow
    tags = [frozenset(), frozenset(["a"]), frozenset(["b"]), frozenset(["c", "d"])]
    rows = []
    for i in range(requests):
        if i < prefills:
            rows.append(StepRow(f"r{i}", chunk, 0, chunk + 8, tags[i % 4]))
        else:
            rows.append(StepRow(f"r{i}", 1, 40 + i % 7, 32, tags[i % 4]))
    return rows


def measure(n_rules, rows, repeats):
    import torch

    import tokentrace as tt
    from tokentrace._backend import torch_library
    from tokentrace._edit import ServedRules
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "spec.json")
        with open(path, "w") as f:
            json.dump(_rules(n_rules), f)
        rules = tt.load_spec(path).rules
    served = ServedRules(rules, True, None)
    table = torch_library.PatchTable(1, max_masks=len(served.slots), max_rows=8192)
    for slot in range(len(served.slots)):
        table.add_entry(0, "zero", calls=("rows", slot))
    table.upload("cpu")
    times = []
    for step in range(repeats):
        begin = time.perf_counter_ns()
        for slot, mask in served.masks(step + 1, rows):
            table.set_row_mask(slot, torch.from_numpy(mask))
        times.append(time.perf_counter_ns() - begin)  # the same requests step after step
    times.sort()
    return times[len(times) // 2] / 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    cases = [("decode, 64 requests", _step(64, 0, 0)),
             ("mixed: 4 prefill chunks of 512 + 60 decode", _step(64, 4, 512)),
             ("decode, 256 requests", _step(256, 0, 0))]
    print("| step | rules | rows | median us per step |")
    print("|---|---|---|---|")
    verdict = None
    for name, rows in cases:
        for n in (1, 4):
            us = measure(n, rows, args.repeats)
            print(f"| {name} | {n} | {sum(r.n for r in rows)} | {us:.1f} |")
            if name.startswith("decode, 64") and n == 4:
                verdict = us
    status = "met" if verdict <= TARGET_US else "**MISSED**"
    print(f"\nTarget: <= {TARGET_US:.0f} us a step with 4 rules at 64 decode requests: "
          f"{verdict:.1f} us, {status}.")


if __name__ == "__main__":
    main()
