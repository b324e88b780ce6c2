// What the Python layer hands to the writer (tokentrace_add_rows, _add_meta, _add_loss) from
// the job's threads, kept until a drain takes it into the batch it writes next: the rows land
// in the same transaction as the calls recorded before them.
//
// Lock-free both ways (a Treiber stack of owned items): a job's thread stopped by a termination
// signal in the middle of an add never blocks the signal stop's drain, which takes whatever
// was fully added. Adding allocates (on the job's thread, as the Python layer's own rows do);
// taking does not, beyond the batch's vectors.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/records.h"

namespace tokentrace {

struct AddedItem {
  enum class What : uint8_t { kRows, kMeta, kLoss };
  What what = What::kRows;
  AddedRows rows;                             // kRows
  std::string key, value;                     // kMeta
  LossKind loss = TOKENTRACE_LOSS_NO_MEMORY;  // kLoss
  int64_t count = 0;                          // kLoss
  AddedItem* next = nullptr;                  // the queue's link
};

class AddedQueue {
 public:
  AddedQueue() = default;
  ~AddedQueue() { Clear(); }
  AddedQueue(const AddedQueue&) = delete;
  AddedQueue& operator=(const AddedQueue&) = delete;

  // Takes the item; any thread.
  void Push(std::unique_ptr<AddedItem> item);
  // Moves everything added so far into `batch` (rows, meta upserts, loss counts), in the order
  // added; the drain's thread only. On an allocation failure the items not yet moved go back
  // on the queue (relinked, nothing allocated: ahead of any added meanwhile, so a meta key
  // added again in between may then keep the older value) and std::bad_alloc propagates.
  void TakeInto(Batch* batch);
  // Drops what is pending (a new session must not write the last one's rows).
  void Clear();
  bool empty() const { return head_.load(std::memory_order_acquire) == nullptr; }

 private:
  void PushChain(AddedItem* first, AddedItem* last);
  std::atomic<AddedItem*> head_{nullptr};
};

// The process's queue (the C API adds to it, the session's drainer takes from it).
AddedQueue& ProcessAddedQueue();

}  // namespace tokentrace
