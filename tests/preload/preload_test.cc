// End to end without a GPU: nvtx_generate runs under LD_PRELOAD=libtokentrace.so (directly,
// and through `tokentrace run`), and the SQLite file it leaves is checked.
#include <glob.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "preload_util.h"
#include "store/schema.h"

namespace {

TEST(PreloadTest, HooksShapedRunGivesSitesCallsAndTokens) {
  std::string out = TempDir() + "/t.sqlite";
  Result r = Shell(Preloaded(out) + kProgram + " hooks 3");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(One(out, "SELECT value FROM meta WHERE key='schema_version'"),
            tokentrace::kSchemaVersion);
  EXPECT_EQ(One(out, "SELECT kind FROM sites WHERE name='self'"), "root");
  EXPECT_EQ(One(out, "SELECT kind FROM sites WHERE name='transformer.h.1.mlp'"), "module");
  EXPECT_EQ(One(out, "SELECT kind FROM sites WHERE name='aten::addmm'"), "range");
  // num_calls of a module = number of tokens; k runs 1..3 and matches the token.
  auto rows = Query(out,
                    "SELECT c.k, c.token FROM calls c JOIN sites s ON s.id=c.site_id "
                    "WHERE s.name='transformer.h.1.mlp' ORDER BY c.k");
  ASSERT_EQ(rows.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rows[i][0], std::to_string(i + 1));
    EXPECT_EQ(rows[i][1], std::to_string(i + 1));
  }
  // Parents: mlp inside its block, block inside the root; torch's range inside the mlp.
  EXPECT_EQ(One(out,
                "SELECT ps.name FROM calls c JOIN sites s ON s.id=c.site_id "
                "JOIN calls p ON p.id=c.parent_id JOIN sites ps ON ps.id=p.site_id "
                "WHERE s.name='transformer.h.1.mlp' AND c.k=2"),
            "transformer.h.1");
  EXPECT_EQ(One(out,
                "SELECT COUNT(*) FROM calls c JOIN sites s ON s.id=c.site_id "
                "JOIN calls p ON p.id=c.parent_id JOIN sites ps ON ps.id=p.site_id "
                "WHERE s.name='aten::addmm' AND ps.name LIKE '%.mlp'"),
            "6");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "3");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM calls WHERE cpu_end_ns IS NULL"), "0");
  EXPECT_EQ(One(out, "SELECT COALESCE(SUM(count),0) FROM losses"), "0");
  // No GPU here: kernels are off, and the file says why.
  EXPECT_NE(One(out, "SELECT value FROM meta WHERE key='kernels_status'"), "");
}

TEST(PreloadTest, TokenRangeRegexMarksForeignRanges) {
  std::string out = TempDir() + "/t.sqlite";
  Result r = Shell(Preloaded(out, "TOKENTRACE_TOKEN_RANGE='decode_.*'") + kProgram + " foreign 4");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "4");
  EXPECT_EQ(One(out, "SELECT is_token FROM sites WHERE name='decode_step'"), "1");
  EXPECT_EQ(One(out,
                "SELECT MAX(c.token) || ':' || COUNT(*) FROM calls c JOIN sites s ON "
                "s.id=c.site_id WHERE s.name='layer_1'"),
            "4:4");
  // Marks are zero-length calls inside their layer.
  EXPECT_EQ(One(out,
                "SELECT COUNT(*) FROM calls c JOIN sites s ON s.id=c.site_id "
                "WHERE s.name='tick' AND c.cpu_begin_ns=c.cpu_end_ns AND c.parent_id IS NOT NULL"),
            "8");
}

