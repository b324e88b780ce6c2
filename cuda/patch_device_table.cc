// DevicePatchTable: upload, teardown and counter read-back (host code; the kernels are in
// patch_apply.cu). These are the only synchronous calls of the device path; teardown defers
// its cudaFree to the next upload, and never frees a table a captured graph may read
// (cuda/released_tables.h).
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/patch_device.h"
#include "cuda/released_tables.h"

namespace tokentrace::patch {
namespace {

bool CudaFail(std::string* error, const char* what, cudaError_t e) {
  if (error) {
    *error = std::string("tokentrace: ") + what + " failed: " + cudaGetErrorString(e) +
             " (is a CUDA device visible to this process?)";
  }
  return false;
}

// The kernel reads operands directly, so they must be addressable from the device: device or
// managed memory, or pinned host memory mapped into the device's address space.
bool OperandIsDeviceAccessible(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later launches do not report it
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ||
         (attr.type == cudaMemoryTypeHost && attr.devicePointer == p);
}

// Uploads allocate, so they already run outside captures: each one frees what was released
// before it (and may be freed). Never destroyed: used at exit.
ReleasedTables* g_released = new ReleasedTables();

void FreeReleasedTables() {
  for (void* p : g_released->TakeFreeable()) cudaFree(p);  // errors ignored, as in Release()
}

// Where each live uploaded table keeps its row masks, by the table's device address:
// SetRowMaskDevice is given only that address, and reading the header back would synchronize.
// Added at upload, removed at release (a released table takes no more masks).
struct MaskLayout {
  RowMaskCounts* counts;  // device addresses
  uint8_t* rows;
  uint32_t max_masks;
  uint32_t max_rows;
};

class MaskLayouts {
 public:
  void Add(const PatchTable* table, const MaskLayout& layout) {
    std::lock_guard<std::mutex> lock(mutex_);
    layouts_[table] = layout;
  }
  void Remove(const PatchTable* table) {
    std::lock_guard<std::mutex> lock(mutex_);
    layouts_.erase(table);
  }
  bool Find(const PatchTable* table, MaskLayout* out) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = layouts_.find(table);
    if (it == layouts_.end()) return false;
    *out = it->second;  // a copy: nothing points into the map after the lock
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const PatchTable*, MaskLayout> layouts_;
};

MaskLayouts* g_mask_layouts = new MaskLayouts();  // never destroyed, as g_released

}  // namespace

DevicePatchTable& DevicePatchTable::operator=(DevicePatchTable&& other) noexcept {
  if (this != &other) {
    Release();
    device_ = other.device_;
    bytes_ = other.bytes_;
    entry_count_ = other.entry_count_;
    max_sites_ = other.max_sites_;
    max_masks_ = other.max_masks_;
    max_rows_ = other.max_rows_;
    entries_ = std::move(other.entries_);
    site_entries_ = std::move(other.site_entries_);
    other.device_ = nullptr;
    other.bytes_ = 0;
    other.entry_count_ = other.max_sites_ = other.max_masks_ = other.max_rows_ = 0;
  }
  return *this;
}

void DevicePatchTable::Release() {
  if (device_ != nullptr) g_mask_layouts->Remove(device_);
  g_released->Release(device_, bytes_);  // freed by the next upload, or kept for graphs
  device_ = nullptr;
  bytes_ = 0;
  entry_count_ = max_sites_ = max_masks_ = max_rows_ = 0;
  entries_.clear();
  site_entries_.clear();
}

const std::vector<uint32_t>& DevicePatchTable::SiteEntries(uint32_t site) const {
  static const std::vector<uint32_t> kNone;
  return site < site_entries_.size() ? site_entries_[site] : kNone;
}

bool UploadPatchTable(const std::vector<PatchEntry>& entries, uint32_t max_sites,
                      uint32_t max_masks, uint32_t max_rows, DevicePatchTable* out,
                      std::string* error) {
  out->Release();
  FreeReleasedTables();
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string why;
    if (!ValidateEntryStatic(entries[i], max_masks, &why)) {
      if (error) *error = why + " (patch entry " + std::to_string(i) + ")";
      return false;
    }
    const PatchOp op = static_cast<PatchOp>(entries[i].op);
    const void* operand = entries[i].operand.data;
    if ((op == PatchOp::kAdd || op == PatchOp::kReplace) && operand != nullptr &&
        !OperandIsDeviceAccessible(operand)) {
      if (error) {
        *error = "tokentrace: the operand of patch entry " + std::to_string(i) +
                 " is not device memory; pass a CUDA tensor (or copy the operand to the device)";
      }
      return false;
    }
  }
  const uint32_t count = static_cast<uint32_t>(entries.size());
  const size_t bytes = PatchTableBytes(count, max_sites, max_masks, max_rows);
  void* device = nullptr;
  cudaError_t e = cudaMalloc(&device, bytes);
  if (e != cudaSuccess) return CudaFail(error, "cudaMalloc of the patch table", e);
  std::vector<uint64_t> staging(bytes / 8);
  if (!LayoutPatchTable(staging.data(), reinterpret_cast<uintptr_t>(device), entries.data(), count,
                        count, max_sites, max_masks, max_rows, error)) {
    cudaFree(device);
    return false;
  }
  e = cudaMemcpy(device, staging.data(), bytes, cudaMemcpyHostToDevice);
  // From pageable memory, cudaMemcpy may return before the data lands, and kernels on a
  // non-blocking stream (torch's side streams) are not ordered after it: wait, once per upload.
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    cudaFree(device);
    return CudaFail(error, "copying the patch table to the device", e);
  }
  out->device_ = static_cast<PatchTable*>(device);
  out->bytes_ = bytes;
  out->entry_count_ = count;
  out->max_sites_ = max_sites;
  out->max_masks_ = max_masks;
  out->max_rows_ = max_rows;
  const PatchTable& header = *reinterpret_cast<const PatchTable*>(staging.data());
  g_mask_layouts->Add(out->device_,
                      MaskLayout{header.mask_counts, header.row_masks, max_masks, max_rows});
  out->entries_ = entries;
  out->site_entries_.assign(max_sites, {});
  for (uint32_t i = 0; i < count; ++i) out->site_entries_[entries[i].site_id].push_back(i);
  return true;
}

