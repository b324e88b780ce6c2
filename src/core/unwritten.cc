#include "core/unwritten.h"

#include <utility>

namespace tokentrace {

namespace {
template <typename T>
void Append(std::vector<T>& to, std::vector<T>& from) {
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}
}  // namespace

void Unwritten::Add(Batch&& failed) {
  int64_t kernels = 0;
  for (const CallGpuDelta& d : failed.call_gpu) kernels += d.kernels;  // every mode but off
  const std::pair<const char*, int64_t> rows[] = {
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_CALLS), static_cast<int64_t>(failed.calls.size())},
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_KERNELS), kernels},
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_ESCAPES),
       static_cast<int64_t>(failed.escapes.size())},
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_OUTPUTS),
       static_cast<int64_t>(failed.outputs.size())}};
  for (const auto& [kind, n] : rows) {
    if (n > 0) kept_.losses[kind] += n;
  }
  calls_total_ += static_cast<int64_t>(failed.calls.size());
  for (const auto& [kind, n] : failed.losses) kept_.losses[kind] += n;
  Append(kept_.sites, failed.sites);
  Append(kept_.strings, failed.strings);
  Append(kept_.meta, failed.meta);
}

void Unwritten::MoveInto(Batch* next) {
  for (const auto& [kind, n] : kept_.losses) next->losses[kind] += n;
  // Kept rows first: a newer meta value of the same key must win.
  Append(kept_.sites, next->sites);
  Append(kept_.strings, next->strings);
  Append(kept_.meta, next->meta);
  next->sites = std::move(kept_.sites);
  next->strings = std::move(kept_.strings);
  next->meta = std::move(kept_.meta);
  kept_ = Batch();
}

Batch Unwritten::LossesOnly() const {
  Batch b;
  b.losses = kept_.losses;
  return b;
}

}  // namespace tokentrace
