#!/usr/bin/env bash
# Device checks of the patch table, sized for a short GPU session: build only the cuda targets
# for sm_90, run the device tests, then a short benchmark. Results go to $OUT (or ./gpu-out).
#   bash tests/cuda/gpu_check.sh
set -u
out="${OUT:-gpu-out}"
mkdir -p "$out"
build="${BUILD_DIR:-build-gpu}"
nvidia-smi -L > "$out/device.txt" 2>&1
cmake -S . -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DTOKENTRACE_BUILD_BENCH=OFF \
  > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 2; }
ninja -C "$build" patch_host_test patch_device_test patch_bench > "$out/build.log" 2>&1 \
  || { tail -40 "$out/build.log"; exit 3; }
rc=0
"$build/patch_device_test" --gtest_brief=1 > "$out/patch_device_test.txt" 2>&1 || rc=1
tail -5 "$out/patch_device_test.txt"
"$build/patch_host_test" --gtest_brief=1 > "$out/patch_host_test.txt" 2>&1 || rc=1
tail -2 "$out/patch_host_test.txt"
timeout 120 "$build/patch_bench" --benchmark_min_time=0.2 --benchmark_out="$out/patch_bench.json" \
  --benchmark_out_format=json > "$out/patch_bench.txt" 2>&1 || rc=1
cat "$out/patch_bench.txt"
exit $rc
