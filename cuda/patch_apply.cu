// The apply kernel and its launchers (see patch_device.h for the contract).
//
// One launch per apply call. How every block agrees on the call index without a grid barrier:
// each block reads site_calls[site] (the number of calls before this one) and uses that + 1;
// when a block is done it takes a ticket from site_done[site], and the block that takes the
// last ticket (gridDim.x - 1) stores the new count and resets the ticket counter. Every block
// has read the old count before taking its ticket, so no block can see the new one, and the
// next launch on the stream starts after this one ends, so it sees both stores.
//
// How entries on the same site compose without races: the kernel resolves the entries that
// match this call into shared memory, in table order. An entry covers the elements of its box
// (for a rows entry, those in rows its mask marks: EntryCovers). For entry j, a thread walks j's
// box and owns an element j covers only if no earlier valid entry covers it; the owner applies,
// in order, entry j and every later matching entry that covers the element, and stores once.
// Each element is thus written by one thread with the fold of all its entries in table order,
// which is what the host (entry after entry) computes.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "cuda/patch_device.h"
#include "cuda/patch_grid.h"
#include "cuda/patch_ops.h"

namespace tokentrace::patch {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxDevices = 64;

__device__ __forceinline__ uint32_t LoadVolatile(const uint32_t* p) {
  return *reinterpret_cast<const volatile uint32_t*>(p);
}

__device__ bool HeaderOk(const PatchTable* t, uint32_t site) {
  return t->magic == kPatchTableMagic && t->version == kPatchTableVersion &&
         t->struct_size == sizeof(PatchTable) && t->entry_size == sizeof(PatchEntry) &&
         site < t->max_sites;
}

// Warp 0: finds, in table order, the entries for `site` matching (call, token), resolves them
// into `slots`, and (block 0 only) counts fires and skips. Returns the number of slots used.
__device__ __noinline__ uint32_t ScanMatches(const PatchTable* t, uint32_t site, uint32_t call,
                                             uint32_t token, const OutputDesc& out,
                                             ResolvedEntry* slots) {
  const uint32_t lane = threadIdx.x;
  const uint32_t count = t->entry_count;
  uint32_t n = 0;
  for (uint32_t base = 0; base < count; base += 32) {
    const uint32_t i = base + lane;
    PatchEntry* e = i < count ? &t->entries[i] : nullptr;
    const bool match =
        e && e->site_id == site && SelectorMatches(e->selector, call, token, MasksOf(*t));
    const unsigned mask = __ballot_sync(0xffffffffu, match);
    if (match) {
      const uint32_t slot = n + __popc(mask & ((1u << lane) - 1u));
      PatchErrorInfo err = MakeError(PatchError::kTooManyMatches, -1, kMaxMatchesPerCall);
      if (slot < static_cast<uint32_t>(kMaxMatchesPerCall)) {
        err = ResolveEntryCore(*e, i, out.ndim, out.shape, out.dtype, MasksOf(*t), &slots[slot]);
        if (err.code != 0) slots[slot].valid = 0;
      }
      if (blockIdx.x == 0) {  // one thread per entry per call counts
        if (err.code == 0) {
          atomicAdd(&e->fires, 1ull);
        } else {
          atomicAdd(&e->skips, 1u);
          e->last_error = err;
        }
      }
    }
    n += __popc(mask);
  }
  return min(n, static_cast<uint32_t>(kMaxMatchesPerCall));
}

__global__ void __launch_bounds__(kThreads, 4)
    ApplyPatchesKernel(PatchTable* table, uint32_t site, void* data, OutputDesc out) {
  __shared__ ResolvedEntry slots[kMaxMatchesPerCall];
  __shared__ uint32_t s_count;
  __shared__ uint32_t s_call;
  if (!HeaderOk(table, site)) return;  // uniform across the grid: nothing advances
  if (threadIdx.x < 32) {
    const uint32_t call = LoadVolatile(&table->site_calls[site]) + 1u;
    const uint32_t token = LoadVolatile(table->token);
    const uint32_t n = ScanMatches(table, site, call, token, out, slots);
    if (threadIdx.x == 0) {
      s_count = n;
      s_call = call;
    }
  }
  __syncthreads();
  const uint32_t n = s_count;
  const GridPos g{blockIdx.x, gridDim.x, threadIdx.x, blockDim.x};
  if (n == 1) {
    if (slots[0].valid) ApplySingle(g, slots[0], data, out);
  } else {
    for (uint32_t j = 0; j < n; ++j) {
      if (slots[j].valid) ApplyEntry(g, slots, j, n, data, out);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const uint32_t ticket = atomicAdd(&table->site_done[site], 1u);
    if (ticket == gridDim.x - 1) {
      *reinterpret_cast<volatile uint32_t*>(&table->site_calls[site]) = s_call;
      *reinterpret_cast<volatile uint32_t*>(&table->site_done[site]) = 0u;
      __threadfence();
    }
  }
}

__global__ void AdvanceTokenKernel(PatchTable* t) {
  if (t->magic == kPatchTableMagic) atomicAdd(t->token, 1u);
}

__global__ void SetTokenKernel(PatchTable* t, uint32_t token) {
  if (t->magic == kPatchTableMagic) *t->token = token;
}

__global__ void ResetCountersKernel(PatchTable* t) {
  if (t->magic != kPatchTableMagic) return;
  for (uint32_t i = threadIdx.x; i < t->entry_count; i += blockDim.x) {
    t->entries[i].fires = 0;
    t->entries[i].skips = 0;
    t->entries[i].last_error = PatchErrorInfo{};
  }
  for (uint32_t s = threadIdx.x; s < t->max_sites; s += blockDim.x) {
    t->site_calls[s] = 0;
    t->site_done[s] = 0;
  }
  for (uint32_t k = threadIdx.x; k < t->max_masks; k += blockDim.x)
    t->mask_counts[k] = RowMaskCounts{0, 0};
  if (threadIdx.x == 0) *t->token = 0;
}

int SmCount() {
  static std::atomic<int> cache[kMaxDevices];  // 0: not queried yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();  // our failed query must not surface as the launch's error
    return 1;
  }
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) {
      (void)cudaGetLastError();
      n = 1;
    }
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

// False when the rank is beyond kMaxPatchDims: the kernel then records kOutputRank for every
// entry that matches, and the call counter still advances.
bool MakeOutput(DType dtype, int ndim, const int64_t* shape, const int64_t* strides,
                OutputDesc* out, int64_t* elements) {
  std::memset(out, 0, sizeof(*out));
  out->ndim = ndim;
  out->dtype = static_cast<uint32_t>(dtype);
  *elements = 1;
  if (ndim < 0 || ndim > kMaxPatchDims) return false;
  for (int d = 0; d < ndim; ++d) {
    out->shape[d] = shape[d];
    out->strides[d] = strides[d];
    *elements *= shape[d] > 0 ? shape[d] : 0;
  }
  return true;
}

cudaError_t Launch(PatchTable* table, uint32_t site, void* data, const OutputDesc& out,
                   int64_t max_box, cudaStream_t stream) {
  // 4+ elements per thread for big boxes; at most 8 blocks per SM, the rest is grid-stride.
  const int64_t want = (max_box + kThreads * 4 - 1) / (kThreads * 4);
  const int blocks = static_cast<int>(std::clamp<int64_t>(want, 1, int64_t{SmCount()} * 8));
  NoteCapturedUse(table, stream);
  ApplyPatchesKernel<<<blocks, kThreads, 0, stream>>>(table, site, data, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t ApplyPatchesDevice(PatchTable* device_table, uint32_t site_id, void* data, DType dtype,
                               int ndim, const int64_t* shape, const int64_t* strides_elems,
                               cudaStream_t stream) {
  OutputDesc out;
  int64_t elements = 0;
  MakeOutput(dtype, ndim, shape, strides_elems, &out, &elements);
  return Launch(device_table, site_id, data, out, elements, stream);
}

cudaError_t ApplyPatchesDevice(const DevicePatchTable& table, uint32_t site_id, void* data,
                               DType dtype, int ndim, const int64_t* shape,
                               const int64_t* strides_elems, cudaStream_t stream) {
  if (table.device() == nullptr || site_id >= table.max_sites()) return cudaErrorInvalidValue;
  OutputDesc out;
  int64_t elements = 0;
  if (!MakeOutput(dtype, ndim, shape, strides_elems, &out, &elements))
    return Launch(table.device(), site_id, data, out, 1, stream);
  int64_t max_box = 1;
  for (uint32_t i : table.SiteEntries(site_id)) {
    ResolvedBox box;
    if (ResolveBoxCore(table.host_entries()[i].box, ndim, shape, &box).code == 0)
      max_box = std::max(max_box, box.total);
  }
  return Launch(table.device(), site_id, data, out, max_box, stream);
}

cudaError_t AdvanceTokenDevice(PatchTable* device_table, cudaStream_t stream) {
  NoteCapturedUse(device_table, stream);
  AdvanceTokenKernel<<<1, 1, 0, stream>>>(device_table);
  return cudaGetLastError();
}

cudaError_t SetTokenDevice(PatchTable* device_table, uint32_t token, cudaStream_t stream) {
  NoteCapturedUse(device_table, stream);
  SetTokenKernel<<<1, 1, 0, stream>>>(device_table, token);
  return cudaGetLastError();
}

cudaError_t ResetCountersDevice(PatchTable* device_table, cudaStream_t stream) {
  NoteCapturedUse(device_table, stream);
  ResetCountersKernel<<<1, kThreads, 0, stream>>>(device_table);
  return cudaGetLastError();
}

}  // namespace tokentrace::patch
