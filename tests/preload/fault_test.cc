// Fault injection, end to end without a GPU or root: nvtx_generate runs under the preloaded
// libtokentrace.so while a thread exits mid-drain or the disk fills (disk_full_vfs.cc), and
// the file it leaves must hold, or count, every call.
#include <signal.h>

#include <cstdio>
#include <string>

#include "preload_util.h"

namespace {

const std::string kDiskFull = TT_DISK_FULL_PATH;
// Bytes the files may grow by before the disk is full: the schema and a few batches.
constexpr int64_t kFullAfter = 900000;

// A thread's last events, written just before it exits (sometimes while a drain is running),
// are read before its ring is freed: every call of 320 short-lived threads is in the file.
// (The race itself is pinned down by BufferRegistryTest; this is the end-to-end check.)
TEST(FaultTest, ShortLivedThreadsLoseNothing) {
  for (int run = 0; run < 5; ++run) {
    const std::string out = RunPreloaded("short_threads 20", "TOKENTRACE_FLUSH_MS=1");
    ASSERT_EQ(One(out, "SELECT COUNT(*) FROM calls"), std::to_string(64 * 14 * 20 * 5))
        << "run " << run;
    EXPECT_EQ(One(out, "SELECT COALESCE(SUM(count),0) FROM losses"), "0");
  }
}

// Runs `paced 300` (2100 calls) with the disk full after kFullAfter bytes of growth (space
// returns after REFUSALS refused writes; 0: never). Every call must be in the file or counted
// there as write_failed_calls, and stderr must say it once, naming the losses.
void ExpectEveryCallKeptOrCounted(int refusals) {
  const std::string out = TempDir() + "/t.sqlite";
  std::string env = "LD_PRELOAD=" + kShim + ":" + kDiskFull +
                    " TT_DISK_FULL_AFTER=" + std::to_string(kFullAfter) + " TOKENTRACE_FLUSH_MS=5";
  if (refusals > 0) env += " TT_DISK_FULL_REFUSALS=" + std::to_string(refusals);
  const Result r = Shell(Preloaded(out, env) + kProgram + " paced 300");
  ASSERT_EQ(r.status, 0) << r.output;
  const int64_t written = std::stoll(One(out, "SELECT COUNT(*) FROM calls"));
  const std::string failed = One(out, "SELECT count FROM losses WHERE kind='write_failed_calls'");
  ASSERT_NE(failed, "") << r.output;
  EXPECT_GT(std::stoll(failed), 0);
  EXPECT_EQ(written + std::stoll(failed), 300 * 7);
  int said = 0;
  for (size_t at = r.output.find("cannot write"); at != std::string::npos;
       at = r.output.find("cannot write", at + 1)) {
    ++said;
  }
  EXPECT_EQ(said, 1) << r.output;
  EXPECT_NE(r.output.find("write_failed"), std::string::npos) << r.output;
}

// The disk fills for a while, then space returns: the counts reach the file with later rows.
TEST(FaultTest, FullDiskThatFreesUpCountsWhatWasNotWritten) { ExpectEveryCallKeptOrCounted(20); }

// The disk stays full to the end: the counts still reach the file, in the smallest write, into
// the space the store set aside for it.
TEST(FaultTest, FullDiskToTheEndStillCountsInTheFile) { ExpectEveryCallKeptOrCounted(0); }

// The disk is full already when the file is to be made (its schema cannot be written), and
// space returns later: one file, made once there is room, holding or counting every call;
// never a second file beside a half-made one "that is not a trace".
TEST(FaultTest, FullDiskWhenTheFileIsMadeLeavesOneFile) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite";
  const std::string env = "LD_PRELOAD=" + kShim + ":" + kDiskFull +
                          " TT_DISK_FULL_AFTER=0 TT_DISK_FULL_REFUSALS=3 TOKENTRACE_FLUSH_MS=5";
  const Result r = Shell(Preloaded(out, env) + kProgram + " paced 300");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(TraceFiles(dir, "t.sqlite").size(), 1u) << r.output;
  EXPECT_EQ(r.output.find("not a tokentrace trace"), std::string::npos) << r.output;
  const int64_t written = std::stoll(One(out, "SELECT COUNT(*) FROM calls"));
  const std::string failed = One(out, "SELECT count FROM losses WHERE kind='write_failed_calls'");
  EXPECT_EQ(written + (failed.empty() ? 0 : std::stoll(failed)), 300 * 7) << r.output;
}

