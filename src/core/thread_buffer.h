// A single-producer / single-consumer ring of Events: one per job thread.
//
// Ownership: the job thread that registered the ring is its only producer (Append); the
// background thread is its only consumer (Drain). Neither locks. When the ring is full the
// producer drops the event and bumps `dropped_`, which the consumer reports as a loss.
//
//   slots_: [ e0 e1 e2 ... e(cap-1) ]      head_ = next write (producer), tail_ = next read
//            ^tail & mask   ^head & mask    head_ - tail_ <= capacity, both only grow
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/event.h"

namespace tokentrace {

class ThreadBuffer {
 public:
  // `capacity` is rounded up to a power of two (at least 64).
  ThreadBuffer(uint32_t capacity, uint32_t thread_index);
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  // Producer side. Returns false (and counts a drop) when the ring is full.
  bool Append(const Event& event) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_cache_ >= capacity_) {
      tail_cache_ = tail_.load(std::memory_order_acquire);
      if (head - tail_cache_ >= capacity_) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
    slots_[head & mask_] = event;
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // Consumer side: calls fn(const Event&) for every event written so far, in order.
  template <typename Fn>
  uint64_t Drain(Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    for (uint64_t i = tail; i != head; ++i) fn(slots_[i & mask_]);
    tail_.store(head, std::memory_order_release);
    return head - tail;
  }

  // Consumer side: drops counted since the last call.
  uint64_t TakeDropped() { return dropped_.exchange(0, std::memory_order_relaxed); }

  // Discards everything (only when no producer can run: fork child, tests).
  void ResetUnsafe() {
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
    tail_cache_ = 0;
    dropped_.store(0, std::memory_order_relaxed);
  }

  uint32_t thread_index() const { return thread_index_; }
  uint32_t capacity() const { return static_cast<uint32_t>(capacity_); }

  // Set by the producer's thread-exit hook; the consumer frees the ring after a last drain.
  std::atomic<bool> retired{false};

 private:
  const uint64_t capacity_;
  const uint64_t mask_;
  const uint32_t thread_index_;
  std::unique_ptr<Event[]> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};
  uint64_t tail_cache_ = 0;  // producer's last view of tail_
  alignas(64) std::atomic<uint64_t> tail_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace tokentrace
