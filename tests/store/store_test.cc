#include "store/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "store/added_rows_sql.h"
#include "store/reader.h"
#include "store/schema.h"
#include "test_db.h"

namespace tokentrace {
namespace {

using testing::QueryInt;
using testing::QueryText;
using testing::TempPath;

// Root site 1 (is_token), module site 2; token t's root call has id 100*t, its module call
// 100*t + 1.
Batch TwoTokens() {
  Batch b;
  b.meta = {{"kernel_mode", "full"}, {"pid", "42"}};
  b.sites = {{1, "self", SiteKind::kRoot, true}, {2, "h.0.mlp", SiteKind::kModule, false}};
  b.strings = {{1, "gemm"}, {2, "relu"}};
  for (uint32_t t = 1; t <= 2; ++t) {
    int64_t base = t * 1000000;
    b.calls.push_back({100u * t, 1, t, t, 0, 0, base, base + 500000});
    b.calls.push_back({100u * t + 1, 2, t, t, 100u * t, 0, base + 1000, base + 9000});
    b.kernels.push_back(
        {100u * t + 1, t, 1, GpuOpKind::kKernel, 0, 7, base + 2000, base + 3000, 10u * t, 0, 0});
    b.call_gpu.push_back({100u * t + 1, t, 1, 1000, base + 2000, base + 3000});
  }
  return b;
}

TEST(StoreTest, OpenFailsWithOneLineMessageWhenParentMissing) {
  std::string error;
  auto store = Store::Open("/nonexistent_dir_tt/x.sqlite", &error);
  EXPECT_EQ(store, nullptr);
  EXPECT_EQ(error.rfind("tokentrace: cannot write '/nonexistent_dir_tt/x.sqlite': ", 0), 0u)
      << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST(StoreTest, TheFilesTokensViewIsTheReadersSelect) {
  std::string path = TempPath("view.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  store->Close();
  // Both come from schema.sql: the view a file carries is what the readers run themselves.
  const std::string view = QueryText(path, "SELECT sql FROM sqlite_master WHERE name='tokens'");
  EXPECT_EQ(view, std::string("CREATE VIEW tokens AS\n  ") + kTokensSelectSql) << view;
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM sqlite_master WHERE name='calls_site_k'"), 0);
}

TEST(StoreTest, WritesRowsWithNullsForAbsentValues) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch b = TwoTokens();
  b.calls.push_back({300, 2, 3, 2, 0, 1, 5000000, -1});  // never closed, no parent
  b.kernels.push_back({0, 2, 2, GpuOpKind::kMemcpy, 1, 3, 10, 20, 99, 4, 5});
  ASSERT_TRUE(store->Write(b, &error)) << error;
  store->Close();

  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key='schema_version'"), kSchemaVersion);
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key='kernel_mode'"), "full");
  EXPECT_EQ(QueryText(path, "SELECT kind FROM sites WHERE id=2"), "module");
  EXPECT_EQ(QueryInt(path, "SELECT is_token FROM sites WHERE id=1"), 1);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM calls"), 5);
  EXPECT_EQ(QueryInt(path, "SELECT parent_id FROM calls WHERE id=300"), -999);
  EXPECT_EQ(QueryInt(path, "SELECT cpu_end_ns FROM calls WHERE id=300"), -999);
  EXPECT_EQ(QueryInt(path, "SELECT parent_id FROM calls WHERE id=201"), 200);
  EXPECT_EQ(QueryInt(path, "SELECT call_id FROM kernels WHERE correlation_id=99"), -999);
  EXPECT_EQ(QueryInt(path, "SELECT kind FROM kernels WHERE correlation_id=99"), 1);
  EXPECT_EQ(QueryInt(path, "SELECT graph_node_id FROM kernels WHERE correlation_id=99"), 5);
  EXPECT_EQ(QueryInt(path, "SELECT stream FROM kernels WHERE correlation_id=20"), 7);
  EXPECT_EQ(QueryText(path, "SELECT text FROM strings WHERE id=2"), "relu");
  // The final checkpoint folded the WAL into the main file.
  struct stat st;
  EXPECT_TRUE(stat((path + "-wal").c_str(), &st) != 0 || st.st_size == 0);
}

TEST(StoreTest, CallGpuDeltasAddUpAcrossBatches) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch a, b, c;
  a.call_gpu = {{5, 1, 2, 300, 1000, 1500}};
  b.call_gpu = {{5, 1, 1, 50, 900, 1200}, {5, 1, 0, 0, 0, 0}};  // an empty delta changes nothing
  c.call_gpu = {{5, 1, 3, 100, 2000, 2600}};
  ASSERT_TRUE(store->Write(a, &error) && store->Write(b, &error) && store->Write(c, &error));
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM call_gpu WHERE call_id=5"), 6);
  EXPECT_EQ(QueryInt(path, "SELECT gpu_busy_ns FROM call_gpu WHERE call_id=5"), 450);
  EXPECT_EQ(QueryInt(path, "SELECT gpu_first_begin_ns FROM call_gpu WHERE call_id=5"), 900);
  EXPECT_EQ(QueryInt(path, "SELECT gpu_last_end_ns FROM call_gpu WHERE call_id=5"), 2600);
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM token_stats WHERE token=1"), 6);
}

TEST(StoreTest, KernelsOutsideCallsCountPerTokenAndInOneCallZeroRow) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch b = TwoTokens();
  b.call_gpu.push_back({0, 1, 4, 4000, 10, 20});
  b.call_gpu.push_back({0, 2, 1, 100, 30, 40});
  ASSERT_TRUE(store->Write(b, &error)) << error;
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM token_stats WHERE token=1"), 5);
  EXPECT_EQ(QueryInt(path, "SELECT gpu_busy_ns FROM token_stats WHERE token=1"), 5000);
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM token_stats WHERE token=2"), 2);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM call_gpu WHERE call_id=0"), 1);
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM call_gpu WHERE call_id=0"), 5);
}

