// What a CUPTI API callback means to tokentrace: the cbid -> action table. Pure (reads the
// call's parameter struct, calls nothing), so it is tested without libcupti or a GPU.
//
//  domain   cbid (each also in its _ptsz / _ptds / _v2 forms where CUDA 13 has them)   action
//  -------  -------------------------------------------------------------------------  ---------------------
//  runtime  cudaLaunchKernel, cudaLaunchKernelExC, __cudaLaunchKernel, cudaLaunch,      Launch
//           cudaLaunchCooperativeKernel(MultiDevice)
//  runtime  cudaGraphLaunch                                                             GraphLaunch(exec)
//  runtime  cudaMemcpy, cudaMemcpy2D, cudaMemcpy3D, cudaMemcpyFromSymbol                Escape kMemcpyDtoHSync
//             - only when kind is cudaMemcpyDeviceToHost or cudaMemcpyDefault           (else none)
//  runtime  cudaStreamSynchronize                                                       Escape kStreamSync
//  runtime  cudaDeviceSynchronize, cudaThreadSynchronize                                Escape kDeviceSync
//  runtime  cudaEventSynchronize                                                        Escape kEventSync
//  driver   cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel(MultiDevice),   Launch
//           cuLaunch, cuLaunchGrid, cuLaunchGridAsync
//  driver   cuGraphLaunch                                                               GraphLaunch(exec)
//  driver   cuMemcpyDtoH                                                                Escape kMemcpyDtoHSync
//  driver   cuMemcpy2D(Unaligned), cuMemcpy3D - when the destination is host memory     Escape kMemcpyDtoHSync
//             and the source is not
//  driver   cuMemcpy (unified addressing, direction unknown: counted as an escape,      Escape kMemcpyDtoHSync
//             it blocks the host until the copy is done)
//  driver   cuStreamSynchronize                                                         Escape kStreamSync
//  driver   cuCtxSynchronize                                                            Escape kDeviceSync
//  driver   cuEventSynchronize                                                          Escape kEventSync
//  any      anything else                                                               none
//
// Driver callbacks made from inside a traced runtime call are ignored by the subscriber
// (subscriber.cc), so a cudaMemcpy does not also count as the cuMemcpy it makes.
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>

#include "core/records.h"

namespace tokentrace::cupti {

struct Action {
  enum Kind : uint8_t { kNone = 0, kLaunch, kGraphLaunch, kEscape };
  Kind kind = kNone;
  EscapeKind escape = EscapeKind::kStreamSync;  // kEscape only
  CUgraphExec graph_exec = nullptr;             // kGraphLaunch only (may be null)
};

// `params` is CUpti_CallbackData::functionParams (the generated *_params struct of the
// call); null is allowed and yields kNone where the decision needs the parameters.
Action ClassifyCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params);

struct TracedCallback {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
};
// Every runtime/driver callback the subscriber enables (the table above).
extern const TracedCallback kTracedCallbacks[];
extern const size_t kNumTracedCallbacks;

}  // namespace tokentrace::cupti