TEST(PreloadTest, ForkedChildWritesItsOwnFile) {
  std::string dir = TempDir();
  Result r = Shell(Preloaded(dir + "/run-%p.sqlite") + kProgram + " fork");
  ASSERT_EQ(r.status, 0) << r.output;
  size_t at = r.output.find("child=");
  ASSERT_NE(at, std::string::npos) << r.output;
  std::string child_pid = r.output.substr(at + 6, r.output.find('\n', at) - at - 6);
  std::string child_file = dir + "/run-" + child_pid + ".sqlite";
  EXPECT_EQ(One(child_file, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(One(child_file, "SELECT value FROM meta WHERE key='pid'"), child_pid);
  Result ls = Shell("ls " + dir);
  int files = 0;
  for (size_t p = 0; (p = ls.output.find(".sqlite", p)) != std::string::npos; ++p) {
    if (ls.output.compare(p, 11, ".sqlite-wal") != 0 &&
        ls.output.compare(p, 11, ".sqlite-shm") != 0)
      ++files;
  }
  EXPECT_EQ(files, 2) << ls.output;
}

TEST(PreloadTest, SigkilledRunLeavesAReadableFile) {
  std::string out = TempDir() + "/t.sqlite";
  std::string cmd = Preloaded(out) + kProgram + " hang >/dev/null 2>&1 & echo $!; sleep 1";
  Result r = Shell(cmd);
  pid_t pid = atoi(r.output.c_str());
  ASSERT_GT(pid, 0) << r.output;
  kill(pid, SIGKILL);
  usleep(200000);
  // Everything up to the last commit is there: the finished token and its calls.
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(CallsOf(out, "transformer.h.0.mlp"), "1");
}

// Runs nvtx_generate MODE (it records a token, prints "ready", then waits) with the longest
// accepted flush period, sends it SIGTERM once it is ready, and returns its exit status as
// the shell reports it ("status=N"; 143 = killed by SIGTERM).
Result RunThenTerminate(const std::string& mode, const std::string& out,
                        const std::string& signal = "TERM") {
  const std::string log = out + ".stdout";
  // A job the shell starts in the background has SIGINT ignored; the program puts it back at
  // its default, as a job started from a terminal has it (NVTX_GENERATE_DEFAULT_SIGINT).
  return Shell(Preloaded(out, "TOKENTRACE_FLUSH_MS=1000 NVTX_GENERATE_DEFAULT_SIGINT=1") +
               kProgram + " " + mode + " > " + log + " 2>&1 & pid=$!; for i in $(seq 200); do " +
               "grep -q ready " + log + " && break; sleep 0.01; done; kill -" + signal +
               " $pid; wait $pid; echo status=$?");
}

// A job ended by SIGTERM (kill, timeout, a batch scheduler) without a handler of its own:
// everything it recorded is written before it dies, and it still dies by SIGTERM. Without the
// handler nothing would have been written yet (the flush period is a second).
TEST(PreloadTest, SigtermedRunFlushesAndStillDiesBySigterm) {
  const std::string out = TempDir() + "/t.sqlite";
  Result r = RunThenTerminate("hang", out);
  EXPECT_NE(r.output.find("status=143"), std::string::npos) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(CallsOf(out, "transformer.h.0.mlp"), "1");
  EXPECT_EQ(One(out, "SELECT value FROM meta WHERE key='exit_signal'"), "SIGTERM");
  Result report = Shell(kCli + " report " + out);
  EXPECT_EQ(report.status, 0) << report.output;
  EXPECT_NE(report.output.find("the job was ended by SIGTERM"), std::string::npos) << report.output;
}

// Ctrl-C in a job that leaves SIGINT at its default (Python does not: it raises
// KeyboardInterrupt and exits through atexit): as for SIGTERM, the run is written with its
// exit record, the file is one file again, and the job dies by SIGINT.
TEST(PreloadTest, CtrlCInAJobWithoutAHandlerStillWritesTheRun) {
  const std::string out = TempDir() + "/t.sqlite";
  Result r = RunThenTerminate("hang", out, "INT");
  EXPECT_NE(r.output.find("status=130"), std::string::npos) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(One(out, "SELECT value FROM meta WHERE key='exit_signal'"), "SIGINT");
  EXPECT_NE(access((out + "-wal").c_str(), F_OK), 0);
  EXPECT_NE(access((out + "-shm").c_str(), F_OK), 0);
}

// A job with its own SIGTERM handler keeps it (that handler exits through exit()/atexit).
TEST(PreloadTest, JobsOwnSigtermHandlerIsKept) {
  const std::string out = TempDir() + "/t.sqlite";
  Result r = RunThenTerminate("hang_own_handler", out);
  EXPECT_NE(r.output.find("status=7"), std::string::npos) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM meta WHERE key='exit_signal'"), "0");
}

// A job whose own handler puts the default back and re-raises (no atexit runs then): the
// default it restores is ours, so the run is written as for a job without a handler, and the
// job still dies by SIGTERM; asked, the job is told SIG_DFL.
TEST(PreloadTest, AJobsHandlerThatReraisesAtTheDefaultStillGetsItsRunWritten) {
  const std::string out = TempDir() + "/t.sqlite";
  Result r = RunThenTerminate("hang_reraise", out);
  EXPECT_NE(r.output.find("status=143"), std::string::npos) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(One(out, "SELECT value FROM meta WHERE key='exit_signal'"), "SIGTERM");
}

TEST(PreloadTest, UnderscoreExitStillFlushes) {
  std::string out = TempDir() + "/t.sqlite";
  Result r = Shell(Preloaded(out, "TOKENTRACE_FLUSH_MS=1000") + kProgram + " quick_exit");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
}

// A CUDA job's exit: the CUDA runtime registers its exit handlers at its first call, after
// our constructor, so they would run before a stop registered there, with the context and
// the records still inside CUPTI gone. The session is therefore also stopped from a handler
// registered inside cuInit (InitializeInjection), which runs before anything registered
// earlier: here a handler standing in for the runtime's finds the session stopped.
TEST(PreloadTest, StopsAtExitBeforeHandlersRegisteredBeforeCuInit) {
  Result r;
  const std::string out = RunPreloaded("injected", "TOKENTRACE_KERNELS=summary", &r);
  EXPECT_NE(r.output.find("recording when the earlier exit handler ran: 0"), std::string::npos)
      << r.output;
  // Two tokens in main and one from an exit handler registered after cuInit: exit() has
  // destroyed the main thread's thread-locals by then, but its recording state is kept.
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "3");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM calls WHERE cpu_end_ns IS NULL"), "0");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM losses"), "0");
}

