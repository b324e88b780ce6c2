// Host semantics of the patch table (cuda/patch_apply_host.cc, cuda/patch_ops.h), checked
// against the reference in patch_test_util.h. Runs on any machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "patch_cases.h"
#include "patch_test_util.h"

namespace tokentrace::patch::testing {
namespace {

uint16_t HalfBits(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

TEST(PatchConversionTest, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    _Float16 ref;
    const uint16_t bits = static_cast<uint16_t>(h);
    std::memcpy(&ref, &bits, 2);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(ref)));
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    ASSERT_EQ(FloatBits(f), FloatBits(static_cast<float>(ref))) << std::hex << h;
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
}

TEST(PatchConversionTest, FloatToHalfRoundsToNearestEven) {
  std::mt19937 rng(3);
  // Random bit patterns concentrated on the half range, plus every tie just above each half.
  std::uniform_int_distribution<uint32_t> bits(0x30000000u, 0x48000000u);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = bits(rng) | (i & 1 ? 0x80000000u : 0u);
    if (i % 4 == 2) u = (u & ~0x1fffu) | 0x1000u;  // an exact tie for normals
    const float f = BitsFloat(u);
    ASSERT_EQ(FloatToHalf(f), HalfBits(static_cast<_Float16>(f))) << std::hex << u;
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f, 5.9604645e-8f, 2.9802322e-8f,
                  2.9802326e-8f, 0.0f, -0.0f, INFINITY, -INFINITY})
    EXPECT_EQ(FloatToHalf(f), HalfBits(static_cast<_Float16>(f))) << f;
}

TEST(PatchConversionTest, FloatToBf16RoundsToNearestEven) {
  std::mt19937 rng(4);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;  // an exact tie
    const float f = BitsFloat(u);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f))));
      continue;
    }
    ASSERT_EQ(FloatBits(Bf16ToFloat(FloatToBf16(f))), FloatBits(RefRound(f, DType::kBF16)))
        << std::hex << u;
  }
}

// Every NaN an edit stores has the same bits, whatever its inputs' payloads: what makes the
// device (which produces 0x7fffffff) and the host (which keeps payloads) agree bit for bit.
TEST(PatchSpecialValuesTest, NaNsAreStoredWithOneBitPattern) {
  for (const auto& [name, sc] : SpecialValueScenarios()) {
    std::string error;
    const Outcome got = RunHost(sc, &error);
    ASSERT_TRUE(error.empty()) << error;
    const Tensor& t = got.outputs.at(0);
    const uint32_t canonical = t.dtype == DType::kF32   ? kCanonicalNanBits
                               : t.dtype == DType::kF16 ? 0x7e00u
                                                        : 0x7fc0u;
    int nans = 0;
    for (int64_t i = 0; i < 24; ++i) {
      if (!std::isnan(t.Get({i / 8, i % 8}))) continue;
      ++nans;
      uint32_t bits = 0;
      std::memcpy(&bits, t.bytes.data() + i * ElemSize(t.dtype), ElemSize(t.dtype));
      EXPECT_EQ(bits, canonical) << name << " element " << i;
    }
    // Row 0: NaN + 1, inf + -inf, -inf + inf, 1 + NaN, NaN + 1; row 1: NaN, inf, -inf, NaN
    // times 0; row 2: the two NaNs clamped.
    EXPECT_EQ(nans, 5 + 4 + 2) << name;
    // -0.0 + -0.0 stays -0.0; -0.0 * 0 is -0.0; clamp keeps -0.0.
    EXPECT_TRUE(std::signbit(t.Get({0, 3})) && std::signbit(t.Get({1, 3})) &&
                std::signbit(t.Get({2, 3})))
        << name;
  }
}

// Python's slice semantics for any step, including ones whose arithmetic would overflow.
TEST(PatchBoxTest, HugeStepsSelectOneElement) {
  for (const auto& box : std::vector<std::vector<DimSlice>>{
           {S({}, {}, INT64_MAX)}, {S(2, {}, INT64_MAX - 1)}, {S(-8, INT64_MAX, INT64_MAX)}}) {
    Scenario sc;
    sc.initial = MakeTensor(DType::kF32, {8});
    Add(&sc, Entry(0, PatchOp::kFill, Every(), box, 9.0f));
    std::string error;
    const Outcome got = RunHost(sc, &error);
    ASSERT_TRUE(error.empty()) << error;
    int filled = 0;
    for (int64_t i = 0; i < 8; ++i) filled += got.outputs.at(0).Get({i}) == 9.0f;
    EXPECT_EQ(filled, 1);
  }
}

class PatchScenarioTest : public ::testing::TestWithParam<std::pair<std::string, Scenario>> {};

