// The patch table: a plain, versioned layout shared by the host and the device.
//
// Hermetic: no CUDA, torch or standard-library container types, so the same bytes are read by
// the apply kernel (cuda/patch_apply.cu), by the host implementation (patch_apply_host.cc) and
// by the Python binding (which may mirror these structs with ctypes; every offset below is
// pinned by a static_assert, and `version` changes whenever one of them does).
//
// One table is one arena. Pointers in the header point *into the same arena*, in the address
// space where the table is used (device addresses for a device table, host addresses for a host
// table); LayoutPatchTable() in patch_apply.h writes them.
//
//   arena offset                    contents                                  written by
//   ----------------------------    ---------------------------------------   -----------------
//   0                               PatchTable header (88 B)                  host, at build
//   88                              PatchEntry entries[capacity] (392 B each)  host, at build;
//                                     .fires / .skips / .last_error             apply kernel
//   88 + 392*capacity               uint32 site_calls[max_sites]              apply kernel
//   + 4*max_sites                   uint32 site_done[max_sites]               apply kernel
//                                     (last-block tickets; 0 between launches)
//   + 4*max_sites                   uint32 token                              token kernel/host
//   (rounded up to 8 bytes: M)
//   M                               RowMaskCounts mask_counts[max_masks]      host (set_row_mask),
//                                     (uint32 mask_len, uint32 mask_marked)     reset
//   M + 8*max_masks                 uint8 row_masks[max_masks][max_rows]      host (set_row_mask)
//   (rounded up to 8 bytes)
//
// Counters are 1-based: site_calls[s] is the number of apply calls made for site s so far, so
// the call being applied is site_calls[s] + 1 (call 1 = the prefill). token is the 1-based index
// of the token being generated (token 1 = the prefill); 0 means "before the first token", and
// no token selector matches it.
//
// Row masks (the "rows" selector, for serving engines that flatten many requests along dim 0
// of an output): slot k is row_masks[k][0 .. mask_counts[k].mask_len), one byte per row,
// nonzero = marked; rows at or past mask_len are unmarked. The host writes a slot before each
// engine step (SetRowMaskHost / SetRowMaskDevice, stream-ordered on the device); the regions
// are allocated once at their largest size, so a captured graph reads them at a fixed address.
// mask_marked counts the marked rows: an entry on a slot with none does not match the call.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tokentrace::patch {

inline constexpr uint32_t kPatchTableMagic = 0x54505454u;  // "TTPT" little-endian
// Version 2: the codes are exported to Python (tokentrace::abi()) and kBadSite, kOperandDevice
// were added. Version 3: row masks (the header's max_masks .. row_masks, the "rows" selector,
// kBadMaskSlot, kRowsScalarOutput).
inline constexpr uint32_t kPatchTableVersion = 3;
inline constexpr int kMaxPatchDims = 6;
// The apply kernel resolves the entries matching one call into shared memory; more than this
// many matches for one site at one call are skipped and reported (kTooManyMatches).
inline constexpr int kMaxMatchesPerCall = 16;

// The codes Python needs are X-macro lists, X(Enumerator, value, "name"): the enums below and
// the table the operator library exports to Python (tokentrace::abi(), cuda/torch/torch_ops.cc;
// read by python/tokentrace/_backend/torch_library.py) are built from the one list. Changing a
// value, or the meaning of one, changes kPatchTableVersion.
#define TT_PATCH_DTYPES(X) \
  X(kF32, 0, "float32")    \
  X(kF16, 1, "float16")    \
  X(kBF16, 2, "bfloat16")  \
  X(kF64, 3, "float64")    \
  X(kI32, 4, "int32")      \
  X(kI64, 5, "int64")      \
  X(kU8, 6, "uint8")       \
  X(kBool, 7, "bool")

// The element types the ops edit (outputs and operands), X(Enumerator of DType): the device
// code's check (IsFloatDType, patch_ops.h) and abi()'s "editable.<name>" rows come from it.
#define TT_PATCH_EDITABLE_DTYPES(X) X(kF32) X(kF16) X(kBF16)

