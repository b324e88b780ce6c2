#include "store/reader.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "store/schema.h"
#include "store/store.h"
#include "test_db.h"

namespace tokentrace {
namespace {

using testing::TempPath;

std::string MakeTrace() {
  std::string path = TempPath("r.sqlite"), error;
  auto store = Store::Open(path, &error);
  EXPECT_NE(store, nullptr) << error;
  Batch b;
  b.meta = {{"kernel_mode", "full"}};
  b.sites = {{1, "self", SiteKind::kRoot, true},
             {2, "h.0.attn", SiteKind::kModule, false},
             {3, "h.0.mlp", SiteKind::kModule, false}};
  b.strings = {{1, "flash_fwd"}, {2, "gemm"}};
  // Token t: root call 10t (t ms long), attn call 10t+1 (one 3 us kernel), mlp call 10t+2
  // (two 5 us kernels); kernels outside calls add 1 us per token.
  for (uint32_t t = 1; t <= 3; ++t) {
    int64_t base = t * 10000000;
    b.calls.push_back({10u * t, 1, t, t, 0, 0, base, base + t * 1000000});
    b.calls.push_back({10u * t + 1, 2, t, t, 10u * t, 0, base + 10, base + 20});
    b.calls.push_back({10u * t + 2, 3, t, t, 10u * t, 1, base + 30, base + 40});
    b.kernels.push_back(
        {10u * t + 1, t, 1, GpuOpKind::kKernel, 0, 7, base + 100, base + 3100, 1, 0, 0});
    b.kernels.push_back(
        {10u * t + 2, t, 2, GpuOpKind::kKernel, 0, 7, base + 4000, base + 9000, 2, 0, 0});
    b.kernels.push_back(
        {10u * t + 2, t, 2, GpuOpKind::kKernel, 0, 7, base + 9000, base + 14000, 3, 0, 0});
    b.call_gpu.push_back({10u * t + 1, t, 1, 3000, base + 100, base + 3100});
    b.call_gpu.push_back({10u * t + 2, t, 2, 10000, base + 4000, base + 14000});
    b.call_gpu.push_back({0, t, 1, 1000, base + 20000, base + 21000});
  }
  b.escapes = {{32, 3, 1, 30000035, EscapeKind::kDeviceSync}};
  b.losses = {{"ring_overflow", 2}};
  EXPECT_TRUE(store->Write(b, &error)) << error;
  return path;
}

TEST(ReaderTest, TokensCarryCpuAndGpuTotals) {
  std::string path = MakeTrace(), error;
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  std::vector<TokenStat> tokens;
  ASSERT_TRUE(reader->Tokens(&tokens, &error)) << error;
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[1].token, 2u);
  EXPECT_EQ(tokens[1].cpu_end_ns - tokens[1].cpu_begin_ns, 2000000);
  EXPECT_EQ(tokens[1].kernels, 4);
  EXPECT_EQ(tokens[1].gpu_busy_ns, 14000);
  EXPECT_EQ(tokens[2].escapes, 1);
  EXPECT_EQ(tokens[0].escapes, 0);
}

TEST(ReaderTest, TopSitesOrderedByGpuSelfTimeWithOutsideBucket) {
  std::string path = MakeTrace(), error;
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  std::vector<SiteGpu> sites;
  ASSERT_TRUE(reader->TopSites(10, &sites, &error)) << error;
  ASSERT_EQ(sites.size(), 4u);
  EXPECT_EQ(sites[0].name, "h.0.mlp");
  EXPECT_EQ(sites[0].cpu_self_ns, 30);  // leaves: self = whole
  EXPECT_EQ(sites[0].calls, 3);
  EXPECT_EQ(sites[0].kernels, 6);
  EXPECT_EQ(sites[0].gpu_busy_ns, 30000);
  EXPECT_EQ(sites[1].name, "h.0.attn");
  EXPECT_EQ(sites[2].name, "(outside any call)");
  EXPECT_EQ(sites[2].gpu_busy_ns, 3000);
  // The root has no kernels of its own: listed last, with its host time minus its children's.
  EXPECT_EQ(sites[3].name, "self");
  EXPECT_EQ(sites[3].kernels, 0);
  EXPECT_EQ(sites[3].cpu_self_ns, (1 + 2 + 3) * 1000000 - 3 * 20);
  sites.clear();
  ASSERT_TRUE(reader->TopSites(1, &sites, &error));
  EXPECT_EQ(sites.size(), 1u);
}

TEST(ReaderTest, BeforeCountsTheOutermostModuleCallsOfTokenZero) {
  std::string path = TempPath("before.sqlite"), error;
  {
    auto store = Store::Open(path, &error);
    ASSERT_NE(store, nullptr) << error;
    Batch b;
    b.sites = {{1, "self", SiteKind::kRoot, true},
               {2, "encoder", SiteKind::kModule, false},
               {3, "encoder.block.0", SiteKind::kModule, false},
               {4, "decoder", SiteKind::kModule, false}};
    // An encoder-decoder's generate: the encoder (with a child) before the first root call,
    // then one token: the root and the decoder inside it.
    b.calls = {{1, 2, 1, 0, 0, 0, 1000, 5000},
               {2, 3, 1, 0, 1, 0, 1500, 4000},
               {3, 1, 1, 1, 0, 0, 6000, 9000},
               {4, 4, 1, 1, 3, 0, 6500, 8000}};
    b.call_gpu = {{2, 0, 2, 700, 1600, 2300}, {4, 1, 1, 300, 6600, 6900}};
    ASSERT_TRUE(store->Write(b, &error)) << error;
  }
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  BeforeTokens before;
  ASSERT_TRUE(reader->Before(&before, &error)) << error;
  EXPECT_EQ(before.calls, 1);  // the encoder; its block is inside it
  EXPECT_EQ(before.cpu_ns, 4000);
  EXPECT_EQ(before.kernels, 2);
  EXPECT_EQ(before.gpu_busy_ns, 700);
  EXPECT_EQ(before.sites, "encoder");
  std::vector<TokenStat> tokens;
  ASSERT_TRUE(reader->Tokens(&tokens, &error)) << error;
  ASSERT_EQ(tokens.size(), 1u);  // token 0 is not a token
  EXPECT_EQ(tokens[0].gpu_busy_ns, 300);
}

TEST(ReaderTest, BeforeIsEmptyWhenEveryCallIsInAToken) {
  std::string path = MakeTrace(), error;
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  BeforeTokens before;
  ASSERT_TRUE(reader->Before(&before, &error)) << error;
  EXPECT_EQ(before.calls, 0);
  EXPECT_EQ(before.sites, "");
}

TEST(ReaderTest, TopOpsSplitsPrefillFromDecodeAndSkipsInnerOps) {
  std::string path = TempPath("ops.sqlite"), error;
  {
    auto store = Store::Open(path, &error);
    ASSERT_NE(store, nullptr) << error;
    Batch b;
    b.sites = {{1, "self", SiteKind::kRoot, true},
               {2, "aten::addmm", SiteKind::kOp, false},
               {3, "aten::mm", SiteKind::kOp, false}};
    // Token t: root call 10t; addmm 10t+1 (5 ns, 2 us on the GPU) in it; an mm inside the
    // addmm (an inner op: it counts towards the addmm, not as a row of its own).
    for (uint32_t t = 1; t <= 3; ++t) {
      const int64_t base = t * 1000;
      b.calls.push_back({10u * t, 1, t, t, 0, 0, base, base + 100});
      b.calls.push_back({10u * t + 1, 2, t, t, 10u * t, 0, base + 10, base + 15});
      b.calls.push_back({10u * t + 2, 3, t, t, 10u * t + 1, 0, base + 11, base + 14});
      b.call_gpu.push_back({10u * t + 1, t, 1, 2000, base, base + 2000});
    }
    ASSERT_TRUE(store->Write(b, &error)) << error;
  }
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  std::vector<OpPhases> ops;
  ASSERT_TRUE(reader->TopOps(10, &ops, &error)) << error;
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].name, "aten::addmm");
  EXPECT_EQ(ops[0].prefill_calls, 1);
  EXPECT_EQ(ops[0].prefill_cpu_ns, 5);
  EXPECT_EQ(ops[0].prefill_gpu_ns, 2000);
  EXPECT_EQ(ops[0].decode_calls, 2);
  EXPECT_EQ(ops[0].decode_cpu_ns, 10);
  EXPECT_EQ(ops[0].decode_gpu_ns, 4000);
  ops.clear();
  auto plain = Reader::Open(MakeTrace(), &error);  // no op records: no rows
  ASSERT_TRUE(plain->TopOps(10, &ops, &error)) << error;
  EXPECT_TRUE(ops.empty());
}

