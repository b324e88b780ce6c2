"""End-to-end recording overhead of HF `generate`: tokentrace's kernel modes next to
plain runs, a patch, torch.profiler and a bare CUPTI subscriber.

Every setup runs in its own worker process (gen_worker.py): CUPTI allows one subscriber per
process (tokentrace, Kineto and the bare subscriber would collide), the bare subscriber must
be injected at process start, and each process's peak RSS is then its own. The controller
warms each worker up with one full-length run, then asks for the repeats interleaved (one
run of each setup per round, the order rotated each round), so drift hits every setup alike.

  python bench/generate_overhead.py --small --out results.md         # CPU, about a minute
  python bench/generate_overhead.py --models gpt2,llama1b --new-tokens 64,256 --out gpu.md
  python bench/generate_overhead.py --long --long-tokens 4096 --out long.md

Needs PYTHONPATH=python and TOKENTRACE_NATIVE_DIR=<build dir with _native*.so> (or an
installed tokentrace). The table: median and min ms/token, median / plain, trace bytes per
token, peak RSS of the worker, losses; --long: RSS and file size over time.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ALL_SETUPS = ["plain", "tt-off", "tt-ops", "tt-layers", "tt-record", "tt-summary",
              "tt-full", "tt-sample16", "patch", "torch-profiler", "bare-cupti"]
WHAT = {
    "plain": "no tool",
    "tt-off": "tokentrace, hooks on every module, kernels off, ops=False",
    "tt-ops": "tokentrace, hooks on every module, op records (tt.trace's default), kernels off",
    "tt-layers": "tokentrace, hooks on the decoder layers only, kernels off",
    "tt-record": "tt.record saving one site per layer (each layer's mlp output), kernels off",
    "tt-summary": "tokentrace summary (per-call kernel count + GPU busy)",
    "tt-full": "tokentrace full (one row per kernel)",
    "tt-sample16": "tokentrace sample:16",
    "patch": "tt.when(one projection, scale(1.0)).bind(model).generate, every call",
    "torch-profiler": "torch.profiler, CPU+CUDA activities (CPU only without a GPU)",
    "bare-cupti": "bare CUPTI subscriber (same CUPTI features, no bookkeeping)",
}


class Worker:
    def __init__(self, setup, args, env):
        cmd = [sys.executable, os.path.join(HERE, "gen_worker.py"), "--setup", setup,
               "--device", args.device, "--prompt-tokens",
               str(args.prompt_tokens), "--max-tokens", str(args.max_tokens),
               "--threads", str(args.threads)]
        self.setup = setup
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=args.worker_stderr, env=env, text=True)
        self.ready = None

    def wait_ready(self):
        if self.ready is None:
            line = self.proc.stdout.readline()
            self.ready = json.loads(line) if line else {"ready": False, "error": "worker died"}
        return self.ready

    def ask(self, req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"setup": self.setup, "error": "worker died"}

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()


def worker_env(setup, args):
    env = dict(os.environ)
    env.pop("CUDA_INJECTION64_PATH", None)
    if setup == "bare-cupti":
        env["CUDA_INJECTION64_PATH"] = args.bare_cupti
    return env


def setups_for(args, cuda):
    chosen = args.setups.split(",") if args.setups else list(ALL_SETUPS)
    notes = []
    if "bare-cupti" in chosen and (not cuda or not args.bare_cupti
                                   or not os.path.exists(args.bare_cupti)):
        chosen.remove("bare-cupti")
        notes.append("bare-cupti skipped: " + ("no GPU" if not cuda else
                     f"no subscriber library (--bare-cupti {args.bare_cupti!r})"))
    return chosen, notes


def start_workers(setups, args):
    return {s: Worker(s, args, worker_env(s, args)) for s in setups}


def close_workers(workers):
    for w in workers.values():
        w.close()


def run_matrix(workers, model, n, setups, args):
    """Warm-up + interleaved repeats for one (model, new tokens); returns {setup: [results]}."""
    results = {s: [] for s in setups}
    errors = {}
    for s in setups:
        r = workers[s].wait_ready()
        if not r.get("ready"):
            errors[s] = r.get("error", "failed to start")
    live = [s for s in setups if s not in errors]
    for s in live:  # full-length warm-up, discarded
        r = workers[s].ask({"op": "run", "model": model, "new_tokens": n})
        if "error" in r:
            errors[s] = r["error"]
    live = [s for s in live if s not in errors]
    round_s = None
    for i in range(args.repeats):
        if i > 0 and args.deadline and time.time() + round_s > args.deadline:
            args.cut_short.append(f"{model}, {n} tokens: {i} of {args.repeats} rounds "
                                  "(the next would have passed --deadline)")
            print(f"  {model} {n} tokens: stopping after {i} rounds (deadline)", file=sys.stderr)
            break
        t_round = time.time()
        order = live[i % len(live):] + live[:i % len(live)] if live else []
        for s in order:
            r = workers[s].ask({"op": "run", "model": model, "new_tokens": n})
            if "error" in r:
                errors[s] = r["error"]
            else:
                results[s].append(r)
        round_s = time.time() - t_round
        print(f"  {model} {n} tokens: round {i + 1}/{args.repeats} done", file=sys.stderr)
    return results, errors


def fmt(v, spec="{:.2f}"):
    return "—" if v is None else spec.format(v)


def losses_text(runs):
    total = {}
    for r in runs:
        for k, v in (r.get("losses") or {}).items():
            total[k] = total.get(k, 0) + v
    if not any("losses" in r for r in runs):
        return "—"
    return "0" if not total else ", ".join(f"{k}={v}" for k, v in sorted(total.items()))


def table(model, n, results, errors, args):
    plain = [r["ms_per_token"] for r in results.get("plain", [])]
    plain_med = statistics.median(plain) if plain else None
    prof = [r["ms_per_token"] for r in results.get("torch-profiler", [])]
    prof_over = statistics.median(prof) - plain_med if prof and plain_med else None
    bare = [r["ms_per_token"] for r in results.get("bare-cupti", [])]
    bare_med = statistics.median(bare) if bare else None
    full_kernels = [r["kernels"] / n for r in results.get("tt-full", []) if r.get("kernels")]
    kpt = statistics.median(full_kernels) if full_kernels else None
    lines = [f"### {model}, {args.prompt_tokens}-token prompt, {n} new tokens, "
             f"{args.repeats} repeats ({args.device})", "",
             "| setup | median ms/token | min ms/token | × plain | × bare CUPTI | "
             "overhead / profiler's | trace bytes/token | bytes/kernel | peak RSS MiB | losses |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s, runs in results.items():
        if s in errors and not runs:
            lines.append(f"| {s} | failed: {errors[s]} |||||||||")
            continue
        ms = [r["ms_per_token"] for r in runs]
        med, lo = statistics.median(ms), min(ms)
        nbytes = [r["trace_bytes"] for r in runs if r.get("trace_bytes") is not None]
        bpt = statistics.median(nbytes) / n if nbytes else None
        bpk = None
        if s == "tt-full":
            ktab = [r["kernel_table_bytes"] for r in runs if r.get("kernel_table_bytes")]
            kern = [r["kernels"] for r in runs if r.get("kernels")]
            if ktab and kern:  # the kernels table's own pages per kernel row
                bpk = statistics.median(ktab) / statistics.median(kern)
        elif s == "torch-profiler" and bpt is not None and kpt:
            bpk = bpt / kpt  # JSON bytes / kernels per token measured by tt-full
        over = (med - plain_med) / prof_over if prof_over and plain_med and s != "plain" else None
        lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            s, fmt(med), fmt(lo), fmt(med / plain_med if plain_med else None, "{:.3f}"),
            fmt(med / bare_med if bare_med and s.startswith("tt-") else None, "{:.3f}"),
            fmt(over, "{:.2f}"), fmt(bpt, "{:,.0f}"), fmt(bpk, "{:,.0f}"),
            fmt(max(r["peak_rss_mib"] for r in runs), "{:,.0f}"), losses_text(runs)))
    notes = []
    for s, runs in results.items():
        st = {r.get("kernels_status") for r in runs if r.get("kernels_status")}
        if st:
            notes.append(f"{s}: kernels not recorded: {'; '.join(sorted(st))}")
        bad = [r.get("tokens_recorded") for r in runs if r.get("tokens_recorded") not in (None, n)]
        if bad:
            notes.append(f"{s}: recorded {bad} tokens instead of {n}")
        fires = {r.get("patch_fires") for r in runs if "patch_fires" in r}
        if fires:
            notes.append(f"{s}: patch fires per run {sorted(fires, key=str)}")
        if s == "tt-off" or not s.startswith("tt-"):
            continue
        stop = [r["stop_and_load_s"] for r in runs if "stop_and_load_s" in r]
        if stop:
            notes.append(f"{s}: stop + open the Trace after generate: "
                         f"{statistics.median(stop):.2f} s")
    if kpt:
        notes.append(f"kernels per token (tt-full): {kpt:.0f}")
    for s, e in errors.items():
        if results.get(s):
            notes.append(f"{s}: error after some runs: {e}")
    if notes:
        lines += [""] + [f"- {x}" for x in notes]
    return lines, {"plain": plain_med, "bare": bare_med, "prof_over": prof_over, "results": {
        s: [r["ms_per_token"] for r in runs] for s, runs in results.items()}}


def targets(summary, setups):
    """The overhead targets (the limits below: of the kernel modes, the decoder-layer hooks,
    record and a patch, against plain runs, a bare CUPTI subscriber and torch.profiler)
    checked against one table's medians."""
    med = {s: statistics.median(v) for s, v in summary["results"].items() if v}
    plain, bare, prof_over = summary["plain"], summary["bare"], summary["prof_over"]
    rows = []

    def check(name, value, limit, text):
        if value is None:
            rows.append(f"| {name} | {text} | not measured | — |")
        else:
            verdict = "met" if value <= limit else "MISSED"
            rows.append(f"| {name} | {text} | {value:.3f} | {verdict} |")

    if plain:
        check("kernels off", med.get("tt-off", 0) / plain if "tt-off" in med else None, 1.05,
              "≤ 1.05 × plain")
        check("decoder layers only", med.get("tt-layers", 0) / plain
              if "tt-layers" in med else None, 1.02, "≤ 1.02 × plain")
        check("record, one site per layer", med.get("tt-record", 0) / plain
              if "tt-record" in med else None, 1.05, "≤ 1.05 × plain")
        check("sample:16", med.get("tt-sample16", 0) / plain if "tt-sample16" in med else None,
              1.05, "≤ 1.05 × plain")
        check("patch", med.get("patch", 0) / plain if "patch" in med else None, 1.02,
              "≤ 1.02 × plain")
        for s in ("tt-summary", "tt-full"):
            check(s, med[s] / bare if bare and s in med else None, 1.10, "≤ 1.10 × bare CUPTI")
            check(s + " vs profiler", (med[s] - plain) / prof_over
                  if prof_over and prof_over > 0 and s in med else None, 1 / 3,
                  "overhead ≤ 1/3 of torch.profiler's")
    return ["| target | limit | measured | |", "|---|---|---|---|"] + rows


