// Row masks on the host (the "rows" selector, SetRowMaskHost): pinned by hand, beside the
// reference comparisons of patch_cases.h's RowMaskScenarios (which the device test repeats).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "patch_test_util.h"

namespace tokentrace::patch::testing {
namespace {

using Mask = std::vector<uint8_t>;

struct MaskedTable {
  std::unique_ptr<HostPatchTable> host;
  PatchTable& t() { return host->table(); }
  bool Set(uint32_t slot, const Mask& rows, std::string* error = nullptr) {
    return SetRowMaskHost(t(), slot, rows.data(), static_cast<uint32_t>(rows.size()), error);
  }
  ApplyStatus Apply(Tensor* out, uint32_t site = 0) {
    return ApplyPatchesHost(t(), site, out->data(), out->dtype, out->ndim(), out->shape.data(),
                            out->strides.data());
  }
};

MaskedTable Make(std::vector<PatchEntry> entries, uint32_t max_masks, uint32_t max_rows) {
  std::string error;
  MaskedTable m{HostPatchTable::Create(entries, 1, max_masks, max_rows, &error)};
  EXPECT_TRUE(m.host) << error;
  return m;
}

// The rows of a 2-D output in which some element differs from `before`.
std::vector<int64_t> ChangedRows(const Tensor& after, const Tensor& before) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < after.shape[0]; ++r) {
    for (int64_t c = 0; c < after.shape[1]; ++c) {
      if (after.Get({r, c}) != before.Get({r, c})) {
        rows.push_back(r);
        break;
      }
    }
  }
  return rows;
}

TEST(PatchRowMaskTest, OnlyMarkedRowsChange) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    MaskedTable m = Make({Entry(0, PatchOp::kFill, Rows(0), {}, 5.0f)}, 1, 4);
    ASSERT_TRUE(m.Set(0, Mask{1, 0, 1}));
    Tensor t = MakeTensor(dt, {4, 3}, Layout::kPadded, 3);
    const Tensor before = t;
    const ApplyStatus st = m.Apply(&t);
    EXPECT_TRUE(st.ok) << st.message;
    EXPECT_EQ(st.fired, 1u);
    // Row 3 is past the written length (3): unmarked.
    EXPECT_EQ(ChangedRows(t, before), (std::vector<int64_t>{0, 2})) << static_cast<int>(dt);
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(t.Get({2, c}), 5.0f);
    EXPECT_EQ(ReadCountersHost(m.t()).fires[0], 1u);
  }
}

TEST(PatchRowMaskTest, UnmarkedMaskNeitherFiresNorChanges) {
  MaskedTable m = Make({Entry(0, PatchOp::kScale, Rows(1), {}, 2.0f)}, 2, 4);
  Tensor t = MakeTensor(DType::kBF16, {4, 3});
  const Tensor before = t;
  EXPECT_EQ(m.Apply(&t).fired, 0u);  // never written
  ASSERT_TRUE(m.Set(1, Mask{0, 0, 0, 0}));
  EXPECT_EQ(m.Apply(&t).fired, 0u);  // written, nothing marked
  ASSERT_TRUE(m.Set(0, Mask{1, 1, 1, 1}));
  EXPECT_EQ(m.Apply(&t).fired, 0u);  // another slot's marks do not count
  EXPECT_EQ(t.bytes, before.bytes);
  const PatchCounters c = ReadCountersHost(m.t());
  EXPECT_EQ(c.fires[0], 0u);
  EXPECT_EQ(c.skips[0], 0u);
  EXPECT_EQ(c.site_calls[0], 3u);  // the calls still count
}

TEST(PatchRowMaskTest, FiresCountOnlyCallsWithMarkedRows) {
  MaskedTable m = Make({Entry(0, PatchOp::kAdd, Rows(0), {}, 1.0f)}, 1, 8);
  const std::vector<Mask> steps = {{0, 1}, {0, 0}, {}, {0, 0, 0, 1}, {1}};
  std::vector<std::vector<int64_t>> changed;
  for (const Mask& mask : steps) {
    ASSERT_TRUE(m.Set(0, mask));
    Tensor t = MakeTensor(DType::kF32, {4, 2});
    const Tensor before = t;
    m.Apply(&t);
    changed.push_back(ChangedRows(t, before));
  }
  EXPECT_EQ(changed, (std::vector<std::vector<int64_t>>{{1}, {}, {}, {3}, {0}}));
  EXPECT_EQ(ReadCountersHost(m.t()).fires[0], 3u);
}

TEST(PatchRowMaskTest, BoxColumnsCombineWithTheMask) {
  MaskedTable m = Make({Entry(0, PatchOp::kZero, Rows(0), {S(), S(1, {}, 2)})}, 1, 3);
  ASSERT_TRUE(m.Set(0, Mask{1, 0, 1}));
  Tensor t = MakeTensor(DType::kF16, {3, 5}, Layout::kTransposed, 9);
  const Tensor before = t;
  m.Apply(&t);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 5; ++c) {
      const bool edited = r != 1 && c % 2 == 1;
      EXPECT_EQ(t.Get({r, c}), edited ? 0.0f : before.Get({r, c})) << r << "," << c;
    }
  }
}

