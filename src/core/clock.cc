#include "core/clock.h"

#include <atomic>
#include <mutex>

namespace tokentrace::clock {
namespace {

// Calibration: ns = base_ns + (ticks - base_ticks) * ns_per_tick. The reference pair is
// written only by Calibrate() (background thread) under a mutex and read under it too: the
// readers are the background thread and tests, never the hot path.
struct Calibration {
  uint64_t base_ticks = 0;
  int64_t base_ns = 0;
  double ns_per_tick = 1.0;
  uint64_t start_ticks = 0;
  int64_t start_ns = 0;
};

std::mutex& Mutex() {
  static std::mutex m;
  return m;
}

Calibration& State() {
  static Calibration c = [] {
    Calibration init;
    init.start_ticks = init.base_ticks = RawTicks();
    init.start_ns = init.base_ns = HostNowNs();
    return init;
  }();
  return c;
}

}  // namespace

void LockForFork() { Mutex().lock(); }
void UnlockAfterFork() { Mutex().unlock(); }

void Calibrate() {
#if defined(__x86_64__)
  std::lock_guard<std::mutex> lock(Mutex());
  Calibration& c = State();
  // Sample the pair tightly: take the tick read closest to the clock read.
  uint64_t t0 = RawTicks();
  int64_t ns = HostNowNs();
  uint64_t t1 = RawTicks();
  uint64_t ticks = t0 + (t1 - t0) / 2;
  if (ticks > c.start_ticks && ns - c.start_ns > 1000000) {  // need >= 1 ms of baseline
    c.ns_per_tick =
        static_cast<double>(ns - c.start_ns) / static_cast<double>(ticks - c.start_ticks);
  }
  c.base_ticks = ticks;
  c.base_ns = ns;
#endif
}

int64_t TicksToNs(uint64_t ticks) {
#if defined(__x86_64__)
  std::lock_guard<std::mutex> lock(Mutex());
  const Calibration& c = State();
  double delta = static_cast<double>(static_cast<int64_t>(ticks - c.base_ticks)) * c.ns_per_tick;
  return c.base_ns + static_cast<int64_t>(delta);
#else
  return static_cast<int64_t>(ticks);
#endif
}

}  // namespace tokentrace::clock
