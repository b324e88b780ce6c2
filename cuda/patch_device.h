// Device side of the patch table: a device-resident table, the apply launcher, and the small
// stream-ordered helpers around it.
//
// Design (why it works under CUDA graphs): the decision whether an entry fires is made by the
// kernel from the table's device-side counters and row masks, never by the host. Every helper
// that changes the counters (apply, token advance, reset) is a kernel on the caller's stream, so
// a graph that captured them replays the same decisions against the counters' current values.
// Row masks are written by the host between replays (SetRowMaskDevice: stream-ordered copies
// into the arena, whose address the graph holds). Nothing here synchronizes the host except
// UploadPatchTable (a one-time copy) and ReadCountersDevice (asked for by a report).
//
// A site must be applied on one stream at a time (one module's forward calls are ordered); two
// concurrent applies of the same site would race on its call counter.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/patch_apply.h"
#include "cuda/patch_table.h"

namespace tokentrace::patch {

// Owns one device arena. Entries are immutable after upload (only the counters change, on the
// device), so the host mirror of the entries stays exact: the launcher sizes its grid from the
// largest box of the site's entries for this output, and uses one block for a site with no
// entries (the disabled path still advances the call counter).
class DevicePatchTable {
 public:
  DevicePatchTable() = default;
  ~DevicePatchTable() { Release(); }
  DevicePatchTable(const DevicePatchTable&) = delete;
  DevicePatchTable& operator=(const DevicePatchTable&) = delete;
  DevicePatchTable(DevicePatchTable&& other) noexcept { *this = std::move(other); }
  DevicePatchTable& operator=(DevicePatchTable&& other) noexcept;

  PatchTable* device() const { return device_; }  // device address of the header
  uint32_t entry_count() const { return entry_count_; }
  uint32_t max_sites() const { return max_sites_; }
  uint32_t max_masks() const { return max_masks_; }
  uint32_t max_rows() const { return max_rows_; }
  const std::vector<PatchEntry>& host_entries() const { return entries_; }
  // Indices of the entries for `site`, in table order (empty for an unknown site).
  const std::vector<uint32_t>& SiteEntries(uint32_t site) const;
  // Gives the device memory back: freed at the next upload, not here, since a release may
  // come during a graph capture (a Python finalizer), which a cudaFree would invalidate;
  // never freed if a captured graph may read it (cuda/released_tables.h).
  void Release();

 private:
  friend bool UploadPatchTable(const std::vector<PatchEntry>&, uint32_t, uint32_t, uint32_t,
                               DevicePatchTable*, std::string*);
  PatchTable* device_ = nullptr;
  size_t bytes_ = 0;
  uint32_t entry_count_ = 0;
  uint32_t max_sites_ = 0;
  uint32_t max_masks_ = 0;
  uint32_t max_rows_ = 0;
  std::vector<PatchEntry> entries_;                  // host mirror, as uploaded
  std::vector<std::vector<uint32_t>> site_entries_;  // per site id
};

// Validates entries (shape-independent checks), checks that operands are device-accessible,
// allocates the arena (with max_masks row mask slots of max_rows rows, all empty) and copies it
// over (synchronously). On failure `out` is left empty and `error` says why.
bool UploadPatchTable(const std::vector<PatchEntry>& entries, uint32_t max_sites,
                      uint32_t max_masks, uint32_t max_rows, DevicePatchTable* out,
                      std::string* error);
inline bool UploadPatchTable(const std::vector<PatchEntry>& entries, uint32_t max_sites,
                             DevicePatchTable* out, std::string* error) {
  return UploadPatchTable(entries, max_sites, 0, 0, out, error);
}

// One kernel launch on `stream`, no host synchronization. Advances the site's call counter and
// applies every matching entry. Shape and strides are copied into the launch parameters, so
// the caller's arrays may be freed on return. Returns the launch error (cudaSuccess normally);
// entries that match but do not resolve are skipped and counted on the device.
cudaError_t ApplyPatchesDevice(PatchTable* device_table, uint32_t site_id, void* data, DType dtype,
                               int ndim, const int64_t* shape, const int64_t* strides_elems,
                               cudaStream_t stream);
// Same, with host-side checks (site range) and a one-block launch for sites with no entries.
cudaError_t ApplyPatchesDevice(const DevicePatchTable& table, uint32_t site_id, void* data,
                               DType dtype, int ndim, const int64_t* shape,
                               const int64_t* strides_elems, cudaStream_t stream);

// Stream-ordered counter updates (tiny kernels, so they can be captured in a graph).
cudaError_t AdvanceTokenDevice(PatchTable* device_table, cudaStream_t stream);
cudaError_t SetTokenDevice(PatchTable* device_table, uint32_t token, cudaStream_t stream);
// Also empties every row mask (mask_len = mask_marked = 0).
cudaError_t ResetCountersDevice(PatchTable* device_table, cudaStream_t stream);

// Writes row mask `slot` of an uploaded table, ordered on `stream` (the stream its applies run
// on): cudaMemcpyAsync of host_rows[0..n) (nonzero = marked) and of the slot's counters
// (mask_len = n, mask_marked = `marked`, which must be the count of nonzero rows: it decides
// whether the slot's entries fire). Pageable host_rows may be reused on return (the copy stages
// it); pinned host_rows must stay unchanged until the stream reaches the copy.
// Not capturable: a graph would replay the copy of this call's rows. Returns
// cudaErrorStreamCaptureUnsupported while `stream` is capturing, cudaErrorInvalidValue for a
// table this process did not upload (or released), slot >= max_masks or n > max_rows.
cudaError_t SetRowMaskDevice(PatchTable* device_table, uint32_t slot, const uint8_t* host_rows,
                             uint32_t n, uint32_t marked, cudaStream_t stream);

// Called by every launch that reads `table`: when `stream` is capturing, the table is kept
// alive for the graph (one cudaStreamIsCapturing query otherwise).
void NoteCapturedUse(const PatchTable* table, cudaStream_t stream);
// Released tables kept because a captured graph may read them (for reports and tests).
size_t PatchTablesKeptForGraphs();

// Copies counters back after synchronizing `stream` (a report; not for the hot path).
bool ReadCountersDevice(const DevicePatchTable& table, cudaStream_t stream, PatchCounters* out,
                        std::string* error);

}  // namespace tokentrace::patch
