#include "preload/session.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <span>

#include "core/buffer_registry.h"
#include "core/clock.h"
#include "core/deadline_wait.h"
#include "core/fd_guard.h"
#include "core/recorder.h"
#include "core/site_registry.h"
#include "cupti/subscriber.h"
#include "preload/injection.h"
#include "session/added_rows.h"
#include "session/file_claim.h"
#include "session/losses.h"
#include "session/meta_rows.h"
#include "store/reader.h"

// TOKENTRACE_VERSION: the CMake project version (preload/CMakeLists.txt), the one source.

namespace tokentrace {
namespace {

// Wake-ups of the background thread (Stop, and the signal handler, which can only write to a
// file descriptor): one pipe per process, made before the first session's thread starts. Its
// two descriptors are guarded (core/fd_guard.h), and before each use they are checked to
// still be that pipe (its inode): one closed by a raw syscall, or whose number the job
// reused, is never read or written, and the loop makes a new pipe.
std::atomic<int> g_wake_read{-1};
std::atomic<int> g_wake_write{-1};
std::atomic<dev_t> g_wake_dev{0};
std::atomic<ino_t> g_wake_ino{0};
// Every session's drain lock (Session::drain_mutex_), taken by fork() (shim.cc's atfork
// handlers) before the claim lock: a fork waits for the drain that is writing, so the child
// never inherits SQLite's mutexes or allocator held by a thread it does not have.
std::mutex g_drain_mutex;
// Held while a file is claimed under a directory lock, and by fork(), so no child is made
// mid-claim. Taken after g_drain_mutex (OpenStoreLocked runs inside a drain).
std::mutex g_claim_mutex;
std::atomic<int> g_stop_signal{0};  // set by RequestStopFromSignal
std::atomic<int64_t> g_stop_signal_ns{
    0};  // when (CLOCK_MONOTONIC): the drain's deadline counts from it
std::atomic<bool> g_loop_running{false};
std::atomic<bool> g_signal_stop_done{false};

bool IsTheWakePipe(int fd) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == g_wake_ino.load() &&
         st.st_dev == g_wake_dev.load();
}

void MakeWakePipe() {
  int fds[2];
  struct stat st;
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
  if (fstat(fds[0], &st) == 0) {
    g_wake_dev.store(st.st_dev);
    g_wake_ino.store(st.st_ino);
  }
  fd_guard::Guard(fds[0]);
  fd_guard::Guard(fds[1]);
  g_wake_write.store(fds[1]);
  g_wake_read.store(fds[0]);
}

// The read end, a new pipe's when either end is no longer the pipe (their numbers are the
// job's now: left open, unguarded).
int WakeReadFd() {
  const int fd = g_wake_read.load();
  if (fd >= 0 && IsTheWakePipe(fd) && IsTheWakePipe(g_wake_write.load())) return fd;
  fd_guard::Unguard(fd);
  fd_guard::Unguard(g_wake_write.load());
  MakeWakePipe();
  return g_wake_read.load();
}

void Wake() {
  const int fd = g_wake_write.load();
  if (!IsTheWakePipe(fd)) return;
  const char one = 1;
  ssize_t ignored = write(fd, &one, 1);  // a full pipe is a pending wake-up already
  (void)ignored;
}

// TOKENTRACE_TEST_SLOW_DRAIN_MS (0 when unset), for tests only (DrainParts::slow_drain_ms): a
// test can make the writer far slower than the job.
int TestSlowDrainMs() {
  const char* v = getenv("TOKENTRACE_TEST_SLOW_DRAIN_MS");
  return v != nullptr ? atoi(v) : 0;
}

// The loss counter of the CUPTI seam; the drainer takes it with src/core's (session/losses.h).
constexpr LossSource kCuptiLosses[] = {
    {TOKENTRACE_LOSS_GPU_WAIT_TIMEOUT, &cupti::TakeDeviceWaitTimeouts}};

// A signal stop's drain (and the test-only slow drain) takes at most this many events from a
// ring before writing them.
constexpr uint64_t kSignalDrainStep = 16384;

// TOKENTRACE_RUN_ID ("" when unset).
std::string RunIdFromEnvironment() {
  const char* v = getenv(kRunIdVariable);
  return v != nullptr ? v : "";
}

}  // namespace