TEST_P(PatchScenarioTest, HostMatchesReference) {
  const Scenario& sc = GetParam().second;
  std::string error;
  const Outcome want = RunReference(sc);
  const Outcome got = RunHost(sc, &error);
  ASSERT_EQ(got.outputs.size(), want.outputs.size()) << error;
  EXPECT_EQ(error, "");
  for (size_t c = 0; c < want.outputs.size(); ++c)
    EXPECT_EQ(got.outputs[c].bytes, want.outputs[c].bytes) << "call " << c + 1;
  EXPECT_EQ(got.fires, want.fires);
}

INSTANTIATE_TEST_SUITE_P(All, PatchScenarioTest, ::testing::ValuesIn(AllScenarios()),
                         [](const auto& info) { return info.param.first; });

// The reference and the host could agree on a wrong selector; pin the calls by hand.
TEST(PatchSelectorTest, FiresExactlyAtTheSelectedCalls) {
  const std::vector<std::pair<std::string, std::set<int>>> want = {
      {"selector_prefill", {1}},
      {"selector_call3", {3}},
      {"selector_calls2_4", {2, 3, 4}},
      {"selector_calls3_on", {3, 4, 5}},
      {"selector_token3", {3}},
      {"selector_tokens2_3", {2, 3}},
      {"selector_every", {1, 2, 3, 4, 5}},
  };
  const auto scenarios = SelectorScenarios();
  ASSERT_EQ(scenarios.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(scenarios[i].first, want[i].first);
    const Scenario& sc = scenarios[i].second;
    std::string error;
    const Outcome got = RunHost(sc, &error);
    for (int c = 1; c <= sc.calls; ++c) {
      const bool changed = got.outputs[c - 1].bytes != sc.initial.bytes;
      EXPECT_EQ(changed, want[i].second.count(c) == 1) << want[i].first << " call " << c;
      for (int64_t f = 0; f < 8; ++f)  // position 1 is zero exactly when fired
        EXPECT_EQ(got.outputs[c - 1].Get({0, 1, f}) == 0.0f,
                  changed || sc.initial.Get({0, 1, f}) == 0.0f);
    }
    EXPECT_EQ(got.fires[0], want[i].second.size()) << want[i].first;
  }
}

TEST(PatchSelectorTest, TokenSelectorsNeverMatchTokenZero) {
  auto table = HostPatchTable::Create({Entry(0, PatchOp::kZero, Tokens(1, 9), {})}, 1, nullptr);
  Tensor t = MakeTensor(DType::kF32, {4});
  const Tensor before = t;
  ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, 1, t.shape.data(), t.strides.data());
  EXPECT_EQ(t.bytes, before.bytes);
  AdvanceTokenHost(table->table());
  ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, 1, t.shape.data(), t.strides.data());
  EXPECT_EQ(t.Get({2}), 0.0f);
  EXPECT_EQ(ReadCountersHost(table->table()).fires[0], 1u);
}

TEST(PatchCountersTest, OnlyTheAppliedSiteAdvancesAndResetClearsEverything) {
  std::string error;
  auto table = HostPatchTable::Create(
      {Entry(0, PatchOp::kScale, Every(), {}, 2.0f), Entry(2, PatchOp::kZero, Every(), {})}, 3,
      &error);
  ASSERT_TRUE(table) << error;
  Tensor t = MakeTensor(DType::kF16, {2, 3});
  for (int i = 0; i < 3; ++i) {
    const ApplyStatus st =
        ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, 2, t.shape.data(), t.strides.data());
    EXPECT_TRUE(st.ok);
    EXPECT_EQ(st.call, static_cast<uint32_t>(i + 1));
    EXPECT_EQ(st.fired, 1u);
  }
  PatchCounters c = ReadCountersHost(table->table());
  EXPECT_EQ(c.site_calls, (std::vector<uint32_t>{3, 0, 0}));
  EXPECT_EQ(c.fires, (std::vector<uint64_t>{3, 0}));
  ResetCountersHost(table->table());
  c = ReadCountersHost(table->table());
  EXPECT_EQ(c.site_calls, (std::vector<uint32_t>{0, 0, 0}));
  EXPECT_EQ(c.fires, (std::vector<uint64_t>{0, 0}));
}

// ---- Errors -----------------------------------------------------------------------------------

std::string Validate(const PatchEntry& e, std::vector<int64_t> shape, DType dt = DType::kF32) {
  std::string error;
  EXPECT_FALSE(ValidateEntry(e, static_cast<int>(shape.size()), shape.data(), dt, 0, &error));
  return error;
}

