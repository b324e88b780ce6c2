#!/usr/bin/env bash
# The one prepared script for the GPU machine (one H200; torch preinstalled as python3; no
# package registry). One call answers, in this order:
#   1. does every `gpu` test pass (ctest -L gpu, pytest -m gpu);
#   2. does the seed's first example (GPT-2 generate) record kernels per call on CUDA;
#   3. does the seed's second example give the same logits on CUDA through the device patch
#      table as through a plain hook;
#   4. does a CUDA-graph decode attribute replayed kernels to modules, and do rules for served
#      requests edit only their requests' rows when a decode graph captured before the first
#      step replays (vLLM's FULL decode graphs, emulated without vLLM: test_served_graphs.py);
#   4b. does `tokentrace import` of a torch.profiler trace taken on the GPU attribute each GPU
#      record as `tokentrace run` of the same job does (per token and module class: its
#      test_gpu_import.py runs among the other gpu tests);
#   5. are NCCL's kernels communication (name rule, src/core/comm_kernels.h): a world-size-1
#      NCCL all_reduce on one GPU, and a 2-rank one when there are 2 GPUs (else "not checked");
#   6. is each Triton kernel of a compiled tiny Llama's decode token attributed to modules or
#      counted (compiled under the trace, and compiled and warmed up before it), and, compiled
#      by generate itself (transformers' auto-compile, mode
#      "reduce-overhead"), each kernel replayed from its decode's CUDA graph (COMPILED_FILE, a
#      step of its own: three Inductor compiles with Triton, estimated at ~1.5 minutes on the
#      16-core H200 machine; optional: not run when out of time);
#   7. is vLLM traced as it serves on CUDA (tests/vllm, eager), and do rules for tagged
#      requests edit only their rows in compiled mode, whose decode replays CUDA graphs, where
#      vLLM is installed (else one line: not checked; optional);
#   8. the overhead table: plain, hooks only, summary, full, sample:16, bare CUPTI subscriber,
#      torch.profiler, on GPT-2-small and the Llama-1B shape.
# Answers 2-4 are tests of the `gpu` pytest run (named in ANSWERS below), which runs their
# files first, so they are in even when the run is cut off. Answer 5 is a step of its own
# (NCCL_FILE), short, right after: its 2-GPU test skips on one GPU, which the gpu steps
# would count as a failure.
#
#   OUT=<dir> scripts/gpu-check.sh [all|tests|bench|long]  (default all; $OUT: ./gpu-out)
#
# Sized for the device runner: one call of at most 10 minutes, out of 15 minutes of device
# time per session (machine start included), on a cold machine (a fresh build). The whole
# script keeps to BUDGET_S seconds (default 530, under 9 minutes): steps run in the order
# above, each gets at most its limit or what is left, and a step that no longer fits is
# recorded as "not run: out of time" instead of being cut off. It builds only the targets
# it runs. After the answers, if time is left: the launch, patch-table and graph-replay
# benchmarks and the demo (optional: not running them fails nothing). `tests` or `bench`
# reruns a phase alone (the build is reused on a warm machine); `long` is a second,
# optional call: the long run over 4096 tokens.
#
# SKIP_GPU=1 runs everything but the steps that need a GPU (they are listed as skipped and
# fail nothing): how the script's own time (the build) is measured on a CPU machine.
#
# The runner brings back at most 8 files from $OUT, so everything lands in these:
#   $OUT/gpu-check.md     the answers, the step table (rewritten after every step), the bench
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
BUDGET=${BUDGET_S:-530}
start=$(date +%s)
deadline=$((start + BUDGET))
WORK=$(mktemp -d /tmp/tt-gpu-check-XXXXXX)
SUMMARY=$OUT/gpu-check.md
LOG=$OUT/gpu-check.log
: >"$LOG"
declare -a rows=() answers=()
failed=0