std::unique_ptr<Session> Session::Start(const Config& config, bool preload, std::string* error) {
  const LaunchInfo launch = LaunchFromEnvironment();
  const std::string out = ExpandOutPath(config.out_path, getpid(), launch.rank, launch.host);
  if (!CheckWritable(out, error)) return nullptr;
  std::unique_ptr<Session> s(new Session(config, preload, out));
  if (!preload) {
    // As in preload mode, a file at that path that is not a trace is never replaced.
    std::string version;
    if (access(out.c_str(), F_OK) == 0 &&
        (!ReadMetaValue(out, "schema_version", &version) || version.empty())) {
      *error = "tokentrace: '" + out + "' exists and is not a tokentrace trace, so it is kept; " +
               "choose another output path";
      return nullptr;
    }
    std::unique_ptr<Store> store = Store::Open(out, error);
    if (!store) return nullptr;
    s->drainer_.SetStore(std::move(store));
  }
  sites::SetTokenRange(config.token_range);
  ProcessAddedQueue().Clear();  // what was handed to no session (or to an earlier one)
  clock::Calibrate();
  recorder::BeginSession(config.buffer_events);
  Policy().wake.store(&Wake);
  Policy().wait_when_full.store(config.wait_when_full);
  if (config.kernels.kind == KernelMode::kOff) {
    s->SetKernelsStatus("kernel mode is off", KernelsOff::kByConfig);
  } else if (!preload) {
    s->StartKernels();
  } else {
    s->SetKernelsStatus("waiting for CUDA initialisation", KernelsOff::kNoCudaWork);
  }
  if (g_wake_read.load() < 0) MakeWakePipe();
  // The background thread never takes the job's termination signals (their handler waits for
  // it), so it starts with them blocked.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGTERM, SIGHUP, SIGINT}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  // Running from here on for the signal handler, even before the thread is first scheduled
  // (a signal that early still finds someone to do the stop).
  g_loop_running.store(true);
  Policy().drain_running.store(true);
  s->thread_ = std::thread([raw = s.get()] { raw->Loop(); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return s;
}

Session::Session(const Config& config, bool preload, std::string out_path)
    : config_(config),
      preload_(preload),
      out_path_(std::move(out_path)),
      run_id_(preload ? RunIdFromEnvironment() : ""),
      joiner_(config.kernels, &clock::TicksToNs),
      drainer_(ProcessDrainParts()),
      drain_mutex_(g_drain_mutex) {}

DrainParts Session::ProcessDrainParts() {
  DrainParts parts;
  parts.rings = [](const std::function<void(ThreadBuffer&)>& fn) { buffers::ForEach(fn); };
  parts.generation = &recorder::Generation;
  parts.activities = &activities_;
  parts.joiner = &joiner_;
  parts.open_store = [this](std::string* error) { return OpenStoreLocked(error); };
  parts.meta = [this](const DrainCounts& counts) { return MetaRows(counts); };
  const std::span<const LossSource> core = CoreLossSources();
  parts.loss_sources.assign(core.begin(), core.end());
  parts.loss_sources.insert(parts.loss_sources.end(), std::begin(kCuptiLosses),
                            std::end(kCuptiLosses));
  parts.calibrate = &clock::Calibrate;
  parts.slow_drain_ms = TestSlowDrainMs();
  parts.step_events = kSignalDrainStep;
  parts.interrupted = [] { return g_stop_signal.load() != 0; };
  parts.added = [](Batch* batch) { ProcessAddedQueue().TakeInto(batch); };
  return parts;
}

std::string Session::out_path() const {
  std::lock_guard<std::mutex> lock(path_mutex_);
  return out_path_;
}

// Preload mode: which file this process writes is settled under a directory lock
// (session/file_claim.h).
std::unique_ptr<Store> Session::OpenStoreLocked(std::string* error) {
  std::unique_lock<std::mutex> no_fork(g_claim_mutex, std::defer_lock);
  if (!run_id_.empty()) no_fork.lock();  // see ClaimOutputFile: no fork while it runs
  FileClaim claim = ClaimOutputFile(out_path(), run_id_, getpid(), error);
  if (!claim.notice.empty()) fprintf(stderr, "%s\n", claim.notice.c_str());
  {
    std::lock_guard<std::mutex> lock(path_mutex_);
    out_path_ = claim.path;
  }
  return std::move(claim.store);
}

void Session::BeforeFork() {
  g_drain_mutex.lock();
  g_claim_mutex.lock();
  recorder::BeforeFork();
}
void Session::AfterForkInParent() {
  recorder::AfterFork();
  g_claim_mutex.unlock();
  g_drain_mutex.unlock();
}

Session::~Session() {
  std::string ignored;
  Stop(&ignored);
}

void Session::SetKernelsStatus(const std::string& status, KernelsOff kind) {
  std::lock_guard<std::mutex> lock(status_mutex_);
  kernels_status_ = status;
  kernels_off_ = kind;
}

MetaRowList Session::MetaRows(const DrainCounts& counts) const {
  SessionFacts facts;
  facts.tool_version = TOKENTRACE_VERSION;
  facts.pid = getpid();
  facts.kernel_mode = config_.kernels.ToString();
  facts.kernels_status = kernels_status();
  facts.kernels_off = kernels_off();
  facts.cupti = cupti::Describe();
  facts.token_range = config_.token_range;
  facts.preload = preload_;
  facts.out_path = out_path();
  facts.events = counts.events();
  facts.start_anchor = start_anchor_;
  facts.launch = launch_;
  return SessionMetaRows(facts);
}

std::string Session::kernels_status() const {
  std::lock_guard<std::mutex> lock(status_mutex_);
  return kernels_status_;
}

KernelsOff Session::kernels_off() const {
  std::lock_guard<std::mutex> lock(status_mutex_);
  return kernels_off_;
}

void Session::StartKernels() {
  if (kernels_started_ || config_.kernels.kind == KernelMode::kOff) return;
  kernels_started_ = true;
  std::string why;
  KernelsOff kind = KernelsOff::kFailed;
  if (cupti::Start(config_, &activities_, &why, &kind)) {
    SetKernelsStatus("", KernelsOff::kNo);
  } else {
    SetKernelsStatus(why, kind);
    // Said once per process, in a few words; the detail is in the meta (`tokentrace info`).
    static std::atomic<bool> said{false};
    const std::string notice = KernelsOffNotice(kind, why);
    if (!notice.empty() && !said.exchange(true)) fprintf(stderr, "%s\n", notice.c_str());
  }
}

void Session::Loop() {
  int starved = 0;  // drains in a row that ran out of memory: the next waits longer
  while (!loop_stop_.load()) {
    const int fd = WakeReadFd();
    pollfd p{fd, POLLIN, 0};
    const int wait_ms = config_.flush_ms << std::min(starved, 3);
    if (poll(&p, fd >= 0 ? 1 : 0, wait_ms) > 0 && (p.revents & POLLIN) != 0) {
      char wakes[64];
      ssize_t ignored = read(fd, wakes, sizeof wakes);  // empty the pipe
      (void)ignored;
    }
    if (const int sig = g_stop_signal.load()) {
      Policy().drain_running.store(false);
      StopFromSignal(sig);
      break;
    }
    if (loop_stop_.load()) break;
    // No exception leaves this thread (the job would be terminated): a drain that runs out of
    // memory counts what it dropped (no_memory) and the next one, a little later, goes on.
    try {
      // CUPTI hands over an activity buffer only when it is full (1 MB) or flushed: flush
      // about once a second, so records reach the file soon after their buffer's last record
      // completed (a buffer still being written to waits until it is full or the session ends).
      if (kernels_started_ && cupti_flush_due_.Turn()) {
        cupti::Flush(false);  // completed buffers only: see cupti/subscriber.h
      }
      std::lock_guard<std::mutex> drain(drain_mutex_);
      std::string error;
      const uint64_t dropped_before = drainer_.no_memory();
      if (!drainer_.Drain(false, &error) && !error.empty() && error != last_error_) {
        fprintf(stderr, "%s\n", error.c_str());
        last_error_ = error;
      }
      starved = drainer_.no_memory() > dropped_before ? starved + 1 : 0;
      // The data reaches the main file about once a second, not only when the WAL is 16 MiB:
      // a killed job's .sqlite copied alone still holds it.
      if (drainer_.store() != nullptr && checkpoint_due_.Turn()) {
        drainer_.store()->Checkpoint();
      }
    } catch (const std::exception&) {
      ++starved;
    }
  }
  Policy().drain_running.store(false);  // a thread waiting for room gives up (and counts)
  g_loop_running.store(false);
}

void Session::StopFromSignal(int sig) {
  {
    std::lock_guard<std::mutex> drain(drain_mutex_);
    if (!stopped_) {
      stopped_ = true;
      recorder::EndSession();
      const char* abbrev = sigabbrev_np(sig);
      const std::string name =
          abbrev != nullptr ? std::string("SIG") + abbrev : std::to_string(sig);
      try {
        DrainBudget budget(g_stop_signal_ns.load() + kSignalDrainNs, &MonotonicNs,
                           kSignalDrainStep);
        drainer_.DrainSteps(&budget);
        std::string error;
        WriteFinalLocked({{"exit_signal", name}}, &error);
      } catch (const std::exception&) {
        // no memory left to finish: what was committed stays (the file reads as unfinished)
      }
      if (drainer_.store() != nullptr) drainer_.store()->Close();
    }
  }
  g_signal_stop_done.store(true);
}

bool Session::RequestStopFromSignal(int sig) {
  if (!g_loop_running.load()) return false;
  int expected = 0;
  if (g_stop_signal_ns.load() == 0) g_stop_signal_ns.store(MonotonicNs());
  g_stop_signal.compare_exchange_strong(expected, sig);
  Wake();
  return true;
}

bool Session::StopFromSignalDone() { return g_signal_stop_done.load(); }

void Session::AfterForkInChild() {
  recorder::AfterFork();        // held by the forking thread, this one (BeforeFork)
  ProcessAddedQueue().Clear();  // the parent's rows: its own file takes them
  g_claim_mutex.unlock();
  g_drain_mutex.unlock();
  // The parent's descriptors are copies here, never used by the child: not guarded, and the
  // wake-up pipe is made again by the child's own session.
  fd_guard::UnguardAll();
  for (std::atomic<int>* end : {&g_wake_read, &g_wake_write}) {
    const int fd = end->exchange(-1);
    if (fd >= 0) close(fd);
  }
  g_loop_running.store(false);
  g_stop_signal.store(0);
  g_stop_signal_ns.store(0);
  g_signal_stop_done.store(false);
}

bool Session::WriteFinalLocked(const MetaRowList& extra_meta, std::string* error) {
  bool ok = drainer_.WriteFinal(extra_meta, error);
  const DrainCounts& counts = drainer_.counts();
  const std::string lost = BufferFullNotice(counts.drained, counts.dropped,
                                            config_.wait_when_full);  // once, at the end
  if (!lost.empty()) fprintf(stderr, "%s\n", lost.c_str());
  if (!ok && drainer_.all_written() && *error == last_error_) error->clear();  // said once already
  return ok;
}

bool Session::Flush(std::string* error) {
  if (kernels_started_) cupti::Flush(false);
  std::lock_guard<std::mutex> drain(drain_mutex_);
  if (stopped_) return true;
  return drainer_.Drain(false, error);
}

bool Session::Stop(std::string* error, const MetaRowList& extra_meta) {
  bool already;
  {
    std::lock_guard<std::mutex> drain(drain_mutex_);
    already = stopped_;
    stopped_ = true;
  }
  if (already) {  // stopped before (or by a termination signal): only the thread is left
    loop_stop_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
    return true;
  }
  recorder::EndSession();
  if (kernels_started_) {
    cupti::WaitForDevice();  // kernels still running would otherwise miss the final flush (bounded)
    cupti::Flush(true);
  } else if (preload_ && config_.kernels.kind != KernelMode::kOff) {
    KernelsOff reason = KernelsOff::kNoCudaWork;
    const std::string why = shim::KernelsNeverStarted(&reason);  // or which tool held it
    SetKernelsStatus(why, reason);
  }
  loop_stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
  bool ok = false;
  {
    std::lock_guard<std::mutex> drain(drain_mutex_);
    try {
      ok = WriteFinalLocked(extra_meta, error);
    } catch (const std::exception&) {
      // no memory left to finish (the job exits anyway): what was committed stays
    }
  }
  if (kernels_started_) cupti::Stop();
  if (drainer_.store() != nullptr) drainer_.store()->Close();
  return ok;
}

}  // namespace tokentrace
