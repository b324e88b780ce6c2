// Host side of the patch table: building a table arena, validating entries with readable
// messages, and applying patches to CPU buffers with the device's semantics (cuda/patch_ops.h).
//
// Plain C++: no CUDA header, so the Python binding and CPU-only builds can use it. Nothing here
// throws or aborts; errors come back as strings starting with "tokentrace:".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/patch_ops.h"
#include "cuda/patch_table.h"

namespace tokentrace::patch {

const char* DTypeName(DType dtype);  // "float32" | "float16" | "bfloat16" | "float64" | ...
const char* OpName(PatchOp op);      // "zero" | "fill" | "add" | "scale" | "clamp" | "replace"
// " (supported: float32, float16, bfloat16)": the editable dtypes (TT_PATCH_EDITABLE_DTYPES),
// as the messages about an unsupported dtype end.
const std::string& SupportedDTypesText();

// The message for an error found while resolving `entry` (shape may be null when unknown).
std::string FormatPatchError(const PatchErrorInfo& info, const PatchEntry& entry);

bool ResolveBox(const IndexBox& box, int ndim, const int64_t* shape, ResolvedBox* out,
                std::string* error);

// Everything that can be checked without an output: op, selector (a rows selector's slot below
// max_masks, the row mask slots of the table it will go in), slice steps, clamp bounds, operand
// dtype. The binder calls this when a spec is bound, before any model work.
bool ValidateEntryStatic(const PatchEntry& entry, uint32_t max_masks, std::string* error);

// Full check against one output (box in range, operand broadcasts to the box, dtypes, a rows
// entry's output has a dim 0).
bool ValidateEntry(const PatchEntry& entry, int ndim, const int64_t* shape, DType dtype,
                   uint32_t max_masks, std::string* error);

// Arena layout (see the drawing in patch_table.h).
size_t PatchTableBytes(uint32_t capacity, uint32_t max_sites, uint32_t max_masks = 0,
                       uint32_t max_rows = 0);

// Writes a table with `count` entries (copied, counters zeroed, masks empty) into `arena`
// (PatchTableBytes bytes, 8-aligned), with header pointers computed from `base_address`: the
// address the arena will have where it is used (the arena itself for a host table, the
// cudaMalloc'ed pointer for a device table that is staged here and copied over). Refuses an
// entry for a site >= max_sites or a rows selector on a slot >= max_masks, naming the entry.
bool LayoutPatchTable(void* arena, uintptr_t base_address, const PatchEntry* entries,
                      uint32_t count, uint32_t capacity, uint32_t max_sites, uint32_t max_masks,
                      uint32_t max_rows, std::string* error);

// Checks a table header from this build's point of view (magic, version, struct sizes).
bool CheckTableHeader(const PatchTable& table, std::string* error);

// Owns a host arena laid out as above.
class HostPatchTable {
 public:
  // max_masks row mask slots of max_rows rows each (none by default).
  static std::unique_ptr<HostPatchTable> Create(const std::vector<PatchEntry>& entries,
                                                uint32_t max_sites, uint32_t max_masks,
                                                uint32_t max_rows, std::string* error);
  static std::unique_ptr<HostPatchTable> Create(const std::vector<PatchEntry>& entries,
                                                uint32_t max_sites, std::string* error) {
    return Create(entries, max_sites, 0, 0, error);
  }
  PatchTable& table() { return *reinterpret_cast<PatchTable*>(arena_.data()); }
  const PatchTable& table() const { return *reinterpret_cast<const PatchTable*>(arena_.data()); }

 private:
  std::vector<uint64_t> arena_;  // uint64 elements: 8-aligned storage
};

struct ApplyStatus {
  bool ok = true;        // false: something was skipped or refused; message says what
  uint32_t call = 0;     // the call index this apply was (1-based), 0 if refused
  uint32_t fired = 0;    // entries applied at this call
  uint32_t skipped = 0;  // entries that matched but could not be applied
  std::string message;
};

// Advances site_id's call counter by one, then applies, in table order, every entry for the site
// whose selector matches (call after the advance, current token, row masks), touching only the
// elements of its box (in a rows entry's marked rows). An entry that matches but does not resolve
// against this output (index out of range, operand that does not broadcast) is skipped and counted,
// exactly as on the device.
ApplyStatus ApplyPatchesHost(PatchTable& table, uint32_t site_id, void* data, DType dtype, int ndim,
                             const int64_t* shape, const int64_t* strides_elems);

// Counters read back for a report.
struct PatchCounters {
  std::vector<uint64_t> fires;  // per entry
  std::vector<uint32_t> skips;  // per entry
  std::vector<PatchErrorInfo> last_errors;
  std::vector<uint32_t> site_calls;  // per site id
  uint32_t token = 0;
};
PatchCounters ReadCountersHost(const PatchTable& table);
// Calls, tickets, token, fires, skips, errors, and every row mask (mask_len = mask_marked = 0),
// so a run never starts with a stale mask.
void ResetCountersHost(PatchTable& table);
void AdvanceTokenHost(PatchTable& table);
void SetTokenHost(PatchTable& table, uint32_t token);

// Whether a row mask of n rows fits slot `slot` of a table with these sizes; the message says
// the limit. Shared by SetRowMaskHost and the binders of the device path.
bool CheckRowMaskArgs(uint32_t max_masks, uint32_t max_rows, int64_t slot, int64_t n,
                      std::string* error);
// Writes row mask `slot`: rows[0..n) (nonzero = marked), mask_len = n, mask_marked = the count
// of marked rows. Rows at or past n are unmarked until the next write.
bool SetRowMaskHost(PatchTable& table, uint32_t slot, const uint8_t* rows, uint32_t n,
                    std::string* error);

}  // namespace tokentrace::patch
