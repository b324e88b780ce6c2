// Semantics shared by the host and the device: element conversion, the ops, selector matching,
// box resolution and operand broadcasting. Both apply paths call exactly these functions, so
// host and device results are identical by construction (f32 bit-identical: every op is one
// IEEE operation in float32; f16/bf16 round once, to nearest even, by the same hand-written
// conversions on both sides, not by the CUDA intrinsics).
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/patch_table.h"

#if defined(__CUDACC__)
#define TT_HD __host__ __device__ __forceinline__
#else
#define TT_HD inline
#endif
#if defined(__CUDA_ARCH__)
#define TT_UNROLL _Pragma("unroll")
#else
#define TT_UNROLL
#endif

namespace tokentrace::patch {

TT_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

TT_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

TT_HD float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));  // inf / NaN payload
  if (exp != 0) return BitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return BitsFloat(sign);
  int e = 113;  // subnormal: normalize mant * 2^-24
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return BitsFloat(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13));
}

// Round to nearest, ties to even.
TT_HD uint16_t FloatToHalf(float f) {
  uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
  if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 -> inf
  if (u < 0x38800000u) {                                               // below 2^-14
    if (u <= 0x33000000u) return static_cast<uint16_t>(sign);          // <= 2^-25 -> 0
    const uint32_t e = u >> 23;
    const uint32_t m = (u & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14 .. 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (((u >> 23) - 112u) << 10) | ((u >> 13) & 0x3ffu);
  const uint32_t rem = u & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | r);
}

TT_HD float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

TT_HD uint16_t FloatToBf16(float f) {
  const uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

TT_HD bool IsFloatDType(uint32_t dtype) {
#define TT_IS_DTYPE_(name) dtype == static_cast<uint32_t>(DType::name) ||
  return TT_PATCH_EDITABLE_DTYPES(TT_IS_DTYPE_) false;
#undef TT_IS_DTYPE_
}

TT_HD float LoadAsFloat(const void* base, int64_t offset, uint32_t dtype) {
  if (dtype == static_cast<uint32_t>(DType::kF32)) return static_cast<const float*>(base)[offset];
  const uint16_t bits = static_cast<const uint16_t*>(base)[offset];
  return dtype == static_cast<uint32_t>(DType::kF16) ? HalfToFloat(bits) : Bf16ToFloat(bits);
}

// Every NaN is stored as the one quiet NaN 0x7fc00000 (f16 0x7e00, bf16 0x7fc0): GPUs make
// 0x7fffffff from an arithmetic NaN while x86 keeps the input's payload (and makes 0xffc00000
// from inf - inf), so without this the host and device results would differ in NaN bits.
constexpr uint32_t kCanonicalNanBits = 0x7fc00000u;

TT_HD void StoreFromFloat(void* base, int64_t offset, uint32_t dtype, float v) {
  if ((FloatBits(v) & 0x7fffffffu) > 0x7f800000u) v = BitsFloat(kCanonicalNanBits);
  if (dtype == static_cast<uint32_t>(DType::kF32)) {
    static_cast<float*>(base)[offset] = v;
    return;
  }
  static_cast<uint16_t*>(base)[offset] =
      dtype == static_cast<uint32_t>(DType::kF16) ? FloatToHalf(v) : FloatToBf16(v);
}

// x: the current element in float32; operand: the broadcast operand element (ignored by ops
// that take none).
TT_HD float ApplyOp(uint32_t op, const OpParams& p, float x, float operand) {
  switch (static_cast<PatchOp>(op)) {
    case PatchOp::kZero:
      return 0.0f;
    case PatchOp::kFill:
      return p.value;
    case PatchOp::kAdd:
      return x + operand;
    case PatchOp::kScale:
      return x * p.value;
    case PatchOp::kClamp:
      return x < p.lo ? p.lo : (x > p.hi ? p.hi : x);
    case PatchOp::kReplace:
      return operand;
  }
  return x;
}

// The table's row masks as the apply reads them: a view of the arena's mask regions, in the
// table's address space (device addresses in the kernel). counts == nullptr: no masks to read
// (validation before any table exists); a rows entry then resolves with no row marked.
struct RowMaskView {
  const RowMaskCounts* counts;  // [max_masks]
  const uint8_t* rows;          // [max_masks * max_rows]
  uint32_t max_masks;
  uint32_t max_rows;
};

TT_HD RowMaskView MasksOf(const PatchTable& t) {
  RowMaskView m;
  m.counts = t.mask_counts;
  m.rows = t.row_masks;
  m.max_masks = t.max_masks;
  m.max_rows = t.max_rows;
  return m;
}

// A rows selector whose slot is beyond the table matches, so the resolve records why it cannot
// apply (kBadMaskSlot) instead of the entry silently never firing; tables refuse such entries
// when they are built, so only a hand-made table gets here.
TT_HD bool SelectorMatches(const CallSelector& s, uint32_t call, uint32_t token,
                           const RowMaskView& masks) {
  switch (static_cast<SelectorKind>(s.kind)) {
    case SelectorKind::kEvery:
      return true;
    case SelectorKind::kCallEq:
      return call == s.first;
    case SelectorKind::kCallRange:
      return call >= s.first && call <= s.last;
    case SelectorKind::kTokenEq:
      return token != 0 && token == s.first;
    case SelectorKind::kTokenRange:
      return token != 0 && token >= s.first && token <= s.last;
    case SelectorKind::kRows:
      return s.first >= masks.max_masks ||
             (masks.counts != nullptr && masks.counts[s.first].mask_marked != 0);
  }
  return false;
}

// A box resolved against one output shape. Per output dimension d (0 .. ndim-1) the box holds
// start[d] + i * step[d] for i in [0, count[d]). view_* is the box shape without integer-index
// dims: the shape the operand broadcasts against.
struct ResolvedBox {
  int32_t ndim;
  int32_t view_ndim;
  int64_t start[kMaxPatchDims];
  int64_t step[kMaxPatchDims];
  int64_t count[kMaxPatchDims];
  int64_t view_shape[kMaxPatchDims];
  int64_t total;                // product of count
  uint8_t kept[kMaxPatchDims];  // 0 for integer-index dims
};

// Everything one apply needs about one matching entry, in output dimensions.
struct ResolvedEntry {
  ResolvedBox box;
  int64_t operand_stride[kMaxPatchDims];  // per output dim; 0 where broadcast or dropped
  const void* operand;                    // nullptr: use params.value
  uint32_t operand_dtype;
  uint32_t op;
  OpParams params;
  uint32_t entry_index;
  uint32_t valid;  // 0: matched but skipped (error recorded)
  // A rows entry's mask: only elements whose dim-0 index is a marked row below row_mask_len
  // are edited (RowMarked). row_mask_len < 0: not a rows entry, every row of the box is.
  // A rows entry only resolves against an output with ndim >= 1.
  const uint8_t* row_mask;
  int64_t row_mask_len;
};

TT_HD bool HasRowMask(const ResolvedEntry& r) { return r.row_mask_len >= 0; }

// Whether the elements of output row `row` (a dim-0 index, >= 0) are edited by r. The one test
// every element walk makes (host rows, kernel rows and elements), so all skip the same rows.
TT_HD bool RowMarked(const ResolvedEntry& r, int64_t row) {
  return r.row_mask_len < 0 || (row < r.row_mask_len && r.row_mask[row] != 0);
}

TT_HD PatchErrorInfo MakeError(PatchError code, int32_t dim = -1, int64_t a = 0, int64_t b = 0) {
  PatchErrorInfo e;
  e.code = static_cast<uint32_t>(code);
  e.dim = dim;
  e.a = a;
  e.b = b;
  return e;
}

TT_HD PatchErrorInfo ResolveBoxCore(const IndexBox& box, int ndim, const int64_t* shape,
                                    ResolvedBox* out) {
  if (ndim < 0 || ndim > kMaxPatchDims) return MakeError(PatchError::kOutputRank, -1, ndim);
  if (box.ndim < 0 || box.ndim > ndim) return MakeError(PatchError::kBoxRank, -1, box.ndim, ndim);
  out->ndim = ndim;
  out->view_ndim = 0;
  out->total = 1;
  for (int d = 0; d < ndim; ++d) {
    const int64_t n = shape[d];
    if (n < 0) return MakeError(PatchError::kBadShape, d, n);
    int64_t start = 0, step = 1, count = n;
    bool kept = true;
    if (d < box.ndim) {
      const DimSlice& s = box.dims[d];
      if (s.flags & kDimIndex) {
        start = s.start < 0 ? s.start + n : s.start;
        if (start < 0 || start >= n) return MakeError(PatchError::kIndexOutOfRange, d, s.start, n);
        count = 1;
        kept = false;
      } else {
        step = s.step;
        if (step < 1) return MakeError(PatchError::kBadStep, d, step);
        // Python's slice.indices() for step > 0.
        int64_t stop = n;
        if (s.flags & kDimHasStart) {
          start = s.start < 0 ? s.start + n : s.start;
          start = start < 0 ? 0 : (start > n ? n : start);
        }
        if (s.flags & kDimHasStop) {
          stop = s.stop < 0 ? s.stop + n : s.stop;
          stop = stop < 0 ? 0 : (stop > n ? n : stop);
        }
        count = stop > start ? (stop - start - 1) / step + 1 : 0;  // no overflow for any step
      }
    }
    out->start[d] = start;
    out->step[d] = step;
    out->count[d] = count;
    out->kept[d] = kept ? 1 : 0;
    if (kept) out->view_shape[out->view_ndim++] = count;
    out->total *= count;
  }
  return MakeError(PatchError::kOk);
}

// Checks that do not depend on the output (op, selector, step, clamp bounds, operand dtype).
// max_masks: the table's row mask slots (a rows selector's slot must be below it).
TT_HD PatchErrorInfo CheckEntryStatic(const PatchEntry& e, uint32_t max_masks) {
  if (e.op > static_cast<uint32_t>(PatchOp::kReplace))
    return MakeError(PatchError::kBadOp, -1, e.op);
  const CallSelector& s = e.selector;
  const uint32_t kind = s.kind;
  if (kind > static_cast<uint32_t>(SelectorKind::kRows))
    return MakeError(PatchError::kBadSelector, -1, kind, 0);
  if (kind == static_cast<uint32_t>(SelectorKind::kRows)) {
    if (s.first >= max_masks) return MakeError(PatchError::kBadMaskSlot, -1, s.first, max_masks);
  } else if (kind != static_cast<uint32_t>(SelectorKind::kEvery)) {
    const bool range = kind == static_cast<uint32_t>(SelectorKind::kCallRange) ||
                       kind == static_cast<uint32_t>(SelectorKind::kTokenRange);
    if (s.first == 0 || (range && s.last < s.first))
      return MakeError(PatchError::kBadSelector, -1, kind, 1);
  }
  if (e.box.ndim < 0 || e.box.ndim > kMaxPatchDims)
    return MakeError(PatchError::kBoxRank, -1, e.box.ndim, kMaxPatchDims);
  for (int d = 0; d < e.box.ndim; ++d) {
    const DimSlice& ds = e.box.dims[d];
    if (!(ds.flags & kDimIndex) && ds.step < 1) return MakeError(PatchError::kBadStep, d, ds.step);
  }
  const PatchOp op = static_cast<PatchOp>(e.op);
  if (op == PatchOp::kClamp && !(e.params.lo <= e.params.hi))  // also rejects NaN bounds
    return MakeError(PatchError::kBadClamp);
  const bool needs_operand = op == PatchOp::kReplace;
  const bool takes_operand = needs_operand || op == PatchOp::kAdd;
  if (needs_operand && e.operand.data == nullptr) return MakeError(PatchError::kOperandMissing);
  if (takes_operand && e.operand.data != nullptr) {
    if (!IsFloatDType(e.operand.dtype))
      return MakeError(PatchError::kOperandDtype, -1, e.operand.dtype);
    if (e.operand.ndim < 0 || e.operand.ndim > kMaxPatchDims)
      return MakeError(PatchError::kOperandShape, -1, e.operand.ndim, -1);
  }
  return MakeError(PatchError::kOk);
}

// Resolves one entry against one output: box, operand broadcast, dtypes, and a rows entry's
// mask (read from `masks` now: the apply that resolves it uses the mask as it is at this call).
TT_HD PatchErrorInfo ResolveEntryCore(const PatchEntry& e, uint32_t entry_index, int ndim,
                                      const int64_t* shape, uint32_t dtype,
                                      const RowMaskView& masks, ResolvedEntry* out) {
  PatchErrorInfo err = CheckEntryStatic(e, masks.max_masks);
  if (err.code != 0) return err;
  if (!IsFloatDType(dtype)) return MakeError(PatchError::kOutputDtype, -1, dtype);
  err = ResolveBoxCore(e.box, ndim, shape, &out->box);
  if (err.code != 0) return err;
  out->row_mask = nullptr;
  out->row_mask_len = -1;
  if (e.selector.kind == static_cast<uint32_t>(SelectorKind::kRows)) {
    if (ndim == 0) return MakeError(PatchError::kRowsScalarOutput);
    const uint32_t slot = e.selector.first;  // < max_masks: checked above
    out->row_mask_len = masks.counts != nullptr ? masks.counts[slot].mask_len : 0;
    if (out->row_mask_len > 0)
      out->row_mask = masks.rows + static_cast<size_t>(slot) * masks.max_rows;
  }
  out->op = e.op;
  out->params = e.params;
  out->entry_index = entry_index;
  out->valid = 1;
  out->operand = nullptr;
  out->operand_dtype = e.operand.dtype;
  for (int d = 0; d < kMaxPatchDims; ++d) out->operand_stride[d] = 0;
  const PatchOp op = static_cast<PatchOp>(e.op);
  if ((op != PatchOp::kAdd && op != PatchOp::kReplace) || e.operand.data == nullptr) return err;
  out->operand = e.operand.data;
  // numpy broadcasting, aligned right, of the operand against the view shape; extra leading
  // operand dims must be 1. The operand must not enlarge the box.
  const ResolvedBox& b = out->box;
  const int shift = b.view_ndim - e.operand.ndim;
  int64_t view_stride[kMaxPatchDims];
  for (int v = 0; v < kMaxPatchDims; ++v) view_stride[v] = 0;
  for (int k = 0; k < e.operand.ndim; ++k) {
    const int v = k + shift;
    const int64_t n = e.operand.shape[k];
    if (v < 0) {
      if (n != 1) return MakeError(PatchError::kOperandShape, k, n, -1);
      continue;
    }
    if (n == b.view_shape[v]) {
      view_stride[v] = n == 1 ? 0 : e.operand.strides[k];
    } else if (n != 1) {
      return MakeError(PatchError::kOperandShape, k, n, b.view_shape[v]);
    }
  }
  for (int d = 0, v = 0; d < b.ndim; ++d) {
    if (b.kept[d]) out->operand_stride[d] = view_stride[v++];
  }
  return err;
}

// Coordinates of output position o (per dim) inside box b, or false when o is not in the box.
// Loops run to kMaxPatchDims with a break so the compiler can unroll them and keep o/q in
// registers on the device.
TT_HD bool BoxContains(const ResolvedBox& b, const int64_t* o, int64_t* q) {
  TT_UNROLL
  for (int d = 0; d < kMaxPatchDims; ++d) {
    if (d >= b.ndim) break;
    const int64_t diff = o[d] - b.start[d];
    if (diff < 0) return false;
    const int64_t i = b.step[d] == 1 ? diff : diff / b.step[d];
    if (i * b.step[d] != diff || i >= b.count[d]) return false;
    q[d] = i;
  }
  return true;
}

// BoxContains, and the element's row is one the entry edits (its mask, if any, marks o[0]).
TT_HD bool EntryCovers(const ResolvedEntry& r, const int64_t* o, int64_t* q) {
  return BoxContains(r.box, o, q) && (!HasRowMask(r) || RowMarked(r, o[0]));
}

TT_HD float OperandAt(const ResolvedEntry& r, const int64_t* q) {
  if (r.operand == nullptr) return r.params.value;
  int64_t off = 0;
  TT_UNROLL
  for (int d = 0; d < kMaxPatchDims; ++d) {
    if (d >= r.box.ndim) break;
    off += q[d] * r.operand_stride[d];
  }
  return LoadAsFloat(r.operand, off, r.operand_dtype);
}

}  // namespace tokentrace::patch
