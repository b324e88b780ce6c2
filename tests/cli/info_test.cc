// `info`, and the file errors shared by report, export and info.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include "cli_runner.h"
#include "store/schema.h"
#include "trace_fixture.h"

namespace tokentrace {
namespace {

using testing::RunCli;

TEST(InfoTest, ShowsMetaCountsLossesAndSize) {
  std::string path = testing::TempDir() + "/t.sqlite";
  testing::WriteSmallTrace(path, /*with_losses=*/true);
  auto r = RunCli({"info", path});
  ASSERT_EQ(r.status, 0) << r.err;
  std::string out = testing::Squeeze(r.out);
  EXPECT_NE(out.find("MiB)"), std::string::npos) << r.out;
  EXPECT_NE(out.find(std::string("\nschema_version ") + tokentrace::kSchemaVersion + "\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(out.find("\nkernel_mode full\n"), std::string::npos) << r.out;
  EXPECT_NE(out.find("\nsites 3\ncalls 9\ntokens 3\nkernels 9\nescapes 1\n"), std::string::npos)
      << r.out;
  EXPECT_NE(out.find("\nring_overflow 12\n"), std::string::npos) << r.out;
}

// A long value (the kernel status on a machine without a GPU) neither pushes the short ones
// to the right nor runs past 100 columns.
TEST(InfoTest, MetaValuesAreLeftAlignedAndWrapped) {
  std::string path = testing::TempDir() + "/long_meta.sqlite";
  const std::string status =
      "tokentrace: kernels are off: no NVIDIA driver (libcuda.so.1: cannot open shared object "
      "file: No such file or directory); cuptiSubscribe failed: CUPTI_ERROR_UNKNOWN";
  testing::WriteSmallTrace(path, false, {{"kernels_status", status}});
  auto r = RunCli({"info", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\n  pid             4242\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  kernels_status  tokentrace: kernels are off: no NVIDIA driver"),
            std::string::npos)
      << r.out;
  size_t start = 0;
  while (start < r.out.size()) {
    size_t end = r.out.find('\n', start);
    if (end == std::string::npos) end = r.out.size();
    EXPECT_LE(end - start, 100u) << r.out.substr(start, end - start);
    start = end + 1;
  }
  EXPECT_NE(r.out.find("\n                  CUPTI_ERROR_UNKNOWN\n"), std::string::npos) << r.out;
}

// A meta value of 100 MB (a crafted file) is shown cut, with its size, not printed whole.
TEST(InfoTest, AHugeMetaValueIsCutWithItsSize) {
  std::string path = testing::TempDir() + "/huge_meta.sqlite";
  testing::WriteSmallTrace(path, false, {{"note", std::string(100 << 20, 'x')}});
  auto r = RunCli({"info", path});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_LT(r.out.size(), 10000u);
  EXPECT_NE(testing::Squeeze(r.out).find("(104857600 bytes; sqlite3 prints it whole)"),
            std::string::npos)
      << r.out.substr(0, 400);
}

// Each bad input, for each reading command: exit 1 and exactly one "tokentrace: " line.
TEST(FileErrorTest, MissingNonSqliteAndForeignSqliteFiles) {
  std::string dir = testing::TempDir();
  std::string text = dir + "/notes.txt", foreign = dir + "/other.db";
  std::ofstream(text) << "SQLite format 2? no, just text that is long enough to be a header\n";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE users(name TEXT)", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  struct Case {
    std::string file, expect;
  } cases[] = {{dir + "/missing.sqlite", "No such file or directory"},
               {text, "is not a SQLite file"},
               {foreign, "not a tokentrace trace"},
               {dir, "is a directory"}};
  for (const Case& c : cases) {
    for (std::vector<std::string> args : {std::vector<std::string>{"report", c.file},
                                          {"info", c.file},
                                          {"export", c.file, "--chrome", dir + "/x.json"}}) {
      auto r = RunCli(args);
      EXPECT_EQ(r.status, 1) << args[0] << " " << c.file;
      EXPECT_EQ(r.err.rfind("tokentrace: ", 0), 0u) << r.err;
      EXPECT_EQ(testing::CountLines(r.err), 1u) << r.err;
      // report and export read a directory as the rank files in it (tests/multi).
      const bool ranks = c.file == dir && args[0] != "info";
      EXPECT_NE(r.err.find(ranks ? "holds no trace files" : c.expect), std::string::npos) << r.err;
      EXPECT_EQ(r.out, "");
    }
  }
}

TEST(HelpTest, EveryCommandHasUsage) {
  auto r = RunCli({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("usage: tokentrace <command>"), std::string::npos);
  for (const char* cmd : {"run", "report", "export", "info"}) {
    r = RunCli({cmd, "--help"});
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_NE(r.out.find(std::string("usage: tokentrace ") + cmd), std::string::npos) << r.out;
  }
  r = RunCli({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "tokentrace " TOKENTRACE_VERSION "\n");
  r = RunCli({"--help"});
  EXPECT_NE(r.out.find("\ntokentrace " TOKENTRACE_VERSION "\n"), std::string::npos) << r.out;
  r = RunCli({"frobnicate"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos);
}

}  // namespace
}  // namespace tokentrace
