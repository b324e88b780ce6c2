#!/usr/bin/env bash
# Lints the Python sources with ruff (pyproject.toml [tool.ruff]: pycodestyle, pyflakes, import
# order, 100 columns) and type-checks the package with mypy ([tool.mypy]). Both come from
# scripts/requirements.txt; an interpreter without them (the GPU machine's own python) skips
# the check and says so.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${TOKENTRACE_PY:-python3}
if ! "$PY" -m ruff --version >/dev/null 2>&1; then
  echo "check_python: ruff is not installed for $PY; the Python lint is skipped"
  exit 0
fi
if ! "$PY" -m ruff check --quiet --output-format concise .; then
  echo "check_python: fix the lines above (many with: $PY -m ruff check --fix FILE)" >&2
  exit 1
fi
echo "check_python: the Python sources pass ruff"
# The package's types (pyproject.toml [tool.mypy]); mypy comes from scripts/requirements.txt too.
if ! "$PY" -m mypy --version >/dev/null 2>&1; then
  echo "check_python: mypy is not installed for $PY; the type check is skipped"
  exit 0
fi
if ! "$PY" -m mypy --no-error-summary; then
  echo "check_python: the package's types do not check (lines above; config: pyproject.toml [tool.mypy])" >&2
  exit 1
fi
echo "check_python: the package passes mypy"
