#!/usr/bin/env bash
# CPU part of the overhead suite: builds what it needs (in build-bench unless BUILD_DIR is
# set), runs the micro benchmarks briefly and the CPU version of generate_overhead.py, and
# writes bench/results/<date>-cpu-<host>.md.
#   bash bench/run_cpu.sh                 # ~5 minutes on 2 cores (LONG_TOKENS=96: ~3)
#   MIN_TIME=0.2 bash bench/run_cpu.sh    # steadier micro numbers
#   PYTHON=/path/to/python SKIP_GENERATE=1 bash bench/run_cpu.sh
set -u
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build-bench}"
python="${PYTHON:-${TOKENTRACE_VENV:-$HOME/.cache/tokentrace/venv}/bin/python}"
[ -x "$python" ] || python=python3
min_time="${MIN_TIME:-0.05}"
jobs="${JOBS:-2}"
host="$(hostname -s 2>/dev/null || echo host)"
out="bench/results/$(date +%Y-%m-%d)-cpu-${host}.md"
tmp="$(mktemp -d /tmp/tt-bench-XXXXXX)"

if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTOKENTRACE_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$python" > "$tmp/configure.log" 2>&1 \
    || { tail -20 "$tmp/configure.log"; exit 2; }
fi
targets="bench_nvtx bench_nvtx_notool bench_hotpath tokentrace_shim tokentrace_cli _native"
for t in store_bench patch_bench; do  # patch_bench only with the CUDA target
  ninja -C "$build" -t targets all 2>/dev/null | grep -q "^$t:" && targets="$targets $t"
done
ninja -C "$build" -j"$jobs" $targets > "$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log"; exit 3; }

run() {  # run NAME ARGS...: Google Benchmark JSON into $tmp/NAME.json
  local name=$1; shift
  echo "== $name" >&2
  env -u NVTX_INJECTION64_PATH -u CUDA_INJECTION64_PATH "$build/$name" \
    --benchmark_min_time="$min_time" --benchmark_out="$tmp/$name.json" \
    --benchmark_out_format=json "$@" > "$tmp/$name.txt" 2>&1 || echo "$name failed (rc $?)" >&2
}
run bench_nvtx_notool
run bench_nvtx
run bench_hotpath
[ -x "$build/store_bench" ] && run store_bench --benchmark_filter='BM_WriteKernelRows/100000|BM_WriteCallRows'
[ -x "$build/patch_bench" ] && run patch_bench --benchmark_filter='^host/'

{
  echo "# tokentrace overhead, CPU ($host, $(date +%Y-%m-%d))"
  echo
  echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"\
       "load average $(cut -d' ' -f1-3 /proc/loadavg) at the start. Commit $(git rev-parse --short HEAD)."
  echo "Google Benchmark min time ${min_time}s per benchmark; CPU time per operation. No GPU here:"
  echo "the CUPTI paths, the launch overhead and the GPU targets are measured by bench/gpu_bench.sh."
  echo
  echo "## Micro benchmarks"
  echo
  "$python" bench/micro_table.py bench_nvtx_notool="$tmp/bench_nvtx_notool.json" \
    bench_nvtx="$tmp/bench_nvtx.json" bench_hotpath="$tmp/bench_hotpath.json" \
    store_bench="$tmp/store_bench.json" patch_bench="$tmp/patch_bench.json"
  echo
  if grep -q "DEBUG" "$tmp/bench_hotpath.txt" 2>/dev/null; then
    echo "- Google Benchmark reports its own library was built as DEBUG (the installed package);"
    echo "  the measured code is built Release."
  fi
  echo
} > "$out"

echo "== hook_overhead.py" >&2
PYTHONPATH=python TOKENTRACE_NATIVE_DIR="$build" timeout 300 "$python" bench/hook_overhead.py \
  2>/dev/null >> "$out" || echo "hook_overhead.py failed (rc $?)" >&2
echo >> "$out"

echo "== input_overhead.py" >&2
PYTHONPATH=python TOKENTRACE_NATIVE_DIR="$build" timeout 300 "$python" bench/input_overhead.py \
  2>/dev/null >> "$out" || echo "input_overhead.py failed (rc $?)" >&2
echo >> "$out"

if [ -z "${SKIP_GENERATE:-}" ]; then
  # The `patch` setup needs the patch-table operators built against this torch: the ones
  # scripts/setup.sh built, else built here.
  if [ -z "${TOKENTRACE_TORCH_OPS_LIB:-}" ]; then
    for ops in "$build/torch-ops/libtokentrace_torch_ops.so" build/torch-ops/libtokentrace_torch_ops.so ""; do
      [ -n "$ops" ] && [ -f "$ops" ] && break
    done
    if [ -z "$ops" ]; then
      echo "== cuda/torch/build.sh $build/torch-ops" >&2
      ops="$build/torch-ops/libtokentrace_torch_ops.so"
      bash cuda/torch/build.sh "$build/torch-ops" "$python" > "$tmp/torch-ops.log" 2>&1 \
        || { tail -5 "$tmp/torch-ops.log" >&2; echo "the patch setup will fail" >&2; }
    fi
    export TOKENTRACE_TORCH_OPS_LIB="$(realpath -m "$ops")"
  fi
  echo "== served_rows_cost.py" >&2
  { echo "### Rules for served requests: row masks per engine step (bench/served_rows_cost.py)";
    echo; PYTHONPATH=python TOKENTRACE_NATIVE_DIR="$build" timeout 300 "$python" \
      bench/served_rows_cost.py 2>/dev/null || echo "served_rows_cost.py failed (rc $?)" >&2
    echo; } >> "$out"
  echo "== generate_overhead.py --small" >&2
  PYTHONPATH=python TOKENTRACE_NATIVE_DIR="$build" timeout 900 "$python" \
    bench/generate_overhead.py --small --models "${GEN_MODELS:-tiny-llama}" --threads 1 \
    --long --long-tokens "${LONG_TOKENS:-4096}" --sample-period 1 --quiet-workers \
    --out "$tmp/generate.md" > /dev/null || echo "generate_overhead.py failed (rc $?)" >&2
  cat "$tmp/generate.md" >> "$out" 2>/dev/null
fi
echo "wrote $out" >&2
cat "$out"
rm -rf "$tmp"