// A burst far faster than the writer (50,000 tokens in a tight loop, 700,000 events through a
// 65,536-event ring): with --on-full wait every token is kept; with the default (drop) the
// losses are counted, and stderr and the report say what share was lost.
TEST(FaultTest, BurstIsCompleteWithWaitAndItsShareLostIsSaidWithDrop) {
  const std::string kept =
      RunPreloaded("hooks 50000", "TOKENTRACE_FLUSH_MS=200 TOKENTRACE_ON_FULL=wait");
  EXPECT_EQ(One(kept, "SELECT COUNT(*) FROM tokens"), "50000");
  EXPECT_EQ(One(kept, "SELECT COUNT(*) FROM calls"), "350000");
  EXPECT_EQ(One(kept, "SELECT COALESCE(SUM(count),0) FROM losses"), "0");

  Result r;
  const std::string dropped = RunPreloaded("hooks 50000", "TOKENTRACE_FLUSH_MS=200", &r);
  const std::string lost = One(dropped, "SELECT count FROM losses WHERE kind='buffer_full'");
  ASSERT_NE(lost, "") << "the ring no longer fills in this burst; make it longer";
  EXPECT_EQ(One(dropped, "SELECT value FROM meta WHERE key='events'"), "700000");
  EXPECT_NE(r.output.find("of the job's events were lost to full buffers (" + lost + " of 700000"),
            std::string::npos)
      << r.output;
  const Result report = Shell(kCli + " report " + dropped);
  EXPECT_NE(report.output.find("buffer_full: " + lost + " ("), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("% of 700000 events)"), std::string::npos) << report.output;
}

// A job killed with SIGKILL, and its .sqlite copied without the -wal: the data reached the
// main file by a scheduled checkpoint (not only once the WAL held 16 MiB).
TEST(FaultTest, SigkilledTraceCopiedWithoutItsWalHoldsTheData) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite";
  const Result r = Shell(Preloaded(out) + kProgram + " hang >/dev/null 2>&1 & echo $!; sleep 1.6");
  const pid_t pid = atoi(r.output.c_str());
  ASSERT_GT(pid, 0) << r.output;
  kill(pid, SIGKILL);
  usleep(200000);
  ASSERT_EQ(Shell("cp " + out + " " + dir + "/copy.sqlite").status, 0);
  // The copy may miss its last second: the report says so rather than "losses: none". (First:
  // the plain SQLite query below leaves an empty -wal beside the copy.)
  const Result copy = Shell(kCli + " report " + dir + "/copy.sqlite");
  EXPECT_EQ(One(dir + "/copy.sqlite", "SELECT COUNT(*) FROM tokens"), "1");
  EXPECT_NE(copy.output.find("not counted: the writer never closed this file and its -wal is "
                             "not beside it"),
            std::string::npos)
      << copy.output;
  EXPECT_EQ(copy.output.find("losses: none"), std::string::npos) << copy.output;
  // Its -wal is there: what was written is read; what the killed process had not written yet
  // is said to be missing (never counted: nothing ran after the kill to count it).
  const Result whole = Shell(kCli + " report " + out);
  EXPECT_EQ(whole.output.find("-wal is not beside it"), std::string::npos) << whole.output;
  EXPECT_NE(whole.output.find("not counted: the writer never closed this file (its process "
                              "ended without exiting"),
            std::string::npos)
      << whole.output;
}

// Two runs with the same --out at once: the second never deletes the file the first is still
// writing; it writes "<name>.<pid>" and says so. Both traces are whole.
TEST(FaultTest, OverlappingRunsWithOneOutKeepBothTraces) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite", log = dir + "/first.log";
  const Result r = Shell(Preloaded(out) + kProgram + " hang > " + log + " 2>&1 & pid=$!; " +
                         "for i in $(seq 200); do grep -q ready " + log +
                         " && break; sleep 0.01; done; sleep 0.1; " + Preloaded(out) + kProgram +
                         " hooks 2 2>&1; kill -TERM $pid; wait $pid; echo status=$?");
  EXPECT_NE(r.output.find("'" + out + "' is being written by another run"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("status=143"), std::string::npos) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "1");  // the first run's, whole
  EXPECT_EQ(One(out, "SELECT value FROM meta WHERE key='exit_signal'"), "SIGTERM");
  const size_t at = r.output.find("writes '" + out + ".");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string second = r.output.substr(at + 8, r.output.find('\'', at + 8) - at - 8);
  EXPECT_EQ(One(second, "SELECT COUNT(*) FROM tokens"), "2");
}