TEST(PatchRowMaskTest, OneDimensionalOutputMasksElements) {
  MaskedTable m = Make({Entry(0, PatchOp::kFill, Rows(0), {}, 2.0f)}, 1, 8);
  ASSERT_TRUE(m.Set(0, Mask{0, 1, 0, 1}));
  Tensor t = MakeTensor(DType::kF32, {6});
  const Tensor before = t;
  m.Apply(&t);
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_EQ(t.Get({i}), i == 1 || i == 3 ? 2.0f : before.Get({i})) << i;
}

TEST(PatchRowMaskTest, SetNormalizesAndCountsMarkedRows) {
  MaskedTable m = Make({}, 2, 4);
  ASSERT_TRUE(m.Set(1, Mask{0, 9, 255}));
  EXPECT_EQ(m.t().mask_counts[1].mask_len, 3u);
  EXPECT_EQ(m.t().mask_counts[1].mask_marked, 2u);
  EXPECT_EQ(Mask(m.t().row_masks + 4, m.t().row_masks + 7), (Mask{0, 1, 1}));
  EXPECT_EQ(m.t().mask_counts[0].mask_len, 0u);
  ASSERT_TRUE(m.Set(1, Mask{}));  // an empty mask is a mask: nothing marked
  EXPECT_EQ(m.t().mask_counts[1].mask_len, 0u);
  EXPECT_EQ(m.t().mask_counts[1].mask_marked, 0u);
}

TEST(PatchRowMaskTest, ResetClearsMasks) {
  MaskedTable m = Make({Entry(0, PatchOp::kZero, Rows(0), {})}, 1, 4);
  ASSERT_TRUE(m.Set(0, Mask{1, 1}));
  ResetCountersHost(m.t());
  EXPECT_EQ(m.t().mask_counts[0].mask_len, 0u);
  EXPECT_EQ(m.t().mask_counts[0].mask_marked, 0u);
  Tensor t = MakeTensor(DType::kF32, {2, 2});
  const Tensor before = t;
  EXPECT_EQ(m.Apply(&t).fired, 0u);  // the stale mask is gone
  EXPECT_EQ(t.bytes, before.bytes);
}

TEST(PatchRowMaskTest, SlotAndLengthLimits) {
  MaskedTable m = Make({}, 2, 4);
  std::string error;
  EXPECT_FALSE(m.Set(2, Mask{1}, &error));
  EXPECT_EQ(error,
            "tokentrace: row mask slot 2 is not in this patch table (slots 0..1: max_masks 2)");
  EXPECT_FALSE(m.Set(0, Mask{1, 0, 0, 0, 1}, &error));
  EXPECT_EQ(error, "tokentrace: a row mask of 5 rows is longer than this patch table's max_rows 4");
  EXPECT_TRUE(m.Set(0, Mask{1, 0, 0, 1}, &error)) << error;
  MaskedTable none = Make({}, 0, 0);
  EXPECT_FALSE(none.Set(0, Mask{}, &error));
  EXPECT_EQ(error,
            "tokentrace: row mask slot 0 is not in this patch table (it has no row mask slots: "
            "max_masks is 0)");
}

TEST(PatchRowMaskTest, RowsSelectorSlotMustBeBelowMaxMasks) {
  const PatchEntry e = Entry(0, PatchOp::kZero, Rows(2), {});
  std::string error;
  EXPECT_FALSE(HostPatchTable::Create({Entry(0, PatchOp::kZero, Every(), {}), e}, 1, 2, 4, &error));
  EXPECT_EQ(error,
            "tokentrace: rows selector slot 2 is not below the table's max_masks 2; create the "
            "table with max_masks >= 3 (patch entry 1)");
  EXPECT_FALSE(ValidateEntryStatic(e, 2, &error));
  EXPECT_EQ(CheckEntryStatic(e, 2).code, static_cast<uint32_t>(PatchError::kBadMaskSlot));
  EXPECT_TRUE(ValidateEntryStatic(e, 3, &error));
  // A table of the old sizes (no masks) refuses any rows entry.
  EXPECT_FALSE(HostPatchTable::Create({Entry(0, PatchOp::kZero, Rows(0), {})}, 1, &error));
  EXPECT_NE(error.find("is not below the table's max_masks 0"), std::string::npos) << error;
}

TEST(PatchRowMaskTest, ScalarOutputIsSkippedWithItsError) {
  MaskedTable m = Make({Entry(0, PatchOp::kFill, Rows(0), {}, 1.0f)}, 1, 4);
  ASSERT_TRUE(m.Set(0, Mask{1}));
  Tensor t = MakeTensor(DType::kF32, {});
  const Tensor before = t;
  const ApplyStatus st = m.Apply(&t);
  const std::string want =
      "tokentrace: call selector 'rows 0' edits rows (dimension 0) but the output is 0-d; a rows "
      "selector needs an output of 1 or more dimensions";
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.call, 1u);
  EXPECT_EQ(st.skipped, 1u);
  EXPECT_EQ(st.message, want);
  EXPECT_EQ(t.bytes, before.bytes);
  const PatchCounters c = ReadCountersHost(m.t());
  EXPECT_EQ(c.skips[0], 1u);
  EXPECT_EQ(c.last_errors[0].code, static_cast<uint32_t>(PatchError::kRowsScalarOutput));
  std::string error;
  EXPECT_FALSE(ValidateEntry(m.t().entries[0], 0, nullptr, DType::kF32, 1, &error));
  EXPECT_EQ(error, want);
}

}  // namespace
}  // namespace tokentrace::patch::testing
