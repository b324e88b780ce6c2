// Joiner throughput on the background thread: how many ring events and GPU kernel records it
// turns into rows per second. The input is token-shaped: a root call, 16 layers each with
// 3 module calls, ~45 launches per layer (~720 kernels per token, like the Llama-1B shape),
// then one GPU record per launch, then EndDrain. Items = events + records.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/config.h"
#include "core/event.h"
#include "core/joiner.h"
#include "core/records.h"

namespace tokentrace {
namespace {

constexpr int kLayers = 16;
constexpr int kModulesPerLayer = 3;
constexpr int kLaunchesPerModule = 15;

int64_t IdentityNs(uint64_t ticks) { return static_cast<int64_t>(ticks); }

struct TokenInput {
  std::vector<Event> events;
  std::vector<GpuActivity> records;
};

Event Make(EventKind kind, uint64_t ticks, uint64_t call, uint64_t a, uint32_t site, uint32_t k,
           uint32_t token) {
  return MakeEvent(kind, ticks, call, a, 0, site, k, token, /*generation=*/1);
}

// Token `token` of a synthetic job; ids continue from *next_call / *next_corr.
TokenInput MakeToken(uint32_t token, uint64_t* next_call, uint64_t* next_corr, uint64_t* t) {
  static const char* kNames[4] = {"ampere_sgemm_128x64_tn", "vectorized_elementwise_kernel",
                                  "reduce_kernel", "flash_fwd_kernel"};
  TokenInput in;
  const uint64_t root = ++*next_call;
  in.events.push_back(Make(EventKind::kPush, (*t)++, root, 0, 1, token, token));
  for (int l = 0; l < kLayers; ++l) {
    const uint64_t layer = ++*next_call;
    in.events.push_back(Make(EventKind::kPush, (*t)++, layer, root, 2 + l, token, token));
    for (int m = 0; m < kModulesPerLayer; ++m) {
      const uint64_t mod = ++*next_call;
      in.events.push_back(
          Make(EventKind::kPush, (*t)++, mod, layer, 100 + l * 4 + m, token, token));
      for (int k = 0; k < kLaunchesPerModule; ++k) {
        const uint64_t corr = ++*next_corr;
        in.events.push_back(Make(EventKind::kLaunch, (*t)++, mod, corr, 0, 0, token));
        GpuActivity a;
        a.correlation_id = corr;
        a.begin_ns = static_cast<int64_t>(*t) * 10;
        a.end_ns = a.begin_ns + 5000;
        a.stream = 7;
        a.name = kNames[corr % 4];
        in.records.push_back(a);
      }
      in.events.push_back(Make(EventKind::kPop, (*t)++, mod, 0, 100 + l * 4 + m, 0, token));
    }
    in.events.push_back(Make(EventKind::kPop, (*t)++, layer, 0, 2 + l, 0, token));
  }
  in.events.push_back(Make(EventKind::kPop, (*t)++, root, 0, 1, 0, token));
  return in;
}

void BM_JoinerToken(benchmark::State& state) {
  KernelMode mode;
  mode.kind = static_cast<KernelMode::Kind>(state.range(0));
  Joiner joiner(mode, &IdentityNs);
  uint64_t next_call = 0, next_corr = 0, t = 1;
  uint32_t token = 0;
  int64_t events = 0, records = 0, rows = 0;
  Batch batch;
  for (auto _ : state) {
    state.PauseTiming();
    TokenInput in = MakeToken(++token, &next_call, &next_corr, &t);
    batch = Batch();
    state.ResumeTiming();
    for (const Event& e : in.events) joiner.OnEvent(0, e, &batch);
    for (const GpuActivity& a : in.records) joiner.OnActivity(a, &batch);
    joiner.EndDrain(&batch);
    events += static_cast<int64_t>(in.events.size());
    records += static_cast<int64_t>(in.records.size());
    rows += static_cast<int64_t>(batch.kernels.size() + batch.call_gpu.size());
  }
  state.SetItemsProcessed(events + records);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["kernels_per_s"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
  state.counters["kernels_per_token"] =
      static_cast<double>(records) / static_cast<double>(state.iterations());
  state.counters["gpu_rows_per_token"] =
      static_cast<double>(rows) / static_cast<double>(state.iterations());
}
BENCHMARK(BM_JoinerToken)
    ->ArgName("mode")  // 1 summary, 2 full (KernelMode::Kind)
    ->Arg(KernelMode::kSummary)
    ->Arg(KernelMode::kFull)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tokentrace
