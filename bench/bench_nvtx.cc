// NVTX push+pop pairs, the way producers emit them, through whatever NVTX finds:
//
//   bench_nvtx         linked to libtokentrace.so, whose constructor points
//                      NVTX_INJECTION64_PATH at itself: every NVTX call lands in our handlers
//                      (src/nvtx/nvtx_injection.cc).
//                        .../disabled  shim loaded, no session: a handler that returns
//                        .../enabled   tokentrace_start(kernels "off"): events are recorded
//   bench_nvtx_notool  the same source without the shim: NVTX finds no tool and every call is
//                      a no-op through NVTX's own function pointer (the floor).
//
// Producers:
//   Registered   our Python hooks: domain "tokentrace", a registered string, category 1
//                (module). The site id is cached in the registered string after the first push.
//   Ascii        nvtxRangePushA("...") as torch.cuda.nvtx and other producers do: one site
//                lookup (hash + compare) per push.
//   NaiveHandler (context, not NVTX) what a handler with a mutex and a string map costs.
//
// The enabled benchmarks pause every kBatch pairs to drain the rings (tokentrace_flush), so
// what is timed is the hot path, not a full ring dropping events; losses are read back from
// the file and reported as the `losses` counter (it should be 0).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "nvtx3/nvToolsExt.h"
#include "nvtx_hook_pair.h"

#ifdef TT_BENCH_WITH_TOOL
#include <sqlite3.h>

#include "tokentrace/tokentrace.h"
#endif

namespace {

constexpr int kBatch = 4096;  // pairs between drains (8192 events, well under the ring's 65536)

// A recording session for one benchmark run (kernels off, file in /tmp); the disabled runs
// construct it with enabled = false and only get the shim loaded with no session.
class Session {
 public:
  explicit Session(benchmark::State& state, bool enabled) : state_(state) {
#ifdef TT_BENCH_WITH_TOOL
    if (!enabled) return;
    snprintf(path_, sizeof(path_), "/tmp/tt_bench_nvtx_%d.sqlite", static_cast<int>(getpid()));
    tokentrace_options o = {};
    o.struct_size = sizeof(o);
    o.api_version = TOKENTRACE_API_VERSION;
    o.out_path = path_;
    o.kernels = "off";
    char err[512] = {};
    if (tokentrace_start(&o, err, sizeof(err)) != 0) state.SkipWithError(err);
    active_ = true;
#else
    if (enabled) state.SkipWithError("no tool in this program");
#endif
  }
  // Between timed batches: drain the rings into the file.
  void Drain() {
#ifdef TT_BENCH_WITH_TOOL
    if (!active_) return;
    state_.PauseTiming();
    const auto t0 = std::chrono::steady_clock::now();
    tokentrace_flush();
    flush_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++flushes_;
    state_.ResumeTiming();
#endif
  }
  ~Session() {
#ifdef TT_BENCH_WITH_TOOL
    if (!active_) return;
    char err[512] = {};
    tokentrace_stop(err, sizeof(err));
    // What the background thread spends per recorded call (drain, join, SQLite insert).
    if (flushes_ > 0)
      state_.counters["bg_us_per_1k_calls"] = flush_s_ * 1e6 / flushes_ / kBatch * 1000;
    state_.counters["losses"] =
        static_cast<double>(Scalar("SELECT coalesce(sum(count),0) FROM losses"));
    state_.counters["calls_per_pair"] = static_cast<double>(Scalar("SELECT count(*) FROM calls")) /
                                        static_cast<double>(state_.iterations() * kBatch);
    unlink(path_);
    for (const char* suffix : {"-wal", "-shm"}) unlink((std::string(path_) + suffix).c_str());
#endif
  }

 private:
#ifdef TT_BENCH_WITH_TOOL
  int64_t Scalar(const char* sql) {
    sqlite3* db = nullptr;
    int64_t v = -1;
    if (sqlite3_open(path_, &db) == SQLITE_OK) {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW) {
        v = sqlite3_column_int64(st, 0);
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
  }
  char path_[128] = {};
  double flush_s_ = 0;
  int64_t flushes_ = 0;
  bool active_ = false;
#endif
  benchmark::State& state_;
};

void Finish(benchmark::State& state) {
  state.SetItemsProcessed(state.iterations() * kBatch);
  state.counters["ns_per_pair"] =
      benchmark::Counter(static_cast<double>(state.iterations() * kBatch),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_NvtxRegisteredPushPop(benchmark::State& state) {
  const nvtxDomainHandle_t domain = HookDomain();
  const nvtxEventAttributes_t attr = HookAttr("model.layers.3.mlp");
  {
    Session session(state, state.range(0) != 0);
    for (auto _ : state) {
      for (int i = 0; i < kBatch; ++i) {
        nvtxDomainRangePushEx(domain, &attr);
        nvtxDomainRangePop(domain);
      }
      session.Drain();
    }
  }
  Finish(state);
}

void BM_NvtxAsciiPushPop(benchmark::State& state) {
  {
    Session session(state, state.range(0) != 0);
    for (auto _ : state) {
      for (int i = 0; i < kBatch; ++i) {
        nvtxRangePushA("aten::addmm");
        nvtxRangePop();
      }
      session.Drain();
    }
  }
  Finish(state);
}

// A naive NVTX handler for scale (called directly, no NVTX): a global mutex, a string map
// from name to id and a vector as the event log, as the reference machine's "~50 ns" point.
// Registered only in bench_nvtx (the tool build).
[[maybe_unused]] void BM_NaiveHandlerPushPop(benchmark::State& state) {
  static std::mutex mutex;
  static std::unordered_map<std::string, int> ids;
  static std::vector<std::pair<int, int>> log;
  auto push = [](const char* name) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = ids.emplace(name, static_cast<int>(ids.size())).first;
    log.emplace_back(it->second, 1);
  };
  auto pop = [] {
    std::lock_guard<std::mutex> lock(mutex);
    log.emplace_back(-1, 0);
  };
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      push("model.layers.3.mlp");
      pop();
      benchmark::ClobberMemory();
    }
    log.clear();
  }
  Finish(state);
}

#ifdef TT_BENCH_WITH_TOOL
BENCHMARK(BM_NvtxRegisteredPushPop)->ArgName("enabled")->Arg(0)->Arg(1);
BENCHMARK(BM_NvtxAsciiPushPop)->ArgName("enabled")->Arg(0)->Arg(1);
BENCHMARK(BM_NaiveHandlerPushPop);
#else
BENCHMARK(BM_NvtxRegisteredPushPop)->ArgName("enabled")->Arg(0);
BENCHMARK(BM_NvtxAsciiPushPop)->ArgName("enabled")->Arg(0);
#endif

}  // namespace

BENCHMARK_MAIN();
