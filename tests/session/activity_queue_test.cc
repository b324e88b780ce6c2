#include "session/activity_queue.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace tokentrace {
namespace {

GpuActivity Kernel(uint64_t correlation, const char* name) {
  GpuActivity a;
  a.correlation_id = correlation;
  a.name = name;
  return a;
}

TEST(ActivityQueueTest, KeepsNamesAfterTheDeliveringBufferIsReused) {
  ActivityQueue queue;
  char buffer[64];  // stands for CUPTI's activity buffer, given back after delivery
  const std::vector<std::string> names = {"k", "gemm_kernel_with_a_name_too_long_for_sso", ""};
  for (size_t i = 0; i < names.size(); ++i) {
    snprintf(buffer, sizeof buffer, "%s", names[i].c_str());
    queue.Push(Kernel(i + 1, buffer));
    memset(buffer, 'X', sizeof buffer - 1);
  }
  // Many short names: the queue's storage grows and moves them while they wait.
  for (int i = 0; i < 100; ++i) queue.Push(Kernel(100 + i, "s"));
  std::vector<std::string> seen;
  std::vector<uint64_t> order;
  queue.Take().ForEach([&](const GpuActivity& a) {
    ASSERT_NE(a.name, nullptr);
    seen.emplace_back(a.name);
    order.push_back(a.correlation_id);
  });
  ASSERT_EQ(seen.size(), 103u);
  EXPECT_EQ(seen[0], "k");
  EXPECT_EQ(seen[1], names[1]);
  EXPECT_EQ(seen[2], "");  // an empty name is the queue's own, not the reused buffer's
  EXPECT_EQ(seen[102], "s");
  for (size_t i = 0; i + 1 < order.size(); ++i) EXPECT_LT(order[i], order[i + 1]);
}

TEST(ActivityQueueTest, ARecordWithoutANameStaysWithout) {
  ActivityQueue queue;
  GpuActivity copy = Kernel(7, nullptr);
  copy.kind = GpuOpKind::kMemcpy;
  copy.bytes = 4096;
  copy.copy_kind = 2;
  queue.Push(copy);
  int calls = 0;
  queue.Take().ForEach([&](const GpuActivity& a) {
    ++calls;
    EXPECT_EQ(a.name, nullptr);
    EXPECT_EQ(a.kind, GpuOpKind::kMemcpy);
    EXPECT_EQ(a.bytes, 4096u);
    EXPECT_EQ(a.copy_kind, 2);
    EXPECT_EQ(a.correlation_id, 7u);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ActivityQueueTest, ATakeHoldsWhatWasQueuedBeforeIt) {
  ActivityQueue queue;
  queue.Push(Kernel(1, "a"));
  ActivityQueue::Taken first = queue.Take();
  queue.Push(Kernel(2, "b"));
  EXPECT_EQ(first.size(), 1u);
  ActivityQueue::Taken second = queue.Take();
  EXPECT_EQ(second.size(), 1u);
  second.ForEach([](const GpuActivity& a) { EXPECT_STREQ(a.name, "b"); });
  EXPECT_EQ(queue.Take().size(), 0u);
}

TEST(ActivityQueueTest, DroppedRecordsAreCountedUntilTaken) {
  ActivityQueue queue;
  queue.AddDropped(3);
  queue.AddDropped(4);
  EXPECT_EQ(queue.TakeDropped(), 7u);
  EXPECT_EQ(queue.TakeDropped(), 0u);
}

}  // namespace
}  // namespace tokentrace