// Another thread's ranges after its recording state is gone (from a thread-local object's
// destructor that runs after ours) cannot be recorded: they are counted, not silently lost.
TEST(PreloadTest, RangesAfterAThreadsStateIsGoneAreCounted) {
  const std::string out = RunPreloaded("thread_exit");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  // The late token: 7 ranges, a push and a pop each.
  EXPECT_EQ(One(out, "SELECT count FROM losses WHERE kind='after_thread_exit'"), "14");
}

// --out without %p, and a job of several processes (two at once, then one more): each keeps
// its own file. The first keeps the name; the others write "<name>.<pid>" and say so. A later
// run replaces the first file, as a rerun should.
TEST(PreloadTest, ProcessesOfOneRunNeverShareAFile) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite";
  const std::string p = kProgram + " hooks ";
  Result r = Shell("env -u CUDA_INJECTION64_PATH " + kCli + " run --out " + out + " -- sh -c '" +
                   p + "2 & " + p + "3; wait; " + p + "4'");
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<std::string> files = TraceFiles(dir, "t.sqlite");
  ASSERT_EQ(files.size(), 3u) << r.output;
  std::multiset<std::string> tokens, run_ids;
  for (const std::string& f : files) {
    tokens.insert(One(f, "SELECT COUNT(*) FROM tokens"));
    run_ids.insert(One(f, "SELECT value FROM meta WHERE key='run_id'"));
    EXPECT_EQ(One(f, "SELECT value FROM meta WHERE key='out_path'"), f);
  }
  EXPECT_EQ(tokens, (std::multiset<std::string>{"2", "3", "4"}));
  EXPECT_EQ(run_ids.count(*run_ids.begin()), 3u);  // one run
  size_t notes = 0;
  for (size_t at = 0;
       (at = r.output.find("belongs to another process of this run", at)) != std::string::npos;
       ++at)
    ++notes;
  EXPECT_EQ(notes, 2u) << r.output;

  r = Shell("env -u CUDA_INJECTION64_PATH " + kCli + " run --out " + out + " -- " + p + "1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(TraceFiles(dir, "t.sqlite").size(), 3u);
  EXPECT_EQ(r.output.find("belongs to another process"), std::string::npos) << r.output;
}

