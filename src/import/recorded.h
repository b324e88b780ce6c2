// A GPU trace recorded by another tool (torch.profiler's Kineto JSON, an Nsight Systems SQLite
// export), read into what a live run's joiner sees: per process, the ranges each thread had
// open (module calls, annotations, NVTX push/pop ranges), the API calls that launched GPU work
// (with their correlation ids) and the GPU records (kernels, copies, sets). Plain data: the
// readers (kineto.h, nsys.h) fill it, replay.h turns it into a tokentrace file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/records.h"

namespace tokentrace::import {

struct RecordedRange {
  uint64_t thread = 0;  // the recording tool's thread id, as it wrote it
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
  std::string name;
  SiteKind kind = SiteKind::kRange;  // kModule: a module call (Kineto's `nn.Module: X`)
};

struct RecordedLaunch {
  uint64_t thread = 0;
  int64_t begin_ns = 0;
  uint64_t correlation = 0;
  bool graph = false;  // a CUDA-graph launch: many records under its one correlation id
  // The API call as the trace names it ("cudaLaunchKernel", nsys: "cudaLaunchKernel_v7000"),
  // and whether it is a driver call (Kineto's cuda_driver, nsys's _DRIVER table).
  std::string api;
  bool driver = false;
};

// A GPU record as CUPTI would hand it (its name pointer is set from `name` when it is given
// to the joiner), with its kernel name owned here.
struct RecordedGpu {
  GpuActivity activity;
  std::string name;  // kernels; copies and sets are named by the joiner
};

struct RecordedProcess {
  int64_t pid = 0;
  std::vector<RecordedRange> ranges;
  std::vector<RecordedLaunch> launches;
  std::vector<RecordedGpu> gpu;
};

struct RecordedTrace {
  std::string format;                            // "torch.profiler" | "nsys"
  std::map<int64_t, RecordedProcess> processes;  // by pid
  // GPU records whose process the trace does not say (a Kineto record whose correlation
  // id no launch has): counted, then given to the one process when there is one.
  uint64_t records = 0;
};

}  // namespace tokentrace::import
