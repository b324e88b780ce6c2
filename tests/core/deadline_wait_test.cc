#include "core/deadline_wait.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tokentrace {
namespace {

constexpr int64_t kMs = 1000000;

// The signal handler once waited 5000 naps of 1 ms; with busy threads each nap lasted
// longer and a SIGTERM took 11.6 s to end the job. Here every nap oversleeps
// tenfold: the wait must still end at its deadline, not after 5000 naps.
TEST(DeadlineWaitTest, EndsAtTheDeadlineWhenNapsOversleep) {
  int64_t now = 0;
  int naps = 0;
  const bool done = WaitUntilDone([] { return false; }, [&] { return now; },
                                  [&] { now += 10 * kMs, ++naps; }, 5000 * kMs);
  EXPECT_FALSE(done);
  EXPECT_GE(now, 5000 * kMs);
  EXPECT_LE(now, 5010 * kMs);  // at most one nap past the deadline
  EXPECT_EQ(naps, 500);
}

TEST(DeadlineWaitTest, ReturnsAsSoonAsTheWorkIsDone) {
  int64_t now = 0;
  int naps = 0;
  const bool done = WaitUntilDone([&] { return naps == 3; }, [&] { return now; },
                                  [&] { now += kMs, ++naps; }, 5000 * kMs);
  EXPECT_TRUE(done);
  EXPECT_EQ(now, 3 * kMs);
}

TEST(DeadlineWaitTest, WorkAlreadyDoneNeedsNoNap) {
  int naps = 0;
  EXPECT_TRUE(WaitUntilDone([] { return true; }, [] { return int64_t{0}; }, [&] { ++naps; }, 0));
  EXPECT_EQ(naps, 0);
}

TEST(DeadlineWaitTest, MonotonicClockAdvances) {
  const int64_t a = MonotonicNs();
  const timespec step{0, 2 * kMs};
  nanosleep(&step, nullptr);
  EXPECT_GE(MonotonicNs() - a, 2 * kMs);
}

}  // namespace
}  // namespace tokentrace
