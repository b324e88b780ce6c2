#include "core/buffer_registry.h"

#include <gtest/gtest.h>

#include <vector>

namespace tokentrace {
namespace {

// A thread that writes its last events and exits while the drain is running (after its ring
// was drained in this pass) must not have its ring freed with those events unread: the next
// drain reads them, then frees the ring.
TEST(BufferRegistryTest, RingRetiredDuringTheDrainIsReadBeforeItIsFreed) {
  ThreadBuffer* ring = buffers::Register(64);
  const uint32_t index = ring->thread_index();
  auto event = [](uint64_t n) { return MakeEvent(EventKind::kPush, 0, n, 0, 0, 0, 0, 0, 0); };
  ASSERT_TRUE(ring->Append(event(1)));
  std::vector<uint64_t> seen;
  bool exited = false;
  auto drain = [&](ThreadBuffer& r) {
    if (r.thread_index() != index) return;
    r.Drain([&](const Event& e) { seen.push_back(e.call_id); });
    if (!exited) {  // the thread's last event and its exit, just after its ring was drained
      exited = true;
      ASSERT_TRUE(r.Append(event(2)));
      r.retired.store(true, std::memory_order_release);
    }
  };
  buffers::ForEach(drain);
  buffers::ForEach(drain);
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2}));
  int still_there = 0;
  buffers::ForEach([&](ThreadBuffer& r) { still_there += r.thread_index() == index; });
  EXPECT_EQ(still_there, 0);  // freed once read
}

// A signal stop drains in steps (core/drain_budget.h): a retired ring that a step left
// events in is kept for the next step, not freed with them unread.
TEST(BufferRegistryTest, RetiredRingDrainedInStepsIsKeptUntilEmpty) {
  ThreadBuffer* ring = buffers::Register(64);
  const uint32_t index = ring->thread_index();
  for (uint64_t n = 0; n < 10; ++n) {
    ASSERT_TRUE(ring->Append(MakeEvent(EventKind::kPush, 0, n, 0, 0, 0, 0, 0, 0)));
  }
  ring->retired.store(true, std::memory_order_release);
  uint64_t seen = 0;
  for (int step = 0; step < 3; ++step) {
    buffers::ForEach([&](ThreadBuffer& r) {
      if (r.thread_index() == index) seen += r.DrainUpTo(4, [](const Event&) {});
    });
  }
  EXPECT_EQ(seen, 10u);
}

}  // namespace
}  // namespace tokentrace
