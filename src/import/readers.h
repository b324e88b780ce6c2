// The readers of recorded traces (recorded.h): which format a file is, and each format's
// reader. Each returns false with a one-line *error naming the file and what was expected
// (an unknown format, a truncated or malformed file, a SQLite file that is no Nsight Systems
// export, a trace without GPU records); they never throw.
#pragma once

#include <string>

#include "import/recorded.h"

namespace tokentrace::import {

// torch.profiler's trace (Kineto's Chrome trace-event JSON), plain or gzip-compressed:
//  - ranges: `python_function` events named `nn.Module: X` (module calls, site X) and
//    `user_annotation` events (record_function ranges, named by their text);
//  - launches: `cuda_runtime` and `cuda_driver` events with a correlation id
//    (`cudaGraphLaunch`, `cuGraphLaunch`: graph launches);
//  - GPU records: `kernel`, `gpu_memcpy`, `gpu_memset` events.
// Times are microseconds there, taken to the nearest nanosecond. A Kineto trace is one
// process: the pid of its launches.
bool ReadKineto(const std::string& path, RecordedTrace* out, std::string* error);

// An Nsight Systems SQLite export (`nsys export --type sqlite`): NVTX_EVENTS' push/pop ranges
// (eventType 59; named by `text` or StringIds, less the ", seq = N", ", op_id = N" and
// ", sizes = [...]" that PyTorch's emit_nvtx appends), CUPTI_ACTIVITY_KIND_RUNTIME's (and
// _DRIVER's) calls, and
// CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET's records (graphId / graphNodeId where the
// export has them), each in its process (globalTid / globalPid: pid = bits 24..47).
bool ReadNsys(const std::string& path, RecordedTrace* out, std::string* error);

// By its content: a SQLite file is read as an nsys export, anything else as Kineto JSON.
bool ReadRecorded(const std::string& path, RecordedTrace* out, std::string* error);

}  // namespace tokentrace::import
