#include "session/activity_handoff.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "session/hand_built_buffer.h"

namespace tokentrace {
namespace {

using testing_buffers::HandBuiltBuffer;

TEST(ActivityHandoffTest, RecordsComeInTheOrderTheirBuffersWereHandedOver) {
  ActivityHandoff handoff;
  uint64_t corr = 0;
  for (int b = 0; b < 5; ++b) {
    auto* buffer = new HandBuiltBuffer();
    for (int i = 0; i < 3; ++i) buffer->Kernel(++corr, "k");
    handoff.OnBuffer(buffer);
  }
  ActivityHandoff::Taken taken = handoff.Take();
  EXPECT_EQ(taken.buffers(), 5u);
  std::vector<uint64_t> order;
  EXPECT_EQ(taken.ForEach([&](const GpuActivity& a) { order.push_back(a.correlation_id); }), 15u);
  ASSERT_EQ(order.size(), 15u);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], i + 1);
  EXPECT_TRUE(taken.empty());
  EXPECT_EQ(taken.ForEach([](const GpuActivity&) { FAIL(); }), 0u);  // walked once only
}

// A name points into its buffer: valid while its record is handed out, and the buffer is
// given back right after its walk, not at the end of the whole take.
TEST(ActivityHandoffTest, ABufferIsGivenBackOnceWalkedAndItsNamesReadInPlace) {
  std::atomic<int> released{0};
  ActivityHandoff handoff;
  const std::string long_name = "gemm_kernel_with_a_name_too_long_for_any_short_string";
  handoff.OnBuffer((new HandBuiltBuffer(&released))->Kernel(1, long_name.c_str())->Kernel(2, ""));
  handoff.OnBuffer((new HandBuiltBuffer(&released))->Kernel(3, "second"));
  std::vector<std::string> names;
  std::vector<int> released_before;
  handoff.Take().ForEach([&](const GpuActivity& a) {
    ASSERT_NE(a.name, nullptr);
    names.emplace_back(a.name);
    released_before.push_back(released.load());
  });
  EXPECT_EQ(names, (std::vector<std::string>{long_name, "", "second"}));
  EXPECT_EQ(released_before, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(released.load(), 2);
}

TEST(ActivityHandoffTest, ARecordWithoutANameStaysWithout) {
  ActivityHandoff handoff;
  GpuActivity copy;
  copy.kind = GpuOpKind::kMemcpy;
  copy.correlation_id = 7;
  copy.bytes = 4096;
  copy.copy_kind = 2;
  handoff.OnBuffer((new HandBuiltBuffer())->Add(copy));
  int calls = 0;
  handoff.Take().ForEach([&](const GpuActivity& a) {
    ++calls;
    EXPECT_EQ(a.name, nullptr);
    EXPECT_EQ(a.kind, GpuOpKind::kMemcpy);
    EXPECT_EQ(a.bytes, 4096u);
    EXPECT_EQ(a.copy_kind, 2);
    EXPECT_EQ(a.correlation_id, 7u);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ActivityHandoffTest, ATakeHoldsWhatWasHandedOverBeforeIt) {
  ActivityHandoff handoff;
  handoff.OnBuffer((new HandBuiltBuffer())->Kernel(1, "a"));
  ActivityHandoff::Taken first = handoff.Take();
  handoff.OnBuffer((new HandBuiltBuffer())->Kernel(2, "b"));
  EXPECT_EQ(first.buffers(), 1u);
  ActivityHandoff::Taken second = handoff.Take();
  EXPECT_EQ(second.buffers(), 1u);
  second.ForEach([](const GpuActivity& a) { EXPECT_STREQ(a.name, "b"); });
  EXPECT_TRUE(handoff.Take().empty());
}

// Buffers a drain took but did not walk, and buffers no drain took (CUPTI completed them after
// the final drain), are given back all the same.
TEST(ActivityHandoffTest, BuffersNeverWalkedAreGivenBack) {
  std::atomic<int> released{0};
  {
    ActivityHandoff handoff;
    handoff.OnBuffer((new HandBuiltBuffer(&released))->Kernel(1, "a"));
    { ActivityHandoff::Taken unwalked = handoff.Take(); }
    EXPECT_EQ(released.load(), 1);
    handoff.OnBuffer((new HandBuiltBuffer(&released))->Kernel(2, "b"));
    handoff.OnBuffer(new HandBuiltBuffer(&released));  // an empty one, as a forced flush gives
    handoff.OnBuffer(nullptr);                         // ignored
  }
  EXPECT_EQ(released.load(), 3);
}

TEST(ActivityHandoffTest, DroppedRecordsAreCountedUntilTaken) {
  ActivityHandoff handoff;
  handoff.OnDropped(3);
  handoff.OnDropped(0);
  handoff.OnDropped(4);
  EXPECT_EQ(handoff.TakeDropped(), 7u);
  EXPECT_EQ(handoff.TakeDropped(), 0u);
}

// Several CUPTI threads hand buffers over while the drain takes them: every record arrives
// exactly once, each thread's records in the order it handed them over, every buffer is given
// back, and the dropped counts of all threads add up.
TEST(ActivityHandoffTest, ManyBuffersFromSeveralThreadsWhileADrainTakes) {
  constexpr int kThreads = 4;
  constexpr int kBuffersPerThread = 2000;
  constexpr int kRecordsPerBuffer = 3;
  std::atomic<int> released{0};
  ActivityHandoff handoff;
  std::atomic<int> done{0};
  std::atomic<size_t> takes{0};  // takes that found buffers
  std::vector<std::thread> producers;
  for (int t = 0; t < kThreads; ++t) {
    producers.emplace_back([&, t] {
      const std::string name = "kernel_of_thread_" + std::to_string(t) + "_named_at_length";
      for (int b = 0; b < kBuffersPerThread; ++b) {
        // Halfway, each thread waits for the drain to have taken something: the rest is
        // handed over while takes go on.
        while (b == kBuffersPerThread / 2 && takes.load() == 0) std::this_thread::yield();
        auto* buffer = new HandBuiltBuffer(&released);
        for (int i = 0; i < kRecordsPerBuffer; ++i) {
          const uint64_t seq = static_cast<uint64_t>(b) * kRecordsPerBuffer + i;
          buffer->Kernel((static_cast<uint64_t>(t) << 32) | seq, name.c_str());
        }
        handoff.OnBuffer(buffer);
        handoff.OnDropped(1);
      }
      done.fetch_add(1);
    });
  }
  std::vector<int64_t> last(kThreads, -1);
  size_t records = 0, bad_order = 0, bad_names = 0;
  auto drain = [&] {
    ActivityHandoff::Taken taken = handoff.Take();
    if (!taken.empty()) takes.fetch_add(1);
    records += taken.ForEach([&](const GpuActivity& a) {
      const int t = static_cast<int>(a.correlation_id >> 32);
      const int64_t seq = static_cast<int64_t>(a.correlation_id & 0xffffffffu);
      if (t < 0 || t >= kThreads || seq != last[t] + 1) ++bad_order;
      if (t >= 0 && t < kThreads) last[t] = seq;
      const std::string want = "kernel_of_thread_" + std::to_string(t) + "_named_at_length";
      if (a.name == nullptr || want != a.name) ++bad_names;
    });
  };
  while (done.load() < kThreads) drain();
  for (std::thread& p : producers) p.join();
  drain();  // what was handed over after the last take above
  EXPECT_EQ(records, size_t{kThreads} * kBuffersPerThread * kRecordsPerBuffer);
  EXPECT_EQ(bad_order, 0u);
  EXPECT_EQ(bad_names, 0u);
  EXPECT_EQ(released.load(), kThreads * kBuffersPerThread);
  EXPECT_GT(takes.load(), 1u);
  EXPECT_EQ(handoff.TakeDropped(), uint64_t{kThreads} * kBuffersPerThread);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(last[t], kBuffersPerThread * kRecordsPerBuffer - 1);
}

}  // namespace
}  // namespace tokentrace
