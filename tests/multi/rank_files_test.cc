#include "multi/rank_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "multi/rank_trace_fixture.h"

namespace tokentrace::multi {
namespace {

using testing::RankSpec;
using testing::WriteRankTrace;

std::string Dir() {
  char dir[] = "/tmp/tt_multi_test_XXXXXX";
  if (mkdtemp(dir) == nullptr) std::abort();
  return dir;
}

bool OneLine(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

bool Open(const std::vector<std::string>& inputs, std::vector<RankFile>* ranks,
          std::string* error) {
  std::vector<std::string> files, warnings;
  return ResolveInputs(inputs, &files, error) &&
         OpenRankFiles(files, false, ranks, &warnings, error);
}

TEST(RankFilesTest, ResolvesDirectoryGlobAndListSortedByRank) {
  const std::string d = Dir();
  for (int r : {2, 0, 1}) WriteRankTrace(d + "/r" + std::to_string(r) + ".sqlite", {r});
  std::ofstream(d + "/notes.txt") << "not a trace";
  for (const std::vector<std::string>& in :
       {std::vector<std::string>{d},
        {d + "/r*.sqlite"},
        {d + "/r1.sqlite", d + "/r0.sqlite", d + "/r2.sqlite"}}) {
    std::vector<RankFile> ranks;
    std::string error;
    ASSERT_TRUE(Open(in, &ranks, &error)) << error;
    ASSERT_EQ(ranks.size(), 3u);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks[r].rank, r);
    EXPECT_EQ(ranks[0].host, "host0");
    EXPECT_TRUE(ranks[0].exited);
  }
}

TEST(RankFilesTest, BadInputIsOneClearLine) {
  const std::string d = Dir();
  std::string error;
  std::vector<RankFile> ranks;
  EXPECT_FALSE(Open({d}, &ranks, &error));
  EXPECT_TRUE(OneLine(error)) << error;
  EXPECT_NE(error.find("holds no trace files"), std::string::npos) << error;

  std::ofstream(d + "/junk.sqlite") << "this is not sqlite at all, just text";
  error.clear();
  EXPECT_FALSE(Open({d + "/junk.sqlite"}, &ranks, &error));
  EXPECT_TRUE(OneLine(error)) << error;
  EXPECT_NE(error.find("not a SQLite file"), std::string::npos) << error;

  const std::string e = Dir();
  WriteRankTrace(e + "/a.sqlite", {0});
  RankSpec other{1};
  other.launch = "launch-2";
  WriteRankTrace(e + "/b.sqlite", other);
  error.clear();
  ranks.clear();
  EXPECT_FALSE(Open({e}, &ranks, &error));
  EXPECT_TRUE(OneLine(error)) << error;
  EXPECT_NE(error.find("different launches"), std::string::npos) << error;

  const std::string f = Dir();
  WriteRankTrace(f + "/a.sqlite", {3});
  WriteRankTrace(f + "/b.sqlite", {3});
  error.clear();
  ranks.clear();
  EXPECT_FALSE(Open({f}, &ranks, &error));
  EXPECT_TRUE(OneLine(error)) << error;
  EXPECT_NE(error.find("both claim rank 3"), std::string::npos) << error;

  error.clear();
  ranks.clear();
  EXPECT_FALSE(Open({f + "/nothing*.sqlite"}, &ranks, &error));
  EXPECT_TRUE(OneLine(error)) << error;
}

TEST(RankFilesTest, OneEnginesProcessesRepeatingARankAreNumberedByRole) {
  // vLLM's engine core and its two workers all say rank 0: engine core first, then the workers
  // by pid; each keeps its role. Without roles the same files are refused.
  const std::string d = Dir();
  RankSpec core{0}, w1{0}, w2{0};
  core.role = "engine_core", core.pid = 300;
  w1.role = "worker", w1.pid = 200;
  w2.role = "worker", w2.pid = 100;
  WriteRankTrace(d + "/a.sqlite", w1);
  WriteRankTrace(d + "/b.sqlite", core);
  WriteRankTrace(d + "/c.sqlite", w2);
  std::vector<RankFile> ranks;
  std::string error;
  ASSERT_TRUE(Open({d}, &ranks, &error)) << error;
  ASSERT_EQ(ranks.size(), 3u);
  EXPECT_EQ(ranks[0].role, "engine_core");
  EXPECT_EQ(ranks[1].pid, "100");
  EXPECT_EQ(ranks[2].pid, "200");
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ranks[r].rank, r);

  const std::string e = Dir();
  RankSpec plain{0};
  WriteRankTrace(e + "/a.sqlite", core);
  WriteRankTrace(e + "/b.sqlite", plain);  // a rank's file, no role: not one engine's
  ranks.clear();
  EXPECT_FALSE(Open({e}, &ranks, &error));
  EXPECT_NE(error.find("both claim rank 0"), std::string::npos) << error;
}

TEST(RankFilesTest, AxisShiftsUndoClockOffsets) {
  const std::string d = Dir();
  // Rank 1's clock reads 5 s more than rank 0's for the same instant (another host).
  RankSpec r0{0}, r1{1};
  r0.clock_offset_ns = 1000;
  r1.clock_offset_ns = 1000 - 5000000000LL;
  WriteRankTrace(d + "/a.sqlite", r0);
  WriteRankTrace(d + "/b.sqlite", r1);
  std::vector<RankFile> ranks;
  std::string error;
  ASSERT_TRUE(Open({d}, &ranks, &error)) << error;
  const std::vector<int64_t> shifts = AxisShifts(ranks);
  // Same instant on both: trace_1 = trace_0 + 5 s, so rank 1 moves back by 5 s.
  EXPECT_EQ(shifts[0] - shifts[1], 5000000000LL);
}

}  // namespace
}  // namespace tokentrace::multi
