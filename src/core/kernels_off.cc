#include "core/kernels_off.h"

namespace tokentrace {

const char* KernelsOffPhrase(KernelsOff reason) {
  switch (reason) {
    case KernelsOff::kNo:
      return "";
    case KernelsOff::kByConfig:
      return "kernel mode off";
    case KernelsOff::kNoGpu:
      return "no NVIDIA GPU here";
    case KernelsOff::kOtherProfiler:
      return "another profiler holds CUPTI";
    case KernelsOff::kNoCupti:
      return "no CUPTI library found";
    case KernelsOff::kNotAllowed:
      return "not allowed to profile the GPU here";
    case KernelsOff::kFailed:
      return "CUPTI failed";
    case KernelsOff::kNoCudaWork:
      return "the job never initialised CUDA";
  }
  return "CUPTI failed";
}

std::string KernelsOffNotice(KernelsOff reason, const std::string& detail) {
  std::string head = std::string("tokentrace: ") + KernelsOffPhrase(reason);
  const char* tail = ": recording module calls and tokens, not kernels";
  switch (reason) {
    case KernelsOff::kNo:
    case KernelsOff::kByConfig:
    case KernelsOff::kNoCudaWork:
      return "";
    case KernelsOff::kOtherProfiler:
      return head + " (torch.profiler or Nsight Systems)" + tail;
    case KernelsOff::kNoCupti:
      return head + " (set TOKENTRACE_CUPTI=/path/to/libcupti.so)" + tail;
    case KernelsOff::kFailed: {
      const std::string prefix = "tokentrace: kernels are off: ";
      const std::string why = detail.rfind(prefix, 0) == 0 ? detail.substr(prefix.size()) : detail;
      return head + " (" + why + ")" + tail;
    }
    case KernelsOff::kNoGpu:
    case KernelsOff::kNotAllowed:
      break;
  }
  return head + tail;
}

}  // namespace tokentrace
