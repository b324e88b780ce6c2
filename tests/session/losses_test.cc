#include "session/losses.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/recorder.h"

namespace tokentrace {
namespace {

uint64_t g_fake_count = 0;
uint64_t TakeFake() {
  const uint64_t n = g_fake_count;
  g_fake_count = 0;
  return n;
}

TEST(LossesTest, AddsCountsUnderTheKindsNameAndNothingForZero) {
  Batch batch;
  AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, 0, &batch);
  EXPECT_TRUE(batch.losses.empty());
  AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, 3, &batch);
  AddLoss(TOKENTRACE_LOSS_BUFFER_FULL, 4, &batch);
  AddLoss(TOKENTRACE_LOSS_SIGNAL_DEADLINE, 1, &batch);
  EXPECT_EQ(batch.losses.size(), 2u);
  EXPECT_EQ(batch.losses["buffer_full"], 7);
  EXPECT_EQ(batch.losses["signal_deadline"], 1);
}

TEST(LossesTest, TakesEverySourceOnce) {
  const LossSource sources[] = {{TOKENTRACE_LOSS_GPU_WAIT_TIMEOUT, &TakeFake}};
  g_fake_count = 5;
  Batch batch;
  TakeLosses(sources, &batch);
  EXPECT_EQ(batch.losses["gpu_wait_timeout"], 5);
  TakeLosses(sources, &batch);  // taken: the counter starts over
  EXPECT_EQ(batch.losses["gpu_wait_timeout"], 5);
}

TEST(LossesTest, CoreSourcesAreTheRecordersAndRegistrysCounters) {
  std::set<std::string> kinds;
  for (const LossSource& s : CoreLossSources()) kinds.insert(LossKindName(s.kind));
  EXPECT_EQ(kinds, (std::set<std::string>{"unbalanced_pop", "depth_overflow", "after_thread_exit",
                                          "no_memory", "site_overflow"}));
  recorder::BeginSession(1024);
  for (const LossSource& s : CoreLossSources()) s.take();  // from earlier tests of the binary
  recorder::Pop();                                         // no call open: an unbalanced pop
  recorder::Pop();
  Batch batch;
  TakeLosses(CoreLossSources(), &batch);
  recorder::EndSession();
  EXPECT_EQ(batch.losses, (std::map<std::string, int64_t>{{"unbalanced_pop", 2}}));
  Batch again;
  TakeLosses(CoreLossSources(), &again);
  EXPECT_TRUE(again.losses.empty());
}

TEST(LossesTest, TheBufferFullShareIsSaidOnceWithTheWayToKeepEverything) {
  EXPECT_EQ(BufferFullNotice(1000, 0, false), "");
  EXPECT_EQ(BufferFullNotice(750, 250, false),
            "tokentrace: 25.0% of the job's events were lost to full buffers (250 of 1000, "
            "counted as buffer_full); --on-full wait keeps every event");
  EXPECT_EQ(BufferFullNotice(0, 3, true),
            "tokentrace: 100.0% of the job's events were lost to full buffers (3 of 3, counted "
            "as buffer_full)");
}

}  // namespace
}  // namespace tokentrace
