#include "session/added_rows.h"

#include <new>

namespace tokentrace {

namespace {

// The list from `first` in the opposite order (relinked in place); returns its new first.
AddedItem* Reversed(AddedItem* first) {
  AddedItem* reversed = nullptr;
  while (first != nullptr) {
    AddedItem* next = first->next;
    first->next = reversed;
    reversed = first;
    first = next;
  }
  return reversed;
}

}  // namespace

void AddedQueue::PushChain(AddedItem* first, AddedItem* last) {
  AddedItem* head = head_.load(std::memory_order_relaxed);
  do {
    last->next = head;
  } while (!head_.compare_exchange_weak(head, first, std::memory_order_release,
                                        std::memory_order_relaxed));
}

void AddedQueue::Push(std::unique_ptr<AddedItem> item) {
  AddedItem* raw = item.release();
  PushChain(raw, raw);
}

void AddedQueue::TakeInto(Batch* batch) {
  // The stack holds the newest first: reversed, the items go in the order they were added.
  AddedItem* ordered = Reversed(head_.exchange(nullptr, std::memory_order_acquire));
  while (ordered != nullptr) {
    AddedItem* item = ordered;
    try {
      switch (item->what) {
        case AddedItem::What::kRows:
          batch->added.push_back(std::move(item->rows));
          break;
        case AddedItem::What::kMeta:
          batch->meta.emplace_back(std::move(item->key), std::move(item->value));
          break;
        case AddedItem::What::kLoss:
          batch->losses[LossKindName(item->loss)] += item->count;
          break;
      }
    } catch (const std::bad_alloc&) {
      // Back on the queue in their order (newest first there), for the next drain.
      AddedItem* last = ordered;
      PushChain(Reversed(ordered), last);
      throw;
    }
    ordered = item->next;
    delete item;
  }
}

void AddedQueue::Clear() {
  AddedItem* taken = head_.exchange(nullptr, std::memory_order_acquire);
  while (taken != nullptr) {
    AddedItem* next = taken->next;
    delete taken;
    taken = next;
  }
}

AddedQueue& ProcessAddedQueue() {
  static AddedQueue* queue = new AddedQueue();  // never destroyed: used by exit hooks
  return *queue;
}

}  // namespace tokentrace
