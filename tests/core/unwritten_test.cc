#include "core/unwritten.h"

#include <gtest/gtest.h>

namespace tokentrace {
namespace {

// Rows of a failed write are counted by kind; its loss counters, sites and meta are kept and
// go out with the next write (a newer meta value of the same key last, so it wins).
TEST(UnwrittenTest, CountsFailedRowsAndCarriesCountersToTheNextWrite) {
  Unwritten unwritten;
  Batch failed;
  failed.calls.resize(3);
  failed.call_gpu.push_back(CallGpuDelta{1, 1, 5, 0, 0, 0});
  failed.escapes.resize(2);
  failed.losses["buffer_full"] = 7;
  failed.sites.push_back(SiteRow{4, "self", SiteKind::kRoot, true});
  failed.meta = {{"kernels_status", "old"}};
  unwritten.Add(std::move(failed));
  EXPECT_FALSE(unwritten.empty());
  EXPECT_EQ(unwritten.calls(), 3);
  EXPECT_EQ(unwritten.LossesOnly().losses.at("write_failed_calls"), 3);

  Batch next;
  next.calls.resize(1);
  next.losses["buffer_full"] = 1;
  next.meta = {{"kernels_status", "new"}};
  unwritten.MoveInto(&next);
  EXPECT_TRUE(unwritten.empty());
  EXPECT_EQ(next.losses["buffer_full"], 8);
  EXPECT_EQ(next.losses["write_failed_calls"], 3);
  EXPECT_EQ(next.losses["write_failed_kernels"], 5);
  EXPECT_EQ(next.losses["write_failed_escapes"], 2);
  EXPECT_EQ(next.losses.count("write_failed_outputs"), 0u);
  ASSERT_EQ(next.sites.size(), 1u);
  EXPECT_EQ(next.sites[0].name, "self");
  ASSERT_EQ(next.meta.size(), 2u);
  EXPECT_EQ(next.meta.back().second, "new");
  EXPECT_EQ(next.calls.size(), 1u);
}

}  // namespace
}  // namespace tokentrace
