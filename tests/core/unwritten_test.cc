#include "core/unwritten.h"

#include <gtest/gtest.h>

namespace tokentrace {
namespace {

// Rows of a failed write are counted by kind; its loss counters, sites and meta are kept and
// go out with the next write (a newer meta value of the same key last, so it wins).
TEST(UnwrittenTest, CountsFailedRowsAndCarriesCountersToTheNextWrite) {
  Unwritten unwritten;
  Batch failed;
  for (uint64_t id = 1; id <= 3; ++id) failed.calls.push_back(CallRow{id, 2, 1, 1, 0, 0, 10, 20});
  failed.call_gpu.push_back(CallGpuDelta{1, 1, 5, 0, 0, 0});
  failed.escapes.resize(2);
  failed.links.resize(4);
  AddedRows inputs;
  inputs.table = TOKENTRACE_ROWS_CALL_INPUTS;
  inputs.columns = {"call_id", "path"};
  inputs.values.resize(6);  // 3 rows
  failed.added.push_back(inputs);
  AddedRows steps;
  steps.table = TOKENTRACE_ROWS_STEP_REQUESTS;
  steps.columns = {"token"};
  steps.values.resize(2);
  failed.added.push_back(steps);
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
  EXPECT_EQ(next.losses["write_failed_links"], 4);
  EXPECT_EQ(next.losses["write_failed_inputs"], 3);  // the Python layer's, by table
  EXPECT_EQ(next.losses["write_failed_steps"], 2);
  EXPECT_EQ(next.losses.count("write_failed_outputs"), 0u);
  ASSERT_EQ(next.sites.size(), 1u);
  EXPECT_EQ(next.sites[0].name, "self");
  ASSERT_EQ(next.meta.size(), 2u);
  EXPECT_EQ(next.meta.back().second, "new");
  EXPECT_EQ(next.calls.size(), 1u);
}

CallRow TokenCall(int64_t end_ns) { return CallRow{7, 1, 1, 1, 0, 0, 10, end_ns}; }

int64_t FailedCalls(const Unwritten& u) {
  const auto losses = u.LossesOnly().losses;
  const auto it = losses.find("write_failed_calls");
  return it == losses.end() ? 0 : it->second;
}

// A token call is written open at a drain and again when it closes. Its open row fails, its
// closed row reaches the file: the call is not lost, so the count it took is given back.
TEST(UnwrittenTest, AnOpenRowThatFailsIsUncountedWhenItsClosedRowIsWritten) {
  Unwritten unwritten;
  Batch open_row;
  open_row.calls.push_back(TokenCall(-1));
  unwritten.Add(std::move(open_row));
  EXPECT_EQ(FailedCalls(unwritten), 1);
  Batch closed;
  closed.calls.push_back(TokenCall(20));
  unwritten.Written(closed);
  EXPECT_EQ(FailedCalls(unwritten), 0);
  EXPECT_EQ(unwritten.calls(), 0);
}

// Its open row reaches the file, its closed row fails: the file has the call (open), so it is
// not counted as lost.
TEST(UnwrittenTest, AClosedRowThatFailsIsNotCountedWhenTheFileHasItsOpenRow) {
  Unwritten unwritten;
  Batch open_row;
  open_row.calls.push_back(TokenCall(-1));
  unwritten.Written(open_row);
  Batch closed;
  closed.calls.push_back(TokenCall(20));
  unwritten.Add(std::move(closed));
  EXPECT_EQ(FailedCalls(unwritten), 0);
  // Both rows fail: one call, counted once.
  Unwritten twice;
  Batch a, b;
  a.calls.push_back(TokenCall(-1));
  b.calls.push_back(TokenCall(20));
  twice.Add(std::move(a));
  twice.Add(std::move(b));
  EXPECT_EQ(FailedCalls(twice), 1);
}

}  // namespace
}  // namespace tokentrace
