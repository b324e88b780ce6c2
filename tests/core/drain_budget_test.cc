#include "core/drain_budget.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace tokentrace {
namespace {

constexpr int64_t kMs = 1000000;

Event Numbered(uint64_t seq) { return MakeEvent(EventKind::kPush, 0, seq, 0, 0, 0, 0, 0, 0); }

std::vector<std::unique_ptr<ThreadBuffer>> Rings(uint32_t count, uint32_t capacity) {
  std::vector<std::unique_ptr<ThreadBuffer>> rings;
  for (uint32_t t = 0; t < count; ++t) rings.push_back(std::make_unique<ThreadBuffer>(capacity, t));
  return rings;
}

// Rings of `events` each, drained by budget.Run as the session's signal stop drains them;
// every event taken costs `cost` on the fake clock. Returns the events taken.
uint64_t RunOnRings(std::vector<std::unique_ptr<ThreadBuffer>>& rings, uint64_t events,
                    DrainBudget& budget, int64_t& now, int64_t cost, int* steps) {
  for (auto& ring : rings) {
    for (uint64_t i = 0; i < events; ++i) EXPECT_TRUE(ring->Append(Numbered(i)));
  }
  uint64_t taken = 0;
  budget.Run(
      [&] {
        for (auto& ring : rings) taken += budget.Take(*ring, [&](const Event&) { now += cost; });
      },
      [&] { ++*steps; });
  return taken;
}

// A signal stop with more in the rings than can be written before the deadline:
// the drain stops taking events at the deadline, and every event it leaves is counted.
TEST(DrainBudgetTest, StopsAtTheDeadlineAndCountsWhatItLeaves) {
  auto rings = Rings(3, 4096);
  int64_t now = 0;
  int steps = 0;
  DrainBudget budget(
      1000 * kMs, [&] { return now; }, 100);
  const uint64_t taken = RunOnRings(rings, 4000, budget, now, kMs, &steps);
  EXPECT_TRUE(budget.expired());
  // Steps of 3 x 100 events at 1 ms each: the deadline passes during the 4th step, the 5th
  // takes nothing.
  EXPECT_EQ(taken, 1200u);
  EXPECT_EQ(steps, 4);
  EXPECT_LE(now, 1300 * kMs);  // at most one step past the deadline
  EXPECT_EQ(taken + budget.TakeLeft(), 3u * 4000);
  EXPECT_EQ(budget.TakeLeft(), 0u);
  for (auto& ring : rings) EXPECT_EQ(ring->Pending(), 0u);
}

// Within the deadline everything is taken and nothing is counted as left.
TEST(DrainBudgetTest, TakesEverythingWhenItFits) {
  auto rings = Rings(2, 4096);
  int64_t now = 0;
  int steps = 0;
  DrainBudget budget(
      1000 * kMs, [&] { return now; }, 1000);
  EXPECT_EQ(RunOnRings(rings, 2500, budget, now, 1, &steps), 5000u);
  EXPECT_FALSE(budget.expired());
  EXPECT_EQ(budget.TakeLeft(), 0u);
  EXPECT_EQ(steps, 2);  // 1000 + 1000 + 500 per ring
}

// A deadline already passed when the stop begins: nothing is taken, all is counted.
TEST(DrainBudgetTest, PastDeadlineTakesNothingAndCountsAll) {
  auto rings = Rings(1, 128);
  int64_t now = 5 * kMs;
  int steps = 0;
  DrainBudget budget(
      kMs, [&] { return now; }, 16);
  EXPECT_EQ(RunOnRings(rings, 100, budget, now, 0, &steps), 0u);
  EXPECT_EQ(budget.TakeLeft(), 100u);
  EXPECT_EQ(steps, 0);
}

}  // namespace
}  // namespace tokentrace
