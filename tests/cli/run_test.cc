// `tokentrace run`: option validation, the environment handed to the job, exec semantics.
// TEST_SHIM is an empty shared library standing in for libtokentrace.so.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

#include "cli_runner.h"

namespace tokentrace {
namespace {

using testing::RunCli;

const std::string kShimEnv = std::string("TOKENTRACE_LIB=") + TEST_SHIM;

TEST(RunTest, ExecsTheCommandWithTheModeAndPropagatesItsStatus) {
  std::string dir = testing::TempDir();
  auto r = RunCli({"run", "--kernels", "sample:4", "--out", dir + "/t-%p.sqlite", "--", "/bin/sh",
                   "-c", "echo $TOKENTRACE_KERNELS; exit 7"},
                  {kShimEnv, "TOKENTRACE_KERNELS"});
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_EQ(r.out, "sample:4\n");
  EXPECT_EQ(r.err, "");
}

TEST(RunTest, SetsTheEnvironmentAndKeepsThePid) {
  std::string dir = testing::TempDir();
  std::string edits = dir + "/p.json";
  std::ofstream(edits) << "[]";
  auto r = RunCli(
      {"run", "--out=" + dir + "/t-%p.sqlite", "--sites", "model.*", "--save", "model.layers.0.*",
       "--edits", edits, "--token-range", "step_[0-9]+", "--inputs", "model.layers.1.*", "--",
       "/bin/sh", "-c",
       "echo $$; echo $TOKENTRACE_OUT; echo $TOKENTRACE_SITES; echo $TOKENTRACE_SAVE;"
       " echo $TOKENTRACE_EDITS; echo $TOKENTRACE_TOKEN_RANGE; echo $LD_PRELOAD;"
       " echo $PYTHONPATH; echo $TOKENTRACE_INPUTS"},
      {kShimEnv, "LD_PRELOAD=libold.so", "PYTHONPATH=/old/py", "TOKENTRACE_BOOT_DIR=/boot/dir"});
  ASSERT_EQ(r.status, 0) << r.err;
  char shim[PATH_MAX];
  ASSERT_NE(realpath(TEST_SHIM, shim), nullptr);
  EXPECT_EQ(r.out, std::to_string(r.pid) + "\n" + dir + "/t-%p.sqlite\nmodel.*\n" +
                       "model.layers.0.*\n" + edits + "\nstep_[0-9]+\n" + shim +
                       ":libold.so\n/boot/dir:/old/py\nmodel.layers.1.*\n");
}

// Relative paths are the command's directory's for every process of the job: a child that
// runs elsewhere (torch.compile's compiler, in a temporary directory) gets them absolute, and
// so does the default output pattern.
TEST(RunTest, RelativePathsAreMadeAbsoluteForProcessesThatRunElsewhere) {
  const std::string dir = testing::TempDir() + "/relative";
  mkdir(dir.c_str(), 0755);
  mkdir((dir + "/traces").c_str(), 0755);
  std::ofstream(dir + "/e.json") << "[]";
  char here[PATH_MAX];
  ASSERT_NE(getcwd(here, sizeof here), nullptr);
  ASSERT_EQ(chdir(dir.c_str()), 0);
  char real[PATH_MAX];
  ASSERT_NE(getcwd(real, sizeof real), nullptr);
  const std::string cwd = real;
  auto given = RunCli({"run", "--out", "traces/t-%p.sqlite", "--edits", "./e.json", "--", "/bin/sh",
                       "-c", "cd / && echo $TOKENTRACE_OUT && echo $TOKENTRACE_EDITS"},
                      {kShimEnv});
  auto by_default = RunCli({"run", "--", "/bin/sh", "-c", "cd / && echo $TOKENTRACE_OUT"},
                           {kShimEnv, "TOKENTRACE_OUT"});
  ASSERT_EQ(chdir(here), 0);
  ASSERT_EQ(given.status, 0) << given.err;
  EXPECT_EQ(given.out, cwd + "/traces/t-%p.sqlite\n" + cwd + "/e.json\n");
  ASSERT_EQ(by_default.status, 0) << by_default.err;
  EXPECT_EQ(by_default.out, cwd + "/tokentrace-%p.sqlite\n");
}

TEST(RunTest, OldPatchesSpellingStillWorksWithADeprecationNote) {
  std::string dir = testing::TempDir();
  std::string spec = dir + "/old.json";
  std::ofstream(spec) << "[]";
  auto r = RunCli({"run", "--patches=" + spec, "--", "/bin/sh", "-c", "echo $TOKENTRACE_EDITS"},
                  {kShimEnv});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, spec + "\n");
  EXPECT_EQ(r.err, "tokentrace: --patches is deprecated; use --edits\n");
  r = RunCli({"run", "--", "/bin/sh", "-c", "echo $TOKENTRACE_EDITS"},
             {kShimEnv, "TOKENTRACE_PATCHES=" + spec});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, spec + "\n");  // the job reads the new name
  EXPECT_EQ(r.err, "tokentrace: TOKENTRACE_PATCHES is deprecated; use TOKENTRACE_EDITS\n");
  r = RunCli({"run", "--", "/bin/true"}, {kShimEnv, "TOKENTRACE_PATCHES=" + dir + "/none.json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("TOKENTRACE_PATCHES is deprecated; use TOKENTRACE_EDITS\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("TOKENTRACE_PATCHES='" + dir + "/none.json' is not a file"),
            std::string::npos)
      << r.err;
}

TEST(RunTest, BadKernelModeNamesTheOptionAndTheAcceptedValues) {
  auto r = RunCli({"run", "--kernels", "everything", "--", "/bin/true"}, {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(testing::CountLines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("--kernels='everything'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("off, summary, full, sample:N"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(RunTest, BadInheritedKernelModeNamesTheVariable) {
  auto r = RunCli({"run", "--", "/bin/true"}, {kShimEnv, "TOKENTRACE_KERNELS=sample:0"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("TOKENTRACE_KERNELS='sample:0'"), std::string::npos) << r.err;
}

TEST(RunTest, BadRegexIsRejectedBeforeTheJobStarts) {
  std::string dir = testing::TempDir();
  auto r =
      RunCli({"run", "--token-range", "step_(", "--", "/bin/sh", "-c", "touch " + dir + "/ran"},
             {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(testing::CountLines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("--token-range='step_('"), std::string::npos) << r.err;
  EXPECT_NE(access((dir + "/ran").c_str(), F_OK), 0);  // the command never ran
}

TEST(RunTest, BadOnFullIsRejectedBeforeTheJobStarts) {
  std::string dir = testing::TempDir();
  auto r = RunCli({"run", "--on-full", "stall", "--", "/bin/sh", "-c", "touch " + dir + "/ran"},
                  {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(testing::CountLines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("--on-full='stall' is not accepted (accepted: drop"), std::string::npos)
      << r.err;
  EXPECT_NE(access((dir + "/ran").c_str(), F_OK), 0);
}

TEST(RunTest, MissingOutDirectoryIsRejected) {
  auto r =
      RunCli({"run", "--out", "/tmp/tt_no_such_dir_xyz/t.sqlite", "--", "/bin/true"}, {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--out='/tmp/tt_no_such_dir_xyz/t.sqlite'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

// Outputs the job could not write, or would write somewhere unexpected: refused up front.
TEST(RunTest, BadOutPathsAreRejectedBeforeTheJobStarts) {
  const std::string dir = testing::TempDir();
  // A file that is not a trace: once found only at the job's end, and said misleadingly.
  const std::string notes = dir + "/notes.txt";
  std::ofstream(notes) << "mine\n";
  const std::pair<std::string, std::string> cases[] = {
      {notes, "'" + notes + "' exists and is not a tokentrace trace, so it is kept"},
      {dir + "/", "it names a directory"},
      {dir, "it names a directory"},
      {dir + "/" + std::string(250, 'x') + ".sqlite", "the file name is 257 bytes long"},
      {"/dev/null", "it is under /dev"},
      {dir + "/fifo", "it is a FIFO, not a file"}};  // opening it would block the job forever
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  for (const auto& [out, why] : cases) {
    auto r =
        RunCli({"run", "--out", out, "--", "/bin/sh", "-c", "touch " + dir + "/ran"}, {kShimEnv});
    EXPECT_EQ(r.status, 2) << out;
    EXPECT_EQ(testing::CountLines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("--out='" + out + "': " + why), std::string::npos) << r.err;
  }
  auto r = RunCli({"run", "--", "/bin/sh", "-c", "touch " + dir + "/ran"},
                  {kShimEnv, "TOKENTRACE_CUPTI=/no/such/libcupti.so"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("TOKENTRACE_CUPTI='/no/such/libcupti.so' is not a file"), std::string::npos)
      << r.err;
  EXPECT_NE(access((dir + "/ran").c_str(), F_OK), 0);  // the command never ran
  std::ifstream kept(notes);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "mine\n");
}

TEST(RunTest, UnwritableOutDirectoryIsRejected) {
  // root ignores permission bits, so as root use a directory of a read-only file system.
  std::string dir = "/proc/self";
  if (geteuid() != 0) {
    dir = testing::TempDir();
    ASSERT_EQ(chmod(dir.c_str(), 0555), 0);
  }
  auto r = RunCli({"run", "--out", dir + "/t.sqlite", "--", "/bin/true"}, {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(testing::CountLines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("is not writable"), std::string::npos) << r.err;
}

TEST(RunTest, MissingEditSpecFileIsRejected) {
  auto r = RunCli({"run", "--edits", "/tmp/tt_no_such_edits.json", "--", "/bin/true"}, {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--edits='/tmp/tt_no_such_edits.json' is not a file"), std::string::npos)
      << r.err;
}

TEST(RunTest, UnknownOptionAndMissingCommandAreUsageErrors) {
  auto r = RunCli({"run", "--kernel", "full", "--", "/bin/true"}, {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown option '--kernel'"), std::string::npos) << r.err;
  r = RunCli({"run", "--kernels", "full"}, {kShimEnv});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("needs a command"), std::string::npos) << r.err;
}

TEST(RunTest, CommandNotFoundExits127) {
  auto r = RunCli({"run", "--", "tt-no-such-command-xyz", "arg"}, {kShimEnv});
  EXPECT_EQ(r.status, 127);
  EXPECT_EQ(r.err, "tokentrace: cannot run 'tt-no-such-command-xyz': No such file or directory\n");
}

TEST(RunTest, MissingShimIsAClearError) {
  auto r = RunCli({"run", "--", "/bin/true"}, {"TOKENTRACE_LIB=/tmp/tt_no_such_shim.so"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("TOKENTRACE_LIB='/tmp/tt_no_such_shim.so' is not a file"), std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace tokentrace