#define TT_PATCH_OPS(X)                                                                     \
  X(kZero, 0, "zero")                                                                       \
  X(kFill, 1, "fill")       /* params.value */                                              \
  X(kAdd, 2, "add")         /* operand broadcast over the box; without one, params.value */ \
  X(kScale, 3, "scale")     /* params.value */                                              \
  X(kClamp, 4, "clamp")     /* params.lo .. params.hi (NaN stays NaN, as torch.clamp) */    \
  X(kReplace, 5, "replace") /* operand broadcast over the box */

#define TT_PATCH_SELECTORS(X)                                                     \
  X(kEvery, 0, "every")                                                           \
  X(kCallEq, 1, "call")       /* call == first (prefill == call 1) */             \
  X(kCallRange, 2, "calls")   /* first <= call <= last (last = kOpenEnd: open) */ \
  X(kTokenEq, 3, "token")     /* token == first */                                \
  X(kTokenRange, 4, "tokens") /* first <= token <= last */                        \
  X(kRows, 5, "rows")         /* row mask `first` has a marked row; edits those rows only */

#define TT_PATCH_ENUMERATOR_(name, value, text) name = value,

// Element types of outputs and operands. Only the first three are supported by any op; the
// rest exist so a binder can pass what it was given and get a clear error back.
enum class DType : uint32_t { TT_PATCH_DTYPES(TT_PATCH_ENUMERATOR_) };

enum class PatchOp : uint32_t { TT_PATCH_OPS(TT_PATCH_ENUMERATOR_) };

enum class SelectorKind : uint32_t { TT_PATCH_SELECTORS(TT_PATCH_ENUMERATOR_) };

// The `last` of an open-ended range selector ("from first on").
inline constexpr uint32_t kOpenEnd = 0xffffffffu;

struct CallSelector {
  uint32_t kind;  // SelectorKind
  uint32_t first;
  uint32_t last;
  uint32_t reserved;
};
static_assert(sizeof(CallSelector) == 16);

// Op parameters are float32 whatever the output dtype: every op computes in float32 and rounds
// once to the output dtype.
struct OpParams {
  float value;  // fill value, scale factor, or the scalar of an operand-less add
  float lo;     // clamp bounds
  float hi;
  float reserved;
};
static_assert(sizeof(OpParams) == 16);

// One dimension of an index box, with Python semantics: a slice start:stop:step (negative
// values count from the end, missing ends are open, out-of-range slice ends are clamped as
// Python does), or an integer index (kDimIndex: start only; out of range is an error, and the
// dimension is dropped from the box shape the operand broadcasts against, as in values[:, 1]).
#define TT_PATCH_DIM_FLAGS(X)      \
  X(kDimHasStart, 1u, "has_start") \
  X(kDimHasStop, 2u, "has_stop")   \
  X(kDimIndex, 4u, "index")
#define TT_PATCH_CONSTANT_(name, value, text) inline constexpr uint32_t name = value;
TT_PATCH_DIM_FLAGS(TT_PATCH_CONSTANT_)
#undef TT_PATCH_CONSTANT_

struct DimSlice {
  int64_t start;
  int64_t stop;
  int64_t step;  // >= 1
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(DimSlice) == 32);

// Dimensions past ndim are full slices (values[:, 1] on a 3-D output edits every feature).
struct IndexBox {
  int32_t ndim;
  uint32_t reserved;
  DimSlice dims[kMaxPatchDims];
};
static_assert(sizeof(IndexBox) == 200);

// A strided view of the operand. Shape and strides count elements; the operand broadcasts
// against the box shape with numpy rules (aligned right, size-1 dims repeat). The memory is
// owned by whoever built the table and must outlive it (device memory for a device table).
struct Operand {
  const void* data;
  uint32_t dtype;  // DType
  int32_t ndim;
  int64_t shape[kMaxPatchDims];
  int64_t strides[kMaxPatchDims];
};
static_assert(sizeof(Operand) == 112);