# The tests that answer questions 2-4 (file::test, all parametrizations), and the gpu test
# files run first so that they do.
ANSWERS=(
  "the seed's first example records kernels per call (GPT-2 generate on CUDA)|test_gpu.py::test_seed_example_on_cuda_with_kernels"
  "the seed's second example gives the same logits through the device table as a plain hook|test_gpu.py::test_declarative_edit_on_cuda_matches_hook"
  "a CUDA-graph decode attributes replayed kernels to modules|test_gpu_graphs.py::test_replayed_kernels_keep_their_modules_and_count_as_tokens"
  "rules for served requests edit only their requests' rows when a decode CUDA graph replays (vLLM's FULL decode graphs, without vLLM)|test_served_graphs.py::test_on_cuda_decode_graph_replays_edit_the_rows_each_step_marks"
  "\`tokentrace import\` of a torch.profiler trace of a job attributes its records as \`tokentrace run\` of the same job, token for token|test_gpu_import.py::test_import_of_a_torch_profiler_trace_attributes_as_the_live_trace"
)
FIRST_FILES=("$ROOT/tests/python/test_gpu.py" "$ROOT/tests/python/test_gpu_graphs.py"
             "$ROOT/tests/python/test_served_graphs.py")
NCCL_FILE=$ROOT/tests/python/test_gpu_nccl.py
NCCL_ONE="NCCL kernels of a world-size-1 all_reduce are communication (comm column, export category)|test_gpu_nccl.py::test_one_rank_nccl_kernels_are_communication"
COMPILED_FILE=$ROOT/tests/python/test_gpu_compiled.py
COMPILED=(
  "each Triton kernel of a compiled Llama's decode token is attributed or counted|test_gpu_compiled.py::test_each_triton_kernel_of_a_decode_token_is_attributed_or_counted"
  "the same for a Llama compiled and warmed up before tt.trace(ops=True) (recovered kernel map)|test_gpu_compiled.py::test_triton_kernels_of_a_model_compiled_before_the_trace_are_attributed_or_counted"
  "each kernel replayed from the CUDA graph of a decode generate compiled itself (reduce-overhead) is attributed or counted|test_gpu_compiled.py::test_each_kernel_replayed_from_a_compiled_decodes_cuda_graph_is_attributed_or_counted"
)
NCCL_TWO="NCCL kernels of a 2-rank all_reduce are each rank's gpu coll column|test_gpu_nccl.py::test_two_ranks_nccl_kernels_are_the_gpu_comm_column"
# What the check runs: the library, the extension, the program, the two gpu test binaries
# and the bare CUPTI subscriber (setup.sh also builds the torch ops). The benchmarks build
# their own extra targets only when they run.
export TOKENTRACE_TARGETS="tokentrace_shim _native tokentrace_cli cupti_gpu_test patch_device_test bare_cupti_subscriber"

header() {
  echo "# tokentrace GPU check ($PHASE) — $(date -u +%Y-%m-%d) — $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown);" \
       "python: $TOKENTRACE_PYTHON ($("$TOKENTRACE_PYTHON" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' 2>&1 | tail -1))"
  echo
}
HEADER=$(header)

