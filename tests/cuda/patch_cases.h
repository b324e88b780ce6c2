// The scenario catalog: every op on every dtype over a set of boxes and layouts, selectors,
// and entries that compose. The host test checks each against the reference; the device test
// checks the device against the host, bit for bit.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "patch_test_util.h"

namespace tokentrace::patch::testing {

struct BoxCase {
  std::string name;
  std::vector<int64_t> shape;
  Layout layout;
  std::vector<DimSlice> box;
};

inline std::vector<BoxCase> BoxCases() {
  return {
      {"col1_2d", {6, 8}, Layout::kContiguous, {S(), I(1)}},
      {"pos1_3d", {2, 5, 8}, Layout::kContiguous, {S(), I(1)}},
      {"steps_negative_padded_3d", {3, 7, 6}, Layout::kPadded, {S(1), S(-5, -1, 2), S({}, {}, 3)}},
      {"open_ends_transposed_2d", {5, 9}, Layout::kTransposed, {S(-3), S({}, 7, 2)}},
      {"index_last_clamped_stop_3d", {4, 6, 3}, Layout::kPadded, {I(-1), S(2, 100)}},
      {"feature_index_3d", {2, 3, 10}, Layout::kTransposed, {S(), S(), I(-2)}},
      {"full_4d", {2, 3, 2, 5}, Layout::kContiguous, {}},
      {"empty_slice", {4, 4}, Layout::kContiguous, {S(3, 1)}},
  };
}

// The box shape the operand broadcasts against (integer-index dims dropped).
inline std::vector<int64_t> ViewShape(const BoxCase& bc) {
  std::vector<int64_t> view;
  for (size_t d = 0; d < bc.shape.size(); ++d) {
    const DimSlice s = d < bc.box.size() ? bc.box[d] : S();
    if (!(s.flags & kDimIndex))
      view.push_back(static_cast<int64_t>(RefIndices(s, bc.shape[d]).size()));
  }
  return view;
}

inline const char* DTypeTag(DType d) {
  return d == DType::kF32 ? "f32" : d == DType::kF16 ? "f16" : "bf16";
}

inline std::vector<std::pair<std::string, Scenario>> OpScenarios() {
  std::vector<std::pair<std::string, Scenario>> out;
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  const PatchOp ops[] = {PatchOp::kZero,  PatchOp::kFill,  PatchOp::kAdd,
                         PatchOp::kScale, PatchOp::kClamp, PatchOp::kReplace};
  uint32_t seed = 10;
  for (DType dt : dtypes) {
    for (const BoxCase& bc : BoxCases()) {
      for (PatchOp op : ops) {
        Scenario sc;
        sc.initial = MakeTensor(dt, bc.shape, bc.layout, ++seed);
        PatchEntry e = Entry(0, op, Every(), bc.box, 2.5f, -1.0f, 1.25f);
        if (op == PatchOp::kScale) e.params.value = -1.5f;
        std::shared_ptr<const Tensor> operand;
        const std::vector<int64_t> view = ViewShape(bc);
        if (op == PatchOp::kAdd && !view.empty()) {  // a vector over the last box dim
          operand = std::make_shared<Tensor>(
              MakeTensor(DType::kF32, {view.back()}, Layout::kContiguous, ++seed));
        } else if (op == PatchOp::kReplace) {  // box-shaped, broadcast over the first dim
          std::vector<int64_t> shape = view;
          if (!shape.empty()) shape[0] = 1;
          const DType odt = dt == DType::kF32 ? DType::kF16 : DType::kF32;  // converts on read
          operand = std::make_shared<Tensor>(MakeTensor(odt, shape, Layout::kTransposed, ++seed));
        }
        Add(&sc, e, operand);
        sc.calls = 1;
        out.emplace_back(std::string(DTypeTag(dt)) + "_" + OpName(op) + "_" + bc.name,
                         std::move(sc));
      }
    }
  }
  return out;
}

inline std::vector<std::pair<std::string, Scenario>> SelectorScenarios() {
  std::vector<std::pair<std::string, Scenario>> out;
  const std::pair<const char*, CallSelector> sels[] = {
      {"prefill", Prefill()},    {"call3", Call(3)},
      {"calls2_4", Calls(2, 4)}, {"calls3_on", Calls(3, 0xffffffffu)},
      {"token3", Token(3)},      {"tokens2_3", Tokens(2, 3)},
      {"every", Every()},
  };
  for (const auto& [name, sel] : sels) {
    Scenario sc;
    sc.initial = MakeTensor(DType::kBF16, {1, 5, 8}, Layout::kContiguous, 77);
    Add(&sc, Entry(0, PatchOp::kZero, sel, {S(), I(1)}));
    sc.calls = 5;
    sc.tokens = {1, 2, 3, 4, 5};  // token 1 = the prefill
    out.emplace_back(std::string("selector_") + name, std::move(sc));
  }
  return out;
}

inline std::vector<std::pair<std::string, Scenario>> CompositionScenarios() {
  std::vector<std::pair<std::string, Scenario>> out;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Scenario sc;  // overlapping boxes: order matters (scale then add != add then scale)
    sc.initial = MakeTensor(dt, {3, 4, 8}, Layout::kPadded, 5);
    Add(&sc, Entry(0, PatchOp::kScale, Every(), {S(), S({}, 3)}, 2.0f));
    Add(&sc, Entry(0, PatchOp::kAdd, Every(), {S(), S(1), S(2, {}, 2)}),
        std::make_shared<Tensor>(MakeTensor(DType::kBF16, {3, 3, 1}, Layout::kContiguous, 6)));
    Add(&sc, Entry(1, PatchOp::kFill, Every(), {}, 9.0f));  // another site: must not fire
    Add(&sc, Entry(0, PatchOp::kClamp, Calls(2, 3), {S(), I(0)}, 0.0f, -0.5f, 0.5f));
    Add(&sc, Entry(0, PatchOp::kReplace, Call(3), {I(1), S(), S(4)}),
        std::make_shared<Tensor>(MakeTensor(DType::kF32, {4, 4}, Layout::kTransposed, 7)));
    sc.calls = 4;
    out.emplace_back(std::string("compose_") + DTypeTag(dt), std::move(sc));
  }
  return out;
}

