// Loss accounting for a drain: the counters that the hot path, the site registry and the
// CUPTI seam keep as process-wide atomics are taken (read and reset) once per drain and added
// to the batch's losses under their kind's name (include/tokentrace/kinds.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/records.h"

namespace tokentrace {

// Adds `count` events of `kind` to the batch (nothing when 0).
void AddLoss(LossKind kind, uint64_t count, Batch* batch);

// One process-wide counter: `take` returns what it counted since its last call and resets it.
struct LossSource {
  LossKind kind;
  uint64_t (*take)();
};

// The counters of src/core: unbalanced pops, depth overflows, events after thread exit
// (core/recorder.h) and site overflows (core/site_registry.h).
std::span<const LossSource> CoreLossSources();

// Takes every source once and adds what it counted to the batch.
void TakeLosses(std::span<const LossSource> sources, Batch* batch);

// The line said at the end of a session whose threads' rings dropped events (`dropped` of
// `drained + dropped`), "" when none were dropped. `wait_when_full`: --on-full wait was on.
std::string BufferFullNotice(uint64_t drained, uint64_t dropped, bool wait_when_full);

}  // namespace tokentrace