void NoteCapturedUse(const PatchTable* table, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (table == nullptr || cudaStreamIsCapturing(stream, &status) != cudaSuccess) return;
  if (status != cudaStreamCaptureStatusNone) g_released->NoteCaptured(table);
}

size_t PatchTablesKeptForGraphs() { return g_released->kept(); }

bool ReadCountersDevice(const DevicePatchTable& table, cudaStream_t stream, PatchCounters* out,
                        std::string* error) {
  if (table.device() == nullptr) {
    if (error) *error = "tokentrace: no device patch table was uploaded";
    return false;
  }
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) return CudaFail(error, "synchronizing the stream for a patch report", e);
  // The counters only: the arena up to the row masks (a report does not read the masks).
  const size_t bytes = PatchTableBytes(table.entry_count(), table.max_sites());
  std::vector<uint64_t> host(bytes / 8);
  e = cudaMemcpy(host.data(), table.device(), bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaFail(error, "reading the patch table back", e);
  // Rebase the header's device pointers onto the host copy, then read it like a host table.
  PatchTable t = *reinterpret_cast<const PatchTable*>(host.data());
  if (!CheckTableHeader(t, error)) return false;
  const uintptr_t dev = reinterpret_cast<uintptr_t>(table.device());
  const uintptr_t hst = reinterpret_cast<uintptr_t>(host.data());
  auto rebase = [&](auto* p) {
    return reinterpret_cast<decltype(p)>(hst + (reinterpret_cast<uintptr_t>(p) - dev));
  };
  t.entries = rebase(t.entries);
  t.site_calls = rebase(t.site_calls);
  t.site_done = rebase(t.site_done);
  t.token = rebase(t.token);
  t.max_masks = 0;  // not copied
  t.mask_counts = nullptr;
  t.row_masks = nullptr;
  *out = ReadCountersHost(t);
  return true;
}

cudaError_t SetRowMaskDevice(PatchTable* device_table, uint32_t slot, const uint8_t* host_rows,
                             uint32_t n, uint32_t marked, cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t e = cudaStreamIsCapturing(stream, &status);
  if (e != cudaSuccess) return e;
  if (status != cudaStreamCaptureStatusNone) return cudaErrorStreamCaptureUnsupported;
  MaskLayout m;
  if (!g_mask_layouts->Find(device_table, &m) || slot >= m.max_masks || n > m.max_rows ||
      marked > n || (n > 0 && host_rows == nullptr)) {
    return cudaErrorInvalidValue;
  }
  // Rows first, then the counters: the slot's entries see the new length only with its rows.
  if (n > 0) {
    e = cudaMemcpyAsync(m.rows + size_t{slot} * m.max_rows, host_rows, n, cudaMemcpyHostToDevice,
                        stream);
    if (e != cudaSuccess) return e;
  }
  const RowMaskCounts counts{n, marked};  // pageable: staged before cudaMemcpyAsync returns
  return cudaMemcpyAsync(m.counts + slot, &counts, sizeof(counts), cudaMemcpyHostToDevice, stream);
}

}  // namespace tokentrace::patch
