// Cost of the patch table, each enabled path next to its disabled one (no entry for the site:
// the call counter still advances).
//
// Host (always): ApplyPatchesHost per call, one-position box and full-tensor scale.
// Device (only when a CUDA device is present):
//   launch/*: host wall time per ApplyPatchesDevice call (one launch, no sync);
//   device/*: device time per apply, from cudaEvents around a CUDA graph of kBatch applies
//             (so launch gaps are not counted);
//   device/full_scale_vs_copy: scale of the whole output vs cudaMemcpyDeviceToDevice of the same
//             bytes; counter `bw_ratio` = copy time / scale time (both read and write N bytes).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "cuda/patch_apply.h"
#include "cuda/patch_device.h"
#include "patch_test_util.h"

namespace tokentrace::patch::testing {
namespace {

constexpr int kBatch = 100;
const std::vector<int64_t> kOneShape = {1, 512, 2048};    // a projection output at prefill
const std::vector<int64_t> kFullShape = {1, 4096, 4096};  // 32 MiB of bf16

// enabled: the entry is on the applied site 0; disabled: on site 1, site 0 has none.
std::vector<PatchEntry> Entries(bool one_position, bool enabled) {
  const uint32_t site = enabled ? 0 : 1;
  if (one_position) return {Entry(site, PatchOp::kZero, Every(), {S(), I(1)})};
  return {Entry(site, PatchOp::kScale, Every(), {}, 0.5f)};
}

void BM_Host(benchmark::State& state, bool one_position, bool enabled) {
  auto table = HostPatchTable::Create(Entries(one_position, enabled), 2, nullptr);
  Tensor t = MakeTensor(DType::kBF16, one_position ? kOneShape : kFullShape);
  for (auto _ : state) {
    ApplyStatus st = ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, t.ndim(),
                                      t.shape.data(), t.strides.data());
    benchmark::DoNotOptimize(st.fired);
  }
  if (!one_position && enabled)
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(t.bytes.size()) * 2);
}

struct DeviceSetup {
  DevicePatchTable table;
  void* buf = nullptr;
  void* scratch = nullptr;
  size_t bytes = 0;
  Tensor shape_only;
  cudaStream_t stream = nullptr;
  DeviceSetup(bool one_position, bool enabled) {
    std::string error;
    UploadPatchTable(Entries(one_position, enabled), 2, &table, &error);
    shape_only.dtype = DType::kBF16;
    shape_only.shape = one_position ? kOneShape : kFullShape;
    int64_t n = 1;
    for (int64_t s : shape_only.shape) n *= s;
    shape_only.strides = {shape_only.shape[1] * shape_only.shape[2], shape_only.shape[2], 1};
    bytes = static_cast<size_t>(n) * 2;
    cudaMalloc(&buf, bytes);
    cudaMalloc(&scratch, bytes);
    cudaMemset(buf, 0, bytes);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  }
  ~DeviceSetup() {
    cudaStreamDestroy(stream);
    cudaFree(buf);
    cudaFree(scratch);
  }
  cudaError_t Apply() {
    return ApplyPatchesDevice(table, 0, buf, shape_only.dtype, shape_only.ndim(),
                              shape_only.shape.data(), shape_only.strides.data(), stream);
  }
};

void BM_DeviceLaunch(benchmark::State& state, bool one_position, bool enabled) {
  DeviceSetup s(one_position, enabled);
  int64_t n = 0;
  for (auto _ : state) {
    s.Apply();
    if (++n % 256 == 0) {  // keep the launch queue from filling; not timed
      state.PauseTiming();
      cudaStreamSynchronize(s.stream);
      state.ResumeTiming();
    }
  }
  cudaStreamSynchronize(s.stream);
}

// Device time of one captured batch, per item.
float TimeGraph(cudaGraphExec_t exec, cudaStream_t stream) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaEventRecord(a, stream);
  cudaGraphLaunch(exec, stream);
  cudaEventRecord(b, stream);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms / kBatch;
}

template <typename F>
cudaGraphExec_t Capture(cudaStream_t stream, F body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec = nullptr;
  cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  for (int i = 0; i < kBatch; ++i) body();
  cudaStreamEndCapture(stream, &graph);
  cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  return exec;
}

void BM_DeviceTime(benchmark::State& state, bool one_position, bool enabled) {
  DeviceSetup s(one_position, enabled);
  cudaGraphExec_t exec = Capture(s.stream, [&] { s.Apply(); });
  TimeGraph(exec, s.stream);  // warm up
  for (auto _ : state) state.SetIterationTime(TimeGraph(exec, s.stream) / 1e3);
  if (!one_position && enabled)
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.bytes) * 2);
  cudaGraphExecDestroy(exec);
}

void BM_DeviceScaleVsCopy(benchmark::State& state) {
  DeviceSetup s(/*one_position=*/false, /*enabled=*/true);
  cudaGraphExec_t scale = Capture(s.stream, [&] { s.Apply(); });
  cudaGraphExec_t copy = Capture(s.stream, [&] {
    cudaMemcpyAsync(s.scratch, s.buf, s.bytes, cudaMemcpyDeviceToDevice, s.stream);
  });
  TimeGraph(scale, s.stream);
  TimeGraph(copy, s.stream);
  double scale_ms = 0, copy_ms = 0;
  for (auto _ : state) {
    const float a = TimeGraph(scale, s.stream), b = TimeGraph(copy, s.stream);
    scale_ms += a;
    copy_ms += b;
    state.SetIterationTime(a / 1e3);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["scale_GBps"] = 2.0 * s.bytes / (scale_ms / n * 1e-3) / 1e9;
  state.counters["copy_GBps"] = 2.0 * s.bytes / (copy_ms / n * 1e-3) / 1e9;
  state.counters["bw_ratio"] = copy_ms / scale_ms;
  cudaGraphExecDestroy(scale);
  cudaGraphExecDestroy(copy);
}

void Register() {
  for (bool one : {true, false}) {
    for (bool enabled : {true, false}) {
      const std::string name = std::string(one ? "one_position" : "full_scale") + "/" +
                               (enabled ? "enabled" : "disabled");
      benchmark::RegisterBenchmark(("host/" + name).c_str(), BM_Host, one, enabled);
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return;  // host-only machine: the device benchmarks are not registered
  }
  for (bool one : {true, false}) {
    for (bool enabled : {true, false}) {
      const std::string name = std::string(one ? "one_position" : "full_scale") + "/" +
                               (enabled ? "enabled" : "disabled");
      benchmark::RegisterBenchmark(("launch/" + name).c_str(), BM_DeviceLaunch, one, enabled);
      benchmark::RegisterBenchmark(("device/" + name).c_str(), BM_DeviceTime, one, enabled)
          ->UseManualTime();
    }
  }
  benchmark::RegisterBenchmark("device/full_scale_vs_copy", BM_DeviceScaleVsCopy)->UseManualTime();
}

}  // namespace
}  // namespace tokentrace::patch::testing

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  tokentrace::patch::testing::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
