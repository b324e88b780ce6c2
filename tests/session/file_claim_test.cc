#include "session/file_claim.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "store/reader.h"
#include "store/test_db.h"

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

}  // namespace
}  // namespace tokentrace
