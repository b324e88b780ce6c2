#!/usr/bin/env bash
# The verdict of one scripts/gpu-check.sh step, from its exit status and its log. Sourced by
# gpu-check.sh; run alone by the tests (tests/python/test_gpu_check.py) with fake logs:
#
#   scripts/gpu-check-verdict.sh NAME RC LIMIT LOG   prints "VERDICT" and exits with the new rc
#
# A step whose name contains "gpu" that skipped a test did not check anything: on the GPU
# machine that is a failure (rc 3). A skip is read only from ctest's and pytest's own markers,
# never from a test's name (a test named "...SkippedEntry..." that passed is a pass):
#   ctest:  "  3/9 Test  #3: name ......***Skipped   0.01 sec"  and, in the summary,
#           "	  3 - name (Skipped)"
#   pytest: "path::test SKIPPED (reason)" (-v) and "===== 5 passed, 2 skipped in 3.1s ====="

# Lines that are a ctest or pytest skip marker (grep -E).
GPU_CHECK_SKIP_RE='\*\*\*Skipped +[0-9.]+ sec$|^[[:space:]]+[0-9]+ - [^ ]+ \(Skipped\)$|^[^ ]+::[^ ]+ SKIPPED( |$)|^=+ .*\b[0-9]+ skipped\b.* in [0-9.]+s.*=+$'
# The line that best summarises a log: ctest's or pytest's final count, else the last line.
GPU_CHECK_SUMMARY_RE='^[0-9]+% tests passed|^=+ .*\b[0-9]+ (passed|failed|skipped|errors?)\b.* in [0-9.]+s'

# step_verdict NAME RC LIMIT LOG: prints the verdict; returns the step's rc (3 for skips).
step_verdict() {
  local name=$1 rc=$2 limit=$3 log=$4
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "TIMEOUT after $limit s"; return "$rc"
  fi
  if [ "$rc" -ne 0 ]; then
    echo "FAIL (rc $rc)"; return "$rc"
  fi
  if [[ $name == *gpu* ]] && grep -qE "$GPU_CHECK_SKIP_RE" "$log"; then
    echo "SKIPPED TESTS (no GPU seen?)"; return 3
  fi
  echo pass
  return 0
}

# step_summary_line LOG: the line shown in the summary table.
step_summary_line() {
  local last
  last=$(grep -E "$GPU_CHECK_SUMMARY_RE" "$1" | tail -n 1)
  [ -n "$last" ] || last=$(tail -n 1 "$1")
  echo "$last" | tr '|' '/' | cut -c1-140
}

# test_answer LOG TEST: the answer a pytest -v log gives for TEST ("file.py::test_name"; all
# its parametrizations): "yes" when every one passed, "NO (failed)", "NO (skipped)", or
# "not run" when the log has no line for it.
test_answer() {
  local lines
  lines=$(grep -E "(^|/)${2}(\[[^ ]*\])? (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)" "$1")
  if [ -z "$lines" ]; then echo "not run"
  elif grep -qE " (FAILED|ERROR|XFAIL|XPASS)" <<<"$lines"; then echo "NO (failed)"
  elif grep -q " SKIPPED" <<<"$lines"; then echo "NO (skipped)"
  else echo yes
  fi
}

# device_answer LOG TEST NEED HAVE: test_answer for a test that needs NEED GPUs on a machine
# with HAVE: its skip there is "not checked: HAVE GPU(s), needs NEED", which fails nothing.
device_answer() {
  local a
  a=$(test_answer "$1" "$2")
  if [ "$a" = "NO (skipped)" ] && [ "${4:-0}" -lt "$3" ]; then
    echo "not checked: ${4:-0} GPU(s), needs $3"
  else
    echo "$a"
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  if [ $# -ne 4 ]; then
    echo "usage: scripts/gpu-check-verdict.sh NAME RC LIMIT LOG" >&2
    exit 2
  fi
  step_verdict "$@"
fi
