// One recorded process (recorded.h) made into a tokentrace file, through the joiner, store and
// summaries a live run uses: its ranges become push and pop events of their threads, its API
// calls launch events with the trace's correlation ids, its GPU records GPU activities, all
// given to a Joiner in the order of their times and written to a Store in drains.
//
// What a live run's recorder does on the job's thread is done here from the recorded times:
// each thread's open ranges (a range is inside the one below it on the stack when it ends
// no later than that one; a range that outlives the one below closes it first), call ids,
// parents, and tokens (a call of a token site, when no token call is open on its thread,
// starts the next token; every other call and launch is in the current token). So a launch
// belongs to the innermost range open on its thread when it began (a range open from b to e
// holds a launch at t when b <= t <= e; the later begin, then the earlier end, is the inner).
//
// Counted: GPU records whose launch is not in the trace (unknown_correlation, the joiner's),
// records of launches no range held (import_outside_ranges).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "import/recorded.h"
#include "store/store.h"

namespace tokentrace::import {

struct ImportOptions {
  KernelMode mode;  // the CLI's default for an import: full
  // The root site (one call = one token): a range name; "" = the outermost module range that
  // began first (Kineto's `nn.Module: X`), none when the trace has no module ranges (then
  // tokens come from sites::SetTokenRange, or everything is token 0).
  std::string root;
  std::string source;       // the trace file, for the meta rows
  std::string format;       // RecordedTrace::format
  std::string token_range;  // --token-range, for the meta rows (sites::SetTokenRange applies it)
  // Items (events and records) per drain: a drain's batch is written, as a live run's are.
  size_t drain_items = 1 << 16;
};

struct ImportCounts {
  uint64_t calls = 0, launches = 0, records = 0;
  uint64_t no_launch = 0;       // records whose launch is not in the trace
  uint64_t outside_ranges = 0;  // records of launches no range held
  uint32_t tokens = 0;
  std::string root;  // the root site chosen ("" none)
};

// The root ImportProcess takes when ImportOptions::root is "": the module range that began
// first (the longest of those), "" when the process has no module ranges.
std::string ChooseRoot(const RecordedProcess& process);

// What the process's host threads did and when its GPU records arrived, in one order: each
// thread's ranges pushed and popped as described above, its API calls, and the GPU records,
// merged by time (at equal times host steps first; a record never begins before its launch).
// ImportProcess gives these steps to a joiner; the live replay of the CUPTI path
// (tests/import/cupti_replay.cc) performs them on threads of its own.
struct ReplayStep {
  enum Kind : uint8_t { kPush, kPop, kLaunch, kRecord } kind;
  uint32_t thread;  // into ReplaySchedule::threads (kRecord: 0)
  uint32_t index;   // into the process's ranges, launches or gpu
};
struct ReplaySchedule {
  std::vector<uint64_t> threads;  // the recorded thread ids, ascending
  std::vector<ReplayStep> steps;
};
// all_launches: every API call of the trace; else only those that have GPU records (the
// others launched nothing an import could attribute).
ReplaySchedule Schedule(const RecordedProcess& process, bool all_launches);

// Writes `process` to `store`; false and *error when a write fails.
bool ImportProcess(const RecordedProcess& process, const ImportOptions& options, Store* store,
                   ImportCounts* counts, std::string* error);

}  // namespace tokentrace::import
