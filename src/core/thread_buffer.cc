#include "core/thread_buffer.h"

#include <time.h>

namespace tokentrace {
namespace {
uint64_t RoundUpPow2(uint32_t n) {
  uint64_t c = 64;
  while (c < n) c <<= 1;
  return c;
}
}  // namespace

ThreadBuffer::ThreadBuffer(uint32_t capacity, uint32_t thread_index)
    : capacity_(RoundUpPow2(capacity)),
      high_water_(capacity_ / 2),
      mask_(capacity_ - 1),
      thread_index_(thread_index),
      slots_(new Event[capacity_]) {}

RingPolicy& Policy() {
  static RingPolicy policy;
  return policy;
}

bool ThreadBuffer::MakeRoom(uint64_t head) {
  RingPolicy& policy = Policy();
  tail_cache_ = tail_.load(std::memory_order_acquire);
  if (head - tail_cache_ < high_water_) {
    woke_ = false;
    return true;
  }
  auto wake = [&] {
    if (void (*fn)() = policy.wake.load(std::memory_order_relaxed)) fn();
  };
  if (!woke_) {
    woke_ = true;
    wake();
  }
  if (head - tail_cache_ < capacity_) return true;
  // Full. Waiting (for complete traces) throttles this thread to the writer's pace; it gives
  // up, and the event is dropped and counted, when no drain runs or none frees room for
  // kMaxStallNs (a stuck writer must not hang the job).
  constexpr int64_t kPauseNs = 50 * 1000;
  constexpr int64_t kMaxStallNs = 2000 * 1000 * 1000LL;
  for (int64_t stalled = 0;
       policy.wait_when_full.load(std::memory_order_relaxed) &&
       policy.drain_running.load(std::memory_order_acquire) && stalled < kMaxStallNs;
       stalled += kPauseNs) {
    wake();
    const timespec pause{0, kPauseNs};
    nanosleep(&pause, nullptr);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    if (tail != tail_cache_) stalled = 0;  // the drain is making progress
    tail_cache_ = tail;
    if (head - tail_cache_ < capacity_) return true;
  }
  return false;
}

}  // namespace tokentrace
