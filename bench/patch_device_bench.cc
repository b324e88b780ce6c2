// What a device-side edit costs (against the targets in bench/README.md), with no library beyond
// the CUDA runtime so that it builds on the GPU machine (which has no Google Benchmark). Each
// enabled path is measured next to its disabled one: the entry is on another site, so the apply
// only advances the call counter. Prints a markdown table; bench/gpu_bench.sh runs it.
//
//   launch: host wall time per ApplyPatchesDevice call (one launch, no sync), batches of 256
//           launches between untimed stream syncs, median of 7 batches;
//   device: device time per apply, from CUDA events around a graph of 100 applies (launch gaps
//           are not counted), median of 15 graphs;
//   scale vs copy: a full-tensor scale against cudaMemcpy device-to-device of the same bytes
//           (both read and write them): copy time / scale time, medians of 15 graphs each.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/patch_apply.h"
#include "cuda/patch_device.h"
#include "patch_test_util.h"

namespace tokentrace::patch::testing {
namespace {

constexpr int kBatch = 100;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Setup {
  DevicePatchTable table;
  void* buf = nullptr;
  void* scratch = nullptr;
  size_t bytes = 0;
  std::vector<int64_t> shape, strides;
  cudaStream_t stream = nullptr;
  std::string error;

  Setup(bool one_position, bool enabled) {
    shape = one_position ? kBenchOneShape : kBenchFullShape;
    strides = {shape[1] * shape[2], shape[2], 1};
    bytes = static_cast<size_t>(shape[0] * shape[1] * shape[2]) * 2;
    if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&scratch, bytes) != cudaSuccess ||
        cudaMemset(buf, 0, bytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      error = cudaGetErrorString(cudaGetLastError());
      return;
    }
    UploadPatchTable(BenchEntries(one_position, enabled), 2, &table,
                     &error);  // waits for the memset
  }
  ~Setup() {
    if (stream != nullptr) cudaStreamDestroy(stream);
    cudaFree(buf);
    cudaFree(scratch);
  }
  cudaError_t Apply() {
    return ApplyPatchesDevice(table, 0, buf, DType::kBF16, 3, shape.data(), strides.data(), stream);
  }
};

double LaunchMicros(Setup& s) {
  std::vector<double> per_batch;
  for (int round = 0; round < 8; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 256; ++i) s.Apply();
    const auto t1 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(s.stream);  // keeps the launch queue from filling; not timed
    if (round > 0) {                  // the first is a warm-up
      per_batch.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 256);
    }
  }
  return Median(per_batch);
}

template <typename F>
cudaGraphExec_t Capture(cudaStream_t stream, F body) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  for (int i = 0; i < kBatch; ++i) body();
  if (cudaStreamEndCapture(stream, &graph) == cudaSuccess) {
    cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
  }
  return exec;
}

// Median device microseconds per captured item over `reps` launches of the graph.
double GraphMicros(cudaGraphExec_t exec, cudaStream_t stream, int reps = 15) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> v;
  for (int r = 0; r <= reps; ++r) {
    cudaEventRecord(a, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(b, stream);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (r > 0) v.push_back(ms * 1e3 / kBatch);  // the first is a warm-up
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Median(v);
}

double DeviceMicros(Setup& s) {
  cudaGraphExec_t exec = Capture(s.stream, [&] { s.Apply(); });
  if (exec == nullptr) return -1;
  const double us = GraphMicros(exec, s.stream);
  cudaGraphExecDestroy(exec);
  return us;
}

const char* Verdict(bool ok) { return ok ? "met" : "MISSED"; }

int Run() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("patch_device_bench: no CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("## Device patch table (%s): what an edit costs\n\n", prop.name);
  std::printf(
      "bf16 outputs: one-position box = column 1 of [1, 512, 2048] (`tt.zero`); full "
      "scale = all of [1, 4096, 4096] (32 MiB). Disabled: the entry is on another site, "
      "so the apply only advances the call counter.\n\n");
  std::printf("| what | enabled | disabled | target | |\n|---|---|---|---|---|\n");
  double launch[2][2] = {}, device[2][2] = {};
  for (int one = 1; one >= 0; --one) {
    for (int enabled = 1; enabled >= 0; --enabled) {
      Setup s(one, enabled);
      if (!s.error.empty()) {
        std::printf("patch_device_bench: setup failed: %s\n", s.error.c_str());
        return 1;
      }
      launch[one][enabled] = LaunchMicros(s);
      device[one][enabled] = DeviceMicros(s);
      const cudaError_t sticky = cudaStreamSynchronize(s.stream);
      if (sticky != cudaSuccess) {
        std::printf("patch_device_bench: %s\n", cudaGetErrorString(sticky));
        return 1;
      }
    }
  }
  std::printf("| host cost per apply, one-position box (µs) | %.2f | %.2f | ≤ 8 µs | %s |\n",
              launch[1][1], launch[1][0], Verdict(launch[1][1] <= 8.0));
  std::printf("| host cost per apply, full scale (µs) | %.2f | %.2f | ≤ 8 µs | %s |\n",
              launch[0][1], launch[0][0], Verdict(launch[0][1] <= 8.0));
  std::printf("| device time per apply, one-position box (µs) | %.2f | %.2f | ≤ 3 µs | %s |\n",
              device[1][1], device[1][0], Verdict(device[1][1] >= 0 && device[1][1] <= 3.0));
  std::printf("| device time per apply, full scale (µs) | %.1f | %.2f | — | |\n", device[0][1],
              device[0][0]);

  Setup s(/*one_position=*/false, /*enabled=*/true);
  cudaGraphExec_t scale = Capture(s.stream, [&] { s.Apply(); });
  cudaGraphExec_t copy = Capture(s.stream, [&] {
    cudaMemcpyAsync(s.scratch, s.buf, s.bytes, cudaMemcpyDeviceToDevice, s.stream);
  });
  if (scale == nullptr || copy == nullptr) {
    std::printf("patch_device_bench: graph capture failed\n");
    return 1;
  }
  const double scale_us = GraphMicros(scale, s.stream), copy_us = GraphMicros(copy, s.stream);
  const double scale_gbps = 2.0 * s.bytes / (scale_us * 1e-6) / 1e9;  // read + write
  const double copy_gbps = 2.0 * s.bytes / (copy_us * 1e-6) / 1e9;
  std::printf(
      "| full scale vs device-to-device copy of the same bytes (bandwidth ratio) | "
      "%.2f (scale %.0f GB/s, copy %.0f GB/s) | — | ≥ 0.70 | %s |\n\n",
      copy_us / scale_us, scale_gbps, copy_gbps, Verdict(copy_us / scale_us >= 0.70));
  cudaGraphExecDestroy(scale);
  cudaGraphExecDestroy(copy);
  return 0;
}

}  // namespace
}  // namespace tokentrace::patch::testing

int main() { return tokentrace::patch::testing::Run(); }
