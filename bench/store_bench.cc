// Writer throughput for kernel rows (target >= 1 M rows/s) and on-disk bytes per kernel row
// (target <= 64 B, measured as page_count * page_size / rows after the final checkpoint).
#include <benchmark/benchmark.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "store/store.h"

namespace tokentrace {
namespace {

// A realistic full-mode batch: ~700 kernels per token, monotonic host-clock timestamps
// (CLOCK_MONOTONIC ~ days of uptime), names from a small interned set.
Batch KernelBatch(int rows, uint64_t* next_corr, int64_t* now) {
  Batch b;
  b.kernels.reserve(rows);
  for (int i = 0; i < rows; ++i) {
    uint64_t corr = (*next_corr)++;
    uint32_t token = static_cast<uint32_t>(corr / 700 + 1);
    *now += 2500;
    b.kernels.push_back({corr / 3 + 1, token, static_cast<uint32_t>(corr % 40 + 1),
                         GpuOpKind::kKernel, 0, 7, *now, *now + 1800, corr, 0, 0});
  }
  return b;
}

// A fresh store in its own temporary directory, removed afterwards.
struct TempStore {
  char dir[32] = "/tmp/tt_store_bench_XXXXXX";
  std::string path, error;
  std::unique_ptr<Store> store;

  explicit TempStore(benchmark::State& state) {
    if (mkdtemp(dir) == nullptr) std::abort();
    path = std::string(dir) + "/bench.sqlite";
    store = Store::Open(path, &error);
    if (store == nullptr) state.SkipWithError(error.c_str());
  }
  ~TempStore() {
    if (store) store->Close();
    for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
    rmdir(dir);
  }
};

void BM_WriteKernelRows(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  TempStore temp(state);
  if (temp.store == nullptr) return;
  uint64_t corr = 1;
  int64_t now = 86400LL * 3 * 1000000000;
  int64_t written = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Batch b = KernelBatch(rows, &corr, &now);
    state.ResumeTiming();
    if (!temp.store->Write(b, &temp.error)) state.SkipWithError(temp.error.c_str());
    written += rows;
  }
  temp.store->Close();  // the final checkpoint: the file holds every page
  temp.store.reset();
  sqlite3* db = nullptr;
  sqlite3_open(temp.path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT (SELECT page_count FROM pragma_page_count()) * "
                     "(SELECT page_size FROM pragma_page_size())",
                     -1, &st, nullptr);
  int64_t bytes = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  sqlite3_close(db);
  state.SetItemsProcessed(written);
  state.counters["bytes_per_row"] = written ? static_cast<double>(bytes) / written : 0;
}
// CPU time is what the writer thread takes from the job; wall time adds the fsyncs that
// WAL checkpoints (synchronous=NORMAL) wait for, which depend on the disk.
BENCHMARK(BM_WriteKernelRows)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WriteKernelRows)->Arg(100000)->UseRealTime()->Unit(benchmark::kMillisecond);

// What the Python hooks produce per module call: one call row and one output row (a
// [1, 1, 2048] bf16 tensor), 230 calls per token as in the Llama-1B shape.
void BM_WriteCallRows(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  TempStore temp(state);
  if (temp.store == nullptr) return;
  uint64_t id = (1ULL << 40) + 1;
  int64_t now = 86400LL * 3 * 1000000000;
  int64_t written = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Batch b;
    b.calls.reserve(rows);
    b.outputs.reserve(rows);
    for (int i = 0; i < rows; ++i, ++id) {
      const uint32_t token = static_cast<uint32_t>((id & 0xffffffffff) / 230 + 1);
      b.calls.push_back(
          {id, static_cast<uint32_t>(id % 230 + 1), token, token, id - 1, 0, now, now + 4000});
      b.outputs.push_back({id, "", "[1, 1, 2048]", "bfloat16"});
      now += 5000;
    }
    state.ResumeTiming();
    if (!temp.store->Write(b, &temp.error)) state.SkipWithError(temp.error.c_str());
    written += rows;
  }
  state.SetItemsProcessed(written);
}
BENCHMARK(BM_WriteCallRows)->Arg(10000)->Unit(benchmark::kMillisecond);

