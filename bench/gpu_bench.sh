#!/usr/bin/env bash
# GPU part of the overhead suite, sized for ~4-5 minutes on an H200 (build included):
#   1. empty-kernel launch cost: no tool / bare CUPTI subscriber / tokentrace full, as separate
#      processes, interleaved (3 processes each, 5 rounds of 20000 launches per process);
#   1a. nvtx_pair: our NVTX push+pop on this host, no tool vs tokentrace (target: ≤ 25 ns);
#   1b. patch_device_bench: the device patch table's host cost per apply, device time per apply
#      and full-scale bandwidth against a device-to-device copy (the patch table's targets);
#   2. generate_overhead.py: Llama-1B shape (GEN_MODELS=gpt2,llama1b for both), 64 new tokens,
#      3 repeats, every setup;
#   2b. graph_replay_overhead.py: a Llama-1B-shape decode step captured as a CUDA graph and
#      replayed GRAPH_TOKENS (256) times: plain / bare CUPTI / tokentrace full and summary;
#   3. the long run (full, summary, plain) over LONG_TOKENS (default 1024) new tokens.
# Writes $OUT/bench-gpu.md (copy it to bench/results/<date>-h200.md), $OUT/long-samples.jsonl,
# and its logs into LOG_DIR (default $OUT).
#   OUT=/tmp/out bash bench/gpu_bench.sh
# Env: BUILD_DIR (default build-gpu-bench; reused if built), PYTHON (python3), GEN_MODELS,
#      GEN_TOKENS (64), GEN_REPEATS (3), GEN_SETUPS (all), GEN_LIMIT (240 s), LONG_TOKENS (1024; 0 skips), JOBS (16),
#      PARTS (launch,nvtx,patch,generate,graph,long: which parts run), LONG_LIMIT (200 s for the long run),
#      STEP_DEADLINE (epoch seconds, set by scripts/gpu-check.sh): each part gets at most what
#      is left before it, and a part that no longer fits is listed as not run.
set -u
cd "$(dirname "$0")/.."
out="${OUT:-gpu-out}"
mkdir -p "$out"
build="${BUILD_DIR:-build-gpu-bench}"
python="${PYTHON:-python3}"
md="$out/bench-gpu.md"
logs="${LOG_DIR:-$out}"
mkdir -p "$logs"
tmp="$(mktemp -d /tmp/tt-gpu-bench-XXXXXX)"
rc=0
t_start=$(date +%s)
deadline=${STEP_DEADLINE:-$((t_start + 3600))}
# part LIMIT NEED: prints the seconds this part may take (LIMIT, or what is left before the
# deadline less a margin for the table); fails when fewer than NEED seconds are left.
part() {
  local left=$((deadline - $(date +%s) - 10))
  [ "$left" -ge "$2" ] || return 1
  if [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}
# skipped WHAT: says in the table that a part did not fit, and fails the run.
skipped() {
  printf '_%s: not run, out of time (%s s were left)._\n\n' "$1" "$((deadline - $(date +%s)))" >> "$md"
  rc=1
}
wants() { [[ ",${PARTS:-launch,nvtx,patch,generate,graph,long}," == *",$1,"* ]]; }

nvidia-smi -L > "$logs/device.txt" 2>&1
# A build directory that is already configured (scripts/gpu-check.sh passes the one
# scripts/setup.sh built, with tests and benchmarks) is used as it is: configuring it again
# with other options would rebuild everything and drop its tests.
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTOKENTRACE_BUILD_TESTS=OFF -DTOKENTRACE_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$python")" > "$logs/bench-configure.log" 2>&1 \
    || { tail -20 "$logs/bench-configure.log"; exit 2; }
fi
build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt")
# Only what the chosen parts run (a cold machine builds it inside the check's time).
targets="bare_cupti_subscriber tokentrace_shim tokentrace_cli _native"
wants launch && targets="$targets launch_overhead"
wants nvtx && targets="$targets nvtx_pair"
# Built with the tests (tests/cuda): present in scripts/setup.sh's build, not in one made above.
wants patch && ninja -C "$build" -t targets all 2>/dev/null | grep -q "^patch_device_bench:" \
  && targets="$targets patch_device_bench"
ninja -C "$build" -j"${JOBS:-16}" $targets > "$logs/bench-build.log" 2>&1 \
  || { tail -40 "$logs/bench-build.log"; exit 3; }
echo "gpu_bench: built in $(( $(date +%s) - t_start )) s" >&2

{
  echo "# tokentrace overhead, GPU ($(head -1 "$logs/device.txt"), $(date +%Y-%m-%d))"
  echo
  echo "Commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), ${build_type:-unknown} build;" \
       "$("$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1)."
  echo
} > "$md"

# ---- 1. launch overhead -------------------------------------------------------------------
bare="$build/libbare_cupti_subscriber.so"
if wants launch; then
  for i in 1 2 3; do
    part 30 30 > /dev/null || { echo "round $i not run (deadline)" >> "$logs/launch.log"; break; }
    env -u CUDA_INJECTION64_PATH timeout 60 "$build/launch_overhead" none \
      >> "$tmp/launch.txt" 2>> "$logs/launch.log"
    CUDA_INJECTION64_PATH="$bare" timeout 60 "$build/launch_overhead" bare-cupti \
      >> "$tmp/launch.txt" 2>> "$logs/launch.log"
    env -u CUDA_INJECTION64_PATH timeout 120 "$build/tokentrace" run --kernels full \
      --out "$tmp/launch-$i.sqlite" -- "$build/launch_overhead" tokentrace-full \
      >> "$tmp/launch.txt" 2>> "$logs/launch.log"
  done
  cp "$tmp/launch.txt" "$logs/launch.txt"
  "$python" bench/process_tables.py launch "$tmp" >> "$md" || rc=1
  echo "gpu_bench: launch overhead done at $(( $(date +%s) - t_start )) s" >&2
