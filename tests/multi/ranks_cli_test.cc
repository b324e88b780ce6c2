// `tokentrace report`, `export` and `merge` over the files of several ranks, run as the
// program (stdout, stderr, exit status).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>

#include "cli/cli_runner.h"
#include "multi/rank_trace_fixture.h"

namespace tokentrace::testing {
namespace {

// Four ranks on four "hosts" (clocks 3 s apart); rank 1 slowed by 25 ms at token 7; rank 3
// optionally killed after token 4.
std::string Launch(bool kill_rank3) {
  const std::string dir = TempDir();
  for (int r = 0; r < 4; ++r) {
    RankSpec s{r};
    s.slow_rank = 1;
    s.slow_token = 7;
    s.slow_ms = 25;
    s.clock_offset_ns = (r - 2) * 3000000000LL;
    if (kill_rank3 && r == 3) {
      s.tokens = 4;
      s.exited = false;
    }
    WriteRankTrace(dir + "/trace-r" + std::to_string(r) + ".sqlite", s);
  }
  return dir;
}

TEST(RanksCliTest, ReportNamesTheStragglerTokenAndSite) {
  const std::string dir = Launch(false);
  CliResult r = RunCli({"report", dir, "--top", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string out = Squeeze(r.out);
  EXPECT_NE(out.find("4 ranks of launch 'launch-1'"), std::string::npos) << r.out;
  // token 7, slowest rank 1, lead 25 ms, its work 27 ms, others' work 2 ms, wait 25.1 ms
  EXPECT_NE(out.find("\n7 1 25.000 27.000 2.000 25.100 27.100\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("token 7, rank 1:\nsite rank ms others ms lost ms\nmodel.mlp 27.000 2.000 "
                     "25.000\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(out.find("every rank has every token"), std::string::npos) << r.out;
  // The same report from a glob and from a list of files.
  EXPECT_EQ(RunCli({"report", dir + "/trace-r*.sqlite", "--top", "2"}).out, r.out);
}

TEST(RanksCliTest, ReportNamesAKilledRankAndItsLastToken) {
  const std::string dir = Launch(true);
  CliResult r = RunCli({"report", dir});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("rank 3 stopped after token 4 (tokens 5..10 missing); it wrote no exit "
                       "record: killed"),
            std::string::npos)
      << r.out;
}

TEST(RanksCliTest, BadInputIsOneLineEach) {
  const std::string empty = TempDir();
  const std::string a = Launch(false), b = TempDir();
  RankSpec other{0};
  other.launch = "launch-2";
  WriteRankTrace(b + "/x.sqlite", other);
  std::ofstream(b + "/notes.txt") << "hello";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"report", empty}, "holds no trace files"},
      {{"report", a + "/trace-r1.sqlite", b + "/x.sqlite"}, "different launches"},
      {{"report", a + "/trace-r0.sqlite", b + "/notes.txt"}, "not a SQLite file"},
      {{"report", a, a + "/trace-r2.sqlite", b + "/x.sqlite"}, "both claim rank 0"},
      {{"merge", b + "/m.sqlite", empty}, "holds no trace files"},
      {{"export", empty, "--chrome", b + "/t.json"}, "holds no trace files"},
  };
  for (const auto& [args, want] : cases) {
    CliResult r = RunCli(args);
    EXPECT_EQ(r.status, 1) << args[1];
    EXPECT_EQ(CountLines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("tokentrace: ", 0), 0u) << r.err;
  }
}

TEST(RanksCliTest, ExportPutsEveryRankOnOneTimeAxis) {
  const std::string dir = Launch(false);
  const std::string json = dir + "/all.json";
  CliResult r = RunCli({"export", dir, "--chrome", json, "--tokens", "1:2"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 4 ranks: 24 calls"), std::string::npos) << r.out;
  const std::string text = ReadFile(json);
  // Token 1's root call of each rank (pid = rank + 1): the same ts on the common axis,
  // though each file's clock reads differently (3 s apart).
  std::regex root("\"name\":\"self\",\"pid\":(\\d+),\"tid\":0,\"ts\":([0-9.]+),[^\n]*\"token\":1,");
  std::map<std::string, std::string> ts;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), root); it != std::sregex_iterator();
       ++it) {
    ts[(*it)[1]] = (*it)[2];
  }
  ASSERT_EQ(ts.size(), 4u) << text.substr(0, 400);
  for (const auto& [pid, t] : ts) EXPECT_EQ(t, ts.begin()->second) << "pid " << pid;
  EXPECT_EQ(ts.begin()->second, "0.000");
  EXPECT_NE(text.find("\"rank 2 (host2, pid 1002)\""), std::string::npos);
}

TEST(RanksCliTest, MergeWritesOneQueryableFile) {
  const std::string dir = Launch(false);
  CliResult r = RunCli({"merge", dir + "/merged.sqlite", dir + "/trace-r*.sqlite"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("merged 4 rank file(s) of launch 'launch-1'"), std::string::npos);
  // A merged file is not a rank file: a second merge of the directory refuses it clearly.
  r = RunCli({"merge", dir + "/again.sqlite", dir});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(CountLines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("is a merged file"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tokentrace::testing

namespace tokentrace::testing {
namespace {

// Two runs of one job, the second 10 ms slower in the MLP at the prefill only.
TEST(RanksCliTest, RunsCompareSiteBySitePrefillAndDecodeApart) {
  const std::string dir = TempDir();
  RankSpec before{0}, after{0};
  after.slow_rank = 0;
  after.slow_token = 1;
  after.slow_ms = 10;
  WriteRankTrace(dir + "/before.sqlite", before);
  WriteRankTrace(dir + "/after.sqlite", after);
  CliResult r = RunCli({"report", "--runs", dir + "/before.sqlite", dir + "/after.sqlite"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string out = Squeeze(r.out);
  // run, prefill ms, decode tokens, decode ms/token
  EXPECT_NE(out.find("\nA 2.100 9 2.100 " + dir + "/before.sqlite\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\nB 12.100 9 2.100 " + dir + "/after.sqlite\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\nB vs A +476.2% +0.0%"), std::string::npos) << r.out;
  // site, prefill A, B, change, decode A, B, change
  EXPECT_NE(out.find("\nmodel.mlp 2.000 12.000 +500.0% 2.000 2.000 +0.0%\n"), std::string::npos)
      << r.out;
  EXPECT_NE(out.find("\nmodel.mlp.all_reduce 0.100 0.100 +0.0% 0.100 0.100 +0.0%\n"),
            std::string::npos)
      << r.out;
  // The root's self time is 0: its children cover it.
  EXPECT_NE(out.find("\nself 0.000 0.000 - 0.000 0.000 -\n"), std::string::npos) << r.out;
  r = RunCli({"report", "--runs", dir + "/before.sqlite"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(CountLines(r.err), 1u) << r.err;
}

}  // namespace
}  // namespace tokentrace::testing
