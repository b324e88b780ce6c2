#!/usr/bin/env bash
# Builds everything (scripts/setup.sh), checks the format of the C++ (clang-format) and lints
# the Python (ruff), then runs every test: the C++ suites (ctest) and the Python suite with the
# docs examples (pytest). Tests that need a GPU are labelled `gpu`
# (ctest) / marked `gpu` (pytest) and skip cleanly without one.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
export BUILD_DIR
"$ROOT/scripts/setup.sh"
# shellcheck disable=SC1091
source "$BUILD_DIR/env.sh"
JOBS=$(nproc 2>/dev/null || echo 2)

echo "== C++ format (clang-format) =="
"$ROOT/scripts/check_format.sh"

echo "== Python lint (ruff) =="
"$ROOT/scripts/check_python.sh"

echo "== C++ tests (ctest) =="
(cd "$BUILD_DIR" && ctest -j"$JOBS" --output-on-failure --timeout 600 "$@") 2>&1 | grep -v -E "^\s+[0-9]+ - .*\(Skipped\)$|\*\*\*Skipped"

echo "== Python tests (pytest) =="
cd "$ROOT"
"$TOKENTRACE_PY" -m pytest -q -p no:cacheprovider tests/python tests/torch_op
