#include "session/losses.h"

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
      {TOKENTRACE_LOSS_SITE_OVERFLOW, &sites::TakeOverflows},
  };
  return kSources;
}

void TakeLosses(std::span<const LossSource> sources, Batch* batch) {
  for (const LossSource& source : sources) AddLoss(source.kind, source.take(), batch);
}

}  // namespace tokentrace
