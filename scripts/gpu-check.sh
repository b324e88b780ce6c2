#!/usr/bin/env bash
# The one prepared script for the GPU machine (one H200; torch preinstalled as python3; no
# package registry). Builds against the installed torch, runs the `gpu` tests, the demo and
# the short benchmarks, and writes a result table.
#
#   OUT=<dir> scripts/gpu-check.sh [all|tests|bench|long]  (default all; $OUT: ./gpu-out)
#
# Sized for the device runner: one call of at most 10 minutes, out of 15 minutes of device
# time per session (machine start included). So the whole script keeps to BUDGET_S seconds
# (default 510): steps run in order of importance (build, C++ gpu tests, Python gpu tests,
# demo, then the benchmarks), each gets at most what is left, and a step that no longer fits
# is recorded as "not run: out of time" instead of being cut off. Rerun a phase alone with
# `tests` or `bench` (the build is reused when the machine is still warm). `all` runs the
# long run over 512 tokens; `long` is a second, optional call for the issue's 4096 tokens
# (about 4 minutes on a warm machine).
#
# The runner brings back at most 8 files from $OUT, so everything lands in these:
#   $OUT/gpu-check.md     the summary table (rewritten after every step) + the bench tables
#   $OUT/gpu-check.log    every step's log, one after another (each cut to its last 4000 lines)
#   $OUT/bench-gpu.md     the benchmark tables (copy to bench/results/<date>-h200.md)
#   $OUT/long-samples.jsonl, $OUT/demo.png
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/gpu-check-verdict.sh
source "$ROOT/scripts/gpu-check-verdict.sh"
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
export BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
export TOKENTRACE_PYTHON=${TOKENTRACE_PYTHON:-$(command -v python3)}
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
export TOKENTRACE_NO_APT=1  # no package registry there: apt-get would only time out
export PYTHONUNBUFFERED=1
PHASE=${1:-all}
case "$PHASE" in all|tests|bench|long) ;; *) echo "usage: scripts/gpu-check.sh [all|tests|bench|long]" >&2; exit 2;; esac
start=$(date +%s)
deadline=$((start + ${BUDGET_S:-510}))
WORK=$(mktemp -d /tmp/tt-gpu-check-XXXXXX)
SUMMARY=$OUT/gpu-check.md
LOG=$OUT/gpu-check.log
: >"$LOG"
declare -a rows
failed=0

header() {
  echo "# tokentrace GPU check ($PHASE) — $(date -u +%Y-%m-%d) — $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown);" \
       "python: $TOKENTRACE_PYTHON ($("$TOKENTRACE_PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1))"
  echo
}
HEADER=$(header)

write_summary() {  # the table so far; called after every step, so a cut-off call keeps it
  {
    echo "$HEADER"
    echo "| step | verdict | time | last line |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "total: $(( $(date +%s) - start )) s of a ${BUDGET_S:-510} s budget"
    [ -f "$OUT/bench-gpu.md" ] && { echo; cat "$OUT/bench-gpu.md"; }
  } >"$SUMMARY"
}

# step NAME LIMIT NEED CMD...: runs CMD for at most LIMIT seconds, or what is left of the
# budget; skipped when less than NEED seconds are left. Logs, records a row, returns CMD's rc.
step() {
  local name=$1 limit=$2 need=$3; shift 3
  local left=$((deadline - $(date +%s)))
  if [ "$left" -lt "$need" ]; then
    rows+=("| $name | not run: out of time | 0 s | ${left} s were left, the step needs ~${need} s |")
    echo "[gpu-check] $name: not run, out of time"; write_summary; failed=1
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$(date +%s) slog="$WORK/$name.log"
  STEP_DEADLINE=$((t0 + limit)) timeout -k 5 "$limit" "$@" >"$slog" 2>&1
  local rc=$? t1=$(date +%s) verdict
  verdict=$(step_verdict "$name" "$rc" "$limit" "$slog")
  rc=$?
  [ $rc -eq 0 ] || failed=1
  local last
  last=$(step_summary_line "$slog")
  rows+=("| $name | $verdict | $((t1 - t0)) s | $last |")
  { echo "=================== $name: $verdict ($((t1 - t0)) s) ==================="
    tail -n 4000 "$slog"; echo; } >>"$LOG"
  echo "[gpu-check] $name: $verdict ($((t1 - t0)) s)"
  write_summary
  return $rc
}

write_summary
step build 300 60 "$ROOT/scripts/setup.sh" || { cat "$SUMMARY"; rm -rf "$WORK"; exit 1; }
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
if [ "$PHASE" = all ] || [ "$PHASE" = tests ]; then
  step ctest-gpu 90 20 bash -c "cd '$BUILD_DIR' && ctest -L gpu --no-tests=error --output-on-failure -j4"
  step pytest-gpu 200 40 "$TOKENTRACE_PY" -m pytest -v --tb=short -p no:cacheprovider -m gpu \
    "$ROOT/tests/python" "$ROOT/tests/torch_op"
  step demo 60 20 "$TOKENTRACE_PY" -m tokentrace.demo --out-dir "$WORK/demo"
  cp "$WORK/demo/demo.png" "$OUT/demo.png" 2>/dev/null
fi
if [ "$PHASE" = all ] || [ "$PHASE" = bench ]; then
  # gpu_bench.sh keeps to the step's deadline itself (STEP_DEADLINE), part by part.
  step bench 420 60 env OUT="$OUT" LOG_DIR="$WORK/bench" BUILD_DIR="$BUILD_DIR" \
    PYTHON="$TOKENTRACE_PY" LONG_TOKENS=512 "$ROOT/bench/gpu_bench.sh"
  cat "$WORK"/bench/*.log >>"$LOG" 2>/dev/null
fi
if [ "$PHASE" = long ]; then
  step long-run 450 120 env OUT="$OUT" LOG_DIR="$WORK/bench" BUILD_DIR="$BUILD_DIR" \
    PYTHON="$TOKENTRACE_PY" PARTS=long LONG_TOKENS=4096 LONG_LIMIT=440 "$ROOT/bench/gpu_bench.sh"
  cat "$WORK"/bench/*.log >>"$LOG" 2>/dev/null
fi
write_summary
cat "$SUMMARY"
rm -rf "$WORK"
exit $failed
