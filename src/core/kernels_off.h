// Why GPU kernels are not recorded, as a category a user reads at a glance. The cupti seam
// decides the category (cupti::Start); the session says it once per process on stderr and
// writes it to the trace's meta (`kernels_off`), next to the full detail (`kernels_status`).
#pragma once

#include <string>

namespace tokentrace {

enum class KernelsOff {
  kNo,             // kernels are recorded
  kByConfig,       // TOKENTRACE_KERNELS=off
  kNoGpu,          // no NVIDIA driver, or no GPU visible to it
  kOtherProfiler,  // another CUPTI subscriber (torch.profiler, Nsight Systems)
  kNoCupti,        // a driver, but no loadable libcupti
  kNotAllowed,     // CUPTI refused: insufficient privileges
  kFailed,         // any other CUPTI failure (the detail says which call)
  kNoCudaWork,     // preload: the job never initialised CUDA, so there was nothing to record
};

// A few words: "no NVIDIA GPU here", "" for kNo. Meta `kernels_off`, plot titles.
const char* KernelsOffPhrase(KernelsOff reason);

// The one stderr line of a process whose kernels cannot be recorded ("" for kNo and
// kByConfig: the user chose that). `detail` is appended only for kFailed, where the phrase
// alone would not say what to do.
std::string KernelsOffNotice(KernelsOff reason, const std::string& detail);

}  // namespace tokentrace
