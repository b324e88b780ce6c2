// Test helpers shared by the host and device patch tests: strided tensors in host memory,
// entry builders, scenarios, and a reference implementation written with explicit index math
// (independent of cuda/patch_ops.h except for reading/writing stored elements).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cuda/patch_apply.h"
#include "cuda/patch_ops.h"
#include "cuda/patch_table.h"

namespace tokentrace::patch::testing {

inline size_t ElemSize(DType d) { return d == DType::kF32 ? 4 : 2; }

enum class Layout { kContiguous, kPadded, kTransposed };

// A strided tensor over a byte buffer (which may be larger than the tensor: padding).
struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape, strides;
  std::vector<uint8_t> bytes;

  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  int64_t Offset(const std::vector<int64_t>& idx) const {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides[d];
    return off;
  }
  float Get(const std::vector<int64_t>& idx) const {
    return LoadAsFloat(bytes.data(), Offset(idx), static_cast<uint32_t>(dtype));
  }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
};

inline Tensor MakeTensor(DType dtype, std::vector<int64_t> shape,
                         Layout layout = Layout::kContiguous, uint32_t seed = 1) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const int nd = static_cast<int>(shape.size());
  std::vector<int64_t> alloc = shape;  // the allocation's shape, in memory order
  std::vector<int> order(nd);          // memory dim k holds tensor dim order[k]
  for (int d = 0; d < nd; ++d) order[d] = d;
  if (layout == Layout::kTransposed && nd >= 2) std::swap(order[nd - 1], order[nd - 2]);
  for (int k = 0; k < nd; ++k) alloc[k] = shape[order[k]] + (layout == Layout::kPadded ? 2 : 0);
  t.strides.assign(nd, 0);
  int64_t stride = 1;
  for (int k = nd - 1; k >= 0; --k) {
    t.strides[order[k]] = stride;
    stride *= alloc[k];
  }
  t.bytes.assign(static_cast<size_t>(stride) * ElemSize(dtype), 0);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  const int64_t slots = stride;  // fill padding too: it must come back untouched
  for (int64_t i = 0; i < slots; ++i)
    StoreFromFloat(t.bytes.data(), i, static_cast<uint32_t>(dtype), dist(rng));
  return t;
}

// ---- Entry builders -------------------------------------------------------------------------

inline DimSlice S(std::optional<int64_t> start = std::nullopt,
                  std::optional<int64_t> stop = std::nullopt, int64_t step = 1) {
  DimSlice s{};
  s.step = step;
  if (start) s.start = *start, s.flags |= kDimHasStart;
  if (stop) s.stop = *stop, s.flags |= kDimHasStop;
  return s;
}
inline DimSlice I(int64_t index) {
  DimSlice s{};
  s.start = index;
  s.step = 1;
  s.flags = kDimIndex;
  return s;
}

inline CallSelector Sel(SelectorKind kind, uint32_t first = 0, uint32_t last = 0) {
  return CallSelector{static_cast<uint32_t>(kind), first, last, 0};
}
inline CallSelector Every() { return Sel(SelectorKind::kEvery); }
inline CallSelector Prefill() { return Sel(SelectorKind::kCallEq, 1); }
inline CallSelector Call(uint32_t k) { return Sel(SelectorKind::kCallEq, k); }
inline CallSelector Calls(uint32_t a, uint32_t b) { return Sel(SelectorKind::kCallRange, a, b); }
inline CallSelector Token(uint32_t k) { return Sel(SelectorKind::kTokenEq, k); }
inline CallSelector Tokens(uint32_t a, uint32_t b) { return Sel(SelectorKind::kTokenRange, a, b); }
inline CallSelector Rows(uint32_t slot) { return Sel(SelectorKind::kRows, slot, slot); }

inline PatchEntry Entry(uint32_t site, PatchOp op, CallSelector sel, std::vector<DimSlice> box,
                        float value = 0.0f, float lo = 0.0f, float hi = 0.0f) {
  PatchEntry e{};
  e.site_id = site;
  e.op = static_cast<uint32_t>(op);
  e.selector = sel;
  e.params = OpParams{value, lo, hi, 0.0f};
  e.box.ndim = static_cast<int32_t>(box.size());
  for (size_t d = 0; d < box.size(); ++d) e.box.dims[d] = box[d];
  return e;
}

// Points the entry's operand at `t` (host memory; the device test rewrites the pointer).
inline void SetOperand(PatchEntry* e, const Tensor& t) {
  e->operand.data = t.data();
  e->operand.dtype = static_cast<uint32_t>(t.dtype);
  e->operand.ndim = t.ndim();
  for (int d = 0; d < t.ndim(); ++d) {
    e->operand.shape[d] = t.shape[d];
    e->operand.strides[d] = t.strides[d];
  }
}

// ---- Reference ------------------------------------------------------------------------------

