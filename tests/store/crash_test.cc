// A writer killed with SIGKILL leaves a file that opens and holds every committed batch
// (and no part of an uncommitted one); another process reads it while it is being written.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store/reader.h"
#include "store/store.h"
#include "test_db.h"

namespace tokentrace {
namespace {

constexpr int kRowsPerBatch = 1000;

// Writes batches forever; after each commit reports the number of committed batches on `fd`.
[[noreturn]] void WriterChild(const std::string& path, int fd) {
  std::string error;
  auto store = Store::Open(path, &error);
  if (store == nullptr) _exit(3);
  for (uint32_t batch = 1;; ++batch) {
    Batch b;
    if (batch == 1) b.sites = {{1, "self", SiteKind::kRoot, true}};
    b.calls.push_back({batch, 1, batch, batch, 0, 0, batch * 1000, batch * 1000 + 999});
    for (int i = 0; i < kRowsPerBatch; ++i) {
      b.kernels.push_back({batch, batch, 1, GpuOpKind::kKernel, 0, 0, batch * 1000 + i,
                           batch * 1000 + i + 1, static_cast<uint64_t>(i), 0, 0});
    }
    b.call_gpu.push_back({batch, batch, kRowsPerBatch, kRowsPerBatch, 0, 0});
    if (!store->Write(b, &error)) _exit(4);
    if (write(fd, &batch, sizeof batch) != sizeof batch) _exit(5);
  }
}

TEST(CrashTest, CommittedBatchesSurviveSigkill) {
  std::string path = testing::TempPath("crash.sqlite");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    WriterChild(path, fds[1]);
  }
  close(fds[1]);
  uint32_t committed = 0;
  while (committed < 20) {
    ASSERT_EQ(read(fds[0], &committed, sizeof committed), (ssize_t)sizeof committed);
  }
  // Read from this process while the child keeps writing.
  {
    std::string error;
    auto reader = Reader::Open(path, &error);
    ASSERT_NE(reader, nullptr) << error;
    TraceCounts counts;
    ASSERT_TRUE(reader->Counts(&counts, &error)) << error;
    EXPECT_GE(counts.kernels, int64_t{committed} * kRowsPerBatch);
  }
  while (committed < 40) {
    ASSERT_EQ(read(fds[0], &committed, sizeof committed), (ssize_t)sizeof committed);
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  close(fds[0]);

  std::string error;
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  TraceCounts counts;
  ASSERT_TRUE(reader->Counts(&counts, &error)) << error;
  EXPECT_GE(counts.calls, committed);
  EXPECT_EQ(counts.kernels, counts.calls * kRowsPerBatch);  // whole batches only
  std::vector<TokenStat> tokens;
  ASSERT_TRUE(reader->Tokens(&tokens, &error)) << error;
  ASSERT_EQ(tokens.size(), static_cast<size_t>(counts.calls));
  EXPECT_EQ(tokens.back().kernels, kRowsPerBatch);
  reader.reset();
  EXPECT_EQ(testing::QueryText(path, "PRAGMA integrity_check"), "ok");
}

}  // namespace
}  // namespace tokentrace