TEST(StoreTest, TokensViewJoinsRootCallsWithStatsAndEscapes) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch b = TwoTokens();
  b.escapes = {{201, 2, 0, 2005000, EscapeKind::kMemcpyDtoHSync},
               {201, 2, 0, 2006000, EscapeKind::kStreamSync}};
  ASSERT_TRUE(store->Write(b, &error)) << error;
  Batch later;  // a third token with no GPU work: the view still lists it, with zeros
  later.calls = {{300, 1, 3, 3, 0, 0, 3000000, 3400000}};
  ASSERT_TRUE(store->Write(later, &error)) << error;
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM tokens"), 3);
  EXPECT_EQ(QueryInt(path, "SELECT escapes FROM tokens WHERE token=2"), 2);
  EXPECT_EQ(QueryInt(path, "SELECT escapes FROM tokens WHERE token=1"), 0);
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM tokens WHERE token=3"), 0);
  EXPECT_EQ(QueryInt(path, "SELECT cpu_end_ns - cpu_begin_ns FROM tokens WHERE token=2"), 500000);
  EXPECT_EQ(QueryText(path, "SELECT kind FROM escapes LIMIT 1"), "memcpy_dtoh_sync");
}

TEST(StoreTest, LossesAddAndMetaIsUpserted) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch a, b;
  a.losses = {{"ring_overflow", 3}};
  a.meta = {{"kernels_status", "on"}};
  b.losses = {{"ring_overflow", 4}, {"cupti_dropped", 1}};
  b.meta = {{"kernels_status", "off: no driver"}};
  ASSERT_TRUE(store->Write(a, &error) && store->Write(b, &error)) << error;
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT count FROM losses WHERE kind='ring_overflow'"), 7);
  EXPECT_EQ(QueryInt(path, "SELECT count FROM losses WHERE kind='cupti_dropped'"), 1);
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key='kernels_status'"), "off: no driver");
}

