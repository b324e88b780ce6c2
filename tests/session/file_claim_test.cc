#include "session/file_claim.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>

#include "store/reader.h"
#include "store/test_db.h"

// This binary's allocations fail on request: the Nth allocation of this thread after
// g_fail_at is set throws std::bad_alloc, as the drain meets it in a job that has taken all
// its memory.
namespace {
thread_local int g_fail_at = 0;  // 0: never
thread_local int g_allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (g_fail_at > 0 && ++g_allocations == g_fail_at) throw std::bad_alloc();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace tokentrace {
namespace {

using testing::TempPath;

std::string RunOf(const std::string& path) {
  std::string run;
  return ReadMetaValue(path, "run_id", &run) ? run : "<unreadable>";
}

TEST(FileClaimTest, WithoutARunThePathIsOpened) {
  const std::string path = TempPath("plain.sqlite");
  std::string error;
  FileClaim claim = ClaimOutputFile(path, "", 11, &error);
  ASSERT_NE(claim.store, nullptr) << error;
  EXPECT_EQ(claim.path, path);
  EXPECT_EQ(claim.notice, "");
}

TEST(FileClaimTest, TheSecondClaimantOfARunWritesItsOwnFile) {
  const std::string path = TempPath("run.sqlite");
  std::string error;
  FileClaim first = ClaimOutputFile(path, "run-a", 11, &error);
  ASSERT_NE(first.store, nullptr) << error;
  EXPECT_EQ(first.path, path);
  EXPECT_EQ(first.notice, "");
  EXPECT_EQ(RunOf(path), "run-a");  // the claim is in the file before the lock is let go

  FileClaim second = ClaimOutputFile(path, "run-a", 22, &error);
  ASSERT_NE(second.store, nullptr) << error;
  EXPECT_EQ(second.path, path + ".22");
  EXPECT_EQ(second.notice, "tokentrace: '" + path +
                               "' belongs to another process of this run; this one (pid 22) "
                               "writes '" +
                               path +
                               ".22' (put %p in --out/TOKENTRACE_OUT for "
                               "one file per process)");
  // Once the first writer is done, a process of the same run still keeps off its file.
  first.store->Close();
  FileClaim third = ClaimOutputFile(path, "run-a", 33, &error);
  EXPECT_EQ(third.path, path + ".33");
}

TEST(FileClaimTest, AFileLeftByAnEarlierRunIsReplaced) {
  const std::string path = TempPath("stale.sqlite");
  std::string error;
  {
    FileClaim old = ClaimOutputFile(path, "run-old", 11, &error);
    ASSERT_NE(old.store, nullptr) << error;
    old.store->Close();
  }
  FileClaim claim = ClaimOutputFile(path, "run-new", 22, &error);
  ASSERT_NE(claim.store, nullptr) << error;
  EXPECT_EQ(claim.path, path);
  EXPECT_EQ(claim.notice, "");
  EXPECT_EQ(RunOf(path), "run-new");
}

TEST(FileClaimTest, AFileAnotherRunIsStillWritingIsKept) {
  const std::string path = TempPath("busy.sqlite");
  std::string error;
  FileClaim other = ClaimOutputFile(path, "run-other", 11, &error);
  ASSERT_NE(other.store, nullptr) << error;
  FileClaim claim = ClaimOutputFile(path, "run-mine", 22, &error);
  ASSERT_NE(claim.store, nullptr) << error;
  EXPECT_EQ(claim.path, path + ".22");
  EXPECT_NE(claim.notice.find("is being written by another run"), std::string::npos)
      << claim.notice;
  EXPECT_EQ(RunOf(path), "run-other");
}

TEST(FileClaimTest, AFileThatIsNoTraceIsKept) {
  const std::string path = TempPath("notes.sqlite");
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("my notes, not a trace\n", f);
  fclose(f);
  std::string error;
  FileClaim claim = ClaimOutputFile(path, "run-a", 22, &error);
  ASSERT_NE(claim.store, nullptr) << error;
  EXPECT_EQ(claim.path, path + ".22");
  EXPECT_NE(claim.notice.find("is not a tokentrace trace (or cannot be read), so it is kept"),
            std::string::npos)
      << claim.notice;
}

TEST(FileClaimTest, AMissingDirectoryIsAClearError) {
  const std::string path = TempPath("gone") + "/deeper/t.sqlite";
  std::string error;
  EXPECT_FALSE(CheckWritable(path, &error));
  EXPECT_EQ(error, "tokentrace: cannot write '" + path + "': directory '" + DirOf(path) +
                       "' does not exist or is not writable (set TOKENTRACE_OUT or --out to a "
                       "writable path)");
  error.clear();
  FileClaim claim = ClaimOutputFile(path, "run-a", 22, &error);
  EXPECT_EQ(claim.store, nullptr);
  EXPECT_EQ(error.rfind("tokentrace: cannot write '" + path + "'", 0), 0u) << error;
}

TEST(FileClaimTest, DirOfABareNameIsTheWorkingDirectory) {
  EXPECT_EQ(DirOf("t.sqlite"), ".");
  EXPECT_EQ(DirOf("/t.sqlite"), "/");
  EXPECT_EQ(DirOf("a/b/t.sqlite"), "a/b");
}

// The directory's lock is released on every way out of a claim, an allocation failure
// included: the drain counts the failure and claims again later, and a lock left held by a
// lost descriptor made that retry wait forever on itself (a job that hung at exit).
TEST(FileClaimTest, AnAllocationFailureInAClaimReleasesTheDirectoryLock) {
  const std::string path = TempPath("oom.sqlite");
  const std::string dir = DirOf(path);
  // The first allocations of a claim: naming the directory, then (the lock held) reading the
  // file's meta and opening the store; each fails once.
  for (int n = 1; n <= 40; ++n) {
    std::string error;
    bool threw = false;
    g_allocations = 0;
    g_fail_at = n;
    try {
      FileClaim claim = ClaimOutputFile(path, "run-oom", 11, &error);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    g_fail_at = 0;
    EXPECT_TRUE(threw) << "allocation " << n;
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    const int free_now = flock(fd, LOCK_EX | LOCK_NB);
    close(fd);
    // (an ASSERT: the next claim would wait for the lock held by the lost descriptor forever)
    ASSERT_EQ(free_now, 0) << "the lock is still held after allocation " << n;
  }
  std::string error;
  FileClaim claim = ClaimOutputFile(path, "run-oom", 11, &error);
  EXPECT_NE(claim.store, nullptr) << error;
}

}  // namespace
}  // namespace tokentrace