TEST(ReaderTest, CountsMetaAndLosses) {
  std::string path = MakeTrace(), error;
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  TraceCounts c;
  ASSERT_TRUE(reader->Counts(&c, &error)) << error;
  EXPECT_EQ(c.sites, 3);
  EXPECT_EQ(c.calls, 9);
  EXPECT_EQ(c.kernels, 9);
  EXPECT_EQ(c.tokens, 3);
  EXPECT_EQ(c.escapes, 1);
  std::vector<std::pair<std::string, std::string>> meta;
  ASSERT_TRUE(reader->Meta(&meta, &error));
  EXPECT_NE(std::find(meta.begin(), meta.end(),
                      std::make_pair(std::string("kernel_mode"), std::string("full"))),
            meta.end());
  std::vector<std::pair<std::string, int64_t>> losses;
  ASSERT_TRUE(reader->Losses(&losses, &error));
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].second, 2);
}

TEST(ReaderTest, ForEachFiltersByToken) {
  std::string path = MakeTrace(), error;
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  std::vector<CallEvent> calls;
  ASSERT_TRUE(reader->ForEachCall(
      2, 3, [&](const CallEvent& e) { calls.push_back(e); }, &error));
  EXPECT_EQ(calls.size(), 6u);
  for (const CallEvent& e : calls) EXPECT_GE(e.token, 2u);
  std::vector<KernelEvent> kernels;
  ASSERT_TRUE(reader->ForEachKernel(
      2, 2, [&](const KernelEvent& e) { kernels.push_back(e); }, &error));
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[0].name, "flash_fwd");
  EXPECT_EQ(kernels[0].call, "h.0.attn:2");
  int64_t first = 0;
  bool found = false;
  ASSERT_TRUE(reader->FirstTimestamp(2, 3, &first, &found, &error));
  EXPECT_TRUE(found);
  EXPECT_EQ(first, 20000000);
  ASSERT_TRUE(reader->FirstTimestamp(7, 9, &first, &found, &error));
  EXPECT_FALSE(found);
}