TEST(PatchValidationTest, IndexOutOfRange) {
  EXPECT_EQ(Validate(Entry(0, PatchOp::kZero, Prefill(), {S(), I(7)}), {2, 5, 8}),
            "tokentrace: index 7 is out of range for dimension 1 of size 5");
  EXPECT_EQ(Validate(Entry(0, PatchOp::kZero, Prefill(), {I(-4)}), {3}),
            "tokentrace: index -4 is out of range for dimension 0 of size 3");
  std::string error;
  EXPECT_TRUE(ValidateEntry(Entry(0, PatchOp::kZero, Prefill(), {S(), I(-5)}), 2,
                            std::vector<int64_t>{2, 5}.data(), DType::kF32, 0, &error));
  ResolvedBox box;
  const int64_t shape[] = {4};
  EXPECT_FALSE(ResolveBox(Entry(0, PatchOp::kZero, Every(), {I(4)}).box, 1, shape, &box, &error));
  EXPECT_EQ(error, "tokentrace: index 4 is out of range for dimension 0 of size 4");
}

TEST(PatchValidationTest, ShapeAndRankErrors) {
  EXPECT_EQ(Validate(Entry(0, PatchOp::kZero, Every(), {S(), S(), S()}), {2, 5}),
            "tokentrace: the index box has 3 dimensions but the output has 2");
  EXPECT_EQ(Validate(Entry(0, PatchOp::kZero, Every(), {S({}, {}, 0)}), {2}),
            "tokentrace: slice step 0 in dimension 0 must be >= 1");
  EXPECT_EQ(Validate(Entry(0, PatchOp::kZero, Every(), {}), {1, 1, 1, 1, 1, 1, 1}),
            "tokentrace: the output has 7 dimensions; patches support up to 6");
}

TEST(PatchValidationTest, OperandThatDoesNotBroadcast) {
  const Tensor vec = MakeTensor(DType::kF32, {3});
  PatchEntry e = Entry(0, PatchOp::kAdd, Every(), {S(), I(1)});
  SetOperand(&e, vec);
  EXPECT_EQ(Validate(e, {2, 5, 8}),
            "tokentrace: operand of shape [3] does not broadcast to the index box: operand "
            "dimension 0 has size 3, the box has 8 (box shape [2, 8])");
  const Tensor big = MakeTensor(DType::kF32, {2, 2, 8});
  SetOperand(&e, big);
  EXPECT_EQ(Validate(e, {2, 5, 8}),
            "tokentrace: operand of shape [2, 2, 8] does not broadcast to the index box: operand "
            "dimension 0 has size 2 and no box dimension (box shape [2, 8])");
  const Tensor ok = MakeTensor(DType::kF32, {1, 1, 8});  // extra leading 1s are fine
  SetOperand(&e, ok);
  std::string error;
  EXPECT_TRUE(ValidateEntry(e, 3, std::vector<int64_t>{2, 5, 8}.data(), DType::kF32, 0, &error))
      << error;
}

TEST(PatchValidationTest, DtypesOpsCannotTake) {
  EXPECT_EQ(Validate(Entry(0, PatchOp::kScale, Every(), {}, 2.0f), {4}, DType::kI64),
            "tokentrace: op 'scale' cannot take an output of dtype int64 (supported: float32, "
            "float16, bfloat16)");
  Tensor f64 = MakeTensor(DType::kF32, {4});
  f64.dtype = DType::kF64;
  PatchEntry e = Entry(0, PatchOp::kReplace, Every(), {});
  SetOperand(&e, f64);
  EXPECT_EQ(Validate(e, {4}),
            "tokentrace: op 'replace' cannot take an operand of dtype float64 (supported: "
            "float32, float16, bfloat16)");
}

TEST(PatchValidationTest, StaticChecks) {
  std::string error;
  auto fails = [&](const PatchEntry& e) {
    error.clear();
    EXPECT_FALSE(ValidateEntryStatic(e, 0, &error));
    return error;
  };
  EXPECT_EQ(fails(Entry(0, PatchOp::kReplace, Every(), {})),
            "tokentrace: op 'replace' needs an operand tensor");
  EXPECT_EQ(fails(Entry(0, PatchOp::kClamp, Every(), {}, 0, 2.0f, 1.0f)),
            "tokentrace: clamp bounds lo=2.000000 hi=1.000000 need lo <= hi");
  EXPECT_EQ(fails(Entry(0, PatchOp::kZero, Call(0), {})),
            "tokentrace: call selector 'call 0' selects nothing: calls and tokens count from 1 "
            "(the prefill is call 1) and a range needs first <= last");
  EXPECT_NE(fails(Entry(0, PatchOp::kZero, Tokens(4, 2), {})).find("'tokens 4..2'"),
            std::string::npos);
  EXPECT_EQ(fails(Entry(0, PatchOp::kZero, Sel(static_cast<SelectorKind>(9), 1), {})),
            "tokentrace: unknown call selector kind 9");
  PatchEntry bad_op = Entry(0, PatchOp::kZero, Every(), {});
  bad_op.op = 42;
  EXPECT_EQ(fails(bad_op), "tokentrace: unknown patch op 42");
  EXPECT_TRUE(ValidateEntryStatic(Entry(0, PatchOp::kAdd, Every(), {}, 1.0f), 0, &error));
  EXPECT_FALSE(HostPatchTable::Create({Entry(5, PatchOp::kZero, Every(), {})}, 4, &error));
  EXPECT_EQ(error, "tokentrace: patch entry 0 is for site 5 but the table has 4 sites");
}

