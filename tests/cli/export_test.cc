#include <gtest/gtest.h>
#include <sqlite3.h>

#include "cli_runner.h"
#include "trace_fixture.h"

namespace tokentrace {
namespace {

using testing::RunCli;

// Summarises a Chrome trace with Python's json module (a strict parser): one line per fact.
std::string Summarise(const std::string& json_path) {
  std::string script = testing::TempDir() + "/summarise.py";
  std::ofstream(script) << R"py(
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
print("calls", sum(1 for e in x if e["cat"] == "call"))
print("kernels", sum(1 for e in x if e["cat"] == "kernel"))
print("tokens", sorted({e["args"]["token"] for e in x}))
print("first_ts", min(e["ts"] for e in x))
print("names", sorted({e["name"] for e in x}))
for e in sorted(x, key=lambda e: (e["ts"], e["cat"])):
    print("event", e["cat"], e["pid"], e["tid"], e["ts"], e["dur"], e["args"]["site"],
          e["args"]["token"])
for e in ev:
    if e["ph"] == "M":
        print("meta", e["name"], e["pid"], e["tid"], e["args"]["name"])
)py";
  std::string out = testing::TempDir() + "/summary.txt";
  std::string cmd = "python3 " + script + " " + json_path + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string text = testing::ReadFile(out);
  return rc == 0 ? text : "python failed: " + text;
}

TEST(ExportTest, ChromeJsonParsesWithTracksPerThreadAndStream) {
  std::string dir = testing::TempDir();
  testing::WriteSmallTrace(dir + "/t.sqlite", false);
  auto r = RunCli({"export", dir + "/t.sqlite", "--chrome", dir + "/t.json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 9 calls and 9 GPU events"), std::string::npos) << r.out;
  std::string s = Summarise(dir + "/t.json");
  EXPECT_NE(s.find("calls 9\n"), std::string::npos) << s;
  EXPECT_NE(s.find("kernels 9\n"), std::string::npos) << s;
  EXPECT_NE(s.find("tokens [1, 2, 3]\n"), std::string::npos) << s;
  EXPECT_NE(s.find("first_ts 0.0\n"), std::string::npos) << s;
  // The root call of token 1 starts at 0 and lasts 4 ms, on thread 0 of pid 4242.
  EXPECT_NE(s.find("event call 4242 0 0.0 4000.0 self:1 1\n"), std::string::npos) << s;
  // mlp ran on thread 1; its second kernel in token 2 starts at 10 ms + 300 us.
  EXPECT_NE(s.find("event call 4242 1 10003.0 1.0 h.0.mlp:2 2\n"), std::string::npos) << s;
  EXPECT_NE(s.find("event kernel 1000000000 7 10300.0 100.0 h.0.mlp:2 2\n"), std::string::npos)
      << s;
  EXPECT_NE(s.find("meta process_name 1000000000 0 GPU 0\n"), std::string::npos) << s;
  EXPECT_NE(s.find("meta thread_name 1000000000 7 stream 7\n"), std::string::npos) << s;
  EXPECT_NE(s.find("meta thread_name 4242 1 thread 1\n"), std::string::npos) << s;
}

TEST(ExportTest, TokensFilterKeepsOnlyThoseTokensAndRebasesTime) {
  std::string dir = testing::TempDir();
  testing::WriteSmallTrace(dir + "/t.sqlite", false);
  auto r = RunCli({"export", dir + "/t.sqlite", "--chrome", dir + "/t.json", "--tokens", "2:3"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string s = Summarise(dir + "/t.json");
  EXPECT_NE(s.find("calls 6\n"), std::string::npos) << s;
  EXPECT_NE(s.find("tokens [2, 3]\n"), std::string::npos) << s;
  EXPECT_NE(s.find("event call 4242 0 0.0 1500.0 self:2 2\n"), std::string::npos) << s;
}

TEST(ExportTest, NamesAreEscapedAndOpenCallsAreDrawnToTheEnd) {
  std::string dir = testing::TempDir(), error;
  {
    auto store = Store::Open(dir + "/t.sqlite", &error);
    ASSERT_NE(store, nullptr) << error;
    Batch b;
    b.sites = {{1, "self", SiteKind::kRoot, true},
               {2, "range \"q\" \\ with\nnewline\ttab", SiteKind::kRange, false}};
    b.strings = {{1, "void k<\"x\">(char\\*)"}};
    b.calls = {{1, 1, 1, 1, 0, 0, 1000, -1}, {2, 2, 1, 1, 1, 0, 2000, 3000}};
    b.kernels = {{2, 1, 1, GpuOpKind::kKernel, 1, 3, 4000, 9000, 5, 0, 0},
                 {0, 1, 0, GpuOpKind::kMemcpy, 1, 4, 9000, 10000, 6, 0, 0}};
    ASSERT_TRUE(store->Write(b, &error)) << error;
  }
  auto r = RunCli({"export", dir + "/t.sqlite", "--chrome", dir + "/t.json"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string s = Summarise(dir + "/t.json");
  EXPECT_NE(s.find("'range \"q\" \\\\ with\\nnewline\\ttab'"), std::string::npos) << s;
  EXPECT_NE(s.find("void k<\"x\">(char\\\\*)"), std::string::npos) << s;
  EXPECT_NE(s.find("event call 1 0 0.0 9.0 self:1 1\n"), std::string::npos) << s;  // open
  EXPECT_NE(s.find("event memcpy 1000000001 4 8.0 1.0  1\n"), std::string::npos) << s;
}

// Each token's slice (its root call) is named by the text the token generated, where the file
// has it (token_text); its other calls keep their site's name.
TEST(ExportTest, TokenSlicesAreNamedByTheirText) {
  std::string dir = testing::TempDir();
  testing::WriteSmallTrace(dir + "/t.sqlite", false);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/t.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "INSERT INTO token_text VALUES (1, 0, 7, NULL), (1, 0, 7, ' Paris'), "
                         "(2, 0, 8, NULL)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto r = RunCli({"export", dir + "/t.sqlite", "--chrome", dir + "/t.json"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string s = Summarise(dir + "/t.json");
  EXPECT_NE(s.find("'self \" Paris\"'"), std::string::npos) << s;
  EXPECT_NE(s.find("'self id 8'"), std::string::npos) << s;
  EXPECT_NE(s.find("'self'"), std::string::npos) << s;  // token 3: no row
  EXPECT_NE(s.find("'h.0.mlp'"), std::string::npos) << s;
}

TEST(ExportTest, UsageErrors) {
  std::string dir = testing::TempDir();
  testing::WriteSmallTrace(dir + "/t.sqlite", false);
  auto r = RunCli({"export", dir + "/t.sqlite", "--chrome", dir + "/t.json", "--tokens", "3:2"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--tokens '3:2'"), std::string::npos) << r.err;
  r = RunCli({"export", dir + "/t.sqlite"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--chrome"), std::string::npos) << r.err;
  // The output is the trace itself (or another trace): refused, the trace is untouched.
  for (const std::string& same : {dir + "/t.sqlite", dir + "/./t.sqlite"}) {
    r = RunCli({"export", dir + "/t.sqlite", "--chrome", same});
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("is a trace file, which the JSON would overwrite"), std::string::npos)
        << r.err;
  }
  EXPECT_EQ(RunCli({"report", dir + "/t.sqlite"}).status, 0);
  r = RunCli({"export", dir + "/t.sqlite", "--chrome", dir + "/no/such/dir/t.json"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.rfind("tokentrace: cannot write '", 0), 0u) << r.err;
}

}  // namespace
}  // namespace tokentrace
