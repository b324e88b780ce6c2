#!/usr/bin/env bash
# Builds libtokentrace_torch_ops.so against the torch of a Python environment.
#
#   cuda/torch/build.sh [BUILD_DIR] [PYTHON]          (defaults: build-torchop, see below)
#   TOKENTRACE_TORCH_OPS_CUDA=OFF cuda/torch/build.sh  (CPU only, e.g. for a CPU-only torch)
#
# PYTHON defaults to the dev venv ($TOKENTRACE_VENV, else ~/.cache/tokentrace/venv, as
# scripts/setup.sh makes it) when it exists, else python3. CUDA is on when nvcc is found (PATH or /usr/local/cuda/bin) and the torch is a CUDA
# build; CMAKE_CUDA_ARCHITECTURES (env) overrides the default (90).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build-torchop}"
py="${2:-}"
if [[ -z "$py" ]]; then
  venv="${TOKENTRACE_VENV:-$HOME/.cache/tokentrace/venv}"
  if [[ -x "$venv/bin/python" ]]; then py="$venv/bin/python"
  else py=python3; fi
fi
read -r torch_dir abi torch_cuda < <("$py" -c \
  'import os, torch; print(os.path.dirname(torch.__file__), int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.version.cuda or "none")')
nvcc="$(command -v nvcc || true)"
[[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
cuda="${TOKENTRACE_TORCH_OPS_CUDA:-}"
if [[ -z "$cuda" ]]; then
  if [[ -n "$nvcc" && "$torch_cuda" != none ]]; then cuda=ON; else cuda=OFF; fi
fi
args=(-S "$here" -B "$build" -DTORCH_PACKAGE_DIR="$torch_dir" -DTORCH_CXX11_ABI="$abi"
      -DTOKENTRACE_TORCH_OPS_CUDA="$cuda" -DPython_EXECUTABLE="$(command -v "$py")")
# Ninja for a new build directory (a rebuild with nothing changed is then a no-op in ~0.1 s); an
# existing one keeps the generator it was configured with.
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then args+=(-G Ninja); fi
if [[ "$cuda" == ON ]]; then
  [[ -n "$nvcc" ]] && args+=(-DCMAKE_CUDA_COMPILER="$nvcc")
  [[ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]] && args+=(-DCMAKE_CUDA_ARCHITECTURES="$CMAKE_CUDA_ARCHITECTURES")
fi
echo "tokentrace: building torch ops (torch $torch_dir, cxx11 abi $abi, cuda $cuda) in $build"
cmake "${args[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"
echo "tokentrace: built $build/libtokentrace_torch_ops.so"