TEST(PatchApplyErrorTest, MatchingEntryThatDoesNotFitIsSkippedAndOthersStillApply) {
  // The seed's prefill edit [:, 1] bound to every call: decode steps have one position.
  auto table = HostPatchTable::Create({Entry(0, PatchOp::kZero, Every(), {S(), I(1)}),
                                       Entry(0, PatchOp::kFill, Every(), {S(), I(0)}, 3.0f)},
                                      1, nullptr);
  Tensor t = MakeTensor(DType::kBF16, {1, 1, 4});
  const ApplyStatus st =
      ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, 3, t.shape.data(), t.strides.data());
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.message, "tokentrace: index 1 is out of range for dimension 1 of size 1");
  EXPECT_EQ(st.fired, 1u);
  EXPECT_EQ(st.skipped, 1u);
  for (int64_t f = 0; f < 4; ++f) EXPECT_EQ(t.Get({0, 0, f}), 3.0f);
  const PatchCounters c = ReadCountersHost(table->table());
  EXPECT_EQ(c.fires, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(c.skips, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(c.last_errors[0].code, static_cast<uint32_t>(PatchError::kIndexOutOfRange));
}

TEST(PatchApplyErrorTest, MoreMatchesThanSlotsAreSkipped) {
  std::vector<PatchEntry> entries(kMaxMatchesPerCall + 1,
                                  Entry(0, PatchOp::kAdd, Every(), {}, 1.0f));
  auto table = HostPatchTable::Create(entries, 1, nullptr);
  Tensor t = MakeTensor(DType::kF32, {2});
  const float before = t.Get({0});
  const ApplyStatus st =
      ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, 1, t.shape.data(), t.strides.data());
  EXPECT_EQ(st.fired, static_cast<uint32_t>(kMaxMatchesPerCall));
  EXPECT_EQ(st.skipped, 1u);
  EXPECT_NE(st.message.find("more than 16 entries for site 0"), std::string::npos) << st.message;
  float want = before;
  for (int i = 0; i < kMaxMatchesPerCall; ++i) want += 1.0f;
  EXPECT_EQ(t.Get({0}), want);
}

TEST(PatchApplyErrorTest, RefusesForeignTablesAndUnknownSites) {
  auto table = HostPatchTable::Create({Entry(0, PatchOp::kZero, Every(), {})}, 2, nullptr);
  Tensor t = MakeTensor(DType::kF32, {2});
  ApplyStatus st =
      ApplyPatchesHost(table->table(), 2, t.data(), t.dtype, 1, t.shape.data(), t.strides.data());
  EXPECT_FALSE(st.ok);
  EXPECT_EQ(st.message, "tokentrace: site 2 is beyond the table's 2 sites");
  table->table().version = 99;
  st = ApplyPatchesHost(table->table(), 0, t.data(), t.dtype, 1, t.shape.data(), t.strides.data());
  EXPECT_FALSE(st.ok);
  EXPECT_NE(st.message.find("patch table version 99 does not match"), std::string::npos);
  table->table().version = kPatchTableVersion;
  EXPECT_EQ(ReadCountersHost(table->table()).site_calls[0], 0u);  // refused calls do not count
}

TEST(PatchTableLayoutTest, HeaderPointersFollowTheDrawing) {
  auto table = HostPatchTable::Create({Entry(0, PatchOp::kZero, Every(), {})}, 3, 2, 5, nullptr);
  const PatchTable& t = table->table();
  const auto base = reinterpret_cast<uintptr_t>(&t);
  EXPECT_EQ(t.magic, kPatchTableMagic);
  EXPECT_EQ(t.version, 3u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.entries) - base, 88u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.site_calls) - base, 88u + 392u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.site_done) - base, 88u + 392u + 12u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.token) - base, 88u + 392u + 24u);
  // 88 + 392 + 24 + 4 = 508, rounded up to 512: the masks' counters, then 2 slots of 5 rows.
  EXPECT_EQ(t.max_masks, 2u);
  EXPECT_EQ(t.max_rows, 5u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.mask_counts) - base, 512u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.row_masks) - base, 512u + 16u);
  EXPECT_EQ(PatchTableBytes(1, 3, 2, 5), 512u + 16u + 16u);  // 10 rows, rounded up to 16
  EXPECT_EQ(PatchTableBytes(1, 3), 512u);
}

}  // namespace
}  // namespace tokentrace::patch::testing
