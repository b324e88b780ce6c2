#!/usr/bin/env bash
# Installs what the build and the tests need, then builds. Idempotent: a second run only
# rebuilds what changed. Usable on a fresh CPU machine (Debian, CUDA toolkit at
# /usr/local/cuda) and on the GPU machine (preinstalled torch, no package registry).
#
# Environment:
#   TOKENTRACE_SETUP_PYTHON  use this interpreter (must have torch, transformers, nanobind,
#                      pytest) instead of the cached environment. Not TOKENTRACE_PYTHON: that
#                      one is what env.sh exports for `tokentrace plot`, so a shell that sourced
#                      one environment's env.sh would make the next setup build the other with it
#   TOKENTRACE_VENV    where the cached environment lives (default ~/.cache/tokentrace/venv)
#   BUILD_DIR          build directory (default <repo>/build)
#   TOKENTRACE_NO_APT  set: never call apt-get (a machine with no package registry, where
#                      apt-get would only spend its timeouts); build with what is installed
#   TOKENTRACE_TARGETS ninja targets to build (default: all); scripts/gpu-check.sh builds
#                      only what it runs
#   TOKENTRACE_NEWEST  set: the second environment, with the newest torch and transformers
#                      (scripts/requirements-newest.txt) in ~/.cache/tokentrace/venv-newest;
#                      only the torch ops library is built for it ($BUILD_DIR/torch-ops-newest:
#                      the rest of the build does not depend on torch), after a first plain run
# Writes $BUILD_DIR/env.sh (env-newest.sh), which test.sh and demo.sh source.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
NEWEST=${TOKENTRACE_NEWEST:-}
SUFFIX=${NEWEST:+-newest}
VENV=${TOKENTRACE_VENV:-$HOME/.cache/tokentrace/venv$SUFFIX}
log() { echo "[setup] $*" >&2; }

# 1. System packages (only the missing ones; needs root or sudo when something is missing).
need=()
for pkg in build-essential cmake ninja-build libgtest-dev libgmock-dev libbenchmark-dev \
           libsqlite3-dev sqlite3 libre2-dev python3-venv nlohmann-json3-dev zlib1g-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  if [ -n "${TOKENTRACE_NO_APT:-}" ]; then
    log "not installing ${need[*]} (TOKENTRACE_NO_APT); building with what is installed"
  elif command -v apt-get >/dev/null 2>&1; then
    SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo
    log "installing system packages: ${need[*]}"
    if ! { timeout 120 $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
           timeout 600 $SUDO apt-get install -y -qq "${need[@]}" >/dev/null; }; then
      # No registry (the GPU machine): build with what is there; CMake falls back (bundled
      # SQLite header, no C++ tests without GoogleTest) and says so.
      log "could not install ${need[*]}; continuing with what is installed"
    fi
  else
    log "missing system packages (${need[*]}) and no apt-get; install them by hand"
  fi
fi
CUDA_ROOT=${CUDA_ROOT:-/usr/local/cuda}
if [ ! -f "$CUDA_ROOT/include/nvtx3/nvToolsExt.h" ] || [ ! -f "$CUDA_ROOT/include/cupti.h" ]; then
  echo "tokentrace: the CUDA toolkit headers (nvtx3, cupti.h) are needed to build; none at $CUDA_ROOT." >&2
  echo "            Install the CUDA toolkit or set CUDA_ROOT." >&2
  exit 1
fi

# 2. Python: an explicit interpreter, the cached venv, or a system python that already has
#    everything (the GPU machine), else create the venv from scripts/requirements.txt.
has_all() { "$1" -c 'import torch, transformers, nanobind, pytest, safetensors, matplotlib' >/dev/null 2>&1; }
REQ="$ROOT/scripts/requirements.txt"
if [ -n "$NEWEST" ]; then
  # requirements.txt with its torch and transformers pins replaced by the newest ones
  mkdir -p "$BUILD_DIR"
  { grep -v -E '^(torch|transformers)==' "$REQ"; grep -E '==' "$ROOT/scripts/requirements-newest.txt"; } \
    > "$BUILD_DIR/requirements-newest.txt"
  REQ="$BUILD_DIR/requirements-newest.txt"
fi
# One stamp per requirements text: a changed file (a package added) installs once, and
# branches that differ in requirements share the cached venv without reinstalling in turn.
NODEPS="$ROOT/scripts/requirements-nodeps.txt"
STAMP="$VENV/.tokentrace-requirements-$(cat "$REQ" "$NODEPS" | sha256sum | cut -c1-16)"
if [ -n "${TOKENTRACE_SETUP_PYTHON:-}" ]; then
  PY=$TOKENTRACE_SETUP_PYTHON
