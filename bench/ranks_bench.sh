#!/usr/bin/env bash
# Cross-rank report and merge at scale: ranks_bench over a grid of rank and
# token counts; prints the markdown rows for bench/results/. Needs ~1 GB free in $TMPDIR.
#   bash bench/ranks_bench.sh [BUILD_DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tt_ranks_bench_XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "| ranks | tokens | calls | input MiB | write s | report s | report peak MiB | merge s | merge peak MiB | merged MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for shape in "8 10000" "16 10000" "32 10000" "64 2500" "64 5000" "64 10000"; do
  # shellcheck disable=SC2086
  "$BUILD/ranks_bench" "$BUILD/tokentrace" "$WORK/run" $shape
  rm -rf "$WORK/run"
done
