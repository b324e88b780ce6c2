#include "preload/session.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/buffer_registry.h"
#include "core/clock.h"
#include "core/deadline_wait.h"
#include "core/recorder.h"
#include "core/site_registry.h"
#include "cupti/subscriber.h"
#include "preload/injection.h"
#include "session/file_claim.h"
#include "session/losses.h"
#include "session/meta_rows.h"
#include "store/reader.h"

// TOKENTRACE_VERSION: the CMake project version (preload/CMakeLists.txt), the one source.

namespace tokentrace {
namespace {

// Wake-ups of the background thread (Stop, and the signal handler, which can only write to a
// file descriptor): one eventfd per process, made before the first session's thread starts.
std::atomic<int> g_wake_fd{-1};
// Held while a file is claimed under a directory lock, and by fork() (shim.cc's atfork
// handlers), so no child is made mid-claim.
std::mutex g_claim_mutex;
std::atomic<int> g_stop_signal{0};  // set by RequestStopFromSignal
std::atomic<int64_t> g_stop_signal_ns{
    0};  // when (CLOCK_MONOTONIC): the drain's deadline counts from it
std::atomic<bool> g_loop_running{false};
std::atomic<bool> g_signal_stop_done{false};

int WakeFd() {
  int fd = g_wake_fd.load();
  if (fd < 0) {
    fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    g_wake_fd.store(fd);
  }
  return fd;
}

void Wake() {
  const int fd = g_wake_fd.load();
  if (fd < 0) return;
  const uint64_t one = 1;
  ssize_t ignored = write(fd, &one, sizeof one);
  (void)ignored;
}

// TOKENTRACE_TEST_SLOW_DRAIN_MS (0 when unset): for tests only, see session.h.
int TestSlowDrainMs() {
  const char* v = getenv("TOKENTRACE_TEST_SLOW_DRAIN_MS");
  return v != nullptr ? atoi(v) : 0;
}

void SleepMs(int ms) {
  if (ms <= 0) return;
  const timespec t{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, nullptr);
}

// The loss counter of the CUPTI seam (the session adds src/core's, session/losses.h).
constexpr LossSource kCuptiLosses[] = {
    {TOKENTRACE_LOSS_GPU_WAIT_TIMEOUT, &cupti::TakeDeviceWaitTimeouts}};

// A signal stop's drain takes at most this many events from a ring before writing them.
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
    s->store_ = Store::Open(out, error);
    if (!s->store_) return nullptr;
  }
  sites::SetTokenRange(config.token_range);
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
  WakeFd();
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
      test_slow_drain_ms_(TestSlowDrainMs()) {}

std::string Session::out_path() const {
  std::lock_guard<std::mutex> lock(path_mutex_);
  return out_path_;
}

// Preload mode: which file this process writes is settled under a directory lock
// (session/file_claim.h).
bool Session::OpenStoreLocked(std::string* error) {
  std::unique_lock<std::mutex> no_fork(g_claim_mutex, std::defer_lock);
  if (!run_id_.empty()) no_fork.lock();  // see ClaimOutputFile: no fork while it runs
  FileClaim claim = ClaimOutputFile(out_path(), run_id_, getpid(), error);
  if (!claim.notice.empty()) fprintf(stderr, "%s\n", claim.notice.c_str());
  {
    std::lock_guard<std::mutex> lock(path_mutex_);
    out_path_ = claim.path;
  }
  store_ = std::move(claim.store);
  return store_ != nullptr;
}

void Session::BeforeFork() { g_claim_mutex.lock(); }
void Session::AfterForkInParent() { g_claim_mutex.unlock(); }

Session::~Session() {
  std::string ignored;
  Stop(&ignored);
}

void Session::SetKernelsStatus(const std::string& status, KernelsOff kind) {
  std::lock_guard<std::mutex> lock(status_mutex_);
  kernels_status_ = status;
  kernels_off_ = kind;
}

MetaRowList Session::MetaRows() const {
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
  facts.events = events_drained_ + events_dropped_ + events_left_;
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
  if (cupti::Start(config_, this, &why, &kind)) {
    SetKernelsStatus("", KernelsOff::kNo);
  } else {
    SetKernelsStatus(why, kind);
    // Said once per process, in a few words; the detail is in the meta (`tokentrace info`).
    static std::atomic<bool> said{false};
    const std::string notice = KernelsOffNotice(kind, why);
    if (!notice.empty() && !said.exchange(true)) fprintf(stderr, "%s\n", notice.c_str());
  }
}

void Session::OnActivity(const GpuActivity& activity) { activities_.Push(activity); }

void Session::OnDropped(uint64_t records) {
  if (records != 0) cupti_dropped_.fetch_add(records, std::memory_order_relaxed);
}

void Session::Loop() {
  const int fd = g_wake_fd.load();
  while (!loop_stop_.load()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, fd >= 0 ? 1 : 0, config_.flush_ms) > 0) {
      uint64_t count;
      ssize_t ignored = read(fd, &count, sizeof count);  // reset the eventfd
      (void)ignored;
    }
    if (const int sig = g_stop_signal.load()) {
      Policy().drain_running.store(false);
      StopFromSignal(sig);
      break;
    }
    if (loop_stop_.load()) break;
    // CUPTI hands over an activity buffer only when it is full (1 MB) or flushed: flush about
    // once a second, so records reach the file soon after their buffer's last record
    // completed (a buffer still being written to waits until it is full or the session ends).
    if (kernels_started_ && cupti_flush_due_.Turn()) {
      cupti::Flush(false);  // completed buffers only: see cupti/subscriber.h
    }
    {
      std::lock_guard<std::mutex> drain(drain_mutex_);
      std::string error;
      if (!DrainLocked(false, &error) && error != last_error_) {
        fprintf(stderr, "%s\n", error.c_str());
        last_error_ = error;
      }
      // The data reaches the main file about once a second, not only when the WAL is 16 MiB:
      // a killed job's .sqlite copied alone still holds it.
      if (store_ && checkpoint_due_.Turn()) {
        store_->Checkpoint();
      }
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
      const std::string name = sig == SIGTERM  ? "SIGTERM"
                               : sig == SIGHUP ? "SIGHUP"
                                               : std::to_string(sig);
      DrainBudget budget(g_stop_signal_ns.load() + kSignalDrainNs, &MonotonicNs, kSignalDrainStep);
      DrainStepsLocked(&budget);
      std::string error;
      WriteFinalLocked({{"exit_signal", name}}, &error);
      if (store_) store_->Close();
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
  new (&g_claim_mutex) std::mutex();  // held by the forking thread (BeforeFork)
  const int fd = g_wake_fd.exchange(-1);
  if (fd >= 0) close(fd);
  g_loop_running.store(false);
  g_stop_signal.store(0);
  g_stop_signal_ns.store(0);
  g_signal_stop_done.store(false);
}

bool Session::DrainLocked(bool final, std::string* error) {
  clock::Calibrate();
  Batch batch;
  // Activities first, then rings: a record already queued had its launch event written
  // before, so that event is in this drain too (records rarely wait in `pending`).
  ActivityQueue::Taken activities = activities_.Take();
  // The test-only slow writer takes one step of each ring per drain, and sleeps.
  DrainBudget slow(
      INT64_MAX, [] { return int64_t{0}; }, kSignalDrainStep);
  const bool slowed = test_slow_drain_ms_ > 0 && !final;
  const uint64_t dropped = TakeRingsLocked(&batch, slowed ? &slow : nullptr);
  if (slowed) SleepMs(test_slow_drain_ms_);
  activities.ForEach([&](const GpuActivity& a) { joiner_.OnActivity(a, &batch); });
  if (final) {
    joiner_.Finish(clock::HostNowNs(), &batch);
  } else {
    joiner_.EndDrain(&batch);
  }
  AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, dropped, &batch);
  AddLoss(TOKENTRACE_LOSS_CUPTI_DROPPED, cupti_dropped_.exchange(0), &batch);
  TakeLosses(kCuptiLosses, &batch);
  TakeLosses(CoreLossSources(), &batch);
  return WriteLocked(batch, error);
}