// Why an entry is refused or skipped: PatchErrorInfo.code, and the reason the operator
// library reports for a bad entry (tokentrace::table_check). kBadSite and kOperandDevice are
// found by the library's binders only (the table itself never sees them).
#define TT_PATCH_ERRORS(X)                                                                   \
  X(kOk, 0, "ok")                                                                            \
  X(kBadOp, 1, "bad_op")                       /* a = op */                                  \
  X(kBadSelector, 2, "bad_selector")           /* a = kind, b = first/last packed */         \
  X(kBadStep, 3, "bad_step")                   /* dim, a = step */                           \
  X(kBoxRank, 4, "box_rank")                   /* a = box ndim, b = output ndim */           \
  X(kOutputRank, 5, "output_rank")             /* a = output ndim */                         \
  X(kIndexOutOfRange, 6, "index_out_of_range") /* dim, a = index, b = size */                \
  X(kOutputDtype, 7, "output_dtype")           /* a = dtype */                               \
  X(kOperandDtype, 8, "operand_dtype")         /* a = dtype */                               \
  X(kOperandMissing, 9, "operand_missing")                                                   \
  X(kOperandShape, 10, "operand_shape") /* dim, a = operand size, b = box size (-1: rank) */ \
  X(kBadClamp, 11, "bad_clamp")                                                              \
  X(kTooManyMatches, 12, "too_many_matches")     /* a = kMaxMatchesPerCall */                \
  X(kBadShape, 13, "bad_shape")                  /* dim, a = size */                         \
  X(kBadSite, 14, "bad_site")                    /* a = site id (binders only) */            \
  X(kOperandDevice, 15, "operand_device")        /* (binders only) */                        \
  X(kBadMaskSlot, 16, "bad_mask_slot")           /* a = slot, b = max_masks */               \
  X(kRowsScalarOutput, 17, "rows_scalar_output") /* a rows selector on a 0-d output */

enum class PatchError : uint32_t { TT_PATCH_ERRORS(TT_PATCH_ENUMERATOR_) };
#undef TT_PATCH_ENUMERATOR_

struct PatchErrorInfo {
  uint32_t code;  // PatchError
  int32_t dim;
  int64_t a;
  int64_t b;
};
static_assert(sizeof(PatchErrorInfo) == 24);

struct PatchEntry {
  uint32_t site_id;
  uint32_t op;  // PatchOp
  CallSelector selector;
  OpParams params;
  IndexBox box;
  Operand operand;
  // Written by the apply path only. fires: calls at which this entry matched and was applied
  // (one atomicAdd per firing, by one thread). skips: calls at which it matched but could not
  // be applied (last_error says why); nothing is written to the output then.
  unsigned long long fires;
  uint32_t skips;
  uint32_t reserved;
  PatchErrorInfo last_error;
};
static_assert(sizeof(PatchEntry) == 392);
static_assert(alignof(PatchEntry) == 8);
static_assert(offsetof(PatchEntry, selector) == 8);
static_assert(offsetof(PatchEntry, params) == 24);
static_assert(offsetof(PatchEntry, box) == 40);
static_assert(offsetof(PatchEntry, operand) == 240);
static_assert(offsetof(PatchEntry, fires) == 352);
static_assert(offsetof(PatchEntry, last_error) == 368);

// One row mask slot's counters (the rows are in PatchTable::row_masks).
struct RowMaskCounts {
  uint32_t mask_len;     // rows written by the last SetRowMask (0 after a reset)
  uint32_t mask_marked;  // how many of them are marked (nonzero)
};
static_assert(sizeof(RowMaskCounts) == 8);

struct PatchTable {
  uint32_t magic;        // kPatchTableMagic
  uint32_t version;      // kPatchTableVersion
  uint32_t struct_size;  // sizeof(PatchTable)
  uint32_t entry_size;   // sizeof(PatchEntry)
  uint32_t entry_count;
  uint32_t capacity;
  uint32_t max_sites;  // site ids are 0 .. max_sites-1
  uint32_t reserved;
  PatchEntry* entries;
  uint32_t* site_calls;
  uint32_t* site_done;
  uint32_t* token;
  uint32_t max_masks;  // row mask slots are 0 .. max_masks-1
  uint32_t max_rows;   // rows per slot
  RowMaskCounts* mask_counts;
  uint8_t* row_masks;  // slot k's rows start at row_masks + k * max_rows
};
static_assert(sizeof(PatchTable) == 88);
static_assert(offsetof(PatchTable, entries) == 32);
static_assert(offsetof(PatchTable, token) == 56);
static_assert(offsetof(PatchTable, max_masks) == 64);
static_assert(offsetof(PatchTable, mask_counts) == 72);
static_assert(offsetof(PatchTable, row_masks) == 80);

}  // namespace tokentrace::patch
