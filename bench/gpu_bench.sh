#!/usr/bin/env bash
# GPU part of the overhead suite, sized for ~4-5 minutes on an H200 (build included):
#   1. empty-kernel launch cost: no tool / bare CUPTI subscriber / tokentrace full, as separate
#      processes, interleaved (3 processes each, 5 rounds of 20000 launches per process);
#   2. generate_overhead.py: Llama-1B shape (GEN_MODELS=gpt2,llama1b for both), 64 new tokens,
#      3 repeats, every setup;
#   2b. graph_replay_overhead.py: a Llama-1B-shape decode step captured as a CUDA graph and
#      replayed GRAPH_TOKENS (256) times: plain / bare CUPTI / tokentrace full and summary;
#   3. the long run (full, summary, plain) over LONG_TOKENS (default 1024) new tokens.
# Writes $OUT/bench-gpu.md (copy it to bench/results/<date>-h200.md) and logs next to it.
#   OUT=/tmp/out bash bench/gpu_bench.sh
# Env: BUILD_DIR (default build-gpu-bench; reused if built), PYTHON (python3), GEN_MODELS,
#      GEN_TOKENS (64), GEN_REPEATS (3), LONG_TOKENS (1024; 0 skips), JOBS (16).
set -u
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
build="${BUILD_DIR:-build-gpu-bench}"
python="${PYTHON:-python3}"
md="$out/bench-gpu.md"
tmp="$(mktemp -d /tmp/tt-gpu-bench-XXXXXX)"
rc=0
t_start=$(date +%s)

nvidia-smi -L > "$out/device.txt" 2>&1
# A build directory that is already configured (scripts/gpu-check.sh passes the one
# scripts/setup.sh built, with tests and benchmarks) is used as it is: configuring it again
# with other options would rebuild everything and drop its tests.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTOKENTRACE_BUILD_TESTS=OFF -DTOKENTRACE_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$python")" > "$out/bench-configure.log" 2>&1 \
    || { tail -20 "$out/bench-configure.log"; exit 2; }
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")
ninja -C "$build" -j"${JOBS:-16}" launch_overhead bare_cupti_subscriber tokentrace_shim \
  tokentrace_cli _native > "$out/bench-build.log" 2>&1 || { tail -40 "$out/bench-build.log"; exit 3; }
echo "gpu_bench: built in $(( $(date +%s) - t_start )) s" >&2

{
  echo "# tokentrace overhead, GPU ($(head -1 "$out/device.txt"), $(date +%Y-%m-%d))"
  echo
  echo "Commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), ${build_type:-unknown} build;" \
       "$("$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1)."
  echo
} > "$md"

# ---- 1. launch overhead -------------------------------------------------------------------
bare="$build/libbare_cupti_subscriber.so"
for i in 1 2 3; do
  env -u CUDA_INJECTION64_PATH timeout 60 "$build/launch_overhead" none >> "$tmp/launch.txt" 2>> "$out/launch.log"
  CUDA_INJECTION64_PATH="$bare" timeout 60 "$build/launch_overhead" bare-cupti >> "$tmp/launch.txt" 2>> "$out/launch.log"
  env -u CUDA_INJECTION64_PATH timeout 120 "$build/tokentrace" run --kernels full \
    --out "$tmp/launch-$i.sqlite" -- "$build/launch_overhead" tokentrace-full \
    >> "$tmp/launch.txt" 2>> "$out/launch.log"
done
cp "$tmp/launch.txt" "$out/launch.txt"
"$python" - "$tmp" >> "$md" <<'PY' || rc=1
import glob, re, sqlite3, statistics, sys
tmp = sys.argv[1]
runs = {}
for line in open(f"{tmp}/launch.txt"):
    m = re.search(r"setup=(\S+) .*median_ns=([\d.]+) min_ns=([\d.]+)", line)
    if m:
        runs.setdefault(m.group(1), []).append((float(m.group(2)), float(m.group(3))))
print("## Empty-kernel launch cost (ns per launch)\n")
print("Each process: 5 rounds of 20000 launches inside one NVTX range, median round; three "
      "processes per setup, interleaved.\n")
