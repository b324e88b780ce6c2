"""What tracing costs a vLLM engine step: the offline job of tests/vllm (vLLM's CPU build, the
tiny random Llama) run plain and under `tokentrace run`, one after the other in one run of
this script, in eager and in compiled mode; each step's time in the worker's execute_model
(input preparation and the forward) is read from the job's own wrapper (STEP_COUNT_FILE), so
both runs are timed the same way, and so is each engine-core step that ran the model
(scheduling, the wait for the worker, the update, queueing the outputs; in the engine core's
process, whose recording adds vllm.core_step, vllm.schedule, vllm.update and the request rows).
Prints a markdown table.

    ~/.cache/tokentrace/venv-vllm/bin/python bench/vllm_step_cost.py [--prompts 16]
        [--new-tokens 64] [--model DIR] [--repeat N]

--repeat N runs each mode's plain and traced jobs N times, in turn (plain, traced, plain, ...),
one row per run, so a load that comes and goes on the machine shows as rows that disagree.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VLLM_TESTS = os.path.join(os.path.dirname(HERE), "tests", "vllm")
sys.path.insert(0, VLLM_TESTS)
import tiny_model  # noqa: E402


def _run(job, traced, steps_file, env, out_dir):
    cmd = list(job)
    if traced:
        exe = os.path.join(os.path.dirname(sys.executable), "tokentrace")
        cmd = [exe, "run", "--out", os.path.join(out_dir, "trace-%p.sqlite"), "--"] + cmd
    begin = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(
        env, STEP_COUNT_FILE=steps_file))
    wall = time.perf_counter() - begin
    if proc.returncode != 0:
        sys.exit(f"the {'traced' if traced else 'plain'} job failed:\n{proc.stderr[-3000:]}")
    decode_ms, all_ms, core_ms = [], [], []
    with open(steps_file) as f:
        for line in f:
            if line.startswith("core "):
                core_ms.append(int(line.split()[1]) / 1e6)
                continue
            _, ns, tokens = line.split()
            all_ms.append(int(ns) / 1e6)
            if int(tokens) <= 4:  # decode steps of a batch of 4 (no prompt in them)
                decode_ms.append(int(ns) / 1e6)
    return wall, decode_ms, all_ms, core_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--model", default=None, help="the tiny model's directory (made if absent)")
    ap.add_argument("--repeat", type=int, default=1, help="plain/traced pairs per mode")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="vllm-step-cost-")
    model = tiny_model.make(args.model or os.path.join(work, "tiny-llama"))
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_USE_V2_MODEL_RUNNER="0",
               JOB_PROMPT_COPIES=str(max(1, args.prompts // 4)),
               JOB_NEW_TOKENS=str(args.new_tokens))
    print(f"{args.prompts} prompts x {args.new_tokens} greedy tokens, max 4 sequences a step; "
          f"execute_model per step in the worker (ms)\n")
    print("| mode | run | steps | decode p50 | decode p90 | all steps mean | engine-core step "
          "p50 | job wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in ("eager", "compiled"):
        job = [sys.executable, os.path.join(VLLM_TESTS, "job.py"), model, mode]
        for run, traced in enumerate((False, True) * max(1, args.repeat)):
            steps_file = os.path.join(work, f"steps-{mode}-{run}.txt")
            wall, decode, every, core = _run(job, traced, steps_file, env, work)
            q = statistics.quantiles(decode, n=10) if len(decode) >= 2 else [0] * 9
            core_p50 = f"{statistics.median(core):.3f}" if core else "-"
            print(f"| {mode} | {'traced' if traced else 'plain'} | {len(every)} | "
                  f"{statistics.median(decode):.3f} | {q[8]:.3f} | "
                  f"{statistics.fmean(every):.3f} | {core_p50} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