uint64_t Session::TakeRingsLocked(Batch* batch, DrainBudget* budget) {
  const uint8_t generation = recorder::Generation();
  uint64_t dropped = 0;
  buffers::ForEach([&](ThreadBuffer& ring) {
    auto on_event = [&](const Event& e) {
      if (e.generation == generation) joiner_.OnEvent(ring.thread_index(), e, batch);
    };
    events_drained_ += budget != nullptr ? budget->Take(ring, on_event) : ring.Drain(on_event);
    dropped += ring.TakeDropped();
  });
  events_dropped_ += dropped;
  return dropped;
}

void Session::DrainStepsLocked(DrainBudget* budget) {
  const auto step = [&] {
    Batch batch;
    AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, TakeRingsLocked(&batch, budget), &batch);
    const uint64_t left = budget->TakeLeft();
    events_left_ += left;
    AddLoss(TOKENTRACE_LOSS_SIGNAL_DEADLINE, left, &batch);
    joiner_.EndDrain(&batch);
    std::string error;
    WriteLocked(batch, &error);  // a failed write is counted (Unwritten) and retried at the end
  };
  budget->Run(step, [&] { SleepMs(test_slow_drain_ms_); });
}

bool Session::WriteLocked(Batch& batch, std::string* error) {
  // Sites are emitted only once the file exists (preload creates it on first use).
  const bool has_work = !batch.calls.empty() || !batch.kernels.empty() || !batch.escapes.empty() ||
                        !batch.outputs.empty() || !batch.call_gpu.empty() || !batch.losses.empty();
  if (!store_) {
    if (!has_work) return true;
    if (!OpenStoreLocked(error)) {
      unwritten_.Add(std::move(batch));
      return false;
    }
    meta_written_ = false;
  }
  if (!meta_written_) {
    batch.meta = MetaRows();
    meta_written_ = true;
  }
  for (uint32_t id : joiner_.TakeNewSites()) batch.sites.push_back(sites::Row(id));
  unwritten_.MoveInto(&batch);
  if (batch.empty()) return true;
  // The periodic clock anchor rides on batches that are written anyway (launch_meta.h).
  batch.meta.emplace_back(kMetaAnchorLast, FormatAnchor(TakeClockAnchor()));
  if (store_->Write(batch, error)) {
    unwritten_.Written(batch);
    return true;
  }
  // A full disk (or another write error): the rows are counted and the counts retried with
  // the next write. The background loop says it once.
  *error += "; what cannot be written is counted in the file's losses (write_failed_*)";
  unwritten_.Add(std::move(batch));
  return false;
}

