#include "preload/injection.h"

#include <cstdlib>
#include <mutex>

namespace tokentrace::shim {
namespace {

// Function-local: NoteInjectionVariables runs in the shim's constructor, possibly before
// this file's globals are initialised. Never destroyed: read at exit.
std::mutex& Mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::string& Conflict() {
  static std::string* s = new std::string();
  return *s;
}

bool HeldByOther(const char* value, const std::string& self) {
  return value != nullptr && *value != '\0' && self != value;
}

}  // namespace

std::string InjectionConflict(const char* cuda_injection, const char* nvtx_injection,
                              const std::string& self) {
  std::string out;
  if (HeldByOther(cuda_injection, self)) {
    out = std::string("CUDA_INJECTION64_PATH held ") + cuda_injection +
          " (another tool, e.g. Nsight Systems), so CUDA never loaded tokentrace (" + self +
          ") and kernels were not traced; run without that tool to trace kernels";
  }
  if (HeldByOther(nvtx_injection, self)) {
    out += std::string(out.empty() ? "" : "; ") + "NVTX_INJECTION64_PATH held " + nvtx_injection +
           ", so NVTX ranges went there, not to tokentrace (" + self + ")";
  }
  return out;
}

void NoteInjectionVariables(const std::string& self) {
  std::string conflict =
      InjectionConflict(getenv("CUDA_INJECTION64_PATH"), getenv("NVTX_INJECTION64_PATH"), self);
  std::lock_guard<std::mutex> lock(Mutex());
  Conflict() = std::move(conflict);
}

std::string KernelsNeverStarted(KernelsOff* reason) {
  std::lock_guard<std::mutex> lock(Mutex());
  *reason = Conflict().empty() ? KernelsOff::kNoCudaWork : KernelsOff::kOtherProfiler;
  return Conflict().empty() ? "the job never initialised CUDA (no GPU work to record)" : Conflict();
}

}  // namespace tokentrace::shim