write_summary() {  # everything so far; called after every step, so a cut-off call keeps it
  {
    echo "$HEADER"
    if ((${#answers[@]})); then
      echo "| question | answer |"
      echo "|---|---|"
      printf '%s\n' "${answers[@]}"
      echo
    fi
    echo "| step | verdict | time | last line |"
    echo "|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "total: $(( $(date +%s) - start )) s of a $BUDGET s budget"
    [ -f "$OUT/bench-gpu.md" ] && { echo; cat "$OUT/bench-gpu.md"; }
  } >"$SUMMARY"
}

# step [-o] [-g] NAME LIMIT NEED CMD...: runs CMD for at most LIMIT seconds, or what is left
# of the budget; not run when less than NEED seconds are left. Logs, records a row, returns
# CMD's rc. -o: optional (not running it fails nothing); -g: needs the GPU (SKIP_GPU).
step() {
  local optional=0 gpu=0
  while [[ $1 == -* ]]; do
    [ "$1" = -o ] && optional=1
    [ "$1" = -g ] && gpu=1
    shift
  done
  local name=$1 limit=$2 need=$3; shift 3
  if [ "$gpu" = 1 ] && [ -n "${SKIP_GPU:-}" ]; then
    rows+=("| $name | skipped here (SKIP_GPU) | 0 s | needs the GPU |")
    echo "[gpu-check] $name: skipped (SKIP_GPU)"; write_summary
    return 124
  fi
  local left=$((deadline - $(date +%s)))
  if [ "$left" -lt "$need" ]; then
    rows+=("| $name | not run: out of time | 0 s | ${left} s were left, the step needs ~${need} s |")
    echo "[gpu-check] $name: not run, out of time"; write_summary
    [ "$optional" = 1 ] || failed=1
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0 slog="$WORK/$name.log"
  t0=$(date +%s)
  STEP_DEADLINE=$((t0 + limit)) timeout -k 5 "$limit" "$@" >"$slog" 2>&1
  local rc=$? t1 verdict last
  t1=$(date +%s)
  verdict=$(step_verdict "$name" "$rc" "$limit" "$slog")
  rc=$?
  [ $rc -eq 0 ] || failed=1
  last=$(step_summary_line "$slog")
  rows+=("| $name | $verdict | $((t1 - t0)) s | $last |")
  { echo "=================== $name: $verdict ($((t1 - t0)) s) ==================="
    tail -n 4000 "$slog"; echo; } >>"$LOG"
  echo "[gpu-check] $name: $verdict ($((t1 - t0)) s)"
  write_summary
  return $rc
}

# answer QUESTION VALUE ("not checked: ..." when the machine cannot check it, e.g. 1 GPU of 2)
answer() {
  answers+=("| $1 | $2 |")
  [ "$2" = yes ] || [[ $2 == "not checked: "* ]] || [ -n "${SKIP_GPU:-}" ] || failed=1
  write_summary
}

# answer_from LOG "QUESTION|file::test" [optional]: the test's verdict in LOG ("skipped here"
# under SKIP_GPU; for an optional step that did not run, "not checked: out of time")
answer_from() {
  if [ -n "${SKIP_GPU:-}" ]; then
    answer "${2%%|*}" "skipped here (SKIP_GPU)"
  elif [ -n "${3:-}" ] && [ ! -f "$1" ]; then
    answer "${2%%|*}" "not checked: out of time"
  else
    answer "${2%%|*}" "$(test_answer "$1" "${2#*|}" 2>/dev/null)"
  fi
}

gpu_tests() {
  local ctest_rc pytest_rc others=()
  step -g ctest-gpu 60 20 bash -c "cd '$BUILD_DIR' && ctest -L gpu --no-tests=error --output-on-failure -j2 --timeout 55"
  ctest_rc=$?
  # Every other test file too (-m gpu keeps the gpu tests): a gpu mark added anywhere runs.
  local f
  for f in "$ROOT"/tests/python/test_*.py "$ROOT"/tests/torch_op/test_*.py; do
    [[ " ${FIRST_FILES[*]} $NCCL_FILE $COMPILED_FILE " == *" $f "* ]] || others+=("$f")
  done
  step -g pytest-gpu 170 40 "$TOKENTRACE_PY" -m pytest -v --tb=short -p no:cacheprovider -m gpu \
    "${FIRST_FILES[@]}" "${others[@]}"
  pytest_rc=$?
  local all=yes q
  [ "$ctest_rc" -eq 0 ] && [ "$pytest_rc" -eq 0 ] || all="NO (see the steps below)"
  [ -n "${SKIP_GPU:-}" ] && all="skipped here (SKIP_GPU)"
  answer "every \`gpu\` test passes" "$all"
  for q in "${ANSWERS[@]}"; do
    answer_from "$WORK/pytest-gpu.log" "$q"
  done
}

# The NCCL step (a name without "gpu": the 2-GPU test may skip). Two processes start NCCL
# and trace 4 tokens each: ~10-15 s per test (estimated; the 2-GPU test skips on one GPU).
nccl_check() {
  step -g nccl 45 25 "$TOKENTRACE_PY" -m pytest -v --tb=short -p no:cacheprovider "$NCCL_FILE"
  answer_from "$WORK/nccl.log" "$NCCL_ONE"
  if [ -n "${SKIP_GPU:-}" ]; then
    answer "${NCCL_TWO%%|*}" "skipped here (SKIP_GPU)"
    return
  fi
  local gpus
  gpus=$("$TOKENTRACE_PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null)
  answer "${NCCL_TWO%%|*}" "$(device_answer "$WORK/nccl.log" "${NCCL_TWO#*|}" 2 "${gpus:-0}")"
}

# The compiled-model step: torch.compile with Triton compiles kernels in a worker pool (16
# cores there): ~20-30 s a graph for the tiny Llama's prefill and decode graphs, estimated
# (not yet measured on the machine), plus imports; default mode (prefill and decode graphs),
# then generate's own reduce-overhead compile (the decode graph; the prefill runs eagerly).
# Optional: a slow build leaves it out.
compiled_check() {
  step -o -g compiled-gpu 230 75 "$TOKENTRACE_PY" -m pytest -v -s --tb=short -p no:cacheprovider \
    -m gpu "$COMPILED_FILE"
  local c
  for c in "${COMPILED[@]}"; do
    answer_from "$WORK/compiled-gpu.log" "$c" optional
  done
}
# vLLM traced as it serves (tests/vllm, eager only: its compiled mode compiles for minutes),
# only where vLLM is installed: the machine has no registry to install it from. Optional.
VLLM_Q="vLLM's engine steps are the tokens, step_requests holds their requests and the engine core's file (or role) their lives (tests/vllm, eager, on CUDA)"
VLLM_GRAPHS_Q="rules for served requests edit only their requests' rows under vLLM's CUDA graphs (tests/vllm/test_vllm_requests.py, compiled, on CUDA)"
vllm_check() {
  if ! "$TOKENTRACE_PY" -c 'import vllm' >/dev/null 2>&1; then
    answer "$VLLM_Q" "not checked: vLLM is not installed on this machine (no registry to install it from)"
    answer "$VLLM_GRAPHS_Q" "not checked: vLLM is not installed on this machine"
    return
  fi
  step -o -g vllm 170 90 "$TOKENTRACE_PY" -m pytest -v --tb=short -p no:cacheprovider -m vllm \
    -k eager "$ROOT/tests/vllm"
  answer_from "$WORK/vllm.log" \
    "$VLLM_Q|test_vllm.py::test_a_traced_vllm_job_serves_the_same_tokens_and_records_its_steps" optional
  # Compiled mode on CUDA: vLLM captures CUDA graphs for decode (FULL and piecewise), which
  # replay the patch table's row masks at their fixed address. With time left only.
  step -o -g vllm-graphs 200 120 "$TOKENTRACE_PY" -m pytest -v --tb=short -p no:cacheprovider \
    -m vllm -k compiled "$ROOT/tests/vllm/test_vllm_requests.py"
  answer_from "$WORK/vllm-graphs.log" \
    "$VLLM_GRAPHS_Q|test_vllm_requests.py::test_tagged_rules_edit_only_their_requests_rows[compiled]" optional
}
write_summary
step build 300 60 env TOKENTRACE_SETUP_PYTHON="$TOKENTRACE_PYTHON" "$ROOT/scripts/setup.sh" || { cat "$SUMMARY"; rm -rf "$WORK"; exit 1; }
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
# bench/gpu_bench.sh with this check's build; the parts and their sizes are added.
BENCH=(env OUT="$OUT" LOG_DIR="$WORK/bench" BUILD_DIR="$BUILD_DIR" PYTHON="$TOKENTRACE_PY")
GPU_BENCH=$ROOT/bench/gpu_bench.sh
if [ "$PHASE" = all ] || [ "$PHASE" = tests ]; then
  gpu_tests
  nccl_check
  compiled_check
  vllm_check
fi
if [ "$PHASE" = all ] || [ "$PHASE" = bench ]; then
  # gpu_bench.sh keeps to the step's deadline itself (STEP_DEADLINE), part by part.
  step -g overhead 300 90 "${BENCH[@]}" PARTS=generate GEN_MODELS=gpt2,llama1b GEN_TOKENS=64 \
    GEN_SETUPS=plain,tt-off,tt-summary,tt-full,tt-sample16,bare-cupti,torch-profiler \
    GEN_REPEATS=3 GEN_LIMIT=300 "$GPU_BENCH"
  # With time left: the other benchmarks (their table is appended), then the demo.
  if step -o -g more-bench 150 60 "${BENCH[@]}" PARTS=launch,patch,graph OUT="$WORK/more" \
       "$GPU_BENCH"; then
    { echo; cat "$WORK/more/bench-gpu.md"; } >>"$OUT/bench-gpu.md" 2>/dev/null
  fi
fi
if [ "$PHASE" = all ] || [ "$PHASE" = tests ]; then
  step -o -g demo 40 30 "$TOKENTRACE_PY" -m tokentrace.demo --out-dir "$WORK/demo" \
    && cp "$WORK/demo/demo.png" "$OUT/demo.png" 2>/dev/null
fi
cat "$WORK"/bench/*.log >>"$LOG" 2>/dev/null
if [ "$PHASE" = long ]; then
  step -g long-run 450 120 "${BENCH[@]}" PARTS=long LONG_TOKENS=4096 LONG_LIMIT=440 "$GPU_BENCH"
  cat "$WORK"/bench/*.log >>"$LOG" 2>/dev/null
fi
write_summary
cat "$SUMMARY"
rm -rf "$WORK"
exit $failed
