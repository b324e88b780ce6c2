// The handoff from CUPTI's buffer thread to the background drain: the session's ActivitySink.
// Completed activity buffers wait here, whole and unread, until the next drain walks them and
// joins their records to calls (core/joiner.h); so does the count of the records CUPTI
// dropped.
//
// What is copied, where:
//  - CUPTI's buffer thread copies nothing: OnBuffer links the buffer into a list (one
//    compare-and-swap) and returns.
//  - The drain's thread walks each buffer (ActivityBuffer::ForEach) and converts one record
//    at a time into a GpuActivity on its stack, which the joiner turns into a row. A kernel's
//    name is read in place: it stays valid until the buffer is released, right after its
//    walk, and the joiner copies it only the first time it sees that name.
//
// Why no lock: the producers only push onto a singly-linked list (compare-and-swap on head_),
// and the one consumer takes the whole list at once (exchange with null), so neither ever
// waits for the other and no node is touched by two threads at a time (no ABA: nothing pops
// single nodes). The list is newest-first; Take() reverses it, so buffers are walked in the
// order they were handed over. The release of the push and the acquire of the take order
// CUPTI's writes into a buffer before the drain's reads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/activity_sink.h"

namespace tokentrace {

class ActivityHandoff final : public ActivitySink {
 public:
  // What one Take() took: buffers in the order they were handed over. Releases whatever it
  // still holds when destroyed.
  class Taken {
   public:
    Taken() = default;
    Taken(Taken&& other) noexcept : first_(other.first_) { other.first_ = nullptr; }
    Taken& operator=(Taken&&) = delete;
    ~Taken();

    // Walks every buffer, oldest first, calling on_record(const GpuActivity&) for each of
    // its records, and releases each buffer once walked: a name is valid during its record's
    // call only. Returns the records walked; a second call finds nothing.
    template <typename F>
    size_t ForEach(F&& on_record) {
      size_t records = 0;
      while (first_ != nullptr) {
        ActivityBuffer* b = first_;
        first_ = b->next;
        records += b->ForEach(on_record);
        b->Release();
      }
      return records;
    }
    bool empty() const { return first_ == nullptr; }
    size_t buffers() const;

   private:
    friend class ActivityHandoff;
    ActivityBuffer* first_ = nullptr;  // oldest first, linked through ActivityBuffer::next
  };

  ActivityHandoff() = default;
  ActivityHandoff(const ActivityHandoff&) = delete;
  ActivityHandoff& operator=(const ActivityHandoff&) = delete;
  // Releases the buffers no drain took (those CUPTI completed after the final drain).
  ~ActivityHandoff() override;

  // Any thread, several at once (CUPTI's buffer threads): the handoff owns `buffer` now.
  void OnBuffer(ActivityBuffer* buffer) override;
  // Any thread: CUPTI dropped `records` (counted as cupti_dropped by the next drain).
  void OnDropped(uint64_t records) override {
    if (records != 0) dropped_.fetch_add(records, std::memory_order_relaxed);
  }

  // The drain's thread: every buffer handed over so far. Taken before the rings are drained,
  // so that a record's launch event (written before its buffer was completed) is in the same
  // drain.
  Taken Take();
  // The drain's thread: the records dropped since the last call.
  uint64_t TakeDropped() { return dropped_.exchange(0, std::memory_order_relaxed); }

 private:
  std::atomic<ActivityBuffer*> head_{nullptr};  // newest first
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace tokentrace
