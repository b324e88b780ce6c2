// A single-producer / single-consumer ring of Events: one per job thread.
//
// Ownership: the job thread that registered the ring is its only producer (Append); the
// background thread is its only consumer (Drain). Neither locks. When the ring passes half
// full the producer wakes the drain once (a burst must not wait for the drain's timer). When
// the ring is full the producer drops the event and bumps `dropped_`, which the consumer
// reports as a loss, or, with the "wait" policy, waits for the drain to make room.
//
//   slots_: [ e0 e1 e2 ... e(cap-1) ]      head_ = next write (producer), tail_ = next read
//            ^tail & mask   ^head & mask    head_ - tail_ <= capacity, both only grow
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/event.h"

namespace tokentrace {

// What producers do at the high-water mark and on a full ring; set by the session.
struct RingPolicy {
  std::atomic<void (*)()> wake{nullptr};  // async-signal-safe wake-up of the drain
  std::atomic<bool> wait_when_full{false};
  std::atomic<bool> drain_running{false};  // waiting makes sense only while a drain runs
};
RingPolicy& Policy();

class ThreadBuffer {
 public:
  // `capacity` is rounded up to a power of two (at least 64).
  ThreadBuffer(uint32_t capacity, uint32_t thread_index);
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  // Producer side. Returns false (and counts a drop) when the ring is full and stays full.
  bool Append(const Event& event) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_cache_ >= high_water_ && !MakeRoom(head)) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    slots_[head & mask_] = event;
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // Consumer side: calls fn(const Event&) for every event written so far, in order.
  template <typename Fn>
  uint64_t Drain(Fn&& fn) {
    return DrainUpTo(UINT64_MAX, fn);
  }

  // Consumer side: the same for at most `max` events (the oldest); returns how many.
  template <typename Fn>
  uint64_t DrainUpTo(uint64_t max, Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    const uint64_t end = head - tail > max ? tail + max : head;
    for (uint64_t i = tail; i != end; ++i) fn(slots_[i & mask_]);
    tail_.store(end, std::memory_order_release);
    return end - tail;
  }

  // Consumer side: events written and not yet drained.
  uint64_t Pending() const {
    return head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_relaxed);
  }

  // Consumer side: drops counted since the last call.
  uint64_t TakeDropped() { return dropped_.exchange(0, std::memory_order_relaxed); }

  // Discards everything (only when no producer can run: fork child, tests).
  void ResetUnsafe() {
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    tail_cache_ = 0;
    woke_ = false;
    dropped_.store(0, std::memory_order_relaxed);
  }

  uint32_t thread_index() const { return thread_index_; }
  uint32_t capacity() const { return static_cast<uint32_t>(capacity_); }

  // Set by the producer's thread-exit hook; the consumer frees the ring after a last drain.
  std::atomic<bool> retired{false};

 private:
  // The slow path of Append, past the high-water mark of the last known tail: refreshes the
  // tail, wakes the drain once per crossing, and on a full ring waits if the policy says so.
  // True when there is room for one event.
  bool MakeRoom(uint64_t head);

  const uint64_t capacity_;
  const uint64_t high_water_;  // capacity / 2
  bool woke_ = false;          // producer: the drain was woken since the ring last emptied
  const uint64_t mask_;
  const uint32_t thread_index_;
  std::unique_ptr<Event[]> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};
  uint64_t tail_cache_ = 0;  // producer's last view of tail_
  alignas(64) std::atomic<uint64_t> tail_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace tokentrace