// A file at the --out path that is not a trace (so nothing says which run wrote it) is kept;
// the job writes next to it and says so.
TEST(PreloadTest, AFileThatIsNotATraceIsNotReplaced) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite";
  std::ofstream(out) << "someone's notes\n";
  Result r;
  RunPreloaded("hooks 2", "", &r, out);
  std::ifstream kept(out);
  std::string line;
  std::getline(kept, line);
  EXPECT_EQ(line, "someone's notes");
  const std::vector<std::string> files = TraceFiles(dir, "t.sqlite");
  ASSERT_EQ(files.size(), 2u) << r.output;
  EXPECT_EQ(One(files[1], "SELECT COUNT(*) FROM tokens"), "2");
  // It says why (it once said the file "could not be checked for another writer").
  EXPECT_NE(r.output.find("is not a tokentrace trace (or cannot be read), so it is kept"),
            std::string::npos)
      << r.output;
}

// A job that execs right after its last events (no periodic drain ran before): the file is
// complete, its meta names the program; when the exec fails, recording goes on in a second
// file of the same process.
TEST(PreloadTest, ExecRightAfterTheLastEventsKeepsThem) {
  const std::string dir = TempDir(), out = dir + "/e.sqlite";
  Result r = Shell(Preloaded(out, "TOKENTRACE_FLUSH_MS=1000") + kProgram + " exec 3 /bin/true");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "3") << r.output;
  EXPECT_EQ(One(out, "SELECT value FROM meta WHERE key = 'exit_exec'"), "/bin/true");

  const std::string failed = dir + "/f.sqlite";
  r = Shell(Preloaded(failed, "TOKENTRACE_FLUSH_MS=1000") + kProgram + " exec 2 ''");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("exec failed"), std::string::npos) << r.output;
  const std::vector<std::string> files = TraceFiles(dir, "f.sqlite");
  ASSERT_EQ(files.size(), 2u) << r.output;
  EXPECT_EQ(One(files[0], "SELECT COUNT(*) FROM tokens"), "2") << r.output;
  EXPECT_EQ(One(files[1], "SELECT COUNT(*) FROM tokens"), "2") << r.output;
}

// A relative TOKENTRACE_OUT and a job that changes directory before the first write: the
// whole trace is where the job started, none of it in the new directory.
TEST(PreloadTest, ARelativeOutIsWhereTheJobStartedAfterAChdir) {
  const std::string dir = TempDir(), elsewhere = TempDir();
  Result r =
      Shell("cd " + dir + " && " + Preloaded("rel.sqlite") + kProgram + " chdir 2 " + elsewhere);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(One(dir + "/rel.sqlite", "SELECT COUNT(*) FROM tokens"), "3") << r.output;
  EXPECT_NE(access((elsewhere + "/rel.sqlite").c_str(), F_OK), 0);
}

// A job that closes every descriptor it did not open (os.closerange(3, N), close_range,
// closefrom) leaves the writer's alone: the whole run is in the file.
TEST(PreloadTest, AJobClosingAllItsDescriptorsKeepsTheTraceWhole) {
  const std::string dir = TempDir(), out = dir + "/c.sqlite";
  Result r = Shell(Preloaded(out) + kProgram + " closerange 3 " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "6") << r.output;
  EXPECT_EQ(One(out, "SELECT COALESCE(SUM(count), 0) FROM losses"), "0") << r.output;
  EXPECT_EQ(r.output, "");
}

// The same by a raw syscall, which no interposer sees, and files of the job that take the
// freed numbers: nothing of the trace is written into the job's files; the job is told once
// why the trace ends there, and exits as it would.
TEST(PreloadTest, DescriptorsClosedByARawSyscallAreNeverWrittenThrough) {
  const std::string dir = TempDir(), out = dir + "/c.sqlite";
  Result r = Shell(Preloaded(out) + kProgram + " closerange_raw 3 " + dir);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the job closed or reused its descriptor"), std::string::npos)
      << r.output;
  for (int i = 0; i < 8; ++i) {
    struct stat st;
    const std::string job_file = dir + "/job_file_" + std::to_string(i);
    ASSERT_EQ(stat(job_file.c_str(), &st), 0) << job_file;
    EXPECT_EQ(st.st_size, 0) << job_file << " got bytes of the trace\n" << r.output;
  }
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "3") << r.output;
}