// Op data flow rows, in blocks and one by one (more than a block of them).
TEST(StoreTest, LinksAreWrittenAsOpLinks) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch batch;
  for (uint64_t i = 0; i < 70; ++i) {
    batch.links.push_back(LinkRow{100 + i, "0:" + std::to_string(i), i % 2 == 1 ? "0:7" : ""});
  }
  ASSERT_TRUE(store->Write(batch, &error)) << error;
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM op_links"), 70);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM op_links WHERE outputs = '0:7'"), 35);
  EXPECT_EQ(QueryText(path, "SELECT inputs FROM op_links WHERE call_id = 169"), "0:69");
}

// The Python layer's rows: each value's type as handed (NULL, integer, real, text), columns
// named; two sets of columns of one table.
TEST(StoreTest, HandedRowsAreWrittenByTheirColumns) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch batch;
  AddedRows inputs;
  inputs.table = TOKENTRACE_ROWS_CALL_INPUTS;
  inputs.columns = {"call_id", "path", "value"};
  inputs.values.resize(6);
  inputs.values[0] = {RowValue::Type::kInt, 7, 0, ""};
  inputs.values[1] = {RowValue::Type::kText, 0, 0, "x"};
  inputs.values[2] = {RowValue::Type::kReal, 0, 0.5, ""};
  inputs.values[3] = {RowValue::Type::kInt, 8, 0, ""};
  inputs.values[4] = {RowValue::Type::kText, 0, 0, "y"};
  inputs.values[5] = {RowValue::Type::kNull, 0, 0, ""};
  batch.added.push_back(inputs);
  AddedRows events;
  events.table = TOKENTRACE_ROWS_REQUEST_EVENTS;
  events.columns = {"role", "request"};
  events.values = {{RowValue::Type::kText, 0, 0, "engine_core"},
                   {RowValue::Type::kText, 0, 0, "A"}};
  batch.added.push_back(events);
  ASSERT_TRUE(store->Write(batch, &error)) << error;
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM call_inputs"), 2);
  EXPECT_EQ(QueryText(path, "SELECT value FROM call_inputs WHERE call_id = 7"), "0.5");  // TEXT
  EXPECT_EQ(QueryText(path, "SELECT typeof(value) FROM call_inputs WHERE call_id = 8"), "null");
  EXPECT_EQ(QueryText(path, "SELECT request FROM request_events WHERE role = 'engine_core'"), "A");
}

// Columns are checked against the schema when rows are handed over, so a bad one never fails
// a transaction that carries calls.
TEST(StoreTest, HandedColumnsAreCheckedAgainstTheSchema) {
  std::string error;
  EXPECT_TRUE(CheckAddedColumns(TOKENTRACE_ROWS_STEP_REQUESTS, {"token", "request"}, &error));
  EXPECT_FALSE(CheckAddedColumns(TOKENTRACE_ROWS_STEP_REQUESTS, {"token", "nope"}, &error));
  EXPECT_NE(error.find("step_requests"), std::string::npos) << error;
  EXPECT_NE(error.find("nope"), std::string::npos) << error;
  EXPECT_FALSE(
      CheckAddedColumns(TOKENTRACE_ROWS_CALL_INPUTS, {"call_id); DROP TABLE calls;--"}, &error));
  EXPECT_NE(error.find("is not a column name"), std::string::npos) << error;
  EXPECT_FALSE(CheckAddedColumns(TOKENTRACE_ROWS_CALL_INPUTS, {}, &error));
}

TEST(StoreTest, OpenTruncatesAPreviousFile) {
  std::string path = TempPath("t.sqlite"), error;
  {
    auto store = Store::Open(path, &error);
    ASSERT_NE(store, nullptr) << error;
    ASSERT_TRUE(store->Write(TwoTokens(), &error));
  }
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM calls"), 0);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM call_inputs"), 0);  // since version 2
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM call_outputs"), 0);
}