// Row masks (the "rows" selector): before each call the host writes which rows of dim 0 each
// slot marks. A call at which an entry's slot marks no row does not fire it; rows at or past
// the written length are unmarked.
inline std::vector<std::pair<std::string, Scenario>> RowMaskScenarios() {
  using M = std::vector<uint8_t>;
  std::vector<std::pair<std::string, Scenario>> out;
  uint32_t seed = 40;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Scenario sc;  // the walk's rows are output rows
    sc.initial = MakeTensor(dt, {6, 8}, Layout::kPadded, ++seed);
    sc.max_masks = 2;
    sc.max_rows = 8;
    Add(&sc, Entry(0, PatchOp::kScale, Rows(1), {}, -2.0f));
    sc.masks = {{M{}, M{1, 0, 1, 1, 0}},            // rows 0, 2, 3 (row 5: past the length)
                {M{}, M{0, 0, 0, 0, 0, 0}},         // nothing marked: no fire
                {M{}, M{}},                         // nothing written: no fire
                {M{}, M{0, 0, 0, 0, 0, 7, 0, 1}}};  // row 5 (nonzero marks); row 7 is no row
    sc.calls = 4;
    out.emplace_back(std::string("rows_scale_") + DTypeTag(dt), std::move(sc));
    Scenario box;  // a box that selects columns, with an operand, on a transposed output
    box.initial = MakeTensor(dt, {5, 3, 8}, Layout::kTransposed, ++seed);
    box.max_masks = 1;
    box.max_rows = 5;
    Add(&box, Entry(0, PatchOp::kAdd, Rows(0), {S(), S(1), S(1, 7, 2)}),
        std::make_shared<Tensor>(MakeTensor(DType::kF32, {3}, Layout::kContiguous, ++seed)));
    box.masks = {{M{0, 1, 0, 1, 1}}, {M{1}}};
    box.calls = 3;  // call 3 keeps call 2's mask
    out.emplace_back(std::string("rows_box_columns_") + DTypeTag(dt), std::move(box));
  }
  Scenario one;  // 1-D: the walk's one row is dim 0, so elements are tested one by one
  one.initial = MakeTensor(DType::kF16, {11}, Layout::kContiguous, ++seed);
  one.max_masks = 1;
  one.max_rows = 16;
  Add(&one, Entry(0, PatchOp::kFill, Rows(0), {S(1, {}, 2)}, 3.0f));
  one.masks = {{M{1, 1, 0, 1, 1, 0, 0, 1, 1, 1}}};  // 10 of 11 rows written
  one.calls = 2;
  out.emplace_back("rows_1d_f16", std::move(one));
  Scenario comp;  // overlapping boxes with different masks and one without: who owns what
  comp.initial = MakeTensor(DType::kBF16, {6, 4, 8}, Layout::kPadded, ++seed);
  comp.max_masks = 2;
  comp.max_rows = 6;
  Add(&comp, Entry(0, PatchOp::kScale, Rows(0), {S(), S({}, 3)}, 2.0f));
  Add(&comp, Entry(0, PatchOp::kAdd, Rows(1), {S(), S(1), S(2, {}, 2)}),
      std::make_shared<Tensor>(MakeTensor(DType::kBF16, {3, 1}, Layout::kContiguous, ++seed)));
  Add(&comp, Entry(0, PatchOp::kClamp, Every(), {S(1, 5)}, 0.0f, -0.5f, 0.5f));
  Add(&comp, Entry(0, PatchOp::kFill, Rows(0), {I(-1), I(0)}, 7.0f));  // row 5 only
  comp.masks = {
      {M{1, 0, 1, 0, 0, 1}, M{0, 1, 1, 0, 1}}, {M{0, 0, 0}, M{1, 1, 1, 1, 1, 1}}, {M{}, M{}}};
  comp.calls = 3;
  out.emplace_back("rows_compose_bf16", std::move(comp));
  return out;
}

