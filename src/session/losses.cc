#include "session/losses.h"

#include <cstdio>

#include "core/recorder.h"
#include "core/site_registry.h"

namespace tokentrace {

void AddLoss(LossKind kind, uint64_t count, Batch* batch) {
  if (count != 0) batch->losses[LossKindName(kind)] += static_cast<int64_t>(count);
}

std::span<const LossSource> CoreLossSources() {
  static constexpr LossSource kSources[] = {
      {TOKENTRACE_LOSS_UNBALANCED_POP, &recorder::TakeUnbalancedPops},
      {TOKENTRACE_LOSS_DEPTH_OVERFLOW, &recorder::TakeDepthOverflows},
      {TOKENTRACE_LOSS_AFTER_THREAD_EXIT, &recorder::TakeAfterThreadExit},
      {TOKENTRACE_LOSS_NO_MEMORY, &recorder::TakeNoMemory},
      {TOKENTRACE_LOSS_SITE_OVERFLOW, &sites::TakeOverflows},
  };
  return kSources;
}

void TakeLosses(std::span<const LossSource> sources, Batch* batch) {
  for (const LossSource& source : sources) AddLoss(source.kind, source.take(), batch);
}

std::string BufferFullNotice(uint64_t drained, uint64_t dropped, bool wait_when_full) {
  if (dropped == 0) return "";
  const uint64_t all = drained + dropped;
  char line[256];
  snprintf(line, sizeof line,
           "tokentrace: %.1f%% of the job's events were lost to full buffers (%llu of %llu, "
           "counted as buffer_full)%s",
           100.0 * static_cast<double>(dropped) / static_cast<double>(all),
           static_cast<unsigned long long>(dropped), static_cast<unsigned long long>(all),
           wait_when_full ? "" : "; --on-full wait keeps every event");
  return line;
}

}  // namespace tokentrace