// The trace deleted while the job writes it is written again at its path, whole.
TEST(PreloadTest, ATraceDeletedWhileWrittenIsWrittenAgainWhole) {
  const std::string out = TempDir() + "/d.sqlite";
  Result r = Shell(Preloaded(out) + kProgram + " delete 3 " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("was deleted while the job wrote it"), std::string::npos) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "6") << r.output;
  EXPECT_EQ(One(out, "SELECT COALESCE(SUM(count), 0) FROM losses"), "0") << r.output;
}

// A fork while the first write is creating the file (here held up by another program's lock
// on an old file of that name) must not leave the child holding the directory lock that the
// creation takes: the child would block on it forever, and its parent in waitpid.
TEST(PreloadTest, ForkWhileTheFileIsCreatedDoesNotHang) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite";
  sqlite3* old = nullptr;
  ASSERT_EQ(sqlite3_open(out.c_str(), &old), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(old,
                         "PRAGMA journal_mode=DELETE; CREATE TABLE meta(key TEXT PRIMARY KEY, "
                         "value TEXT); INSERT INTO meta VALUES('schema_version','1'),"
                         "('run_id','an earlier run'); BEGIN EXCLUSIVE; "
                         "UPDATE meta SET value='x' WHERE key='schema_version';",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  FILE* job = popen(("timeout 30 " + Preloaded(out) + kProgram + " fork_late 2>&1").c_str(), "r");
  ASSERT_NE(job, nullptr);
  sleep(2);  // the parent's first write waits on the lock meanwhile; the fork happens
  sqlite3_exec(old, "ROLLBACK;", nullptr, nullptr, nullptr);
  sqlite3_close(old);
  std::string output;
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, job)) > 0) output.append(buf, n);
  const int st = pclose(job);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st << ": " << output;
  const std::vector<std::string> files = TraceFiles(dir, "t.sqlite");
  ASSERT_EQ(files.size(), 2u) << output;  // the parent's (the old file replaced), the child's
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_EQ(One(files[1], "SELECT COUNT(*) FROM tokens"), "1");
}

TEST(PreloadTest, UnbalancedPopsAndOpenRangesAreCounted) {
  const std::string out = RunPreloaded("unbalanced");
  EXPECT_EQ(One(out, "SELECT count FROM losses WHERE kind='unbalanced_pop'"), "2");
  EXPECT_EQ(One(out, "SELECT count FROM losses WHERE kind='unclosed_range'"), "1");
  EXPECT_EQ(One(out,
                "SELECT COUNT(*) FROM calls c JOIN sites s ON s.id=c.site_id "
                "WHERE s.name='left_open' AND c.cpu_end_ns IS NULL"),
            "1");
}