// Bigger than one block, so several blocks share the call counter and the ticket.
inline std::vector<std::pair<std::string, Scenario>> LargeScenarios() {
  std::vector<std::pair<std::string, Scenario>> out;
  Scenario scale;
  scale.initial = MakeTensor(DType::kBF16, {3, 257, 1001}, Layout::kPadded, 21);
  Add(&scale, Entry(0, PatchOp::kScale, Calls(2, 3), {}, 0.37f));
  scale.calls = 4;
  out.emplace_back("large_scale_bf16", std::move(scale));
  Scenario overlap;
  overlap.initial = MakeTensor(DType::kF32, {4, 300, 700}, Layout::kTransposed, 22);
  Add(&overlap, Entry(0, PatchOp::kScale, Every(), {S(), S(10, 250)}, 3.0f));
  Add(&overlap, Entry(0, PatchOp::kAdd, Every(), {S(1), S({}, {}, 3), S(5, -5, 2)}),
      std::make_shared<Tensor>(MakeTensor(DType::kF16, {300 / 3, 1}, Layout::kContiguous, 23)));
  Add(&overlap, Entry(0, PatchOp::kClamp, Call(2), {S(), S(100)}, 0.0f, -2.0f, 2.0f));
  overlap.calls = 2;
  out.emplace_back("large_overlap_f32", std::move(overlap));
  Scenario one;  // a one-position box in a prefill-sized output
  one.initial = MakeTensor(DType::kF16, {1, 512, 2048}, Layout::kContiguous, 24);
  Add(&one, Entry(0, PatchOp::kZero, Prefill(), {S(), I(1)}));
  one.calls = 2;
  out.emplace_back("large_one_position_f16", std::move(one));
  Scenario rows;  // every third row of the first 700, over many blocks
  rows.initial = MakeTensor(DType::kBF16, {777, 1030}, Layout::kContiguous, 25);
  rows.max_masks = 2;
  rows.max_rows = 1024;
  Add(&rows, Entry(0, PatchOp::kScale, Rows(1), {}, 0.37f));
  std::vector<uint8_t> thirds(700);
  for (size_t r = 0; r < thirds.size(); ++r) thirds[r] = r % 3 == 1;
  rows.masks = {{{}, thirds}};
  rows.calls = 2;
  out.emplace_back("large_rows_bf16", std::move(rows));
  Scenario rows_overlap;  // two masks over overlapping boxes, many rows
  rows_overlap.initial = MakeTensor(DType::kF32, {3000, 2, 64}, Layout::kPadded, 26);
  rows_overlap.max_masks = 2;
  rows_overlap.max_rows = 4096;
  Add(&rows_overlap, Entry(0, PatchOp::kAdd, Rows(0), {S(10, 2900)}, 1.0f));
  Add(&rows_overlap, Entry(0, PatchOp::kScale, Rows(1), {S(), I(1)}, 3.0f));
  std::vector<uint8_t> halves(3000), fifths(2990);
  for (size_t r = 0; r < halves.size(); ++r) halves[r] = r % 2;
  for (size_t r = 0; r < fifths.size(); ++r) fifths[r] = r % 5 == 0;
  rows_overlap.masks = {{halves, fifths}};
  rows_overlap.calls = 1;
  out.emplace_back("large_rows_overlap_f32", std::move(rows_overlap));
  return out;
}