TEST(StoreTest, OpenReplacesANonDatabaseFile) {
  std::string path = TempPath("t.sqlite"), error;
  std::ofstream(path) << "not a database";
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  store->Close();
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key='schema_version'"), kSchemaVersion);
}

TEST(StoreTest, WriteAfterCloseFails) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  store->Close();
  EXPECT_FALSE(store->Write(TwoTokens(), &error));
  EXPECT_EQ(error.rfind("tokentrace: cannot write", 0), 0u);
}

TEST(StoreTest, AnotherConnectionReadsWhileTheWriterIsOpen) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  ASSERT_TRUE(store->Write(TwoTokens(), &error));
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM kernels"), 2);
  ASSERT_TRUE(store->Write(TwoTokens(), &error));  // the reader did not lock the writer out
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM kernels"), 4);
}

// A finished trace is one file: no -wal or -shm beside it after the writer closes, nor after
// a reader (`tokentrace report`) opened and closed it.
TEST(StoreTest, AClosedTraceIsOneFileAlsoAfterAReader) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  ASSERT_TRUE(store->Write(TwoTokens(), &error));
  store->Close();
  auto exists = [](const std::string& p) { return access(p.c_str(), F_OK) == 0; };
  EXPECT_FALSE(exists(path + "-wal"));
  EXPECT_FALSE(exists(path + "-shm"));
  {
    auto reader = Reader::Open(path, &error);
    ASSERT_NE(reader, nullptr) << error;
    std::vector<std::pair<std::string, std::string>> meta;
    ASSERT_TRUE(reader->Meta(&meta, &error)) << error;
  }
  EXPECT_FALSE(exists(path + "-wal"));
  EXPECT_FALSE(exists(path + "-shm"));
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM kernels"), 2);
}

// The descriptors this process has open on `path` or its -wal and -shm.
std::vector<int> DescriptorsOf(const std::string& path) {
  std::vector<int> fds;
  char real[PATH_MAX];
  if (realpath(path.c_str(), real) == nullptr) return fds;
  const std::string name = real;
  DIR* dir = opendir("/proc/self/fd");
  char link[PATH_MAX];
  while (dirent* e = readdir(dir)) {
    const ssize_t n = readlinkat(dirfd(dir), e->d_name, link, sizeof link - 1);
    if (n <= 0 || atoi(e->d_name) == dirfd(dir)) continue;
    const std::string target(link, static_cast<size_t>(n));
    if (target == name || target == name + "-wal" || target == name + "-shm") {
      fds.push_back(atoi(e->d_name));
    }
  }
  closedir(dir);
  return fds;
}

Batch ThirdToken() {
  Batch b;
  b.calls.push_back({300, 1, 3, 3, 0, 0, 3000000, 3500000});
  return b;
}

// A trace deleted while it is written (all of it, or only the main file while the -wal and
// -shm stay) is written again at its path with every row it held, and the store says so once.
class StoreDeletedTest : public ::testing::TestWithParam<bool> {};

TEST_P(StoreDeletedTest, AFileDeletedWhileWrittenIsWrittenAgainWithAllItHeld) {
  const bool with_wal = GetParam();
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  ASSERT_TRUE(store->Write(TwoTokens(), &error)) << error;
  ASSERT_EQ(unlink(path.c_str()), 0);
  if (with_wal) {
    unlink((path + "-wal").c_str());
    unlink((path + "-shm").c_str());
  }
  ASSERT_TRUE(store->Write(ThirdToken(), &error)) << error;
  const std::string notice = store->TakeNotice();
  EXPECT_NE(notice.find("'" + path + "' was deleted while the job wrote it"), std::string::npos)
      << notice;
  EXPECT_EQ(store->TakeNotice(), "");  // said once
  Batch fourth;
  fourth.calls.push_back({400, 1, 4, 4, 0, 0, 4000000, 4500000});
  ASSERT_TRUE(store->Write(fourth, &error)) << error;
  store->Close();
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM calls"), 6);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM kernels"), 2);
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key='kernel_mode'"), "full");
  // Nothing else is left in the directory (the copy took the file's place).
  DIR* dir = opendir(DirOf(path).c_str());
  int entries = 0;
  while (dirent* e = readdir(dir)) entries += e->d_name[0] != '.' || strlen(e->d_name) > 2;
  closedir(dir);
  EXPECT_EQ(entries, 1);
}

