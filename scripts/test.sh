#!/usr/bin/env bash
# Builds everything (scripts/setup.sh), checks the format of the C++ (clang-format) and lints
# the Python (ruff), then runs every test: the C++ suites (ctest) and the Python suite with the
# docs examples (pytest), on the oldest supported torch and transformers (the pins of
# scripts/requirements.txt); then the Python suite again on the newest
# (scripts/requirements-newest.txt), in a second cached environment with its own build of the
# torch ops library. The C++ suites run once: nothing else in the build depends on torch.
# Tests that need a GPU are labelled `gpu` (ctest) / marked `gpu` (pytest) and skip cleanly
# without one. TOKENTRACE_SKIP_NEWEST=1 skips the second environment (a quick local run).
# Last, the vLLM tests (tests/vllm, marked `vllm`: vLLM's CPU build serving a tiny model under
# `tokentrace run`) in the vLLM environment of scripts/setup-vllm.sh: CI (CI=true) or
# TOKENTRACE_VLLM=1 makes it (cached under ~/.cache/tokentrace); otherwise they run when it is
# there, and one line says when it is not. TOKENTRACE_VLLM=0 skips them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export BUILD_DIR
"$ROOT/scripts/setup.sh"
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
JOBS=$(nproc 2>/dev/null || echo 2)

# The Python suite, then the real trained model's tests (marked real_model) in a process of their
# own, as a user's job runs it. (CI's newest run once saw SmolLM2, loaded late in the one long
# pytest process, answer garbage: torch had cached our torch.tensor wrapper as a device factory
# during an earlier test's trace, fixed in _common/op_groups.py, and test_ops.py's
# test_a_device_block_after_a_run_with_ops_still_places_torch_tensor guards it.)
python_tests() {
  "$TOKENTRACE_PY" -m pytest -q -p no:cacheprovider -m "not real_model" tests/python tests/torch_op
  "$TOKENTRACE_PY" -m pytest -q -p no:cacheprovider -m real_model tests/python
}

echo "== C++ format (clang-format) =="
"$ROOT/scripts/check_format.sh"

echo "== Python lint (ruff) =="
"$ROOT/scripts/check_python.sh"

echo "== C++ tests (ctest) =="
(cd "$BUILD_DIR" && ctest -j"$JOBS" --output-on-failure --timeout 600 "$@") 2>&1 | grep -v -E "^\s+[0-9]+ - .*\(Skipped\)$|\*\*\*Skipped"

echo "== Python tests (pytest), $("$TOKENTRACE_PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)') =="
cd "$ROOT"
python_tests

if [ -z "${TOKENTRACE_SKIP_NEWEST:-}" ]; then
  TOKENTRACE_NEWEST=1 "$ROOT/scripts/setup.sh"
  # shellcheck disable=SC1091
  source "$BUILD_DIR/env-newest.sh"
  echo "== Python tests (pytest), $("$TOKENTRACE_PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)') =="
  python_tests
fi

VLLM_VENV=${TOKENTRACE_VLLM_VENV:-$HOME/.cache/tokentrace/venv-vllm}
case "${TOKENTRACE_VLLM:-}" in
  0) echo "== vLLM tests: skipped (TOKENTRACE_VLLM=0) =="; exit 0 ;;
  1) WANT_VLLM=1 ;;
  *) WANT_VLLM=${CI:+1} ;;
esac
if [ -n "$WANT_VLLM" ] || [ -x "$VLLM_VENV/bin/python" ]; then
  VLLM_PY=$("$ROOT/scripts/setup-vllm.sh" | tail -1)
  echo "== vLLM tests (pytest -m vllm), $("$VLLM_PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' 2>/dev/null) =="
  # The vLLM environment has its own tokentrace (pip-installed against its torch): none of the
  # build's variables that env.sh / env-newest.sh exported above may reach it (the newest
  # torch's operator library loaded into vLLM's torch kills its worker at the first edit).
  # Its own `tokentrace` program comes first on PATH (the docs' examples call it by name).
  env -u TOKENTRACE_TORCH_OPS_LIB -u TOKENTRACE_NATIVE_DIR -u PYTHONPATH \
    PATH="$(dirname "$VLLM_PY"):$PATH" \
    "$VLLM_PY" -m pytest -q -p no:cacheprovider -m vllm tests/vllm
else
  echo "== vLLM tests: skipped: no vLLM environment (scripts/setup-vllm.sh makes it, or TOKENTRACE_VLLM=1) =="
fi