TEST(ReaderTest, MissingFileIsOneLineError) {
  std::string error;
  EXPECT_EQ(Reader::Open("/tmp/definitely/missing.sqlite", &error), nullptr);
  EXPECT_EQ(error,
            "tokentrace: cannot open '/tmp/definitely/missing.sqlite': "
            "No such file or directory");
}

TEST(ReaderTest, NonSqliteFileIsRejected) {
  std::string path = TempPath("text.sqlite"), error;
  std::ofstream(path) << "this is a text file that is long enough to have a header.......\n";
  EXPECT_EQ(Reader::Open(path, &error), nullptr);
  EXPECT_NE(error.find("is not a SQLite file"), std::string::npos) << error;
}

TEST(ReaderTest, SqliteFileWithoutMetaIsRejected) {
  std::string path = TempPath("other.sqlite"), error;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE t(x); CREATE TABLE meta(key TEXT, value TEXT);", nullptr, nullptr,
               nullptr);
  sqlite3_close(db);
  EXPECT_EQ(Reader::Open(path, &error), nullptr);
  EXPECT_NE(error.find("not a tokentrace trace"), std::string::npos) << error;

  std::string path2 = TempPath("other2.sqlite");
  ASSERT_EQ(sqlite3_open(path2.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "CREATE TABLE t(x);", nullptr, nullptr, nullptr);
  sqlite3_close(db);
  EXPECT_EQ(Reader::Open(path2, &error), nullptr);
  EXPECT_NE(error.find("not a tokentrace trace"), std::string::npos) << error;
}

// A trace's .sqlite copied without its -wal (the writer was killed before a checkpoint): the
// message says the WAL is missing, not that the file is no trace.
TEST(ReaderTest, TraceWithoutItsWalSaysTheWalIsMissing) {
  std::string path = TempPath("nowal.sqlite"), error;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db, "PRAGMA journal_mode=WAL;", nullptr, nullptr, nullptr);
  sqlite3_close(db);  // a WAL-mode file with no tables, and no -wal next to it
  EXPECT_EQ(Reader::Open(path, &error), nullptr);
  EXPECT_NE(error.find("its write-ahead log '" + path + "-wal' is missing"), std::string::npos)
      << error;
}

// Reading a finished trace leaves nothing next to it (no -wal, no -shm), even for a path
// with characters a URI must escape.
TEST(ReaderTest, ReadingAFinishedTraceLeavesNoWalOrShm) {
  const std::string dir = TempPath("odd dir %?#");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const std::string path = dir + "/t.sqlite";
  std::string error;
  {
    auto store = Store::Open(path, &error);
    ASSERT_NE(store, nullptr) << error;
    Batch b;
    b.meta = {{"kernel_mode", "off"}};
    ASSERT_TRUE(store->Write(b, &error)) << error;
  }
  {
    auto reader = Reader::Open(path, &error);
    ASSERT_NE(reader, nullptr) << error;
    std::vector<std::pair<std::string, std::string>> meta;
    ASSERT_TRUE(reader->Meta(&meta, &error)) << error;
    EXPECT_FALSE(meta.empty());
  }
  EXPECT_NE(access((path + "-wal").c_str(), F_OK), 0);
  EXPECT_NE(access((path + "-shm").c_str(), F_OK), 0);
}

void SetSchemaVersion(const std::string& path, const char* version) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql =
      std::string("UPDATE meta SET value='") + version + "' WHERE key='schema_version'";
  sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
}

TEST(ReaderTest, NewerSchemaIsRejected) {
  std::string path = MakeTrace(), error;
  const std::string newer = std::to_string(std::atoi(kSchemaVersion) + 1);
  SetSchemaVersion(path, newer.c_str());
  EXPECT_EQ(Reader::Open(path, &error), nullptr);
  EXPECT_NE(error.find("schema version " + newer + "; this tokentrace reads versions 1 to " +
                       kSchemaVersion),
            std::string::npos)
      << error;
  SetSchemaVersion(path, "2x");
  EXPECT_EQ(Reader::Open(path, &error), nullptr);
}

// Version 2 added call_inputs (3: call_gpu.gpu_comm_ns); a file written by version 1 still
// opens, and says so.
TEST(ReaderTest, PreviousSchemaOpensAndSaysWhichVersionWroteIt) {
  std::string path = MakeTrace(), error;
  EXPECT_EQ(Reader::Open(path, &error)->schema_version(), std::atoi(kSchemaVersion)) << error;
  SetSchemaVersion(path, "1");
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  EXPECT_EQ(reader->schema_version(), 1);
}

}  // namespace
}  // namespace tokentrace