fi

# ---- 1a. NVTX push+pop on this host's CPU (target ≤ 25 ns; no Google Benchmark here) ---------
if wants nvtx; then
  if part 40 20 > /dev/null; then
    for i in 1 2 3; do
      env -u NVTX_INJECTION64_PATH -u CUDA_INJECTION64_PATH "$build/nvtx_pair" none \
        >> "$tmp/nvtx.txt" 2>> "$logs/nvtx.log"
      env -u NVTX_INJECTION64_PATH -u CUDA_INJECTION64_PATH timeout 60 "$build/tokentrace" run \
        --kernels off --out "$tmp/nvtx-$i.sqlite" -- "$build/nvtx_pair" tokentrace \
        >> "$tmp/nvtx.txt" 2>> "$logs/nvtx.log"
    done
    "$python" bench/process_tables.py nvtx "$tmp" >> "$md" || rc=1
  else
    skipped "NVTX push+pop"
  fi
fi

# ---- 1b. the device patch table (host cost per apply, device time, bandwidth) ---------------
if wants patch && [ ! -x "$build/patch_device_bench" ]; then
  echo "_device patch table: not measured, patch_device_bench was not built (no CUDA compiler)._" >> "$md"
elif wants patch; then
  if limit=$(part 60 20); then
    timeout -k 5 "$limit" "$build/patch_device_bench" >> "$md" 2> "$logs/patch.log" || rc=1
  else
    skipped "device patch table"
  fi
fi

# ---- 2. generate overhead -----------------------------------------------------------------
# The Python parts get what is left before the deadline (less the graph-replay and long-run
# parts' shares); generate_overhead.py drops repeat rounds that would not fit, and says so.
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" TOKENTRACE_NATIVE_DIR="$build"
if wants generate; then
  if limit=$(part "${GEN_LIMIT:-240}" 90); then
    now=$(date +%s)
    # Its rounds stop ~150 s before the deadline when that leaves it 90 s, so the graph-replay
    # and long-run parts still run; the timeout stays at the full limit.
    reserve=0
    { wants graph || { wants long && [ "${LONG_TOKENS:-1024}" != "0" ]; }; } && reserve=150
    gen_end=$(( now + limit < deadline - reserve ? now + limit : deadline - reserve ))
    [ "$gen_end" -lt $(( now + 90 )) ] && gen_end=$(( now + 90 ))
    timeout -k 5 "$limit" "$python" bench/generate_overhead.py --device cuda \
      --models "${GEN_MODELS:-llama1b}" --new-tokens "${GEN_TOKENS:-64}" \
      --repeats "${GEN_REPEATS:-3}" ${GEN_SETUPS:+--setups "$GEN_SETUPS"} \
      --bare-cupti "$bare" --cli "$build/tokentrace" \
      --deadline $(( gen_end - 15 )) \
      --out "$tmp/generate.md" > "$logs/generate.log" 2>&1 || { rc=1; tail -30 "$logs/generate.log"; }
    cat "$tmp/generate.md" >> "$md" 2>/dev/null
  else
    skipped "generate overhead"
  fi
fi
echo "gpu_bench: generate done at $(( $(date +%s) - t_start )) s" >&2

# ---- 2b. CUDA-graph replayed decode ----------------------------------------------------------
if wants graph; then
  if limit=$(part 150 60); then
    timeout -k 5 "$limit" "$python" bench/graph_replay_overhead.py --bare-cupti "$bare" \
      --tokens "${GRAPH_TOKENS:-256}" --repeats "${GRAPH_REPEATS:-5}" --out "$tmp/graph.md" \
      --deadline $(( $(date +%s) + limit - 20 )) \
      > "$logs/graph.log" 2>&1 || { rc=1; tail -30 "$logs/graph.log"; }
    echo >> "$md"
    cat "$tmp/graph.md" >> "$md" 2>/dev/null
  else
    skipped "CUDA-graph replayed decode"
  fi
fi
echo "gpu_bench: graph replay done at $(( $(date +%s) - t_start )) s" >&2

# ---- 3. long run ---------------------------------------------------------------------------
if [ "${LONG_TOKENS:-1024}" != "0" ] && wants long; then
  if limit=$(part "${LONG_LIMIT:-200}" 45); then
    timeout -k 5 "$limit" "$python" bench/generate_overhead.py --device cuda --long-only \
      --long-tokens "${LONG_TOKENS:-1024}" --cli "$build/tokentrace" --sample-period 1 \
      --samples-out "$out/long-samples.jsonl" --out "$tmp/long.md" > "$logs/long.log" 2>&1 \
      || { rc=1; tail -30 "$logs/long.log"; }
    echo >> "$md"
    cat "$tmp/long.md" >> "$md" 2>/dev/null
  else
    skipped "long run"
  fi
fi
echo "_gpu_bench.sh: $(( $(date +%s) - t_start )) s in all (build included)._" >> "$md"
cat "$md"
rm -rf "$tmp"
exit $rc
