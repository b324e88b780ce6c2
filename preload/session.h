// A recording session: the composition root that wires the hot path (core/recorder), the
// background drain (session/drainer.h), CUPTI (src/cupti) and the file (src/store) to the
// process: its threads, signals, fork and exit. What needs no process (the drain and write
// path, the CUPTI buffer handoff, loss collection, claiming the file, the flush policy, the meta
// rows) is in src/session/.
//
// Threads: Start/Stop/Flush are called by the controlling thread (constructor, exit hook, C
// API); CUPTI's buffer thread hands its completed buffers to activities_ (the sink,
// session/activity_handoff.h: lock-free); everything else runs on the background thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/joiner.h"
#include "core/kernels_off.h"
#include "core/launch_meta.h"
#include "session/activity_handoff.h"
#include "session/drainer.h"
#include "session/meta_rows.h"
#include "session/once_per_second.h"

namespace tokentrace {

class Session {
 public:
  // `preload`: started by the library constructor; CUPTI then starts from the CUDA
  // injection entry point (cuInit) instead of right away, and the file is created only once
  // the process records something (so helper processes that inherit LD_PRELOAD leave none).
  static std::unique_ptr<Session> Start(const Config& config, bool preload, std::string* error);
  ~Session();

  // Enables CUPTI now (in-process start, or the CUDA injection entry point).
  void StartKernels();
  // Drains rings and CUPTI now and commits.
  bool Flush(std::string* error);
  // Final drain, closes open calls, writes and closes the file, with `extra_meta` among the
  // final meta rows (e.g. exit_exec). Idempotent.
  bool Stop(std::string* error, const MetaRowList& extra_meta = {});

  // Async-signal-safe: the job is being terminated by `sig`. Asks the running session's
  // background thread to write what it has (closing open calls; CUPTI is neither flushed nor
  // stopped, the interrupted thread may hold its locks: only the buffers CUPTI already handed
  // over are walked, with its parse helper cuptiActivityGetNextRecord) and close the file.
  // Returns at once; false when no session's background thread is running to do it.
  static bool RequestStopFromSignal(int sig);
  // Async-signal-safe: true once that stop has finished.
  static bool StopFromSignalDone();
  // In a fork child, before its own session starts: the wake-up channel is the parent's.
  static void AfterForkInChild();
  // Around fork() in the parent (pthread_atfork): no fork while a drain runs or a file is
  // being claimed, so the child finds SQLite's locks and memory as no thread is using them.
  static void BeforeFork();
  static void AfterForkInParent();

  // The file this session writes. In preload mode it is settled when the file is created
  // (the first write), where another process of the same run may already own the path.
  std::string out_path() const;
  std::string kernels_status() const;
  KernelsOff kernels_off() const;

 private:
  Session(const Config& config, bool preload, std::string out_path);
  void Loop();
  void StopFromSignal(int sig);
  // The final write (drainer_.WriteFinal) and the notice of events lost on full rings;
  // requires drain_mutex_.
  bool WriteFinalLocked(const MetaRowList& extra_meta, std::string* error);
  void SetKernelsStatus(const std::string& status, KernelsOff kind);
  MetaRowList MetaRows(const DrainCounts& counts) const;
  // The drainer's collaborators: this process's rings, CUPTI queue, clock and file claim.
  DrainParts ProcessDrainParts();

  const Config config_;
  const bool preload_;
  std::unique_ptr<Store> OpenStoreLocked(std::string* error);  // requires drain_mutex_

  mutable std::mutex path_mutex_;  // out_path_ may change once, at the first write (preload)
  std::string out_path_;
  const std::string run_id_;                           // TOKENTRACE_RUN_ID ("" when not preloaded)
  const LaunchInfo launch_ = LaunchFromEnvironment();  // rank, host, launch id (meta)
  const ClockAnchor start_anchor_ = TakeClockAnchor();
  Joiner joiner_;
  ActivityHandoff activities_;  // CUPTI's buffer thread -> background thread (cupti's sink)
  Drainer drainer_;             // rings and records -> file (drain_mutex_)
  bool stopped_ = false;
  std::atomic<bool> kernels_started_{false};  // set by StartKernels (any thread), read by Loop
  OncePerSecond cupti_flush_due_{config_.flush_ms};  // background thread only
  OncePerSecond checkpoint_due_{config_.flush_ms};   // background thread only
  std::string last_error_;

  // One drain at a time (background thread, Flush, Stop). Process-wide, so that fork() can
  // take it (BeforeFork): a child is never made while a drain is inside SQLite.
  std::mutex& drain_mutex_;

  mutable std::mutex status_mutex_;
  std::string kernels_status_;                // the detail (meta kernels_status)
  KernelsOff kernels_off_ = KernelsOff::kNo;  // its category (meta kernels_off)

  std::atomic<bool> loop_stop_{false};  // Stop -> background thread (with a wake-up)
  std::thread thread_;
};

}  // namespace tokentrace