// masks: the rows written to each slot so far (a rows selector matches when one is nonzero).
inline bool RefMatches(const CallSelector& s, uint32_t call, uint32_t token,
                       const std::vector<std::vector<uint8_t>>& masks) {
  switch (s.kind) {
    case 0:
      return true;
    case 1:
      return call == s.first;
    case 2:
      return s.first <= call && call <= s.last;
    case 3:
      return token >= 1 && token == s.first;
    case 4:
      return token >= 1 && s.first <= token && token <= s.last;
    case 5:
      for (uint8_t r : masks.at(s.first))
        if (r != 0) return true;
      return false;
  }
  return false;
}

// Python's range(*slice(start, stop, step).indices(n)), or [i] for an integer index.
inline std::vector<int64_t> RefIndices(const DimSlice& s, int64_t n) {
  if (s.flags & kDimIndex) return {s.start < 0 ? s.start + n : s.start};
  auto norm = [n](int64_t v) { return std::min(std::max(v < 0 ? v + n : v, int64_t{0}), n); };
  const int64_t start = (s.flags & kDimHasStart) ? norm(s.start) : 0;
  const int64_t stop = (s.flags & kDimHasStop) ? norm(s.stop) : n;
  std::vector<int64_t> out;
  for (int64_t i = start; i < stop; i += s.step) out.push_back(i);
  return out;
}

// Rounds like the stored dtype, by independent means: _Float16 (GCC's software conversion) for
// f16 and a nearest-candidate search for bf16.
inline float RefRound(float v, DType d) {
  if (d == DType::kF32) return v;
  if (d == DType::kF16) return static_cast<float>(static_cast<_Float16>(v));
  if (std::isnan(v)) return v;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t lo_bits = u & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
  float lo, hi;
  std::memcpy(&lo, &lo_bits, 4);
  std::memcpy(&hi, &hi_bits, 4);
  // Past the largest finite value the upper candidate is infinity; IEEE rounds as if it were
  // 2^128 (the next value with an unbounded exponent).
  const double hi_d = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), hi) : hi;
  const double dl = std::fabs(static_cast<double>(v) - lo), dh = std::fabs(hi_d - v);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return ((lo_bits >> 16) & 1u) ? hi : lo;
}

// Applies one entry to `out` (host), element by element, from first principles. rows: a rows
// entry's mask (only elements whose dim-0 index is a nonzero row are edited), else null.
inline void RefApply(const PatchEntry& e, Tensor* out, const Tensor* operand,
                     const std::vector<uint8_t>* rows = nullptr) {
  const int nd = out->ndim();
  std::vector<std::vector<int64_t>> lists(nd);
  std::vector<bool> kept(nd, true);
  for (int d = 0; d < nd; ++d) {
    DimSlice full = S();
    const DimSlice& s = d < e.box.ndim ? e.box.dims[d] : full;
    lists[d] = RefIndices(s, out->shape[d]);
    kept[d] = !(s.flags & kDimIndex);
    if (lists[d].empty()) return;
  }
  std::vector<size_t> pos(nd, 0);
  while (true) {
    std::vector<int64_t> idx(nd), view;
    for (int d = 0; d < nd; ++d) {
      idx[d] = lists[d][pos[d]];
      if (kept[d]) view.push_back(static_cast<int64_t>(pos[d]));
    }
    float opv = e.params.value;
    if (operand) {  // right-aligned broadcasting: size-1 operand dims read index 0
      std::vector<int64_t> oi(operand->ndim(), 0);
      for (int k = operand->ndim() - 1, v = static_cast<int>(view.size()) - 1; k >= 0 && v >= 0;
           --k, --v)
        oi[k] = operand->shape[k] == 1 ? 0 : view[v];
      opv = operand->Get(oi);
    }
    const bool marked = rows == nullptr || (nd > 0 && static_cast<size_t>(idx[0]) < rows->size() &&
                                            (*rows)[static_cast<size_t>(idx[0])] != 0);
    const float x = out->Get(idx);
    float r = x;
    switch (static_cast<PatchOp>(e.op)) {
      case PatchOp::kZero:
        r = 0.0f;
        break;
      case PatchOp::kFill:
        r = e.params.value;
        break;
      case PatchOp::kAdd:
        r = x + opv;
        break;
      case PatchOp::kScale:
        r = x * e.params.value;
        break;
      case PatchOp::kClamp:
        r = std::isnan(x) ? x : std::min(std::max(x, e.params.lo), e.params.hi);
        break;
      case PatchOp::kReplace:
        r = opv;
        break;
    }
    if (marked)
      StoreFromFloat(out->data(), out->Offset(idx), static_cast<uint32_t>(out->dtype),
                     RefRound(r, out->dtype));
    int d = nd - 1;
    for (; d >= 0; --d) {
      if (++pos[d] < lists[d].size()) break;
      pos[d] = 0;
    }
    if (d < 0) return;
  }
}

// ---- What the benchmarks apply (patch_bench on the host, patch_device_bench on the device) ----

