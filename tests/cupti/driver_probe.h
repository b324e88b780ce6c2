// The few CUDA driver entry points the CUPTI tests use, found with dlsym so nothing links
// libcuda. Available() is false on machines without a driver or a GPU (tests then skip).
#pragma once

#include <cuda.h>
#include <dlfcn.h>

namespace tokentrace::testing_driver {

struct Driver {
  void* handle = nullptr;
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) PrimaryCtxRetain = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuCtxSynchronize) CtxSynchronize = nullptr;
  decltype(&::cuModuleLoadData) ModuleLoadData = nullptr;
  decltype(&::cuModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&::cuLaunchKernel) LaunchKernel = nullptr;
  decltype(&::cuMemAlloc) MemAlloc = nullptr;
  decltype(&::cuMemsetD8) MemsetD8 = nullptr;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH = nullptr;
  decltype(&::cuStreamCreate) StreamCreate = nullptr;
  decltype(&::cuStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&::cuStreamBeginCapture) StreamBeginCapture = nullptr;
  decltype(&::cuStreamEndCapture) StreamEndCapture = nullptr;
  decltype(&::cuGraphInstantiateWithFlags) GraphInstantiateWithFlags = nullptr;
  decltype(&::cuGraphLaunch) GraphLaunch = nullptr;

  bool Available() {
    handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return false;
#define TT_SYM(field, name) field = reinterpret_cast<decltype(field)>(dlsym(handle, name))
    TT_SYM(Init, "cuInit");
    TT_SYM(DeviceGetCount, "cuDeviceGetCount");
    TT_SYM(DeviceGet, "cuDeviceGet");
    TT_SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    TT_SYM(CtxSetCurrent, "cuCtxSetCurrent");
    TT_SYM(CtxSynchronize, "cuCtxSynchronize");
    TT_SYM(ModuleLoadData, "cuModuleLoadData");
    TT_SYM(ModuleGetFunction, "cuModuleGetFunction");
    TT_SYM(LaunchKernel, "cuLaunchKernel");
    TT_SYM(MemAlloc, "cuMemAlloc_v2");
    TT_SYM(MemsetD8, "cuMemsetD8_v2");
    TT_SYM(MemcpyDtoH, "cuMemcpyDtoH_v2");
    TT_SYM(StreamCreate, "cuStreamCreate");
    TT_SYM(StreamSynchronize, "cuStreamSynchronize");
    TT_SYM(StreamBeginCapture, "cuStreamBeginCapture_v2");
    TT_SYM(StreamEndCapture, "cuStreamEndCapture");
    TT_SYM(GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    TT_SYM(GraphLaunch, "cuGraphLaunch");
#undef TT_SYM
    if (Init == nullptr || DeviceGetCount == nullptr || Init(0) != CUDA_SUCCESS) return false;
    int count = 0;
    return DeviceGetCount(&count) == CUDA_SUCCESS && count > 0;
  }
};

}  // namespace tokentrace::testing_driver
