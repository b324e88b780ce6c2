// Where converted CUPTI activity goes. The core's session implements it.
//
// Threading: both methods are called on CUPTI's buffer-completion thread (or on the thread
// that calls cupti::Flush), one buffer at a time, never concurrently with each other.
// Lifetime: GpuActivity::name points into CUPTI's buffer and is valid only during the call.
// Implementations must not throw (the caller is a C callback) and must not call back into
// CUDA.
#pragma once

#include <cstdint>

#include "core/records.h"

namespace tokentrace::cupti {

struct ActivitySink {
  virtual ~ActivitySink() = default;
  virtual void OnActivity(const GpuActivity& activity) = 0;
  // Records CUPTI could not store (no free buffer, or device-side overflow) since the last
  // report for the same context/stream. Called after every buffer, also with 0, and for
  // every queue after the final forced flush (cupti::Flush(true), cupti::Stop()).
  virtual void OnDropped(uint64_t records) = 0;
};

}  // namespace tokentrace::cupti