inline const std::vector<int64_t> kBenchOneShape = {1, 512, 2048};    // a projection at prefill
inline const std::vector<int64_t> kBenchFullShape = {1, 4096, 4096};  // 32 MiB of bf16

// one_position: tt.zero of column 1; else a scale of the whole output. enabled: the entry is on
// the applied site 0; disabled: on site 1, so site 0 has none and only its counter advances.
inline std::vector<PatchEntry> BenchEntries(bool one_position, bool enabled) {
  const uint32_t site = enabled ? 0 : 1;
  if (one_position) return {Entry(site, PatchOp::kZero, Every(), {S(), I(1)})};
  return {Entry(site, PatchOp::kScale, Every(), {}, 0.5f)};
}

// ---- Scenarios ------------------------------------------------------------------------------

// A sequence of calls at one site; each call edits a fresh copy of `initial` (as each forward
// produces a new output). tokens[i] is the token counter during call i+1 (empty: never set).
// masks[i][k] is written to row mask slot k before call i+1 (as a serving engine writes them
// before each step); slots not listed, and calls past masks.size(), keep their masks.
struct Scenario {
  std::vector<PatchEntry> entries;                        // operand pointers are set by each runner
  std::vector<std::shared_ptr<const Tensor>> operand_of;  // per entry, may be null
  Tensor initial;
  uint32_t site = 0;
  uint32_t max_sites = 4;
  int calls = 1;
  std::vector<uint32_t> tokens;
  uint32_t max_masks = 0;
  uint32_t max_rows = 0;
  std::vector<std::vector<std::vector<uint8_t>>> masks;
};

// The masks every slot holds during call c (1-based), as the runners write them.
inline void UpdateMasks(const Scenario& sc, int c, std::vector<std::vector<uint8_t>>* current) {
  current->resize(sc.max_masks);
  if (static_cast<size_t>(c) > sc.masks.size()) return;
  const auto& written = sc.masks[c - 1];
  for (size_t k = 0; k < written.size(); ++k) (*current)[k] = written[k];
}

// Keeps gtest's parameter listings short.
inline void PrintTo(const Scenario& sc, std::ostream* os) {
  *os << sc.entries.size() << " entries, " << sc.calls << " calls";
}

struct Outcome {
  std::vector<Tensor> outputs;  // after each call
  std::vector<uint64_t> fires;
};

inline Outcome RunReference(const Scenario& sc) {
  Outcome o;
  o.fires.assign(sc.entries.size(), 0);
  std::vector<std::vector<uint8_t>> masks;
  for (int c = 1; c <= sc.calls; ++c) {
    const uint32_t token = sc.tokens.empty() ? 0 : sc.tokens[c - 1];
    UpdateMasks(sc, c, &masks);
    Tensor t = sc.initial;
    for (size_t i = 0; i < sc.entries.size(); ++i) {
      const PatchEntry& e = sc.entries[i];
      if (e.site_id != sc.site || !RefMatches(e.selector, c, token, masks)) continue;
      const bool rows = e.selector.kind == static_cast<uint32_t>(SelectorKind::kRows);
      RefApply(e, &t, sc.operand_of[i].get(), rows ? &masks.at(e.selector.first) : nullptr);
      ++o.fires[i];
    }
    o.outputs.push_back(std::move(t));
  }
  return o;
}

inline void Add(Scenario* sc, PatchEntry e, std::shared_ptr<const Tensor> operand = nullptr) {
  sc->entries.push_back(e);
  sc->operand_of.push_back(std::move(operand));
}

// Runs the scenario through ApplyPatchesHost.
inline Outcome RunHost(const Scenario& sc, std::string* error) {
  Outcome o;
  std::vector<PatchEntry> entries = sc.entries;
  for (size_t i = 0; i < entries.size(); ++i)
    if (sc.operand_of[i]) SetOperand(&entries[i], *sc.operand_of[i]);
  auto table = HostPatchTable::Create(entries, sc.max_sites, sc.max_masks, sc.max_rows, error);
  if (!table) return o;
  for (int c = 1; c <= sc.calls; ++c) {
    if (!sc.tokens.empty()) SetTokenHost(table->table(), sc.tokens[c - 1]);
    if (static_cast<size_t>(c) <= sc.masks.size()) {
      for (size_t k = 0; k < sc.masks[c - 1].size(); ++k) {
        const std::vector<uint8_t>& rows = sc.masks[c - 1][k];
        if (!SetRowMaskHost(table->table(), static_cast<uint32_t>(k), rows.data(),
                            static_cast<uint32_t>(rows.size()), error))
          return o;
      }
    }
    Tensor t = sc.initial;
    const ApplyStatus st = ApplyPatchesHost(table->table(), sc.site, t.data(), t.dtype, t.ndim(),
                                            t.shape.data(), t.strides.data());
    if (!st.ok && error) *error = st.message;
    o.outputs.push_back(std::move(t));
  }
  o.fires = ReadCountersHost(table->table()).fires;
  return o;
}

}  // namespace tokentrace::patch::testing