// SIGTERM while the rings hold far more than the writer can write in the handler's time:
// a 1M-event ring kept full by a busy thread, and a writer made slow by the
// test-only TOKENTRACE_TEST_SLOW_DRAIN_MS (each drain step sleeps 500 ms). The stop writes what
// fits by its deadline and counts the rest as signal_deadline: the job dies by the signal
// within the bound, the file opens with exit_signal in its meta, and every event the job
// produced is written or counted.
TEST(FaultTest, SigtermWithFullRingsWritesWhatFitsAndCountsTheRest) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite", log = dir + "/job.log";
  const Result r =
      Shell(Preloaded(out, "TOKENTRACE_BUFFER_EVENTS=1048576 TOKENTRACE_TEST_SLOW_DRAIN_MS=500") +
            kProgram + " busy > " + log + " 2>&1 & pid=$!; for i in $(seq 500); do grep -q ready " +
            log + " && break; sleep 0.01; done; sleep 1; t0=$(date +%s%N); kill -TERM $pid; " +
            "wait $pid; echo status=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))");
  EXPECT_NE(r.output.find("status=143"), std::string::npos) << r.output;
  const size_t at = r.output.find("ms=");
  ASSERT_NE(at, std::string::npos) << r.output;
  const int ms = std::stoi(r.output.substr(at + 3));
  std::printf("SIGTERM to death: %d ms\n", ms);
  EXPECT_LT(ms, 6000) << r.output;  // the handler's 5 s, and the time to exit
  EXPECT_EQ(One(out, "SELECT value FROM meta WHERE key='exit_signal'"), "SIGTERM");
  const std::string left = One(out, "SELECT count FROM losses WHERE kind='signal_deadline'");
  ASSERT_NE(left, "") << r.output;
  EXPECT_GT(std::stoll(left), 0);
  // Events produced = taken by the drains + dropped on the full ring + left at the deadline;
  // a call is a push and a pop, and an open one is counted as unclosed_range.
  const int64_t events = std::stoll(One(out, "SELECT value FROM meta WHERE key='events'"));
  const int64_t calls = std::stoll(One(out, "SELECT COUNT(*) FROM calls"));
  const int64_t dropped =
      std::stoll(One(out, "SELECT COALESCE(SUM(count),0) FROM losses WHERE kind='buffer_full'"));
  EXPECT_GT(calls, 0);
  EXPECT_GE(events - dropped - std::stoll(left), 2 * calls - 64) << r.output;
}

// A job that forks 50 children while another thread records without pause (the drain is
// writing at almost every fork): every child ends and writes its own file, no deadlock.
// Before fork() waited for the drain, 4 runs in 5 hung with a child blocked in SQLite's
// allocator on a mutex the parent's drain thread held at the fork.
TEST(FaultTest, ForksWhileTheDrainWritesNeverHang) {
  const std::string dir = TempDir();
  for (int run = 0; run < 2; ++run) {
    const std::string out = dir + "/f" + std::to_string(run) + "-%p.sqlite";
    Result r = Shell("timeout 60 " + Preloaded(out) + kProgram + " fork_busy 50");
    ASSERT_EQ(r.status, 0) << "run " << run << " (124: hung)\n" << r.output;
    EXPECT_EQ(Shell("ls " + dir + "/f" + std::to_string(run) + "-*.sqlite | wc -l").output, "51\n");
  }
}

// A job killed inside a token: the token reads as unfinished (its root call is in the file,
// open), not as one without a root call (which the report took for a CUDA-graph replay).
TEST(FaultTest, TokenOfAKilledJobReadsAsUnfinished) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite", log = dir + "/job.log";
  const Result r = Shell(Preloaded(out) + kProgram + " hang_in_token > " + log + " 2>&1 & " +
                         "pid=$!; for i in $(seq 200); do grep -q ready " + log +
                         " && break; sleep 0.01; done; sleep 0.3; kill -KILL $pid");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM tokens"), "2");
  EXPECT_EQ(One(out,
                "SELECT cpu_begin_ns IS NOT NULL AND cpu_end_ns IS NULL FROM tokens "
                "WHERE token = 2"),
            "1");
  const Result report = Shell(kCli + " report " + out);
  EXPECT_EQ(report.output.find("graph"), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("open"), std::string::npos) << report.output;
}

}  // namespace