TEST(PreloadTest, BadConfigurationStopsTheJobBeforeItStarts) {
  std::string out = TempDir() + "/t.sqlite";
  Result r = Shell(Preloaded(out, "TOKENTRACE_KERNELS=fast") + kProgram + " hooks 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("TOKENTRACE_KERNELS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("accepted"), std::string::npos) << r.output;
  r = Shell(Preloaded("/nonexistent/dir/t.sqlite") + kProgram + " hooks 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("/nonexistent/dir"), std::string::npos) << r.output;
}

TEST(PreloadTest, ProcessesThatRecordNothingLeaveNoFile) {
  std::string dir = TempDir();
  Result r = Shell(Preloaded(dir + "/x-%p.sqlite") + "/bin/true");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(Shell("ls " + dir).output, "");
}

// Another tool (Nsight Systems) owns CUDA_INJECTION64_PATH: CUDA never loads us, and the
// trace says which variable held which library instead of "never initialised CUDA".
TEST(PreloadTest, AnotherToolsCudaInjectionIsNamed) {
  std::string out = TempDir() + "/other.sqlite";
  const std::string other = "/opt/nvidia/nsight-systems/libToolsInjection64.so";
  Result r = Shell("env CUDA_INJECTION64_PATH=" + other + " LD_PRELOAD=" + kShim +
                   " TOKENTRACE_OUT=" + out + " " + kProgram + " hooks 1");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string status = One(out, "SELECT value FROM meta WHERE key = 'kernels_status'");
  EXPECT_NE(status.find("CUDA_INJECTION64_PATH held " + other), std::string::npos) << status;
  EXPECT_NE(status.find("libtokentrace"), std::string::npos) << status;
  EXPECT_EQ(status.find("never initialised CUDA"), std::string::npos) << status;
}

TEST(PreloadTest, CliRunTracesAndPropagatesExitStatus) {
  if (access(kCli.c_str(), X_OK) != 0) GTEST_SKIP() << "tokentrace program not built";
  std::string out = TempDir() + "/cli.sqlite";
  Result r = Shell("env -u CUDA_INJECTION64_PATH " + kCli + " run --out " + out + " -- " +
                   kProgram + " hooks 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "2");
  r = Shell(kCli + " run --out " + out + " -- " + kProgram + " quick_exit");
  EXPECT_EQ(r.status, 3) << r.output;
  r = Shell(kCli + " report " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tokens: 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("never initialised CUDA"), std::string::npos) << r.output;
}

}  // namespace

// Two ranks of one torchrun-like launch (%r and %h in the name), and a third that is
// SIGKILLed: every file names its rank, world size, host and launch, and carries clock
// anchors (start, last write, exit); the cross-rank report names the killed rank.
TEST(PreloadTest, RankFilesCarryLaunchMetaAndClockAnchors) {
  const std::string dir = TempDir();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string launch = "WORLD_SIZE=3 TORCHELASTIC_RUN_ID=tt-launch-7 ";
  for (const char* rank : {"0", "1"}) {
    RunPreloaded("hooks 3", launch + "RANK=" + rank, nullptr, dir + "/r%r-%h.sqlite");
  }
  const std::string killed = dir + "/r2-" + host + ".sqlite";
  Result r = Shell(Preloaded(killed, launch + "RANK=2") + kProgram +
                   " hang >/dev/null 2>&1 & echo $!; sleep 1");
  pid_t pid = atoi(r.output.c_str());
  ASSERT_GT(pid, 0) << r.output;
  kill(pid, SIGKILL);
  usleep(200000);
  for (const char* rank : {"0", "1", "2"}) {
    const std::string f = dir + "/r" + rank + "-" + host + ".sqlite";
    EXPECT_EQ(One(f, "SELECT value FROM meta WHERE key='rank'"), rank);
    EXPECT_EQ(One(f, "SELECT value FROM meta WHERE key='world_size'"), "3");
    EXPECT_EQ(One(f, "SELECT value FROM meta WHERE key='host'"), host);
    EXPECT_EQ(One(f, "SELECT value FROM meta WHERE key='launch_id'"), "tt-launch-7");
    EXPECT_EQ(One(f, "SELECT value FROM meta WHERE key='launch_id_from'"), "TORCHELASTIC_RUN_ID");
    // Anchors: "<trace ns> <wall ns>"; the start one is before every call, the last one after
    // the first write; only a process that got to its exit has the exit one.
    const std::string start = One(f, "SELECT value FROM meta WHERE key='clock_anchor_start'");
    const std::string last = One(f, "SELECT value FROM meta WHERE key='clock_anchor_last'");
    ASSERT_NE(start.find(' '), std::string::npos) << f;
    ASSERT_NE(last.find(' '), std::string::npos) << f;
    const long long start_trace = atoll(start.c_str());
    EXPECT_LE(start_trace, atoll(One(f, "SELECT MIN(cpu_begin_ns) FROM calls").c_str()));
    EXPECT_LE(start_trace, atoll(last.c_str()));
    const long long offset_start = atoll(start.c_str() + start.find(' ')) - start_trace;
    const long long offset_last = atoll(last.c_str() + last.find(' ')) - atoll(last.c_str());
    EXPECT_LT(std::llabs(offset_last - offset_start), 5000000) << start << " / " << last;
    EXPECT_EQ(One(f, "SELECT COUNT(*) FROM meta WHERE key='clock_anchor_exit'"),
              std::string(rank) == "2" ? "0" : "1");
  }
  Result report = Shell(kCli + " report " + dir);
  EXPECT_EQ(report.status, 0) << report.output;
  EXPECT_NE(report.output.find("3 ranks of launch 'tt-launch-7'"), std::string::npos)
      << report.output;
  EXPECT_NE(report.output.find("rank 2 stopped after token 1 (tokens 2..3 missing); it wrote "
                               "no exit record"),
            std::string::npos)
      << report.output;
}