def long_run(workers, model, n, args):
    """--long: full and summary over n tokens (plain for reference: its KV cache grows too);
    RSS and file size sampled over time."""
    lines = [f"### Long run: {model}, {n} new tokens ({args.device})", "",
             "| mode | ms/token | tokens | RSS MiB at 25% / 50% / 75% / 100% | RSS growth after "
             "25% | bytes/token 2nd quarter / last quarter | losses | `tokentrace report` s |",
             "|---|---|---|---|---|---|---|---|"]
    for s in ("plain", "tt-full", "tt-summary"):
        w = workers.get(s)
        if w is None:
            continue
        ready = w.wait_ready()
        if not ready.get("ready"):
            lines.append(f"| {s} | failed: {ready.get('error')} |||||||")
            continue
        r = w.ask({"op": "long", "model": model, "new_tokens": n, "period": args.sample_period,
                   "cli": args.cli})
        if "error" in r:
            lines.append(f"| {s} | failed: {r['error']} |||||||")
            continue
        samples = [x for x in r["samples"] if x[1] > 0]
        rss_at, bytes_at = [], []
        for q in (0.25, 0.5, 0.75, 1.0):
            pick = min(samples, key=lambda x: abs(x[1] - q * n)) if samples else None
            rss_at.append(pick[2] if pick else None)
            bytes_at.append(pick if pick and pick[3] is not None else None)
        growth = (rss_at[3] - rss_at[0]) if None not in (rss_at[0], rss_at[3]) else None
        # file growth per token over the 2nd quarter and over the last sampled stretch
        with_size = [x for x in samples if x[3] is not None]
        per_tok = []
        for a, b in ((0.25, 0.5), (0.75, 1.0)):
            seg = [x for x in with_size if a * n <= x[1] <= b * n]
            if len(seg) >= 2 and seg[-1][1] > seg[0][1]:
                per_tok.append((seg[-1][3] - seg[0][3]) / (seg[-1][1] - seg[0][1]))
            else:
                per_tok.append(None)
        lines.append("| {} | {} | {} | {} | {} | {} / {} | {} | {} |".format(
            s, fmt(r["ms_per_token"]),
            r.get("tokens_recorded") or (r["samples"][-1][1] if r.get("samples") else None),
            " / ".join(fmt(x, "{:,.0f}") for x in rss_at), fmt(growth, "{:+,.0f}"),
            fmt(per_tok[0], "{:,.0f}"), fmt(per_tok[1], "{:,.0f}"), losses_text([r]),
            fmt(r.get("report_s"), "{:.2f}")))
        if args.samples_out:
            with open(args.samples_out, "a") as f:
                f.write(json.dumps({"setup": s, "model": model, "samples": r["samples"]}) + "\n")
    lines += ["", "- RSS: the worker's resident set at that fraction of the tokens; the file "
              "grows linearly when both bytes/token columns agree (the background thread "
              "writes once a drain period, so short stretches are noisy)."]
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true",
                   help="CPU-sized: tiny models, 16 new tokens, 3 repeats")
    p.add_argument("--models", default=None,
                   help="gpt2,llama1b | tiny-gpt2,tiny-llama | smollm2 (the real model)")
    p.add_argument("--new-tokens", default=None, help="comma list, e.g. 64,256")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--setups", default=None, help="comma list of " + ",".join(ALL_SETUPS))
    p.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    p.add_argument("--threads", type=int, default=0, help="torch threads per worker (0: default)")
    p.add_argument("--bare-cupti", default=os.environ.get("TT_BARE_CUPTI", ""),
                   help="path of libbare_cupti_subscriber.so")
    p.add_argument("--cli", default=None, help="the tokentrace program (for --long report time)")
    p.add_argument("--long", action="store_true", help="also the long run (full and summary)")
    p.add_argument("--long-only", action="store_true", help="only the long run")
    p.add_argument("--long-tokens", type=int, default=4096)
    p.add_argument("--long-model", default=None)
    p.add_argument("--sample-period", type=float, default=1.0)
    p.add_argument("--samples-out", default=None, help="append the long run's samples (JSON lines)")
    p.add_argument("--out", default=None, help="write the markdown here too")
    p.add_argument("--quiet-workers", action="store_true", help="discard workers' stderr")
    p.add_argument("--deadline", type=float, default=0,
                   help="epoch seconds: no repeat round or table is started that would end "
                        "after it (the table says what was cut)")
    args = p.parse_args()
    args.cut_short = []

    import torch
    cuda = torch.cuda.is_available() if args.device is None else args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        sys.exit("generate_overhead: --device cuda, but torch sees no CUDA device here")
    args.device = args.device or ("cuda" if cuda else "cpu")
    small = args.small or not cuda
    models = (args.models or ("tiny-gpt2,tiny-llama" if small else "gpt2,llama1b")).split(",")
    counts = [int(x) for x in (args.new_tokens or ("16" if small else "64,256")).split(",")]
    args.repeats = args.repeats or (3 if small else 7)
    args.long_model = args.long_model or ("tiny-llama" if small else "llama1b")
    args.max_tokens = max(counts + ([args.long_tokens] if args.long or args.long_only else []))
    args.worker_stderr = subprocess.DEVNULL if args.quiet_workers else None
    if args.cli is None and os.environ.get("TOKENTRACE_NATIVE_DIR"):
        args.cli = os.path.join(os.environ["TOKENTRACE_NATIVE_DIR"], "tokentrace")
    setups, notes = setups_for(args, cuda)

    started = time.time()
    out = [f"## generate overhead ({time.strftime('%Y-%m-%d %H:%M')}, "
           f"{torch.cuda.get_device_name(0) if cuda else 'CPU'}, torch {torch.__version__})", ""]
    out += ["Setups:", ""] + [f"- `{s}`: {WHAT[s]}" for s in setups] + [f"- {n}" for n in notes]
    out.append("")
    long_setups = ["plain", "tt-full", "tt-summary"]
    workers = start_workers(setups if not args.long_only else long_setups, args)
    try:
        out += measure(workers, models, counts, setups, args)
    finally:
        close_workers(workers)
    out += [f"- Cut short to keep to the deadline: {c}." for c in args.cut_short]
    out.append(f"_{time.time() - started:.0f} s in all._")
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


def measure(workers, models, counts, setups, args):
    out, target_lines = [], []
    if not args.long_only:
        matrices = [(m, n) for m in models for n in counts]
        per_token_s = None  # wall seconds per new token of the last matrix, for the estimate
        for i, (model, n) in enumerate(matrices):
            if per_token_s and args.deadline and time.time() + per_token_s * n > args.deadline:
                args.cut_short += [f"{m}, {c} tokens: not run" for m, c in matrices[i:]]
                break
            t_matrix = time.time()
            results, errors = run_matrix(workers, model, n, setups, args)
            per_token_s = (time.time() - t_matrix) / n
            lines, summary = table(model, n, results, errors, args)
            out += lines + [""]
            if model in ("llama1b", "tiny-llama"):
                scope = ("" if model == "llama1b" else " — the targets are set for the "
                         "Llama-1B shape on an H200; here they are informational only")
                target_lines += [f"### Targets (issues 3 and 5), {model}, {n} new tokens{scope}",
                                 ""] + targets(summary, setups) + [""]
        out += target_lines
    if args.long or args.long_only:
        out += long_run(workers, args.long_model, args.long_tokens, args) + [""]
    return out


if __name__ == "__main__":
    main()
