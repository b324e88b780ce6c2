#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "store/schema.h"
#include "trace_fixture.h"

namespace tokentrace {
namespace {

using testing::RunCli;
using testing::Squeeze;

TEST(ReportTest, SmallTraceNumbersMatchWhatWasWritten) {
  std::string path = testing::TempDir() + "/t.sqlite";
  testing::WriteSmallTrace(path, /*with_losses=*/false);
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string out = Squeeze(r.out);
  EXPECT_NE(out.find(std::string("kernel mode full, pid 4242, schema ") + kSchemaVersion +
                     ", written by tokentrace " TOKENTRACE_VERSION "\nGPU kernels: recorded\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(out.find("tokens: 3\n"), std::string::npos) << r.out;
  // token, cpu ms, gpu busy ms, kernels, escapes
  EXPECT_NE(out.find("\n1 4.000 0.300 3 0\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n2 1.500 0.300 3 0\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n3 1.250 0.300 3 1\n"), std::string::npos) << r.out;
  // phase, tokens, mean cpu, median cpu, mean gpu, kernels/token
  EXPECT_NE(out.find("prefill (token 1) 1 4.000 4.000 0.300 3.0"), std::string::npos) << r.out;
  EXPECT_NE(out.find("decode (tokens >= 2) 2 1.375 1.375 0.300 3.0"), std::string::npos) << r.out;
  // site, kind, calls, kernels, gpu ms: mlp (0.6 ms) before attn (0.3 ms)
  size_t mlp = out.find("h.0.mlp module 3 6 0.600");
  size_t attn = out.find("h.0.attn module 3 3 0.300");
  EXPECT_NE(mlp, std::string::npos) << r.out;
  EXPECT_NE(attn, std::string::npos) << r.out;
  EXPECT_LT(mlp, attn);
  EXPECT_NE(out.find("losses: none"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST(ReportTest, SaysWhichVersionWroteAFileOfAnotherVersion) {
  std::string path = testing::TempDir() + "/old.sqlite";
  testing::WriteSmallTrace(path, false, {{"tool_version", "0.0.9"}});
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("written by tokentrace 0.0.9 (this is " TOKENTRACE_VERSION ")\n"),
            std::string::npos)
      << r.out;
}

// Why kernels are missing, in the words of meta kernels_off; the long detail is info's.
TEST(ReportTest, SaysInAFewWordsWhyKernelsWereNotRecorded) {
  std::string path = testing::TempDir() + "/nogpu.sqlite";
  testing::WriteSmallTrace(path, false,
                           {{"kernels_status",
                             "tokentrace: kernels are off: no NVIDIA driver "
                             "(libcuda.so.1: cannot open shared object file)"},
                            {"kernels_off", "no NVIDIA GPU here"}});
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\n  GPU kernels: not recorded: no NVIDIA GPU here (`tokentrace info` has "
                       "the detail)\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("libcuda"), std::string::npos) << r.out;
}

TEST(ReportTest, LossesAndTopAreShown) {
  std::string path = testing::TempDir() + "/t.sqlite";
  testing::WriteSmallTrace(path, /*with_losses=*/true);
  auto r = RunCli({"report", path, "--top", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string out = Squeeze(r.out);
  EXPECT_NE(out.find("ring_overflow: 12"), std::string::npos) << r.out;
  EXPECT_EQ(out.find("cupti_dropped"), std::string::npos) << r.out;  // zero counts are noise
  EXPECT_NE(out.find("h.0.mlp module"), std::string::npos);
  EXPECT_EQ(out.find("h.0.attn module"), std::string::npos) << r.out;
}

// A crafted trace: names with terminal escapes and newlines, a 1 MiB name, and a tokens view
// that never ends. The report finishes, prints nothing raw, and keeps its rows short.
TEST(ReportTest, CraftedTraceIsPrintedSafelyAndViewsInItAreNotTrusted) {
  std::string path = testing::TempDir() + "/t.sqlite";
  testing::WriteSmallTrace(path, /*with_losses=*/true);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string huge(1 << 20, 'n');
  const std::string sql =
      "UPDATE sites SET name = 'h.0.\x1b[31mred\nline' WHERE id = 3;"
      "UPDATE sites SET name = '" +
      huge +
      "' WHERE id = 2;"
      "UPDATE meta SET value = 'x\x1b]0;title\x07' WHERE key = 'kernel_mode';"
      "DROP VIEW tokens; CREATE VIEW tokens AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL "
      "SELECT x + 1 FROM r) SELECT x AS token, 0 AS cpu_begin_ns, 0 AS cpu_end_ns, 0 AS kernels, "
      "0 AS gpu_busy_ns, 0 AS escapes FROM r;";
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(r.out.find('\x07'), std::string::npos);
  EXPECT_NE(r.out.find("h.0.\\x1B[31mred\\x0Aline"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens: 3"), std::string::npos);  // from the tables, not the view
  size_t longest = 0;
  for (size_t at = 0, next; at < r.out.size(); at = next + 1) {
    next = r.out.find('\n', at);
    if (next == std::string::npos) next = r.out.size();
    longest = std::max(longest, next - at);
  }
  EXPECT_LT(longest, 400u);
}

TEST(ReportTest, BadTopIsAUsageError) {
  std::string path = testing::TempDir() + "/t.sqlite";
  testing::WriteSmallTrace(path, false);
  auto r = RunCli({"report", path, "--top", "zero"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--top"), std::string::npos);
}

// 100 tokens, token t lasts t ms except token 50 (500 ms): listed as first 10 + slowest 10 +
// percentiles, not row by row.
void WriteLongTrace(const std::string& path) {
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch b;
  b.sites = {{1, "self", SiteKind::kRoot, true}};
  int64_t now = 0;
  for (uint32_t t = 1; t <= 100; ++t) {
    int64_t d = (t == 50 ? 500 : t) * 1000000LL;
    b.calls.push_back({t, 1, t, t, 0, 0, now, now + d});
    b.call_gpu.push_back({t, t, 2, 2 * d / 10, now, now + d});
    now += d + 1000;
  }
  ASSERT_TRUE(store->Write(b, &error)) << error;
}

TEST(ReportTest, LongTraceIsSummarised) {
  std::string path = testing::TempDir() + "/long.sqlite";
  WriteLongTrace(path);
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string out = Squeeze(r.out);
  EXPECT_NE(out.find("tokens: 100\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("first 10 tokens"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n10 10.000 2.000 2 0\n"), std::string::npos) << r.out;
  EXPECT_EQ(out.find("\n30 30.000"), std::string::npos) << r.out;  // neither first nor slowest
  size_t slowest = out.find("slowest 10 tokens");
  ASSERT_NE(slowest, std::string::npos) << r.out;
  size_t header = out.find("token cpu ms", slowest);  // the slowest token comes first
  EXPECT_EQ(out.find("\n50 500.000 100.000 2 0\n"), out.find('\n', header)) << r.out;
  EXPECT_NE(out.find("\n92 92.000"), std::string::npos) << r.out;  // 10th slowest
  EXPECT_EQ(out.find("\n91 91.000"), std::string::npos) << r.out;
  // sorted cpu ms: 1..49, 51..100, 500 -> p50 = 51, p90 = 91, p99 = 100, max = 500
  EXPECT_NE(out.find("cpu ms 51.000 91.000 100.000 500.000"), std::string::npos) << r.out;
  EXPECT_NE(out.find("gpu busy ms 10.200 18.200 20.000 100.000"), std::string::npos) << r.out;
  EXPECT_LT(testing::CountLines(r.out), 70u);
}

// The numbers of the line of `out` that starts with `head`.
std::vector<double> NumbersAfter(const std::string& out, const std::string& head) {
  std::vector<double> v;
  const size_t at = out.find("\n" + head);
  if (at == std::string::npos) return v;
  std::istringstream line(out.substr(at + 1 + head.size(), out.find('\n', at + 1) - at - 1));
  for (double x; line >> x;) v.push_back(x);
  return v;
}

// The same long trace from the writer's token digest (what a run of more than 1,000,000
// tokens gets by default): the same tokens listed, the same slowest and maxima, medians and
// percentiles within 0.4 % of the exact ones, and the report says where they came from.
TEST(ReportTest, TheDigestGivesTheExactReportsFiguresWithinItsBound) {
  std::string path = testing::TempDir() + "/long-digest.sqlite";
  WriteLongTrace(path);
  auto exact = RunCli({"report", path, "--percentiles", "exact"});
  auto digest = RunCli({"report", path, "--percentiles=digest"});
  ASSERT_EQ(exact.status, 0) << exact.err;
  ASSERT_EQ(digest.status, 0) << digest.err;
  const std::string e = Squeeze(exact.out), d = Squeeze(digest.out);
  EXPECT_EQ(e.find("histogram"), std::string::npos) << exact.out;
  EXPECT_NE(d.find("percentiles over 100 tokens (from the file's histogram of token times: "
                   "within 0.4 %"),
            std::string::npos)
      << digest.out;
  // Everything before the percentiles (the tokens listed, the slowest) is the same.
  EXPECT_EQ(e.substr(0, e.find("percentiles over")), d.substr(0, d.find("percentiles over")));
  for (const std::string head :
       {"cpu ms ", "gpu busy ms ", "prefill (token 1) ", "decode (tokens >= 2) "}) {
    const std::vector<double> a = NumbersAfter(e, head), b = NumbersAfter(d, head);
    ASSERT_EQ(a.size(), b.size()) << head << "\n" << exact.out << digest.out;
    ASSERT_FALSE(a.empty()) << head;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(b[i], a[i], 0.004 * a[i] + 0.0015) << head << " column " << i;
    }
  }
  EXPECT_NE(d.find(" 500.000\n"), std::string::npos) << digest.out;  // the max: exact
  // A default report of 100 tokens reads every token.
  EXPECT_EQ(RunCli({"report", path}).out, exact.out);
  auto bad = RunCli({"report", path, "--percentiles", "approx"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--percentiles 'approx' is not one of auto, exact, digest"),
            std::string::npos)
      << bad.err;
}

// 10,000 tokens x ~700 kernels (full mode), 100 calls per token: report reads only the
// summary tables. The time is printed, not asserted (a timed unit test fails on a busy
// machine); bench/ranks_bench measures report speed over such files.
TEST(ReportTest, TenThousandTokenFullTraceIsReported) {
  std::string path = testing::TempDir() + "/big.sqlite", error;
  auto build = std::chrono::steady_clock::now();
  {
    auto store = Store::Open(path, &error);
    ASSERT_NE(store, nullptr) << error;
    Batch sites;
    sites.sites.push_back({1, "self", SiteKind::kRoot, true});
    for (uint32_t s = 2; s <= 100; ++s) {
      sites.sites.push_back(
          {s, "model.layers." + std::to_string(s) + ".mlp", SiteKind::kModule, false});
    }
    ASSERT_TRUE(store->Write(sites, &error));
    int64_t now = 1000000000;
    uint64_t call_id = 1, corr = 1;
    for (uint32_t t = 1; t <= 10000; ++t) {
      Batch b;
      uint64_t root = call_id++;
      b.calls.push_back({root, 1, t, t, 0, 0, now, now + 20000000});
      for (uint32_t s = 2; s <= 100; ++s) {
        uint64_t id = call_id++;
        int64_t begin = now + s * 100000;
        b.calls.push_back({id, s, t, t, root, 0, begin, begin + 90000});
        int n = s <= 8 ? 14 : 7;  // 7*14 + 92*7 = 742 kernels per token
        for (int k = 0; k < n; ++k) {
          b.kernels.push_back({id, t, 1, GpuOpKind::kKernel, 0, 7, begin + k * 10000,
                               begin + k * 10000 + 5000, corr++, 0, 0});
        }
        b.call_gpu.push_back(
            {id, t, static_cast<uint32_t>(n), n * 5000LL, begin, begin + n * 10000});
      }
      ASSERT_TRUE(store->Write(b, &error)) << error;
      now += 25000000;
    }
  }
  std::printf("built in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - build).count());
  auto start = std::chrono::steady_clock::now();
  auto r = RunCli({"report", path});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("tokens: 10000\n"), std::string::npos);
  std::printf("report on 10000 tokens x 742 kernels: %.2f s\n", seconds);
}

}  // namespace
}  // namespace tokentrace

namespace tokentrace {
namespace {

// Tokens that ran as CUDA-graph replays have GPU work but no token call of their own.
TEST(ReportTest, GraphReplayTokensAreListedAndMarked) {
  std::string path = ::testing::TempDir() + "/graph.sqlite";
  testing::WriteSmallTrace(path, /*with_losses=*/false);
  // Append two replayed tokens (4, 5) the way the session writes them: summaries only.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "INSERT INTO token_stats(token, kernels, gpu_busy_ns, escapes) "
                           "VALUES(4, 7, 2000000, 0), (5, 7, 2500000, 0);",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string out = Squeeze(r.out);
  EXPECT_NE(out.find("tokens: 5 (2 ran as CUDA-graph replays"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n4 graph 2.000 7 0\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n5 graph 2.500 7 0\n"), std::string::npos) << r.out;
}

// Each token's generated text (token_text): the prompt once, the answer, and a column of the
// tokens' texts; a batch's other sequences counted; text from the file never reaches the
// terminal raw (an escape sequence or a newline shows as a JSON escape).
TEST(ReportTest, TokensShowTheTextTheyGeneratedAndThePromptOnce) {
  std::string path = testing::TempDir() + "/text.sqlite";
  testing::WriteSmallTrace(path, /*with_losses=*/false);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql =
      "INSERT INTO token_text VALUES (0, 0, NULL, 'The capital of France is'), "
      "(0, 1, NULL, 'Another prompt'), (1, 0, 7, NULL), (1, 0, 7, ' Paris'), "
      "(1, 1, 9, ' Rome'), (2, 0, 8, '.\x1b[31m'), (3, 0, 10, NULL);";
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
  sqlite3_close(db);
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prompt: \"The capital of France is\" (and 1 more sequences)"),
            std::string::npos)
      << r.out;
  const std::string out = Squeeze(r.out);
  EXPECT_NE(out.find("escapes generated\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n1 4.000 0.300 3 0 \" Paris\" (+1)\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n2 1.500 0.300 3 0 \".\\u001b[31m\"\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\n3 1.250 0.300 3 1 id 10\n"), std::string::npos) << r.out;  // no text
  EXPECT_NE(r.out.find("generated: \" Paris.\\u001b[31m\""), std::string::npos) << r.out;
}

// A file without token_text (older, or a job whose root read no token ids): no column.
TEST(ReportTest, TokensWithoutTextHaveNoTextColumn) {
  std::string path = testing::TempDir() + "/notext.sqlite";
  testing::WriteSmallTrace(path, /*with_losses=*/false);
  auto r = RunCli({"report", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("generated"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("prompt:"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tokentrace