elif [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && has_all "$VENV/bin/python"; then
  PY=$VENV/bin/python
elif [ -z "$NEWEST" ] && [ ! -x "$VENV/bin/python" ] && has_all python3; then
  PY=$(command -v python3)  # e.g. the GPU machine: torch preinstalled, no registry
else
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating the Python environment in $VENV (cached across runs)"
    python3 -m venv "$VENV"
  fi
  log "installing Python packages (first run downloads torch: a few minutes)"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q -r "$REQ"
  "$VENV/bin/pip" install -q --no-deps -r "$NODEPS"
  cat "$REQ" "$NODEPS" > "$STAMP"
  PY=$VENV/bin/python
fi
log "python: $PY ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"

# 3. Build (native library, program, tests, benchmarks, device code, Python extension). The
#    newest environment reuses it: only the torch ops library depends on torch, and both
#    environments are made from the same python3, so the extension loads in either.
if [ -n "$NEWEST" ] && [ ! -f "$BUILD_DIR/build.ninja" ]; then
  echo "tokentrace: TOKENTRACE_NEWEST=1 needs the build of a plain scripts/setup.sh run in $BUILD_DIR first" >&2
  exit 1
fi
CUDA_FLAG=ON
command -v "$CUDA_ROOT/bin/nvcc" >/dev/null 2>&1 || CUDA_FLAG=OFF
if [ -n "$NEWEST" ]; then
  log "newest environment: the build in $BUILD_DIR is reused"
elif [ ! -f "$BUILD_DIR/build.ninja" ]; then
  log "configuring $BUILD_DIR"
  PATH="$CUDA_ROOT/bin:$PATH" cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTOKENTRACE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$PY" -DTOKENTRACE_BUILD_CUDA=$CUDA_FLAG \
    -DTOKENTRACE_CUDA_ROOT="$CUDA_ROOT" >/dev/null
fi
[ -n "$NEWEST" ] || log "building (ninja; log in $BUILD_DIR/build.log)"
# shellcheck disable=SC2086  # a list of targets
if [ -z "$NEWEST" ] && ! PATH="$CUDA_ROOT/bin:$PATH" ninja -C "$BUILD_DIR" ${TOKENTRACE_TARGETS:-} >"$BUILD_DIR/build.log" 2>&1; then
  grep -E -A5 "error|FAILED" "$BUILD_DIR/build.log" | head -60 >&2
  echo "tokentrace: the build failed; the whole log is $BUILD_DIR/build.log" >&2
  exit 1
fi

# 4. The patch table as PyTorch operators (libtokentrace_torch_ops.so, cuda/torch/), built against
#    this python's torch into $BUILD_DIR/torch-ops; what the declarative edits run through. CUDA
#    only when nvcc exists and the torch is a CUDA build (build.sh decides); ninja rebuilds only
#    what changed.
TORCH_OPS_DIR="$BUILD_DIR/torch-ops$SUFFIX"
log "building the torch ops (log in $TORCH_OPS_DIR.log)"
if ! PATH="$CUDA_ROOT/bin:$PATH" bash "$ROOT/cuda/torch/build.sh" "$TORCH_OPS_DIR" "$PY" >"$TORCH_OPS_DIR.log" 2>&1; then
  grep -E -A5 "error|FAILED|Error" "$TORCH_OPS_DIR.log" | head -60 >&2
  echo "tokentrace: the torch ops build failed; the whole log is $TORCH_OPS_DIR.log" >&2
  exit 1
fi

cat > "$BUILD_DIR/env$SUFFIX.sh" <<ENV
# Written by scripts/setup.sh: the environment of the tests, the demo and the benchmarks.
export TOKENTRACE_PY="$PY"
export TOKENTRACE_PYTHON="$PY"  # the interpreter \`tokentrace plot\` runs
export TOKENTRACE_NATIVE_DIR="$BUILD_DIR"
export TOKENTRACE_TORCH_OPS_LIB="$TORCH_OPS_DIR/libtokentrace_torch_ops.so"
export PYTHONPATH="$ROOT/python\${PYTHONPATH:+:\$PYTHONPATH}"
export PATH="$BUILD_DIR:\$PATH"
ENV
log "ready: $BUILD_DIR"
