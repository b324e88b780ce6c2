// One host clock for every timestamp tokentrace stores.
//
// HostNowNs() is CLOCK_MONOTONIC in nanoseconds. The hot path does not call it: it reads a
// raw tick counter (RawTicks(), rdtsc on x86-64, ~7 ns instead of ~20 ns for the vDSO call)
// and the background thread converts ticks with TicksToNs(), using a calibration taken at
// start and refreshed at every drain. CUPTI's timestamps are put on the same clock by
// registering HostNowNs as CUPTI's timestamp callback (src/cupti).
#pragma once

#include <cstdint>
#include <ctime>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace tokentrace::clock {

inline int64_t HostNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline uint64_t RawTicks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(HostNowNs());
#endif
}

// Around fork() (recorder::BeforeFork): the calibration is whole in the child.
void LockForFork();
void UnlockAfterFork();

// Converts raw ticks to HostNowNs() nanoseconds. Thread-safe; Calibrate() refines the rate.
int64_t TicksToNs(uint64_t ticks);
// Takes a new (ticks, ns) reference point; call from the background thread now and then.
void Calibrate();

}  // namespace tokentrace::clock
