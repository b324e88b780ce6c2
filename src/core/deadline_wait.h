// Waiting, with a bound in wall-clock time, for something another thread does: the
// termination-signal handler waits this way for the background thread's final write.
#ifndef TOKENTRACE_CORE_DEADLINE_WAIT_H_
#define TOKENTRACE_CORE_DEADLINE_WAIT_H_

#include <time.h>

#include <cstdint>

namespace tokentrace {

// Calls nap() until done() or until limit_ns have passed on now_ns(); true when done() was
// seen. The bound is a deadline on the clock, not a count of naps: a nap may last far longer
// than asked (busy threads, a loaded machine, timer slack), and 5000 naps of "1 ms" once took
// 11.6 s. Async-signal-safe when the callables are.
template <typename Done, typename NowNs, typename Nap>
bool WaitUntilDone(Done done, NowNs now_ns, Nap nap, int64_t limit_ns) {
  const int64_t deadline = now_ns() + limit_ns;
  while (!done()) {
    if (now_ns() >= deadline) return false;
    nap();
  }
  return true;
}

// CLOCK_MONOTONIC in ns; clock_gettime is async-signal-safe.
inline int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace tokentrace

#endif  // TOKENTRACE_CORE_DEADLINE_WAIT_H_