// Writes raw bits (a NaN with a payload, -0.0, ...) as element i of a contiguous tensor.
inline void SetBits(Tensor* t, int64_t i, uint32_t f32_bits) {
  if (t->dtype == DType::kF32) {
    std::memcpy(t->bytes.data() + 4 * i, &f32_bits, 4);
  } else {
    const uint16_t h = t->dtype == DType::kF16
                           ? static_cast<uint16_t>((f32_bits >> 16 & 0x8000u) | 0x7e01u)
                           : static_cast<uint16_t>(f32_bits >> 16);
    const bool nan = (f32_bits & 0x7fffffffu) > 0x7f800000u;
    uint16_t bits = h;
    if (!nan)
      bits = t->dtype == DType::kF16 ? FloatToHalf(BitsFloat(f32_bits))
                                     : FloatToBf16(BitsFloat(f32_bits));
    std::memcpy(t->bytes.data() + 2 * i, &bits, 2);
  }
}

// NaNs with payloads, infinities and -0.0 through add, scale and clamp: inf + -inf, inf * 0
// and NaN inputs make NaNs, which host and device must store with the same bits.
constexpr uint32_t kSpecialBits[] = {0x7fc00123u, 0x7f800000u, 0xff800000u, 0x80000000u,
                                     0x3f800000u, 0xffc00456u, 0x40400000u, 0xc0400000u};

inline std::vector<std::pair<std::string, Scenario>> SpecialValueScenarios() {
  std::vector<std::pair<std::string, Scenario>> out;
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Scenario sc;
    sc.initial = MakeTensor(dt, {3, 8}, Layout::kContiguous, 31);
    for (int64_t row = 0; row < 3; ++row)
      for (int64_t i = 0; i < 8; ++i) SetBits(&sc.initial, row * 8 + i, kSpecialBits[i]);
    auto operand = std::make_shared<Tensor>(MakeTensor(DType::kF32, {8}));
    const uint32_t addend[] = {0x3f800000u, 0xff800000u, 0x7f800000u, 0x80000000u,
                               0x7fc00789u, 0x3f800000u, 0x3f800000u, 0x00000000u};
    for (int64_t i = 0; i < 8; ++i) SetBits(operand.get(), i, addend[i]);
    Add(&sc, Entry(0, PatchOp::kAdd, Every(), {I(0)}), operand);
    Add(&sc, Entry(0, PatchOp::kScale, Every(), {I(1)}, 0.0f));
    Add(&sc, Entry(0, PatchOp::kClamp, Every(), {I(2)}, 0.0f, -1.0f, 1.0f));
    sc.calls = 1;
    out.emplace_back(std::string("special_values_") + DTypeTag(dt), std::move(sc));
  }
  return out;
}

inline std::vector<std::pair<std::string, Scenario>> AllScenarios() {
  auto all = OpScenarios();
  for (auto* more :
       {&SelectorScenarios, &CompositionScenarios, &SpecialValueScenarios, &RowMaskScenarios})
    for (auto& s : (*more)()) all.push_back(std::move(s));
  return all;
}

}  // namespace tokentrace::patch::testing
