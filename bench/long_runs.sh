#!/usr/bin/env bash
# Long runs: records a foreign-NVTX job of N tokens (bench/long_run_job.cc: 12 calls a token)
# under `tokentrace run --on-full wait`, then times each reader on the file, one fresh process
# each (wall seconds and peak resident memory from /usr/bin/time). Prints a Markdown table.
#
#   bash bench/long_runs.sh [N...]          # default: 1000 100000 1000000
#   BUILD=build-old PYPATH=old/python LABEL=before bash bench/long_runs.sh 1000000
#
# Environment: BUILD (the build dir: tokentrace, libtokentrace.so, long_run_job; default
# build), RECORD_BUILD (the build whose tokentrace records the job; default BUILD: another
# one times today's readers on files an older writer wrote), PYPATH (the python/ dir whose tokentrace package the Python readers import; default
# python), PYTHON (default $TOKENTRACE_PY, else the cached venv's), WORK (where the traces go;
# default /tmp/tt-long-runs; each N's file is removed after its readers unless KEEP=1),
# LABEL (a word for the table's title).
set -u
cd "$(dirname "$0")/.."
build="${BUILD:-build}"
native="$(cd "$build" && pwd)"  # where _native*.so is
record="${RECORD_BUILD:-$build}"
pypath="$(cd "${PYPATH:-python}" && pwd)"
python="${PYTHON:-${TOKENTRACE_PY:-$HOME/.cache/tokentrace/venv/bin/python}}"
work="${WORK:-/tmp/tt-long-runs}"
label="${LABEL:-$(git rev-parse --short HEAD 2>/dev/null)}"
[ $# -gt 0 ] || set -- 1000 100000 1000000
mkdir -p "$work"
for f in "$build/tokentrace" "$build/libtokentrace.so" "$build/long_run_job"; do
  [ -e "$f" ] || { echo "long_runs.sh: $f is missing (build it: ninja -C $build)" >&2; exit 2; }
done

# measure NAME CMD...: one table row "| NAME | wall s | peak MiB | rc |", the output in
# $work/NAME.out (stdout) and $work/NAME.err.
measure() {
  local name=$1; shift
  local times="$work/time.txt"
  /usr/bin/time -f "%e %M" -o "$times" "$@" > "$work/$name.out" 2> "$work/$name.err"
  local rc=$?
  read -r wall kib < <(tail -1 "$times")
  printf "| %s | %.2f | %.0f | %s |\n" "$name" "$wall" "$((kib / 1024))" \
    "$([ "$rc" = 0 ] && echo ok || echo "rc $rc: $(tail -c 200 "$work/$name.err" | tr '\n' ' ')")"
}

echo "## Long runs ($label, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the start)"
echo
echo "Job: \`tokentrace run --on-full wait --token-range '^decode_step\$' -- long_run_job N\`"
echo "(12 calls a token, no kernels), recorded by $record, read by $build."
echo "Readers run one at a time, each a fresh process."
for n in "$@"; do
  trace="$work/long-$n.sqlite"
  rm -f "$trace" "$trace-wal" "$trace-shm"
  echo
  echo "### $n tokens"
  echo
  echo "| step | wall (s) | peak RSS (MiB) | |"
  echo "|---|---|---|---|"
  measure "run" "$record/tokentrace" run --on-full wait --token-range '^decode_step$' \
    --out "$trace" -- "$record/long_run_job" "$n"
  measure "report" "$build/tokentrace" report "$trace"
  measure "info" "$build/tokentrace" info "$trace"
  measure "plot" env TOKENTRACE_PYTHON="$python" PYTHONPATH="$pypath" TOKENTRACE_NATIVE_DIR="$native" \
    "$build/tokentrace" plot "$trace" -o "$work/long-$n.png"
  measure "tt.load().tokens" env PYTHONPATH="$pypath" TOKENTRACE_NATIVE_DIR="$native" "$python" -c \
    "import sys, tokentrace as tt; t = tt.load(sys.argv[1]); print(len(t.tokens))" "$trace"
  measure "tt.load().tokens, every row" env PYTHONPATH="$pypath" TOKENTRACE_NATIVE_DIR="$native" "$python" -c \
    "import sys, tokentrace as tt; t = tt.load(sys.argv[1]); print(sum(r.cpu_ms for r in t.tokens))" "$trace"
  measure "tt.load().tokens[mid]" env PYTHONPATH="$pypath" TOKENTRACE_NATIVE_DIR="$native" "$python" -c \
    "import sys, tokentrace as tt; t = tt.load(sys.argv[1]).tokens; print(t[len(t) // 2])" "$trace"
  mid=$((n / 2))
  measure "report --tokens $mid:$((mid + 99))" "$build/tokentrace" report "$trace" \
    --tokens "$mid:$((mid + 99))"
  bytes=$(stat -c %s "$trace")
  calls=$("$python" -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM calls').fetchone()[0])" "$trace")
  echo
  echo "file: $((bytes / 1048576)) MiB, $calls calls, $(awk -v b="$bytes" -v c="$calls" 'BEGIN { printf "%.1f", c ? b / c : 0 }') bytes a call;" \
    "stderr of report: $(head -c 300 "$work/report.err" | tr '\n' ' ')"
  [ -n "${KEEP:-}" ] || rm -f "$trace" "$trace-wal" "$trace-shm" "$work/long-$n.png"
done
