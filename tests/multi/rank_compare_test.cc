#include "multi/rank_compare.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "multi/rank_trace_fixture.h"

namespace tokentrace::multi {
namespace {

using testing::RankSpec;
using testing::WriteRankTrace;

// Four ranks, rank 2 slowed by 30 ms at token 5; rank 3 optionally killed after token 6.
std::vector<RankFile> Launch(bool kill_rank3, bool nested_c10d = false, bool gpu = false) {
  char dir[] = "/tmp/tt_multi_test_XXXXXX";
  if (mkdtemp(dir) == nullptr) std::abort();
  std::vector<std::string> files;
  for (int r = 0; r < 4; ++r) {
    RankSpec s{r};
    s.slow_rank = 2;
    s.slow_token = 5;
    s.slow_ms = 30;
    s.clock_offset_ns = r * 7777777777LL;
    s.nested_c10d = nested_c10d;
    s.gpu = gpu;
    if (kill_rank3 && r == 3) {
      s.tokens = 6;
      s.exited = false;
    }
    files.push_back(std::string(dir) + "/rank" + std::to_string(r) + ".sqlite");
    WriteRankTrace(files.back(), s);
  }
  std::vector<RankFile> ranks;
  std::vector<std::string> warnings;
  std::string error;
  EXPECT_TRUE(OpenRankFiles(files, false, &ranks, &warnings, &error)) << error;
  EXPECT_TRUE(warnings.empty());
  return ranks;
}

TEST(RankCompareTest, NamesTheSlowRankAndTokenAndTheOthersWait) {
  std::vector<RankFile> ranks = Launch(false);
  Comparison c;
  std::string error;
  ASSERT_TRUE(CompareRanks(ranks, 3, &c, &error)) << error;
  EXPECT_EQ(c.max_token, 10u);
  EXPECT_EQ(c.compared_tokens, 10);
  ASSERT_EQ(c.top.size(), 1u);  // the other tokens are ties: no straggler
  const Straggler& s = c.top.front();
  EXPECT_EQ(s.token, 5u);
  EXPECT_EQ(ranks[s.slow].rank, 2);
  EXPECT_EQ(s.lead_ns, 30000000);
  EXPECT_EQ(s.others_wait_ns, 30000000 + testing::kReduce);
  EXPECT_EQ(c.ranks[2].slowest, 1);
  EXPECT_EQ(c.ranks[0].slowest, 0);
  // Every rank's token time is the same (the collective syncs them): only work tells.
  for (const RankTotals& r : c.ranks) EXPECT_EQ(r.tokens, 10);
  EXPECT_EQ(c.ranks[0].time_ns, c.ranks[2].time_ns);
}

// A module named all_reduce around c10d::all_reduce (as the preload's collective sites make
// it): the wait is counted once, not twice.
TEST(RankCompareTest, NestedCollectivesCountOnce) {
  std::vector<RankFile> ranks = Launch(false, true);
  Comparison c;
  std::string error;
  ASSERT_TRUE(CompareRanks(ranks, 1, &c, &error)) << error;
  ASSERT_EQ(c.top.size(), 1u);
  EXPECT_EQ(c.top[0].others_wait_ns, 30000000 + testing::kReduce);
  EXPECT_EQ(c.top[0].lead_ns, 30000000);
}

// GPU time in collectives is its own column: the ranks that waited for rank 2 at token 5 ran
// their collective kernels 30 ms longer.
TEST(RankCompareTest, GpuTimeInCollectivesIsItsOwnColumn) {
  for (bool nested : {false, true}) {
    std::vector<RankFile> ranks = Launch(false, nested, true);
    Comparison c;
    std::string error;
    ASSERT_TRUE(CompareRanks(ranks, 1, &c, &error)) << error;
    EXPECT_EQ(c.ranks[2].gpu_collective_ns, 10 * testing::kReduce);
    EXPECT_EQ(c.ranks[0].gpu_collective_ns, 10 * testing::kReduce + 30000000);
    EXPECT_EQ(c.ranks[0].gpu_ns, 10 * 1000000 + c.ranks[0].gpu_collective_ns);
  }
}

// Since schema 6 the comparison reads each token's time in collectives from token_stats (one
// row a token): the same numbers as the scan of the calls older files get.
std::string Numbers(const Comparison& c) {
  std::string out = std::to_string(c.max_token) + " " + std::to_string(c.compared_tokens) + ":";
  for (const RankTotals& r : c.ranks) {
    for (int64_t v : {r.tokens, static_cast<int64_t>(r.last_token), r.time_ns, r.wait_ns, r.gpu_ns,
                      r.gpu_collective_ns, r.slowest}) {
      out += " " + std::to_string(v);
    }
    out += ";";
  }
  for (const Straggler& s : c.top) {
    for (int64_t v : {static_cast<int64_t>(s.token), static_cast<int64_t>(s.slow), s.time_ns,
                      s.work_ns, s.others_work_ns, s.others_wait_ns, s.lead_ns}) {
      out += " " + std::to_string(v);
    }
    out += ";";
  }
  return out;
}

TEST(RankCompareTest, TokenStatsGiveWhatTheCallsScanGives) {
  for (bool nested : {false, true}) {
    for (bool killed : {false, true}) {
      std::vector<RankFile> ranks = Launch(killed, nested, true);
      Comparison summed;
      std::string error;
      ASSERT_TRUE(CompareRanks(ranks, 3, &summed, &error)) << error;
      std::vector<std::string> files;
      for (const RankFile& f : ranks) files.push_back(f.path);
      ranks.clear();  // closes them
      for (const std::string& f : files) {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(f.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '5' WHERE key = 'schema_version'",
                               nullptr, nullptr, nullptr),
                  SQLITE_OK);
        sqlite3_close(db);
      }
      std::vector<std::string> warnings;
      ASSERT_TRUE(OpenRankFiles(files, false, &ranks, &warnings, &error)) << error;
      Comparison scanned;
      ASSERT_TRUE(CompareRanks(ranks, 3, &scanned, &error)) << error;
      EXPECT_EQ(Numbers(summed), Numbers(scanned)) << "nested " << nested << " killed " << killed;
      EXPECT_GT(summed.ranks[0].wait_ns, 0);
    }
  }
}

TEST(RankCompareTest, SiteLossesNameWhereTheTimeWent) {
  std::vector<RankFile> ranks = Launch(false);
  std::vector<SiteLoss> losses;
  std::string error;
  ASSERT_TRUE(SiteLosses(ranks, 2, 5, 5, &losses, &error)) << error;
  ASSERT_EQ(losses.size(), 1u);  // the collective is where the others lost, not rank 2
  EXPECT_EQ(losses[0].site, "model.mlp");
  EXPECT_EQ(losses[0].slow_ns - losses[0].others_ns, 30000000);
}

TEST(RankCompareTest, AKilledRankIsNamedWithTheTokenItStoppedAt) {
  std::vector<RankFile> ranks = Launch(true);
  EXPECT_FALSE(ranks[3].exited);
  Comparison c;
  std::string error;
  ASSERT_TRUE(CompareRanks(ranks, 3, &c, &error)) << error;
  EXPECT_EQ(c.max_token, 10u);
  EXPECT_EQ(c.ranks[3].last_token, 6u);
  EXPECT_EQ(c.ranks[3].tokens, 6);
  EXPECT_EQ(c.ranks[0].tokens, 10);
}

TEST(RankCompareTest, CollectiveSitesByName) {
  EXPECT_TRUE(IsCollectiveSite("model.layers.0.mlp.all_reduce"));
  EXPECT_TRUE(IsCollectiveSite("c10d::allreduce_"));
  EXPECT_TRUE(IsCollectiveSite("ncclKernel_AllReduce"));
  EXPECT_FALSE(IsCollectiveSite("model.layers.0.mlp.down_proj"));
}

}  // namespace
}  // namespace tokentrace::multi