INSTANTIATE_TEST_SUITE_P(WholeOrMainFileOnly, StoreDeletedTest, ::testing::Values(true, false));

TEST(StoreTest, AFileWhoseDirectoryIsGoneSaysItCannotBeMadeAgain) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  ASSERT_TRUE(store->Write(TwoTokens(), &error)) << error;
  for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
  ASSERT_EQ(rmdir(DirOf(path).c_str()), 0);
  EXPECT_FALSE(store->Write(ThirdToken(), &error));
  EXPECT_NE(error.find("was deleted while the job wrote it, and cannot be made again"),
            std::string::npos)
      << error;
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

// The job closes the writer's descriptors behind its back (a raw close_range, which the
// shim's close interposers cannot see) and opens files that take their numbers: the store
// never writes through them, says why, and its Close leaves the job's files open.
TEST(StoreTest, DescriptorsClosedUnderTheWriterAreNeverWrittenThrough) {
  std::string path = TempPath("t.sqlite"), error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  ASSERT_TRUE(store->Write(TwoTokens(), &error)) << error;
  const std::vector<int> fds = DescriptorsOf(path);
  ASSERT_GE(fds.size(), 2u);  // the database (and the lock), the -wal, the -shm
  for (int fd : fds) close(fd);
  const std::string victim = DirOf(path) + "/the_jobs_file";
  std::vector<int> victims;
  for (size_t i = 0; i < fds.size(); ++i) {
    victims.push_back(open(victim.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  }
  EXPECT_FALSE(store->Write(ThirdToken(), &error));
  EXPECT_NE(error.find("the job closed or reused its descriptor"), std::string::npos) << error;
  EXPECT_FALSE(store->Write(ThirdToken(), &error));  // and stays so
  store->Checkpoint();
  store->Close();
  store.reset();
  struct stat st;
  ASSERT_EQ(stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  for (int fd : victims) EXPECT_NE(fcntl(fd, F_GETFD), -1) << "fd " << fd << " was closed";
  for (int fd : victims) close(fd);
}

// A killed writer's file copied with its -wal but not its -shm: a reader reads everything and
// leaves the files as it found them (no -shm made beside them, the -wal kept).
TEST(StoreTest, AReaderOfAKilledWritersFileLeavesNoShm) {
  std::string path = TempPath("k.sqlite"), error;
  const pid_t child = fork();
  if (child == 0) {
    auto store = Store::Open(path, &error);
    if (!store || !store->Write(TwoTokens(), &error)) _exit(1);
    _exit(0);  // killed: never closed, the rows are in the -wal only
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  unlink((path + "-shm").c_str());
  ASSERT_EQ(access((path + "-wal").c_str(), F_OK), 0);
  {
    auto reader = Reader::Open(path, &error);
    ASSERT_NE(reader, nullptr) << error;
    std::vector<std::pair<std::string, std::string>> meta;
    ASSERT_TRUE(reader->Meta(&meta, &error)) << error;
    bool found = false;
    for (const auto& [key, value] : meta) found |= key == "kernel_mode" && value == "full";
    EXPECT_TRUE(found);
  }
  EXPECT_NE(access((path + "-shm").c_str(), F_OK), 0);
  EXPECT_EQ(access((path + "-wal").c_str(), F_OK), 0);
}

}  // namespace
}  // namespace tokentrace
