// The recorder's hot path, called directly (no NVTX, no CUPTI): what a CUPTI launch callback
// and an NVTX handler cost inside libtokentrace, each next to its inactive path.
//
//   BM_RecorderLaunch/active:0  no session: one relaxed load and return
//   BM_RecorderLaunch/active:1  the launch-callback body (correlation insert): innermost open
//                               call and token + one 48-byte Event appended to this thread's
//                               ring. Target: <= 50 ns.
//   BM_RecorderPushPop          a call opened and closed (what an NVTX pair costs past the
//                               NVTX dispatch)
//   BM_RingAppend               ThreadBuffer::Append alone (the store into the ring)
//
// Rings hold 65536 events; every kBatch operations the benchmark pauses and drains them (as
// the background thread would), so the timed loop never measures the "ring full" drop path.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstring>

#include "core/buffer_registry.h"
#include "core/clock.h"
#include "core/recorder.h"
#include "core/site_registry.h"
#include "core/thread_buffer.h"

namespace tokentrace {
namespace {

constexpr int kBatch = 8192;
constexpr uint32_t kRing = 1u << 16;

// Empties every ring as the background thread would; counts events dropped on a full ring.
void Drain(benchmark::State& state) {
  uint64_t dropped = 0;
  buffers::ForEach([&](ThreadBuffer& ring) {
    ring.Drain([](const Event&) {});
    dropped += ring.TakeDropped();
  });
  state.counters["dropped"] += static_cast<double>(dropped);
}

// Inside the timed loop: the drain is not timed.
void DrainAll(benchmark::State& state) {
  state.PauseTiming();
  Drain(state);
  state.ResumeTiming();
}

void PerOp(benchmark::State& state, int ops_per_iteration) {
  state.SetItemsProcessed(state.iterations() * ops_per_iteration);
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(state.iterations() * ops_per_iteration),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_RecorderLaunch(benchmark::State& state) {
  const bool active = state.range(0) != 0;
  const uint32_t site = sites::Intern("model.layers.3.mlp", SiteKind::kModule);
  if (active) recorder::BeginSession(kRing);
  recorder::Push(site);  // launches inside an open call, as in a traced module
  uint64_t corr = 1;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) recorder::Launch(corr++);
    if (active) DrainAll(state);
  }
  recorder::Pop();
  if (active) {
    recorder::EndSession();
    Drain(state);
  }
  PerOp(state, kBatch);
}
BENCHMARK(BM_RecorderLaunch)->ArgName("active")->Arg(0)->Arg(1);

void BM_RecorderPushPop(benchmark::State& state) {
  const bool active = state.range(0) != 0;
  const uint32_t site = sites::Intern("model.layers.3.mlp", SiteKind::kModule);
  if (active) recorder::BeginSession(kRing);
  for (auto _ : state) {
    for (int i = 0; i < kBatch / 2; ++i) {
      recorder::Push(site);
      recorder::Pop();
    }
    if (active) DrainAll(state);
  }
  if (active) {
    recorder::EndSession();
    Drain(state);
  }
  PerOp(state, kBatch / 2);  // per pair
}
BENCHMARK(BM_RecorderPushPop)->ArgName("active")->Arg(0)->Arg(1);

void BM_RingAppend(benchmark::State& state) {
  ThreadBuffer ring(kRing, 0);
  Event e;
  memset(&e, 0, sizeof(e));
  e.kind = EventKind::kLaunch;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      e.a = static_cast<uint64_t>(i);
      ring.Append(e);
    }
    state.PauseTiming();
    ring.Drain([](const Event&) {});
    state.ResumeTiming();
  }
  state.counters["dropped"] = static_cast<double>(ring.TakeDropped());
  PerOp(state, kBatch);
}
BENCHMARK(BM_RingAppend);

// The pieces a push is made of, for explaining where its time goes: one raw clock read
// (rdtsc) per event, and the shared atomic counters a push bumps (call id, per-site k).
void BM_PartRawTicks(benchmark::State& state) {
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) benchmark::DoNotOptimize(clock::RawTicks());
  }
  PerOp(state, kBatch);
}
BENCHMARK(BM_PartRawTicks);

void BM_PartAtomicFetchAdd(benchmark::State& state) {
  static std::atomic<uint64_t> counter{0};
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      benchmark::DoNotOptimize(counter.fetch_add(1, std::memory_order_relaxed));
    }
  }
  PerOp(state, kBatch);
}
BENCHMARK(BM_PartAtomicFetchAdd);

}  // namespace
}  // namespace tokentrace

BENCHMARK_MAIN();
