// NCCL kernels recognised by name (core/comm_kernels.h) count as communication in the
// cross-rank report and the Chrome export, also when no collective site is around them (a
// serving engine's own NCCL calls, not torch.distributed's). The files are written the way
// the shim writes them: hand-built launch events and CUPTI-like kernel records through the
// Joiner, then the Store.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "cli/cli_runner.h"
#include "core/joiner.h"
#include "core/launch_meta.h"
#include "multi/rank_compare.h"
#include "store/store.h"

namespace tokentrace::testing {
namespace {

constexpr const char* kGemm = "ampere_sgemm_128x64_nn";
constexpr const char* kNccl =
    "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
constexpr uint32_t kTokens = 4;
constexpr int64_t kMs = 1000000;

// One rank: per token, "self" > "model.tp.row_parallel" (a module, not a collective site
// name), which launches a 1 ms GEMM and then an NCCL all_reduce that takes `nccl_ms`.
void WriteRank(const std::string& path, int rank, int64_t nccl_ms, KernelMode::Kind mode) {
  KernelMode m;
  m.kind = mode;
  Joiner j(m);
  Batch b;
  b.meta = {{kMetaRank, std::to_string(rank)},
            {kMetaHost, "host"},
            {kMetaLaunchId, "nccl-launch"},
            {"pid", std::to_string(2000 + rank)},
            {kMetaWorldSize, "2"}};
  b.sites = {{1, "self", SiteKind::kRoot, true}, {2, "model.tp.row_parallel", SiteKind::kModule}};
  uint64_t corr = 0;
  for (uint32_t t = 1; t <= kTokens; ++t) {
    const int64_t begin = t * 20 * kMs;
    const uint64_t root = 10u * t, layer = root + 1;
    j.OnEvent(0, MakeEvent(EventKind::kPush, begin, root, 0, 0, 1, t, t, 0), &b);
    j.OnEvent(0, MakeEvent(EventKind::kPush, begin, layer, root, 0, 2, t, t, 0), &b);
    int64_t gpu = begin;
    for (const auto& [name, ms] : {std::pair{kGemm, int64_t{1}}, std::pair{kNccl, nccl_ms}}) {
      j.OnEvent(0, MakeEvent(EventKind::kLaunch, 0, layer, ++corr, 0, 0, 0, t, 0), &b);
      GpuActivity a;
      a.correlation_id = corr;
      a.begin_ns = gpu;
      a.end_ns = gpu += ms * kMs;
      a.name = name;
      j.OnActivity(a, &b);
    }
    j.OnEvent(0, MakeEvent(EventKind::kPop, gpu, layer, 0, 0, 0, 0, 0, 0), &b);
    j.OnEvent(0, MakeEvent(EventKind::kPop, gpu + kMs, root, 0, 0, 0, 0, 0, 0), &b);
  }
  j.EndDrain(&b);
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  ASSERT_TRUE(store->Write(b, &error)) << error;
}

// Rank 0 spends 5 ms in each all_reduce (waiting for rank 1), rank 1 spends 1 ms.
std::string Launch(KernelMode::Kind mode) {
  const std::string dir = TempDir();
  WriteRank(dir + "/r0.sqlite", 0, 5, mode);
  WriteRank(dir + "/r1.sqlite", 1, 1, mode);
  return dir;
}

// The cross-rank comparison of the two files Launch wrote.
void CompareLaunch(const std::string& dir, multi::Comparison* c) {
  std::vector<multi::RankFile> ranks;
  std::vector<std::string> warnings;
  std::string error;
  ASSERT_TRUE(multi::OpenRankFiles({dir + "/r0.sqlite", dir + "/r1.sqlite"}, false, &ranks,
                                   &warnings, &error))
      << error;
  ASSERT_TRUE(multi::CompareRanks(ranks, 3, c, &error)) << error;
  ASSERT_EQ(c->ranks.size(), 2u);
}

TEST(CommKernelsReportTest, NcclKernelsAreTheGpuCommColumn) {
  for (KernelMode::Kind mode : {KernelMode::kSummary, KernelMode::kFull}) {
    const std::string dir = Launch(mode);
    multi::Comparison c;
    ASSERT_NO_FATAL_FAILURE(CompareLaunch(dir, &c));
    EXPECT_EQ(c.ranks[0].gpu_ns, kTokens * 6 * kMs);
    EXPECT_EQ(c.ranks[0].gpu_collective_ns, kTokens * 5 * kMs);
    EXPECT_EQ(c.ranks[1].gpu_collective_ns, kTokens * 1 * kMs);
  }
}

TEST(CommKernelsReportTest, ReportAndExportShowThemAsCommunication) {
  const std::string dir = Launch(KernelMode::kFull);
  CliResult r = RunCli({"report", dir});
  ASSERT_EQ(r.status, 0) << r.err;
  // rank 0's row: 24 ms of GPU time, 20 of them communication.
  EXPECT_NE(Squeeze(r.out).find(" 24.000 20.000 "), std::string::npos) << r.out;
  const std::string json = dir + "/all.json";
  r = RunCli({"export", dir, "--chrome", json});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = ReadFile(json);
  EXPECT_NE(text.find(std::string("\"cat\":\"comm\",\"name\":\"") + kNccl + "\""),
            std::string::npos)
      << text.substr(0, 600);
  EXPECT_NE(text.find(std::string("\"cat\":\"kernel\",\"name\":\"") + kGemm + "\""),
            std::string::npos);
  EXPECT_EQ(text.find(std::string("\"cat\":\"kernel\",\"name\":\"") + kNccl), std::string::npos);
}

// Files written before version 3 have no call_gpu.gpu_comm_ns: they still make a report, with
// no GPU communication time (0), not an error.
TEST(CommKernelsReportTest, FilesOfVersion2HaveNoCommColumnAndReadAsZero) {
  const std::string dir = Launch(KernelMode::kFull);
  for (const char* name : {"/r0.sqlite", "/r1.sqlite"}) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir + name).c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "ALTER TABLE call_gpu DROP COLUMN gpu_comm_ns; UPDATE meta SET "
                           "value = '2' WHERE key = 'schema_version';",
                           nullptr, nullptr, nullptr),
              SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  multi::Comparison c;
  ASSERT_NO_FATAL_FAILURE(CompareLaunch(dir, &c));
  EXPECT_EQ(c.ranks[0].gpu_ns, kTokens * 6 * kMs);
  EXPECT_EQ(c.ranks[0].gpu_collective_ns, 0);
  CliResult r = RunCli({"report", dir});
  EXPECT_EQ(r.status, 0) << r.err;
}

}  // namespace
}  // namespace tokentrace::testing
