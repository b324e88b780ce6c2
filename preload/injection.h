// Which library held each injection variable when libtokentrace.so was preloaded, so that a
// job whose kernels never started can say why. Another tool (Nsight Systems, for one) may own
// CUDA_INJECTION64_PATH: CUDA then never loads us, kernel tracing never starts, and "the job
// never initialised CUDA" would be wrong.
#pragma once

#include <string>

#include "core/kernels_off.h"

namespace tokentrace::shim {

// Notes the variables as the process had them, before tokentrace sets its own. `self` is
// libtokentrace.so's path.
void NoteInjectionVariables(const std::string& self);
// Pure: names each variable that another library held, or "" when none did (unset, empty,
// or tokentrace itself).
std::string InjectionConflict(const char* cuda_injection, const char* nvtx_injection,
                              const std::string& self);
// What a preloaded job whose kernels never started is told, and its category: the conflict
// noted at load (kOtherProfiler), else that the job never initialised CUDA (kNoCudaWork).
std::string KernelsNeverStarted(KernelsOff* reason);

}  // namespace tokentrace::shim