// The Python layer's rows (call inputs, saved outputs, a serving engine's steps and requests)
// go through the session's writer (tokentrace_add_rows), which commits them with the calls
// recorded before them. `nvtx_generate inputs` hands a row per block call and one per token,
// as the hooks and the vLLM adapter do; the job is stopped by `sig` mid-run. Every block call
// the file keeps has its input row, and every token but the last its step row: the rows are
// kept as the calls are (they once lagged them by hundreds of tokens, in the Python layer's
// own buffer, and were lost with it).
void ExpectRowsKeptWithTheirCalls(const char* sig, int status) {
  const std::string dir = TempDir(), out = dir + "/t.sqlite", log = dir + "/job.log";
  const Result r = Shell(Preloaded(out, "TOKENTRACE_FLUSH_MS=20") + kProgram + " inputs 0 > " +
                         log + " 2>&1 & pid=$!; for i in $(seq 500); do grep -q ready " + log +
                         " && break; sleep 0.01; done; sleep 0.7; kill -" + sig +
                         " $pid; wait $pid; echo status=$?");
  EXPECT_NE(r.output.find("status=" + std::to_string(status)), std::string::npos) << r.output;
  const std::string blocks =
      "FROM calls c JOIN sites s ON s.id = c.site_id WHERE s.name IN "
      "('transformer.h.0', 'transformer.h.1')";
  const int64_t kept = std::stoll(One(out, "SELECT COUNT(*) " + blocks));
  EXPECT_GT(kept, 100) << r.output;
  EXPECT_EQ(One(out, "SELECT COUNT(*) " + blocks +
                         " AND NOT EXISTS (SELECT 1 FROM call_inputs i WHERE i.call_id = c.id)"),
            "0");
  EXPECT_EQ(One(out, "SELECT COUNT(*) FROM call_inputs WHERE path = 'hidden_states'"),
            One(out, "SELECT COUNT(DISTINCT call_id) FROM call_inputs"));
  const int64_t tokens =
      std::stoll(One(out,
                     "SELECT COUNT(*) FROM calls c JOIN sites s ON s.id = c.site_id WHERE s.name = "
                     "'self' AND c.cpu_end_ns >= 0"));
  const int64_t steps = std::stoll(One(out, "SELECT COUNT(*) FROM step_requests"));
  EXPECT_GE(steps, tokens - 1) << r.output;
  EXPECT_LE(steps, tokens + 1) << r.output;
}

TEST(FaultTest, PythonRowsSurviveSigkillWithTheirCalls) {
  ExpectRowsKeptWithTheirCalls("KILL", 137);
}

TEST(FaultTest, PythonRowsSurviveSigtermWithTheirCalls) {
  ExpectRowsKeptWithTheirCalls("TERM", 143);
}

// A full disk: the Python layer's rows that could not be written are counted by table, as
// the calls are; what was written plus what was counted is every row handed over.
TEST(FaultTest, PythonRowsOnAFullDiskAreCountedByTable) {
  const std::string out = TempDir() + "/t.sqlite";
  const std::string env = "LD_PRELOAD=" + kShim + ":" + kDiskFull +
                          " TT_DISK_FULL_AFTER=" + std::to_string(kFullAfter) +
                          " TT_DISK_FULL_REFUSALS=20" + " TOKENTRACE_FLUSH_MS=5";
  const Result r = Shell(Preloaded(out, env) + kProgram + " inputs 300");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto count = [&](const std::string& sql) {
    const std::string v = One(out, sql);
    return v.empty() ? int64_t{0} : std::stoll(v);
  };
  const int64_t failed = count("SELECT count FROM losses WHERE kind='write_failed_inputs'");
  EXPECT_GT(failed, 0) << r.output;
  EXPECT_EQ(count("SELECT COUNT(*) FROM call_inputs") + failed, 300 * 2);
  EXPECT_EQ(count("SELECT COUNT(*) FROM step_requests") +
                count("SELECT count FROM losses WHERE kind='write_failed_steps'"),
            300);
  EXPECT_EQ(count("SELECT COUNT(*) FROM calls") +
                count("SELECT count FROM losses WHERE kind='write_failed_calls'"),
            300 * 7);
}

// A job that has taken all the address space it may while its threads record: the writer
// cannot join or write what they record, and no exception of its own reaches the job (it once
// ended in std::terminate, exit 134, from a bad_alloc in the joiner's maps). The job exits 0 as
// untraced, what was dropped is counted as no_memory, and once memory is back the writer
// writes again (the last token is in the file).
TEST(FaultTest, AnExhaustedAddressSpaceNeverStopsTheJob) {
  const std::string out = TempDir() + "/t.sqlite";
  const Result r =
      Shell(Preloaded(out, "MALLOC_ARENA_MAX=1 TOKENTRACE_FLUSH_MS=5") + kProgram + " exhaust");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string no_memory = One(out, "SELECT count FROM losses WHERE kind='no_memory'");
  ASSERT_NE(no_memory, "") << r.output;
  EXPECT_GT(std::stoll(no_memory), 0);
  EXPECT_EQ(One(out,
                "SELECT COUNT(*) FROM calls c JOIN sites s ON s.id = c.site_id WHERE "
                "s.name = 'self'"),
            "1");
  EXPECT_NE(One(out, "SELECT value FROM meta WHERE key='clock_anchor_exit'"), "");
}
