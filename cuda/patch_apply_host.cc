// Host implementation of the patch table (see patch_apply.h). Element semantics come from
// patch_ops.h, shared with the kernel; only the iteration differs: the host applies entries
// one after another, each over its whole box, which gives every element the same fold of
// matching entries in table order that the kernel computes per element.
#include <array>
#include <cstring>

#include "cuda/patch_apply.h"
#include "cuda/patch_grid.h"  // OutputDesc

namespace tokentrace::patch {
namespace {

constexpr size_t kHeaderBytes = sizeof(PatchTable);

size_t RoundUp8(size_t n) { return (n + 7) & ~size_t{7}; }

std::string ShapeString(int ndim, const int64_t* shape) {
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

std::string SelectorString(const CallSelector& s) {
  const char* name = nullptr;
  switch (static_cast<SelectorKind>(s.kind)) {
#define TT_SELECTOR_NAME_(enumerator, value, text) \
  case SelectorKind::enumerator:                   \
    name = text;                                   \
    break;
    TT_PATCH_SELECTORS(TT_SELECTOR_NAME_)
#undef TT_SELECTOR_NAME_
  }
  if (name == nullptr) return "kind " + std::to_string(s.kind);
  std::string out = std::string(name) + " " + std::to_string(s.first);
  if (s.kind == static_cast<uint32_t>(SelectorKind::kCallRange) ||
      s.kind == static_cast<uint32_t>(SelectorKind::kTokenRange))
    out += ".." + std::to_string(s.last);
  return out;
}

bool Fail(std::string* error, std::string message) {
  if (error) *error = std::move(message);
  return false;
}

// One row of the box's last dimension, with the output dtype and the op as constants so the
// loop has no per-element dispatch. The element arithmetic is ApplyOp/LoadAsFloat/
// StoreFromFloat from patch_ops.h, as in the kernel.
template <uint32_t kDType, uint32_t kOp>
void ApplyRow(void* data, int64_t obase, int64_t ostep, const ResolvedEntry& r, int64_t pbase,
              int64_t pstep, int64_t n) {
  const OpParams p = r.params;  // a local copy: stores into `data` cannot alias it
  const void* operand = r.operand;
  const uint32_t odt = r.operand_dtype;
  constexpr bool kReadsX = kOp == static_cast<uint32_t>(PatchOp::kAdd) ||
                           kOp == static_cast<uint32_t>(PatchOp::kScale) ||
                           kOp == static_cast<uint32_t>(PatchOp::kClamp);
  for (int64_t c = 0; c < n; ++c) {
    const int64_t o = obase + c * ostep;
    const float x = kReadsX ? LoadAsFloat(data, o, kDType) : 0.0f;
    const float v = operand ? LoadAsFloat(operand, pbase + c * pstep, odt) : p.value;
    StoreFromFloat(data, o, kDType, ApplyOp(kOp, p, x, v));
  }
}

using RowFn = void (*)(void*, int64_t, int64_t, const ResolvedEntry&, int64_t, int64_t, int64_t);

template <uint32_t kDType>
constexpr std::array<RowFn, 6> RowFns() {
  return {&ApplyRow<kDType, 0>, &ApplyRow<kDType, 1>, &ApplyRow<kDType, 2>,
          &ApplyRow<kDType, 3>, &ApplyRow<kDType, 4>, &ApplyRow<kDType, 5>};
}

// Applies one resolved entry over its whole box: rows of the last dimension, the rows in
// odometer order. A rows entry skips the unmarked output rows (RowMarked, as the kernel): whole
// rows of the walk when the output has 2+ dims, single elements when dim 0 is the walk's row.
void ApplyEntryHost(const ResolvedEntry& r, void* data, const OutputDesc& out) {
  static constexpr std::array<std::array<RowFn, 6>, 3> kFns = {RowFns<0>(), RowFns<1>(),
                                                               RowFns<2>()};
  const ResolvedBox& b = r.box;
  if (b.total == 0) return;
  const RowFn row_fn = kFns[out.dtype][r.op];
  const int last = b.ndim - 1;
  const int64_t inner = b.ndim > 0 ? b.count[last] : 1;
  const int64_t ostep = b.ndim > 0 ? b.step[last] * out.strides[last] : 0;
  const int64_t pstep = b.ndim > 0 ? r.operand_stride[last] : 0;
  int64_t c[kMaxPatchDims] = {0, 0, 0, 0, 0, 0};
  for (int64_t row = 0, rows = b.total / inner; row < rows; ++row) {
    int64_t obase = b.ndim > 0 ? b.start[last] * out.strides[last] : 0, pbase = 0;
    for (int d = 0; d < last; ++d) {
      obase += (b.start[d] + c[d] * b.step[d]) * out.strides[d];
      pbase += c[d] * r.operand_stride[d];
    }
    if (!HasRowMask(r)) {
      row_fn(data, obase, ostep, r, pbase, pstep, inner);
    } else if (last > 0) {
      if (RowMarked(r, b.start[0] + c[0] * b.step[0]))
        row_fn(data, obase, ostep, r, pbase, pstep, inner);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        if (RowMarked(r, b.start[0] + i * b.step[0]))
          row_fn(data, obase + i * ostep, ostep, r, pbase + i * pstep, pstep, 1);
    }
    for (int d = last - 1; d >= 0; --d) {
      if (++c[d] < b.count[d]) break;
      c[d] = 0;
    }
  }
}

}  // namespace

const char* DTypeName(DType dtype) {
  switch (dtype) {
#define TT_DTYPE_NAME_(name, value, text) \
  case DType::name:                       \
    return text;
    TT_PATCH_DTYPES(TT_DTYPE_NAME_)
#undef TT_DTYPE_NAME_
  }
  return "unknown dtype";
}

const char* OpName(PatchOp op) {
  switch (op) {
#define TT_OP_NAME_(name, value, text) \
  case PatchOp::name:                  \
    return text;
    TT_PATCH_OPS(TT_OP_NAME_)
#undef TT_OP_NAME_
  }
  return "unknown op";
}

const std::string& SupportedDTypesText() {
  static const std::string text = [] {
    std::string names;
#define TT_SUPPORTED_NAME_(name) \
  names += std::string(names.empty() ? "" : ", ") + DTypeName(DType::name);
    TT_PATCH_EDITABLE_DTYPES(TT_SUPPORTED_NAME_)
#undef TT_SUPPORTED_NAME_
    return " (supported: " + names + ")";
  }();
  return text;
}

std::string FormatPatchError(const PatchErrorInfo& e, const PatchEntry& entry) {
  const std::string op = OpName(static_cast<PatchOp>(entry.op));
  const std::string& kSupported = SupportedDTypesText();
  const std::string d = std::to_string(e.dim);
  const std::string a = std::to_string(e.a);
  const std::string b = std::to_string(e.b);
  std::string m;
  switch (static_cast<PatchError>(e.code)) {
    case PatchError::kOk:
      return "";
    case PatchError::kBadOp:
      m = "unknown patch op " + a;
      break;
    case PatchError::kBadSelector:
      m = e.b == 0 ? "unknown call selector kind " + a
                   : "call selector '" + SelectorString(entry.selector) +
                         "' selects nothing: calls and tokens count from 1 (the prefill is "
                         "call 1) and a range needs first <= last";
      break;
    case PatchError::kBadStep:
      m = "slice step " + a + " in dimension " + d + " must be >= 1";
      break;
    case PatchError::kBoxRank:
      m = "the index box has " + a + " dimensions but the output has " + b;
      break;
    case PatchError::kOutputRank:
      m = "the output has " + a + " dimensions; patches support up to " +
          std::to_string(kMaxPatchDims);
      break;
    case PatchError::kIndexOutOfRange:
      m = "index " + a + " is out of range for dimension " + d + " of size " + b;
      break;
    case PatchError::kOutputDtype:
      m = "op '" + op + "' cannot take an output of dtype " + DTypeName(static_cast<DType>(e.a)) +
          kSupported;
      break;
    case PatchError::kOperandDtype:
      m = "op '" + op + "' cannot take an operand of dtype " + DTypeName(static_cast<DType>(e.a)) +
          kSupported;
      break;
    case PatchError::kOperandMissing:
      m = "op '" + op + "' needs an operand tensor";
      break;
    case PatchError::kOperandShape: {
      const int n = entry.operand.ndim;
      const std::string shape =
          n >= 0 && n <= kMaxPatchDims ? ShapeString(n, entry.operand.shape) : "(rank " + a + ")";
      m = "operand of shape " + shape + " does not broadcast to the index box";
      if (e.dim >= 0) {
        m += e.b < 0 ? ": operand dimension " + d + " has size " + a + " and no box dimension"
                     : ": operand dimension " + d + " has size " + a + ", the box has " + b;
      }
      break;
    }
    case PatchError::kBadClamp:
      m = "clamp bounds lo=" + std::to_string(entry.params.lo) +
          " hi=" + std::to_string(entry.params.hi) + " need lo <= hi";
      break;
    case PatchError::kTooManyMatches:
      m = "more than " + a + " entries for site " + std::to_string(entry.site_id) +
          " matched one call; the rest were skipped";
      break;
    case PatchError::kBadShape:
      m = "dimension " + d + " of the output has negative size " + a;
      break;
    case PatchError::kBadMaskSlot:
      m = "rows selector slot " + a +
          (e.a < 0 ? " is negative; row mask slots count from 0"
                   : " is not below the table's max_masks " + b +
                         "; create the table with max_masks >= " + std::to_string(e.a + 1));
      break;
    case PatchError::kRowsScalarOutput:
      m = "call selector '" + SelectorString(entry.selector) +
          "' edits rows (dimension 0) but the output is 0-d; a rows selector needs an output of "
          "1 or more dimensions";
      break;
    default:
      m = "unknown patch error " + std::to_string(e.code);
      break;
  }
  return "tokentrace: " + m;
}

bool ResolveBox(const IndexBox& box, int ndim, const int64_t* shape, ResolvedBox* out,
                std::string* error) {
  const PatchErrorInfo e = ResolveBoxCore(box, ndim, shape, out);
  if (e.code == 0) return true;
  PatchEntry entry{};
  entry.box = box;
  return Fail(error, FormatPatchError(e, entry));
}

bool ValidateEntryStatic(const PatchEntry& entry, uint32_t max_masks, std::string* error) {
  const PatchErrorInfo e = CheckEntryStatic(entry, max_masks);
  return e.code == 0 || Fail(error, FormatPatchError(e, entry));
}

bool ValidateEntry(const PatchEntry& entry, int ndim, const int64_t* shape, DType dtype,
                   uint32_t max_masks, std::string* error) {
  ResolvedEntry r;
  const RowMaskView no_masks{nullptr, nullptr, max_masks, 0};
  const PatchErrorInfo e =
      ResolveEntryCore(entry, 0, ndim, shape, static_cast<uint32_t>(dtype), no_masks, &r);
  if (e.code == 0) return true;
  std::string m = FormatPatchError(e, entry);
  if (e.code == static_cast<uint32_t>(PatchError::kOperandShape)) {
    ResolvedBox box;
    if (ResolveBoxCore(entry.box, ndim, shape, &box).code == 0)
      m += " (box shape " + ShapeString(box.view_ndim, box.view_shape) + ")";
  }
  return Fail(error, std::move(m));
}

// Where the mask regions start: after the counters, 8-aligned (the drawing's M).
size_t MasksOffset(uint32_t capacity, uint32_t max_sites) {
  return RoundUp8(kHeaderBytes + size_t{capacity} * sizeof(PatchEntry) +
                  2 * size_t{max_sites} * sizeof(uint32_t) + sizeof(uint32_t));
}

size_t PatchTableBytes(uint32_t capacity, uint32_t max_sites, uint32_t max_masks,
                       uint32_t max_rows) {
  return MasksOffset(capacity, max_sites) +
         RoundUp8(size_t{max_masks} * sizeof(RowMaskCounts) + size_t{max_masks} * max_rows);
}

bool LayoutPatchTable(void* arena, uintptr_t base_address, const PatchEntry* entries,
                      uint32_t count, uint32_t capacity, uint32_t max_sites, uint32_t max_masks,
                      uint32_t max_rows, std::string* error) {
  if (count > capacity) return Fail(error, "tokentrace: more patch entries than table capacity");
  if (max_sites == 0) return Fail(error, "tokentrace: a patch table needs max_sites >= 1");
  for (uint32_t i = 0; i < count; ++i) {
    if (entries[i].site_id >= max_sites) {
      return Fail(error, "tokentrace: patch entry " + std::to_string(i) + " is for site " +
                             std::to_string(entries[i].site_id) + " but the table has " +
                             std::to_string(max_sites) + " sites");
    }
    const CallSelector& s = entries[i].selector;
    if (s.kind == static_cast<uint32_t>(SelectorKind::kRows) && s.first >= max_masks) {
      return Fail(error,
                  FormatPatchError(MakeError(PatchError::kBadMaskSlot, -1, s.first, max_masks),
                                   entries[i]) +
                      " (patch entry " + std::to_string(i) + ")");
    }
  }
  const size_t bytes = PatchTableBytes(capacity, max_sites, max_masks, max_rows);
  std::memset(arena, 0, bytes);
  auto* t = static_cast<PatchTable*>(arena);
  t->magic = kPatchTableMagic;
  t->version = kPatchTableVersion;
  t->struct_size = sizeof(PatchTable);
  t->entry_size = sizeof(PatchEntry);
  t->entry_count = count;
  t->capacity = capacity;
  t->max_sites = max_sites;
  const size_t entries_off = kHeaderBytes;
  const size_t calls_off = entries_off + size_t{capacity} * sizeof(PatchEntry);
  const size_t done_off = calls_off + size_t{max_sites} * sizeof(uint32_t);
  const size_t token_off = done_off + size_t{max_sites} * sizeof(uint32_t);
  const size_t counts_off = MasksOffset(capacity, max_sites);
  const size_t rows_off = counts_off + size_t{max_masks} * sizeof(RowMaskCounts);
  t->entries = reinterpret_cast<PatchEntry*>(base_address + entries_off);
  t->site_calls = reinterpret_cast<uint32_t*>(base_address + calls_off);
  t->site_done = reinterpret_cast<uint32_t*>(base_address + done_off);
  t->token = reinterpret_cast<uint32_t*>(base_address + token_off);
  t->max_masks = max_masks;
  t->max_rows = max_rows;
  t->mask_counts = reinterpret_cast<RowMaskCounts*>(base_address + counts_off);
  t->row_masks = reinterpret_cast<uint8_t*>(base_address + rows_off);
  auto* staged = reinterpret_cast<PatchEntry*>(static_cast<char*>(arena) + entries_off);
  for (uint32_t i = 0; i < count; ++i) {
    staged[i] = entries[i];
    staged[i].fires = 0;
    staged[i].skips = 0;
    staged[i].last_error = PatchErrorInfo{};
  }
  return true;
}

bool CheckTableHeader(const PatchTable& t, std::string* error) {
  if (t.magic != kPatchTableMagic) return Fail(error, "tokentrace: not a patch table (bad magic)");
  if (t.version != kPatchTableVersion || t.struct_size != sizeof(PatchTable) ||
      t.entry_size != sizeof(PatchEntry)) {
    return Fail(error, "tokentrace: patch table version " + std::to_string(t.version) +
                           " does not match this build's version " +
                           std::to_string(kPatchTableVersion) +
                           "; rebuild the table with the same tokentrace build");
  }
  return true;
}

std::unique_ptr<HostPatchTable> HostPatchTable::Create(const std::vector<PatchEntry>& entries,
                                                       uint32_t max_sites, uint32_t max_masks,
                                                       uint32_t max_rows, std::string* error) {
  auto table = std::unique_ptr<HostPatchTable>(new HostPatchTable());
  const uint32_t count = static_cast<uint32_t>(entries.size());
  table->arena_.resize(PatchTableBytes(count, max_sites, max_masks, max_rows) / 8);
  void* arena = table->arena_.data();
  if (!LayoutPatchTable(arena, reinterpret_cast<uintptr_t>(arena), entries.data(), count, count,
                        max_sites, max_masks, max_rows, error)) {
    return nullptr;
  }
  return table;
}

ApplyStatus ApplyPatchesHost(PatchTable& table, uint32_t site_id, void* data, DType dtype, int ndim,
                             const int64_t* shape, const int64_t* strides) {
  ApplyStatus status;
  if (!CheckTableHeader(table, &status.message)) {
    status.ok = false;
    return status;
  }
  if (site_id >= table.max_sites) {
    status.ok = false;
    status.message = "tokentrace: site " + std::to_string(site_id) + " is beyond the table's " +
                     std::to_string(table.max_sites) + " sites";
    return status;
  }
  OutputDesc out{};
  out.ndim = ndim;
  out.dtype = static_cast<uint32_t>(dtype);
  for (int d = 0; d < ndim && d < kMaxPatchDims; ++d) {
    out.shape[d] = shape[d];
    out.strides[d] = strides[d];
  }
  status.call = ++table.site_calls[site_id];
  const uint32_t token = *table.token;
  const RowMaskView masks = MasksOf(table);
  uint32_t matches = 0;
  for (uint32_t i = 0; i < table.entry_count; ++i) {
    PatchEntry& e = table.entries[i];
    if (e.site_id != site_id || !SelectorMatches(e.selector, status.call, token, masks)) continue;
    ResolvedEntry r;
    PatchErrorInfo err = MakeError(PatchError::kTooManyMatches, -1, kMaxMatchesPerCall);
    if (matches++ < static_cast<uint32_t>(kMaxMatchesPerCall))
      err = ResolveEntryCore(e, i, ndim, shape, static_cast<uint32_t>(dtype), masks, &r);
    if (err.code != 0) {
      ++e.skips;
      e.last_error = err;
      ++status.skipped;
      if (status.ok) status.message = FormatPatchError(err, e);
      status.ok = false;
      continue;
    }
    ++e.fires;
    ++status.fired;
    ApplyEntryHost(r, data, out);
  }
  return status;
}

PatchCounters ReadCountersHost(const PatchTable& t) {
  PatchCounters out;
  for (uint32_t i = 0; i < t.entry_count; ++i) {
    out.fires.push_back(t.entries[i].fires);
    out.skips.push_back(t.entries[i].skips);
    out.last_errors.push_back(t.entries[i].last_error);
  }
  out.site_calls.assign(t.site_calls, t.site_calls + t.max_sites);
  out.token = *t.token;
  return out;
}

void ResetCountersHost(PatchTable& t) {
  for (uint32_t i = 0; i < t.entry_count; ++i) {
    t.entries[i].fires = 0;
    t.entries[i].skips = 0;
    t.entries[i].last_error = PatchErrorInfo{};
  }
  std::memset(t.site_calls, 0, sizeof(uint32_t) * t.max_sites);
  std::memset(t.site_done, 0, sizeof(uint32_t) * t.max_sites);
  *t.token = 0;
  std::memset(t.mask_counts, 0, sizeof(RowMaskCounts) * t.max_masks);
}

void AdvanceTokenHost(PatchTable& t) { ++*t.token; }
void SetTokenHost(PatchTable& t, uint32_t token) { *t.token = token; }

bool CheckRowMaskArgs(uint32_t max_masks, uint32_t max_rows, int64_t slot, int64_t n,
                      std::string* error) {
  if (slot < 0 || slot >= max_masks) {
    return Fail(error, "tokentrace: row mask slot " + std::to_string(slot) +
                           (max_masks == 0 ? std::string(" is not in this patch table (it has no "
                                                         "row mask slots: max_masks is 0)")
                                           : " is not in this patch table (slots 0.." +
                                                 std::to_string(max_masks - 1) + ": max_masks " +
                                                 std::to_string(max_masks) + ")"));
  }
  if (n < 0 || n > max_rows) {
    return Fail(error, "tokentrace: a row mask of " + std::to_string(n) +
                           " rows is longer than this patch table's max_rows " +
                           std::to_string(max_rows));
  }
  return true;
}

bool SetRowMaskHost(PatchTable& t, uint32_t slot, const uint8_t* rows, uint32_t n,
                    std::string* error) {
  if (!CheckTableHeader(t, error) || !CheckRowMaskArgs(t.max_masks, t.max_rows, slot, n, error))
    return false;
  uint8_t* dst = t.row_masks + size_t{slot} * t.max_rows;
  uint32_t marked = 0;
  for (uint32_t i = 0; i < n; ++i) {
    dst[i] = rows[i] != 0 ? 1 : 0;
    marked += dst[i];
  }
  t.mask_counts[slot] = RowMaskCounts{n, marked};
  return true;
}

}  // namespace tokentrace::patch
