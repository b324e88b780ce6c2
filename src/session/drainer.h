// The drain and write path of a session: the threads' rings and the CUPTI buffers handed over
// go through the joiner (core/joiner.h) into batches, with the drain's loss counts, and the
// batches into the file. The file is opened lazily (a preloaded process that never records
// leaves none), its meta rows go first, and what a failed write (a full disk) could not store
// is counted and retried with the next write (core/unwritten.h).
//
// Memory: no exception leaves it. An event the joiner has no memory for is dropped, a chunk
// that cannot be built or written for want of memory is dropped, and both are counted as
// no_memory (events); the loop calls again later and what fits then is written.
//
// Its collaborators come in as plain parts, so a test drives it with hand-built rings and
// buffers and a store in a temporary directory; preload/session.cc gives it the process's
// rings, the CUPTI handoff and the file claim. Not thread-safe: one drain at a time (the caller's
// lock).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/drain_budget.h"
#include "core/joiner.h"
#include "core/thread_buffer.h"
#include "core/unwritten.h"
#include "session/activity_handoff.h"
#include "session/losses.h"
#include "session/meta_rows.h"
#include "store/store.h"

namespace tokentrace {

// Events the drains have seen, for the meta rows and the notice at exit.
struct DrainCounts {
  uint64_t drained = 0;  // read from the rings
  uint64_t dropped = 0;  // dropped on full rings
  uint64_t left = 0;     // left in the rings at a signal stop's deadline
  uint64_t events() const { return drained + dropped + left; }
};

struct DrainParts {
  // Calls its argument for every thread's ring (core/buffer_registry.h's ForEach).
  std::function<void(const std::function<void(ThreadBuffer&)>&)> rings;
  // The session's generation: ring events of another are skipped (core/recorder.h).
  std::function<uint8_t()> generation;
  ActivityHandoff* activities = nullptr;  // CUPTI's completed buffers
  Joiner* joiner = nullptr;
  // Creates the file at the first write that has rows; null (and *error) when it cannot.
  std::function<std::unique_ptr<Store>(std::string* error)> open_store;
  // The session's meta rows, given the events seen so far.
  std::function<MetaRowList(const DrainCounts&)> meta;
  // The process-wide loss counters taken once per drain.
  std::vector<LossSource> loss_sources;
  // Called before each drain (clock::Calibrate).
  std::function<void()> calibrate = [] {};
  // For tests only (TOKENTRACE_TEST_SLOW_DRAIN_MS): a drain takes at most one step of each
  // ring and then sleeps this long, as does every step of a signal stop's drain.
  int slow_drain_ms = 0;
  // The most events a bounded (or slowed) drain takes from a ring per step.
  uint64_t step_events = 16384;
  // The most events a drain takes from a ring before it writes them (a chunk).
  uint64_t chunk_events = 65536;
  // True when the drain should stop after the chunk it has written (a termination signal
  // asked for the stop); what is left is taken by the next drain.
  std::function<bool()> interrupted;
  // Moves what the Python layer handed over since the last call into the batch (its rows,
  // meta and losses: session/added_rows.h); after each chunk's rings, so the rows of every
  // call a chunk closes are in that chunk or an earlier one.
  std::function<void(Batch*)> added = [](Batch*) {};
  // Says a line to the user (what happened to the file: Store::TakeNotice).
  std::function<void(const std::string&)> say = [](const std::string& line) {
    fprintf(stderr, "%s\n", line.c_str());
  };
};

class Drainer {
 public:
  explicit Drainer(DrainParts parts) : parts_(std::move(parts)) {}

  // A file opened before the first drain (a session started in-process).
  void SetStore(std::unique_ptr<Store> store) { store_ = std::move(store); }
  Store* store() { return store_.get(); }

  // Drains the rings and the handed-over buffers and writes them, in chunks (each written
  // before the next is taken). `final`: calls still open are closed (counted as unclosed_range).
  // False (and *error, the first failure) when a write failed.
  bool Drain(bool final, std::string* error);
  // A signal stop's drain, in steps until the rings are empty or `budget`'s deadline; what is
  // left is counted as `signal_deadline`. A failed step is counted and retried at the end.
  void DrainSteps(DrainBudget* budget);
  // The final drain, then the meta rows (plus `extra_meta`) and, if the disk is still full,
  // the loss counts alone, in the space the store set aside.
  bool WriteFinal(const MetaRowList& extra_meta, std::string* error);

  const DrainCounts& counts() const { return counts_; }
  bool all_written() const { return unwritten_.empty(); }
  // Events dropped for want of memory and not yet counted in the file.
  uint64_t no_memory() const { return no_memory_; }

 private:
  // The rings into `batch` (all of each ring, or a step with `budget`); returns the events
  // dropped on full rings since the last drain.
  uint64_t TakeRings(Batch* batch, DrainBudget* budget);
  bool Write(Batch& batch, std::string* error);
  // The no_memory count not yet in a written (or counted) batch, into `batch`; returns it.
  uint64_t AddNoMemory(Batch* batch);
  void SleepSlow() const;

  DrainParts parts_;
  std::unique_ptr<Store> store_;
  Unwritten unwritten_;  // what failed writes could not store
  DrainCounts counts_;
  bool meta_written_ = false;
  uint64_t no_memory_ = 0;  // events dropped for want of memory, not yet in the file's losses
};

}  // namespace tokentrace
