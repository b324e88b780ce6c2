// NVTX injection: the handlers NVTX calls once our library is its injection.
//
// Every NVTX instance in the process (torch's, a C++ library's, our Python extension's)
// loads the library named by NVTX_INJECTION64_PATH on its first call and calls the exported
// InitializeInjectionNvtx2, which fills that instance's function table with these handlers.
// The preload constructor points NVTX_INJECTION64_PATH at libtokentrace.so.
#pragma once

#include <cstdint>

namespace tokentrace::nvtx {

// Number of NVTX instances that attached to us (for diagnostics and tests).
uint32_t AttachedInstances();

}  // namespace tokentrace::nvtx
