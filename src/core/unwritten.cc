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
  int64_t calls = 0;
  for (const CallRow& c : failed.calls) {
    const bool open = c.cpu_end_ns == -1;
    if (open_in_file_.count(c.id) != 0) {  // the file has it (open): not lost
      if (!open) open_in_file_.erase(c.id);
    } else if (open_counted_.count(c.id) != 0) {  // counted when its open row failed
      if (!open) open_counted_.erase(c.id);
    } else {
      ++calls;
      if (open) open_counted_.insert(c.id);
    }
  }
  const std::pair<const char*, int64_t> rows[] = {
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_CALLS), calls},
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_KERNELS), kernels},
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_ESCAPES),
       static_cast<int64_t>(failed.escapes.size())},
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_OUTPUTS),
       static_cast<int64_t>(failed.outputs.size())},
      {LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_LINKS),
       static_cast<int64_t>(failed.links.size())}};
  for (const auto& [kind, n] : rows) {
    if (n > 0) kept_.losses[kind] += n;
  }
  for (const AddedRows& added : failed.added) {  // the Python layer's, by table
    if (added.rows() > 0) {
      kept_.losses[LossKindName(RowTableLoss(added.table))] += static_cast<int64_t>(added.rows());
    }
  }
  calls_total_ += calls;
  for (const auto& [kind, n] : failed.losses) kept_.losses[kind] += n;
  Append(kept_.sites, failed.sites);
  Append(kept_.strings, failed.strings);
  Append(kept_.meta, failed.meta);
}

void Unwritten::Uncount(uint64_t call_id) {
  if (open_counted_.erase(call_id) == 0) return;
  // The count may already be in the file: the losses table adds what each write carries.
  kept_.losses[LossKindName(TOKENTRACE_LOSS_WRITE_FAILED_CALLS)] -= 1;
  --calls_total_;
}

void Unwritten::Written(const Batch& batch) {
  for (const CallRow& c : batch.calls) {
    Uncount(c.id);  // counted lost, but the file has it now
    if (c.cpu_end_ns == -1) {
      open_in_file_.insert(c.id);
    } else {
      open_in_file_.erase(c.id);
    }
  }
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
