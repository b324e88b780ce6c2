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
//   0                               PatchTable header (64 B)                  host, at build
//   64                              PatchEntry entries[capacity] (392 B each)  host, at build;
//                                     .fires / .skips / .last_error             apply kernel
//   64 + 392*capacity               uint32 site_calls[max_sites]              apply kernel
//   + 4*max_sites                   uint32 site_done[max_sites]               apply kernel
//                                     (last-block tickets; 0 between launches)
//   + 4*max_sites                   uint32 token                              token kernel/host
//   (rounded up to 8 bytes)
//
// Counters are 1-based: site_calls[s] is the number of apply calls made for site s so far, so
// the call being applied is site_calls[s] + 1 (call 1 = the prefill). token is the 1-based index
// of the token being generated (token 1 = the prefill); 0 means "before the first token", and
// no token selector matches it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tokentrace::patch {

inline constexpr uint32_t kPatchTableMagic = 0x54505454u;  // "TTPT" little-endian
inline constexpr uint32_t kPatchTableVersion = 1;
inline constexpr int kMaxPatchDims = 6;
// The apply kernel resolves the entries matching one call into shared memory; more than this
// many matches for one site at one call are skipped and reported (kTooManyMatches).
inline constexpr int kMaxMatchesPerCall = 16;

// Element types of outputs and operands. Only the first three are supported by any op; the
// rest exist so a binder can pass what it was given and get a clear error back.
enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kF64 = 3,
  kI32 = 4,
  kI64 = 5,
  kU8 = 6,
  kBool = 7,
};

enum class PatchOp : uint32_t {
  kZero = 0,
  kFill = 1,     // params.value
  kAdd = 2,      // operand broadcast over the box; without an operand, params.value
  kScale = 3,    // params.value
  kClamp = 4,    // params.lo .. params.hi (NaN stays NaN, as torch.clamp)
  kReplace = 5,  // operand broadcast over the box
};

enum class SelectorKind : uint32_t {
  kEvery = 0,
  kCallEq = 1,      // call == first (prefill == call 1)
  kCallRange = 2,   // first <= call <= last (last = 0xffffffff for "from first on")
  kTokenEq = 3,     // token == first
  kTokenRange = 4,  // first <= token <= last
};

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
inline constexpr uint32_t kDimHasStart = 1u;
inline constexpr uint32_t kDimHasStop = 2u;
inline constexpr uint32_t kDimIndex = 4u;

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

enum class PatchError : uint32_t {
  kOk = 0,
  kBadOp = 1,            // a = op
  kBadSelector = 2,      // a = kind, b = first/last packed (see FormatPatchError)
  kBadStep = 3,          // dim, a = step
  kBoxRank = 4,          // a = box ndim, b = output ndim
  kOutputRank = 5,       // a = output ndim
  kIndexOutOfRange = 6,  // dim, a = index, b = size
  kOutputDtype = 7,      // a = dtype
  kOperandDtype = 8,     // a = dtype
  kOperandMissing = 9,
  kOperandShape = 10,  // dim = operand dim, a = operand size, b = box size (or -1: rank)
  kBadClamp = 11,
  kTooManyMatches = 12,  // a = kMaxMatchesPerCall
  kBadShape = 13,        // dim, a = size
};

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
};
static_assert(sizeof(PatchTable) == 64);
static_assert(offsetof(PatchTable, entries) == 32);
static_assert(offsetof(PatchTable, token) == 56);

}  // namespace tokentrace::patch