print("| setup | median of process medians | min | processes |")
print("|---|---|---|---|")
med = {}
for s in ("none", "bare-cupti", "tokentrace-full"):
    v = runs.get(s, [])
    if not v:
        print(f"| {s} | failed (see launch.log) | | 0 |")
        continue
    med[s] = statistics.median(x[0] for x in v)
    print(f"| {s} | {med[s]:.0f} | {min(x[1] for x in v):.0f} | {len(v)} |")
print()
if all(k in med for k in ("none", "bare-cupti", "tokentrace-full")):
    n, b, t = med["none"], med["bare-cupti"], med["tokentrace-full"]
    ratio = t / b
    added = (t - b) / (b - n) if b > n else float("nan")
    print(f"- tokentrace full / bare subscriber: **{ratio:.3f}** (target ≤ 1.10: "
          f"{'met' if ratio <= 1.10 else 'MISSED'}); tokentrace's own addition is "
          f"{t - b:.0f} ns per launch = {added:.0%} of what the bare subscriber adds over no tool "
          f"({b - n:.0f} ns).")
rows = kernels = 0
for path in sorted(glob.glob(f"{tmp}/launch-*.sqlite")):
    con = sqlite3.connect(path)
    k = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    try:
        kb = con.execute("SELECT sum(pgsize) FROM dbstat WHERE name='kernels'").fetchone()[0]
    except sqlite3.Error:
        kb = None
    losses = con.execute("SELECT coalesce(sum(count),0) FROM losses").fetchone()[0]
    import os
    size = os.path.getsize(path)
    print(f"- {os.path.basename(path)}: {k} kernel rows, file {size / max(k, 1):.1f} B per kernel"
          + (f", kernels table {kb / max(k, 1):.1f} B per row" if kb else "")
          + f" (target ≤ 64 B), losses {losses}")
    con.close()
print()
PY
echo "gpu_bench: launch overhead done at $(( $(date +%s) - t_start )) s" >&2

# ---- 2. generate overhead -----------------------------------------------------------------
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" TOKENTRACE_NATIVE_DIR="$build"
timeout 420 "$python" bench/generate_overhead.py --device cuda \
  --models "${GEN_MODELS:-llama1b}" --new-tokens "${GEN_TOKENS:-64}" \
  --repeats "${GEN_REPEATS:-3}" --bare-cupti "$bare" --cli "$build/tokentrace" \
  --out "$tmp/generate.md" > "$out/generate.log" 2>&1 || { rc=1; tail -30 "$out/generate.log"; }
cat "$tmp/generate.md" >> "$md" 2>/dev/null
echo "gpu_bench: generate done at $(( $(date +%s) - t_start )) s" >&2

# ---- 2b. CUDA-graph replayed decode (issue 6) ------------------------------------------------
timeout 240 "$python" bench/graph_replay_overhead.py --bare-cupti "$bare" \
  --tokens "${GRAPH_TOKENS:-256}" --repeats "${GRAPH_REPEATS:-5}" --out "$tmp/graph.md" \
  > "$out/graph.log" 2>&1 || { rc=1; tail -30 "$out/graph.log"; }
echo >> "$md"
cat "$tmp/graph.md" >> "$md" 2>/dev/null
echo "gpu_bench: graph replay done at $(( $(date +%s) - t_start )) s" >&2

# ---- 3. long run ---------------------------------------------------------------------------
if [ "${LONG_TOKENS:-1024}" != "0" ]; then
  timeout 300 "$python" bench/generate_overhead.py --device cuda --long-only \
    --long-tokens "${LONG_TOKENS:-1024}" --cli "$build/tokentrace" --sample-period 1 \
    --samples-out "$out/long-samples.jsonl" --out "$tmp/long.md" > "$out/long.log" 2>&1 \
    || { rc=1; tail -30 "$out/long.log"; }
  echo >> "$md"
  cat "$tmp/long.md" >> "$md" 2>/dev/null
fi
echo "_gpu_bench.sh: $(( $(date +%s) - t_start )) s in all (build included)._" >> "$md"
cat "$md"
rm -rf "$tmp"
exit $rc