// On a GPU, most kernels complete after their call has closed and been written: each batch
// carries the calls of this drain and the GPU deltas of the last drain's calls (one per
// call, 230 calls per token). The summaries attribute each delta to its call's site from what
// the joiner carried with it (until schema 8's writer, one SELECT by id per delta).
void BM_WriteLateGpuDeltas(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  TempStore temp(state);
  if (temp.store == nullptr) return;
  uint64_t id = 1;
  int64_t now = 86400LL * 3 * 1000000000;
  int64_t written = 0;
  std::vector<CallRow> last;
  for (auto _ : state) {
    state.PauseTiming();
    Batch b;
    b.calls.reserve(rows);
    for (int i = 0; i < rows; ++i, ++id) {
      const uint32_t token = static_cast<uint32_t>(id / 230 + 1);
      b.calls.push_back(
          {id, static_cast<uint32_t>(id % 230 + 1), token, token, 0, 0, now, now + 4000});
      now += 5000;
    }
    b.call_gpu.reserve(last.size());
    for (const CallRow& c : last) {
      b.call_gpu.push_back({c.id, c.token, 3, 9000, c.cpu_begin_ns + 100, c.cpu_end_ns + 9000, 0,
                            c.site_id, c.token, true});
    }
    last = b.calls;
    state.ResumeTiming();
    if (!temp.store->Write(b, &temp.error)) state.SkipWithError(temp.error.c_str());
    written += static_cast<int64_t>(b.call_gpu.size());
  }
  state.SetItemsProcessed(written);  // GPU deltas
}
BENCHMARK(BM_WriteLateGpuDeltas)->Arg(10000)->Unit(benchmark::kMillisecond);

// A foreign-NVTX job's shape (bench/long_run_job.cc): tokens of 12 calls, a token range and
// 11 ranges inside it, no outputs, in batches of `rows` calls: what the per-token rows of the
// file cost where tokens are short.
void BM_WriteShortTokens(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  TempStore temp(state);
  if (temp.store == nullptr) return;
  uint64_t id = 1;
  uint32_t token = 0, k = 0;
  int64_t now = 86400LL * 3 * 1000000000;
  int64_t written = 0;
  bool first = true;
  for (auto _ : state) {
    state.PauseTiming();
    Batch b;
    if (first) {
      b.sites.push_back({1, "decode_step", SiteKind::kRange, true});
      for (uint32_t s = 2; s <= 12; ++s)
        b.sites.push_back({s, "r" + std::to_string(s), SiteKind::kRange, false});
      first = false;
    }
    b.calls.reserve(rows);
    while (static_cast<int>(b.calls.size()) + 12 <= rows) {
      const uint64_t root = id++;
      ++token;
      ++k;
      const int64_t begin = now;
      for (uint32_t s = 2; s <= 12; ++s, ++id) {
        b.calls.push_back({id, s, k, token, root, 0, now + 100, now + 200});
        now += 250;
      }
      b.calls.push_back({root, 1, k, token, 0, 0, begin, now});
      now += 100;
    }
    state.ResumeTiming();
    if (!temp.store->Write(b, &temp.error)) state.SkipWithError(temp.error.c_str());
    written += static_cast<int64_t>(b.calls.size());
  }
  temp.store->Close();
  temp.store.reset();
  sqlite3* db = nullptr;
  sqlite3_open(temp.path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db,
                     "SELECT (SELECT page_count FROM pragma_page_count()) * "
                     "(SELECT page_size FROM pragma_page_size())",
                     -1, &st, nullptr);
  int64_t bytes = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
  sqlite3_finalize(st);
  sqlite3_close(db);
  state.SetItemsProcessed(written);
  state.counters["bytes_per_call"] = written ? static_cast<double>(bytes) / written : 0;
}
BENCHMARK(BM_WriteShortTokens)->Arg(32768)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tokentrace

BENCHMARK_MAIN();
