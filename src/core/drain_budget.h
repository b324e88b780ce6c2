// The final drain of a signal stop, bounded in wall-clock time: the termination-signal
// handler waits only so long (kSignalWaitNs) before the job dies by the signal, and with large
// rings or a slow disk the whole final write may not fit. The drain then writes what fits:
// it takes events from the rings in steps (each step is written before the next is taken)
// until the deadline, and counts what it leaves in the rings as `signal_deadline` losses, so
// the last, small write (meta, loss counts) still fits before the handler stops waiting.
#ifndef TOKENTRACE_CORE_DRAIN_BUDGET_H_
#define TOKENTRACE_CORE_DRAIN_BUDGET_H_

#include <cstdint>
#include <functional>

#include "core/thread_buffer.h"

namespace tokentrace {

// How long the termination-signal handler waits for the final write, and how much of that the
// bounded drain may use: the rest is for the last write (meta and loss counts).
constexpr int64_t kSignalWaitNs = int64_t{5000} * 1000000;
constexpr int64_t kSignalDrainNs = int64_t{4000} * 1000000;

class DrainBudget {
 public:
  // `step`: the most events taken from one ring per step.
  DrainBudget(int64_t deadline_ns, std::function<int64_t()> now_ns, uint64_t step)
      : deadline_ns_(deadline_ns), now_ns_(std::move(now_ns)), step_(step) {}

  // Calls step() (which calls Take for every ring) until the rings are empty or the deadline
  // has passed, and pause() between steps; the step after the deadline discards and counts
  // what is left, so the rings end empty.
  void Run(const std::function<void()>& step, const std::function<void()>& pause) {
    for (;;) {
      const bool open = Open();
      step();
      if (!(Again() && open)) return;
      pause();
    }
  }

  // Before each step: false once the deadline has passed (stays false).
  bool Open() {
    if (!expired_ && now_ns_() >= deadline_ns_) expired_ = true;
    return !expired_;
  }

  // One step on one ring: while open, up to `step` events go to fn; once closed, the ring's
  // events are discarded and counted. Returns the events given to fn.
  template <typename Fn>
  uint64_t Take(ThreadBuffer& ring, Fn&& fn) {
    if (expired_) {
      left_ += ring.DrainUpTo(UINT64_MAX, [](const Event&) {});
      return 0;
    }
    const uint64_t taken = ring.DrainUpTo(step_, fn);
    if (ring.Pending() > 0) more_ = true;
    return taken;
  }

  // After a step over every ring: true when another step is needed (a ring still held events
  // and the deadline has not passed). Resets the "more" mark for the next step.
  bool Again() {
    const bool again = more_;
    more_ = false;
    return again;
  }

  bool expired() const { return expired_; }
  // Events left in the rings at the deadline (the `signal_deadline` loss).
  uint64_t TakeLeft() {
    const uint64_t n = left_;
    left_ = 0;
    return n;
  }

 private:
  const int64_t deadline_ns_;
  const std::function<int64_t()> now_ns_;
  const uint64_t step_;
  bool expired_ = false;
  bool more_ = false;
  uint64_t left_ = 0;
};

}  // namespace tokentrace

#endif  // TOKENTRACE_CORE_DRAIN_BUDGET_H_
