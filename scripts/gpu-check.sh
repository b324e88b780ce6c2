#!/usr/bin/env bash
# The one prepared script for the GPU machine (one H200; torch preinstalled as python3; no
# package registry). Builds against the installed torch, runs the `gpu` tests and the short
# benchmarks, and writes a result table. Designed to fit in ~8 minutes including the build.
#
#   OUT=<dir> scripts/gpu-check.sh [all|tests|bench]   (default all; $OUT defaults to ./gpu-out)
# The device runner allows 10 minutes per command: run `tests` (build + gpu tests, ~5 min)
# and `bench` (reuses the build, ~4 min) as two calls there; `all` does both.
# Results: $OUT/gpu-check-<phase>.md (summary table; .progress has each step as it ends),
# $OUT/*.log, $OUT/bench-gpu.md
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
export BUILD_DIR=${BUILD_DIR:-$ROOT/build-gpu}
export TOKENTRACE_PYTHON=${TOKENTRACE_PYTHON:-$(command -v python3)}
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
export TOKENTRACE_NO_APT=1  # no package registry there: apt-get would only time out
PHASE=${1:-all}
case "$PHASE" in all|tests|bench) ;; *) echo "usage: scripts/gpu-check.sh [all|tests|bench]" >&2; exit 2;; esac
SUMMARY=$OUT/gpu-check-$PHASE.md
start=$(date +%s)
: >"$OUT/gpu-check-$PHASE.progress"
declare -a rows

step() {  # step NAME TIMEOUT CMD...: runs CMD with a time limit, logs it, records a row
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$? t1=$(date +%s)
  local verdict=pass; [ $rc -eq 0 ] || verdict="FAIL (rc $rc)"; [ $rc -eq 124 ] && verdict="TIMEOUT"
  # A GPU test that skipped did not check anything: on this machine that is a failure.
  if [ $rc -eq 0 ] && [[ $name == *gpu* ]] && grep -qE "Skipped|[0-9]+ skipped" "$OUT/$name.log"; then
    verdict="SKIPPED TESTS (no GPU seen?)"; rc=3
  fi
  local last
  last=$(grep -E "tests passed|passed|failed|error" "$OUT/$name.log" | tail -n 1)
  [ -n "$last" ] || last=$(tail -n 1 "$OUT/$name.log")
  rows+=("| $name | $verdict | $((t1 - t0)) s | $(echo "$last" | tr '|' '/' | cut -c1-120) |")
  # Also as it happens: if the device call is cut off, what finished is still on record.
  echo "${rows[-1]}" >>"$OUT/gpu-check-$PHASE.progress"
  echo "[gpu-check] $name: $verdict ($((t1 - t0)) s)"
  return $rc
}

{
  echo "# tokentrace GPU check — $(date -u +%Y-%m-%d) — $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "python: $TOKENTRACE_PYTHON ($($TOKENTRACE_PYTHON -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1))"
  echo
} >"$SUMMARY"

step build 420 "$ROOT/scripts/setup.sh" || { printf '%s\n' "${rows[@]}" >>"$SUMMARY"; cat "$SUMMARY"; exit 1; }
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
if [ "$PHASE" != bench ]; then
  step ctest-gpu 120 bash -c "cd '$BUILD_DIR' && ctest -L gpu --no-tests=error --output-on-failure -j4"
  step pytest-gpu 240 "$TOKENTRACE_PY" -m pytest -q -p no:cacheprovider -m gpu \
    "$ROOT/tests/python" "$ROOT/tests/torch_op"
  step demo 60 "$TOKENTRACE_PY" -m tokentrace.demo --out-dir "$OUT/demo"
fi
if [ "$PHASE" != tests ]; then
  step bench 420 env OUT="$OUT" BUILD_DIR="$BUILD_DIR" PYTHON="$TOKENTRACE_PY" LONG_TOKENS=512 \
    "$ROOT/bench/gpu_bench.sh"
fi

{
  echo "| step | verdict | time | last line |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "total: $(( $(date +%s) - start )) s"
  for f in "$OUT"/bench-*.md; do [ -f "$f" ] && { echo; cat "$f"; }; done
} >>"$SUMMARY"
cat "$SUMMARY"
