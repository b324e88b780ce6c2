#!/usr/bin/env bash
# The main job: builds (scripts/setup.sh), traces a tiny randomly initialised GPT-2's
# `generate` (on the GPU if there is one, else the CPU), prints the per-token report and
# writes a plot. No downloads of weights: the model is built from a config.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export BUILD_DIR
"$ROOT/scripts/setup.sh"
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
OUT_DIR=${DEMO_OUT:-$ROOT/demo-out}
mkdir -p "$OUT_DIR"
exec "$TOKENTRACE_PY" -m tokentrace.demo --out-dir "$OUT_DIR" "$@"
