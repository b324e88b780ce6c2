// Cost of the host patch table (CPU tensors), each enabled path next to its disabled one (no
// entry for the site: the call counter still advances): ApplyPatchesHost per call, for a
// one-position box and a full-tensor scale. The device paths are measured by
// patch_device_bench (no Google Benchmark needed, so it builds on the GPU machine).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "cuda/patch_apply.h"
#include "patch_test_util.h"

namespace tokentrace::patch::testing {
namespace {

void BM_Host(benchmark::State& state, bool one_position, bool enabled) {
  auto table = HostPatchTable::Create(BenchEntries(one_position, enabled), 2, nullptr);
  Tensor t = MakeTensor(DType::kBF16, one_position ? kBenchOneShape : kBenchFullShape);
  for (auto _ : state) {
    ApplyStatus st = ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, t.ndim(),
                                      t.shape.data(), t.strides.data());
    benchmark::DoNotOptimize(st.fired);
  }
  if (!one_position && enabled)
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(t.bytes.size()) * 2);
}

void Register() {
  for (bool one : {true, false}) {
    for (bool enabled : {true, false}) {
      const std::string name = std::string(one ? "one_position" : "full_scale") + "/" +
                               (enabled ? "enabled" : "disabled");
      benchmark::RegisterBenchmark(("host/" + name).c_str(), BM_Host, one, enabled);
    }
  }
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
