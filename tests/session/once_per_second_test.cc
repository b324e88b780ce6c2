#include "session/once_per_second.h"

#include <gtest/gtest.h>

namespace tokentrace {
namespace {

// The turns (1-based) among the first `turns` on which the policy says "due".
std::vector<int> DueTurns(int turn_ms, int turns) {
  OncePerSecond policy(turn_ms);
  std::vector<int> due;
  for (int i = 1; i <= turns; ++i) {
    if (policy.Turn()) due.push_back(i);
  }
  return due;
}

TEST(OncePerSecondTest, DueOnEverySecondsWorthOfTurns) {
  EXPECT_EQ(DueTurns(200, 12), (std::vector<int>{5, 10}));  // the default TOKENTRACE_FLUSH_MS
  EXPECT_EQ(DueTurns(300, 9), (std::vector<int>{4, 8}));    // 1200 ms: the first turn past 1 s
  EXPECT_EQ(DueTurns(1000, 3), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(DueTurns(1, 2000), (std::vector<int>{1000, 2000}));
}

TEST(OncePerSecondTest, ANonPositivePeriodCountsAsOneMillisecond) {
  EXPECT_EQ(DueTurns(0, 1000), (std::vector<int>{1000}));
}

}  // namespace
}  // namespace tokentrace