bool Session::WriteFinalLocked(const std::vector<std::pair<std::string, std::string>>& extra_meta,
                               std::string* error) {
  bool ok = DrainLocked(true, error);  // closes open calls (counted as unclosed_range)
  Batch meta;
  meta.meta = MetaRows();  // the final kernels status
  meta.meta.insert(meta.meta.end(), extra_meta.begin(), extra_meta.end());
  meta.meta.emplace_back(kMetaAnchorExit, FormatAnchor(TakeClockAnchor()));
  std::string meta_error;
  if (store_ && !WriteLocked(meta, &meta_error)) {
    if (ok) *error = meta_error;
    ok = false;
  }
  if (!unwritten_.empty() && store_) {
    // Still no room for the rows: the smallest write, the counts alone, into the space the
    // store set aside for it if need be.
    Batch losses = unwritten_.LossesOnly();
    std::string ignored;
    if (store_->Write(losses, &ignored) ||
        (store_->ReleaseReserve() && store_->Write(losses, &ignored))) {
      unwritten_ = Unwritten();
    } else {
      *error = "tokentrace: '" + out_path() + "' misses " + std::to_string(unwritten_.calls()) +
               " calls that could not be written, and the disk has no room to say so in it (" +
               ignored + ")";
    }
  }
  const std::string lost = BufferFullNotice(events_drained_, events_dropped_,
                                            config_.wait_when_full);  // once, at the end
  if (!lost.empty()) fprintf(stderr, "%s\n", lost.c_str());
  if (!ok && unwritten_.empty() && *error == last_error_) error->clear();  // said once already
  return ok;
}

bool Session::Flush(std::string* error) {
  if (kernels_started_) cupti::Flush(false);
  std::lock_guard<std::mutex> drain(drain_mutex_);
  if (stopped_) return true;
  return DrainLocked(false, error);
}

bool Session::Stop(std::string* error) {
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
  bool ok;
  {
    std::lock_guard<std::mutex> drain(drain_mutex_);
    ok = WriteFinalLocked({}, error);
  }
  if (kernels_started_) cupti::Stop();
  if (store_) store_->Close();
  return ok;
}

}  // namespace tokentrace
