// What a CUPTI API callback means to tokentrace: the cbid -> action table. Pure (reads the
// call's parameter struct, calls nothing), so it is tested without libcupti or a GPU.
//
// clang-format off
//  domain   cbid (each also in its _ptsz / _ptds / _v2 forms where CUDA 13 has them)   action
//  -------  -------------------------------------------------------------------------  ---------------------
//  runtime  cudaLaunchKernel, cudaLaunchKernelExC, __cudaLaunchKernel, cudaLaunch,      Launch
//           cudaLaunchCooperativeKernel(MultiDevice)
//  runtime  cudaGraphLaunch                                                             GraphLaunch(exec)
//  runtime  cudaMemcpy, cudaMemcpy2D, cudaMemcpy3D, cudaMemcpyFromSymbol                LaunchEscape kMemcpyDtoHSync
//             - when kind is cudaMemcpyDeviceToHost or cudaMemcpyDefault                (else Launch)
//  runtime  cudaMemcpy*Async, cudaMemcpyToSymbol, cudaMemcpy(3D)Peer, cudaMemcpy*Batch*, Launch
//           cudaMemset, cudaMemset2D/3D (and their Async forms)
//             - their MEMCPY / MEMSET records carry the call's correlation id
//  runtime  cudaStreamSynchronize                                                       Escape kStreamSync
//  runtime  cudaDeviceSynchronize, cudaThreadSynchronize                                Escape kDeviceSync
//  runtime  cudaEventSynchronize                                                        Escape kEventSync
//  driver   cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel(MultiDevice),   Launch
//           cuLaunch, cuLaunchGrid, cuLaunchGridAsync
//  driver   cuGraphLaunch                                                               GraphLaunch(exec)
//  driver   cuMemcpyDtoH                                                                LaunchEscape kMemcpyDtoHSync
//  driver   cuMemcpy2D(Unaligned), cuMemcpy3D - when the destination is host memory     LaunchEscape kMemcpyDtoHSync
//             and the source is not                                                     (else Launch)
//  driver   cuMemcpy (unified addressing, direction unknown: counted as an escape,      LaunchEscape kMemcpyDtoHSync
//             it blocks the host until the copy is done)
//  driver   cuMemcpyHtoD, cuMemcpyDtoD, cuMemcpyPeer, cuMemcpy*Async, cuMemcpy*Batch*,  Launch
//           cuMemsetD8/16/32, cuMemsetD2D8/16/32 (and their Async forms)
//  driver   cuStreamSynchronize                                                         Escape kStreamSync
//  driver   cuCtxSynchronize                                                            Escape kDeviceSync
//  driver   cuEventSynchronize                                                          Escape kEventSync
//  runtime  cudaGraphInstantiate* (and driver cuGraphInstantiate*)                      none; tracked by the
//             - nodes CUPTI reports as created inside one are instantiation's own, not    dispatcher
//               the capture's: their clone events carry the owner (IsGraphInstantiate)
//  any      anything else                                                               none
// clang-format on
//
// Driver callbacks made from inside a traced runtime call are ignored by the dispatcher
// (callback_dispatch.cc), so a cudaMemcpy does not also count as the cuMemcpy it makes.
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>

#include "core/records.h"

namespace tokentrace::cupti {

struct Action {
  // kLaunchEscape: both (a synchronous copy into host memory: its MEMCPY record joins
  // through the launch, and the host waited for device data).
  enum Kind : uint8_t { kNone = 0, kLaunch, kGraphLaunch, kEscape, kLaunchEscape };
  Kind kind = kNone;
  EscapeKind escape = EscapeKind::kStreamSync;  // kEscape and kLaunchEscape
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
// True for the graph-instantiate API calls (runtime and driver), whose enter/exit the
// dispatcher tracks per thread.
bool IsGraphInstantiate(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
// The CUDA-graph resource callbacks it enables (handled in callback_dispatch.cc): node
// created, node cloned into an exec, exec created, graph cloned.
extern const CUpti_CallbackId kResourceCallbacks[];
extern const size_t kNumResourceCallbacks;

}  // namespace tokentrace::cupti
