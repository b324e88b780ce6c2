// The per-thread element walks of the apply kernel, written against an explicit grid position
// so the host can run them for every (block, thread) of a chosen grid and check the kernel's
// index math without a GPU (tests/cuda/patch_host_test.cc, "GridEmulation"). The kernel in
// patch_apply.cu passes blockIdx/threadIdx; nothing here touches shared memory or atomics.
#pragma once

#include <cstdint>

#include "cuda/patch_ops.h"

#if defined(__CUDACC__)
#define TT_HD_COLD inline __host__ __device__ __noinline__
#else
#define TT_HD_COLD inline
#endif

namespace tokentrace::patch {

struct GridPos {
  int64_t block, blocks, thread, threads;
};

// The output as the kernel sees it (passed by value as a launch parameter).
struct OutputDesc {
  int32_t ndim;
  uint32_t dtype;
  int64_t shape[kMaxPatchDims];
  int64_t strides[kMaxPatchDims];
};

// The common case: one entry matches. The box is walked as rows of its last dimension, so a
// row's base offset is computed once and the elements of a row are independent loads (4 in
// flight per thread) that coalesce when the output's last dimension is contiguous. Ops that
// overwrite (zero, fill, replace) do not read the output.
TT_HD void ApplySingle(const GridPos& g, const ResolvedEntry& r, void* data,
                       const OutputDesc& out) {
  const ResolvedBox& b = r.box;
  const int nd = b.ndim;
  if (b.total == 0) return;
  const int last = nd - 1;
  const int64_t inner = nd > 0 ? b.count[last] : 1;
  const int64_t rows = b.total / inner;
  const int64_t ostep = nd > 0 ? b.step[last] * out.strides[last] : 0;
  const int64_t pstep = nd > 0 ? r.operand_stride[last] : 0;
  const int64_t ostart = nd > 0 ? b.start[last] * out.strides[last] : 0;
  // Short rows: several rows per block iteration, one element per thread.
  const int64_t per_iter = inner >= g.threads ? 1 : g.threads / inner;
  const int64_t sub_row = per_iter > 1 ? g.thread / inner : 0;
  const int64_t col0 = per_iter > 1 ? g.thread % inner : g.thread;
  const int64_t col_stride = per_iter > 1 ? inner : g.threads;
  if (sub_row >= per_iter) return;
  const PatchOp op = static_cast<PatchOp>(r.op);
  const bool reads_x = op == PatchOp::kAdd || op == PatchOp::kScale || op == PatchOp::kClamp;
  // A rows entry: a row of the walk lies in one output row (dim 0) when nd >= 2, and is skipped
  // whole when that row is unmarked; when nd == 1 the walk's one row is dim 0 itself, so each
  // element is tested.
  const bool mask_rows = HasRowMask(r) && nd >= 2;
  const bool mask_elements = HasRowMask(r) && nd == 1;
  for (int64_t row = g.block * per_iter + sub_row; row < rows; row += g.blocks * per_iter) {
    int64_t rem = row, obase = ostart, pbase = 0, row0 = 0;
    TT_UNROLL
    for (int d = kMaxPatchDims - 2; d >= 0; --d) {
      if (d < last) {
        const int64_t digit = d == 0 ? rem : rem % b.count[d];
        rem = d == 0 ? 0 : rem / b.count[d];
        obase += (b.start[d] + digit * b.step[d]) * out.strides[d];
        pbase += digit * r.operand_stride[d];
        if (d == 0) row0 = b.start[0] + digit * b.step[0];
      }
    }
    if (mask_rows && !RowMarked(r, row0)) continue;
    for (int64_t col = col0; col < inner; col += 4 * col_stride) {
      float x[4], p[4];
      bool edit[4];
      TT_UNROLL
      for (int k = 0; k < 4; ++k) {
        const int64_t cc = col + k * col_stride;
        edit[k] = cc < inner && (!mask_elements || RowMarked(r, b.start[0] + cc * b.step[0]));
        if (edit[k]) {
          x[k] = reads_x ? LoadAsFloat(data, obase + cc * ostep, out.dtype) : 0.0f;
          p[k] = r.operand ? LoadAsFloat(r.operand, pbase + cc * pstep, r.operand_dtype)
                           : r.params.value;
        }
      }
      TT_UNROLL
      for (int k = 0; k < 4; ++k) {
        const int64_t cc = col + k * col_stride;
        if (edit[k])
          StoreFromFloat(data, obase + cc * ostep, out.dtype, ApplyOp(r.op, r.params, x[k], p[k]));
      }
    }
  }
}

// Several entries match: element ownership as described at the top of the file.
TT_HD_COLD void ApplyEntry(const GridPos& g, const ResolvedEntry* slots, uint32_t j, uint32_t n,
                           void* data, const OutputDesc& out) {
  const ResolvedEntry& r = slots[j];
  const ResolvedBox& b = r.box;
  const int nd = b.ndim;
  int64_t lin = static_cast<int64_t>(g.block) * g.threads + g.thread;
  if (lin >= b.total) return;
  const int64_t stride = static_cast<int64_t>(g.blocks) * g.threads;
  // Mixed-radix digits of this thread's first element and of the grid stride, so the loop
  // advances with carries instead of dividing per element. Digit 0 is unbounded.
  int64_t c[kMaxPatchDims], s[kMaxPatchDims];
  int64_t rc = lin, rs = stride;
  TT_UNROLL
  for (int d = kMaxPatchDims - 1; d >= 1; --d) {
    c[d] = s[d] = 0;
    if (d < nd) {
      c[d] = rc % b.count[d];
      rc /= b.count[d];
      s[d] = rs % b.count[d];
      rs /= b.count[d];
    }
  }
  c[0] = rc;
  s[0] = rs;
  for (; lin < b.total; lin += stride) {
    int64_t o[kMaxPatchDims], q[kMaxPatchDims];
    int64_t off = 0;
    TT_UNROLL
    for (int d = 0; d < kMaxPatchDims; ++d) {
      if (d < nd) {
        o[d] = b.start[d] + c[d] * b.step[d];
        off += o[d] * out.strides[d];
      }
    }
    // Entries cover their box's marked rows only (EntryCovers): an element of j's box in a row j
    // does not edit is left to the later entries that do, whose own walks find it.
    bool owned = !HasRowMask(r) || RowMarked(r, o[0]);
    for (uint32_t i = 0; i < j && owned; ++i) {
      if (slots[i].valid && EntryCovers(slots[i], o, q)) owned = false;
    }
    if (owned) {
      float x = LoadAsFloat(data, off, out.dtype);
      x = ApplyOp(r.op, r.params, x, OperandAt(r, c));
      for (uint32_t k = j + 1; k < n; ++k) {
        const ResolvedEntry& rk = slots[k];
        if (rk.valid && EntryCovers(rk, o, q)) x = ApplyOp(rk.op, rk.params, x, OperandAt(rk, q));
      }
      StoreFromFloat(data, off, out.dtype, x);
    }
    int64_t carry = 0;
    TT_UNROLL
    for (int d = kMaxPatchDims - 1; d >= 1; --d) {
      if (d < nd) {
        c[d] += s[d] + carry;
        carry = c[d] >= b.count[d] ? 1 : 0;
        if (carry) c[d] -= b.count[d];
      }
    }
    c[0] += s[0] + carry;
  }
}

}  // namespace tokentrace::patch
