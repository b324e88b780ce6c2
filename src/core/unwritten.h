// What a failed write (a full disk) could not store. The rows are gone; they are counted as
// losses ("write_failed_calls", ..._kernels, ..._escapes, ..._outputs, ..._links, and the
// Python layer's rows by table: ..._inputs, ..._saved, ..._escape_sites, ..._steps,
// ..._requests, kinds.h TOKENTRACE_ROW_TABLES) and the counts, the
// loss counters the batch carried and the rows that later rows refer to (sites, kernel
// names) are kept for the next write, so a file written after space returns, or at exit in
// the smallest write that fits, still says what is missing.
#pragma once

#include <cstdint>
#include <unordered_set>

#include "core/records.h"

namespace tokentrace {

class Unwritten {
 public:
  // `failed` was not written (its transaction was rolled back): keeps what must be retried.
  void Add(Batch&& failed);
  // `batch` was written. A token call is written open at a drain and again when it closes
  // (joiner.cc), so one call can fail once and reach the file later, or reach the file open
  // and then fail closed: each call is counted in write_failed_calls at most once, and only
  // while the file has no row of it.
  void Written(const Batch& batch);
  // Moves what is kept into `next` (the next write); if that write fails too, Add it again.
  void MoveInto(Batch* next);
  // Only the loss counters, for the smallest write at exit.
  Batch LossesOnly() const;
  bool empty() const { return kept_.empty(); }
  // Calls not written since the session began (for the message at exit).
  int64_t calls() const { return calls_total_; }

 private:
  void Uncount(uint64_t call_id);

  Batch kept_;  // sites, strings, losses and meta
  int64_t calls_total_ = 0;
  std::unordered_set<uint64_t> open_in_file_;  // open rows the file has (a few tokens)
  std::unordered_set<uint64_t> open_counted_;  // open rows counted as write_failed_calls
};

}  // namespace tokentrace
