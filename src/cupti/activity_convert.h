// CUPTI activity record -> tokentrace::GpuActivity, at the boundary. Pure: no libcupti
// calls, so tests build CUpti_ActivityKernel10 / Memcpy6 / Memset4 records by hand.
#pragma once

#include <cupti.h>

#include <cstdint>

#include "core/records.h"

namespace tokentrace::cupti {

// Record layouts this build reads. CUPTI always writes the newest layout its version
// knows; cupti_api.cc refuses a libcupti older than CUDA 13 for that reason.
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;

// Converts kernels (CONCURRENT_KERNEL and KERNEL), memcpys and memsets; returns false for
// every other kind (and for null). `clock_offset_ns` is added to CUPTI's start/end: 0 when
// CUPTI already uses our clock (timestamp callback registered), otherwise
// HostNowNs() - cuptiGetTimestamp() taken at start.
bool ConvertActivity(const CUpti_Activity* record, int64_t clock_offset_ns, GpuActivity* out);

// CUpti_ActivityMemcpyKind -> GpuActivity::copy_kind (1 HtoD, 2 DtoH, 8 DtoD, 0 other).
uint8_t CopyKindCode(uint8_t cupti_copy_kind);

}  // namespace tokentrace::cupti
