#include "cupti/callback_classify.h"

// cupti.h already brings in cuda_runtime_api.h and the generated *_params structs
// (generated_cuda_meta.h, generated_cuda_runtime_api_meta.h); they have no include guards.

namespace tokentrace::cupti {
namespace {

// The _ptds / _ptsz parameter structs have the same layout as the default-stream ones
// (only the per-thread stream semantics differ), so each pair is read through one type.

bool IsHostReadKind(cudaMemcpyKind kind) {
  return kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault;
}

// Driver 2D/3D copies describe both ends by memory type. A host (or unified) destination
// filled from a non-host source is a device-to-host read.
bool IsHostRead(CUmemorytype src, CUmemorytype dst) {
  const bool dst_host = dst == CU_MEMORYTYPE_HOST || dst == CU_MEMORYTYPE_UNIFIED;
  return dst_host && src != CU_MEMORYTYPE_HOST;
}

Action Launch() { return Action{Action::kLaunch, EscapeKind::kStreamSync, nullptr}; }
// A copy (or memset) the call enqueues: its MEMCPY/MEMSET record carries this call's
// correlation id, so it is a launch; a synchronous one that reads device memory into host
// memory is also an escape.
Action Copy(bool host_read) {
  return host_read ? Action{Action::kLaunchEscape, EscapeKind::kMemcpyDtoHSync, nullptr} : Launch();
}
Action Escape(EscapeKind kind) { return Action{Action::kEscape, kind, nullptr}; }
Action GraphLaunch(CUgraphExec exec) {
  return Action{Action::kGraphLaunch, EscapeKind::kStreamSync, exec};
}

template <typename P>
const P* As(const void* params) {
  return static_cast<const P*>(params);
}

Action ClassifyRuntime(CUpti_CallbackId cbid, const void* params) {
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000:
    case CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000:
      return Launch();

    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
      return GraphLaunch(params == nullptr ? nullptr
                                           : As<cudaGraphLaunch_v10000_params>(params)->graphExec);

    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000:
      return Copy(params && IsHostReadKind(As<cudaMemcpy_v3020_params>(params)->kind));
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000:
      return Copy(params && IsHostReadKind(As<cudaMemcpy2D_v3020_params>(params)->kind));
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_ptds_v7000: {
      const auto* p = params ? As<cudaMemcpy3D_v3020_params>(params)->p : nullptr;
      return Copy(p && IsHostReadKind(p->kind));
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_ptds_v7000:
      return Copy(params && IsHostReadKind(As<cudaMemcpyFromSymbol_v3020_params>(params)->kind));

    // Asynchronous copies, copies that do not land in host memory, and memsets.
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeerAsync_v4000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeerAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v12080:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v12080:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v13000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_v12080:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_ptsz_v12080:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_v13000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DBatchAsync_ptsz_v13000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_ptds_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeer_v4000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DPeer_ptds_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset2D_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset2D_ptds_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_ptsz_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset3D_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset3D_ptds_v7000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_ptsz_v7000:
      return Launch();

    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000:
      return Escape(EscapeKind::kStreamSync);
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaThreadSynchronize_v3020:
      return Escape(EscapeKind::kDeviceSync);
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020:
      return Escape(EscapeKind::kEventSync);
    default:
      return Action{};
  }
}

Action ClassifyDriver(CUpti_CallbackId cbid, const void* params) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice:
      return Launch();

    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
      return GraphLaunch(params == nullptr ? nullptr : As<cuGraphLaunch_params>(params)->hGraph);

    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds:
      return Copy(true);
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2_ptds: {
      const CUDA_MEMCPY2D* c = params ? As<cuMemcpy2D_v2_params>(params)->pCopy : nullptr;
      return Copy(c && IsHostRead(c->srcMemoryType, c->dstMemoryType));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds: {
      const CUDA_MEMCPY3D* c = params ? As<cuMemcpy3D_v2_params>(params)->pCopy : nullptr;
      return Copy(c && IsHostRead(c->srcMemoryType, c->dstMemoryType));
    }

    // Asynchronous copies, copies that do not land in host memory, and memsets (driver-API
    // callers such as Triton; the runtime's own driver calls are skipped by the subscriber).
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async:
    case CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz:
      return Launch();

    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
      return Escape(EscapeKind::kStreamSync);
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2:
      return Escape(EscapeKind::kDeviceSync);
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
      return Escape(EscapeKind::kEventSync);
    default:
      return Action{};
  }
}

}  // namespace

Action ClassifyCallback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params) {
  switch (domain) {
    case CUPTI_CB_DOMAIN_RUNTIME_API:
      return ClassifyRuntime(cbid, params);
    case CUPTI_CB_DOMAIN_DRIVER_API:
      return ClassifyDriver(cbid, params);
    default:
      return Action{};
  }
}

#define TT_RT(name) \
  { CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##name }
#define TT_DRV(name) \
  { CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name }
const TracedCallback kTracedCallbacks[] = {
    TT_RT(cudaLaunch_v3020),
    TT_RT(cudaLaunch_ptsz_v7000),
    TT_RT(cudaLaunchKernel_v7000),
    TT_RT(cudaLaunchKernel_ptsz_v7000),
    TT_RT(cudaLaunchCooperativeKernel_v9000),
    TT_RT(cudaLaunchCooperativeKernel_ptsz_v9000),
    TT_RT(cudaLaunchCooperativeKernelMultiDevice_v9000),
    TT_RT(cudaLaunchKernelExC_v11060),
    TT_RT(cudaLaunchKernelExC_ptsz_v11060),
    TT_RT(__cudaLaunchKernel_v13000),
    TT_RT(__cudaLaunchKernel_ptsz_v13000),
    TT_RT(cudaGraphLaunch_v10000),
    TT_RT(cudaGraphLaunch_ptsz_v10000),
    TT_RT(cudaMemcpy_v3020),
    TT_RT(cudaMemcpy_ptds_v7000),
    TT_RT(cudaMemcpy2D_v3020),
    TT_RT(cudaMemcpy2D_ptds_v7000),
    TT_RT(cudaMemcpy3D_v3020),
    TT_RT(cudaMemcpy3D_ptds_v7000),
    TT_RT(cudaMemcpyFromSymbol_v3020),
    TT_RT(cudaMemcpyFromSymbol_ptds_v7000),
    TT_RT(cudaMemcpyAsync_v3020),
    TT_RT(cudaMemcpyAsync_ptsz_v7000),
    TT_RT(cudaMemcpy2DAsync_v3020),
    TT_RT(cudaMemcpy2DAsync_ptsz_v7000),
    TT_RT(cudaMemcpy3DAsync_v3020),
    TT_RT(cudaMemcpy3DAsync_ptsz_v7000),
    TT_RT(cudaMemcpyToSymbolAsync_v3020),
    TT_RT(cudaMemcpyToSymbolAsync_ptsz_v7000),
    TT_RT(cudaMemcpyFromSymbolAsync_v3020),
    TT_RT(cudaMemcpyFromSymbolAsync_ptsz_v7000),
    TT_RT(cudaMemcpyPeerAsync_v4000),
    TT_RT(cudaMemcpy3DPeerAsync_v4000),
    TT_RT(cudaMemcpy3DPeerAsync_ptsz_v7000),
    TT_RT(cudaMemcpyBatchAsync_v12080),
    TT_RT(cudaMemcpyBatchAsync_ptsz_v12080),
    TT_RT(cudaMemcpyBatchAsync_v13000),
    TT_RT(cudaMemcpyBatchAsync_ptsz_v13000),
    TT_RT(cudaMemcpy3DBatchAsync_v12080),
    TT_RT(cudaMemcpy3DBatchAsync_ptsz_v12080),
    TT_RT(cudaMemcpy3DBatchAsync_v13000),
    TT_RT(cudaMemcpy3DBatchAsync_ptsz_v13000),
    TT_RT(cudaMemcpyToSymbol_v3020),
    TT_RT(cudaMemcpyToSymbol_ptds_v7000),
    TT_RT(cudaMemcpyPeer_v4000),
    TT_RT(cudaMemcpy3DPeer_v4000),
    TT_RT(cudaMemcpy3DPeer_ptds_v7000),
    TT_RT(cudaMemset_v3020),
    TT_RT(cudaMemset_ptds_v7000),
    TT_RT(cudaMemsetAsync_v3020),
    TT_RT(cudaMemsetAsync_ptsz_v7000),
    TT_RT(cudaMemset2D_v3020),
    TT_RT(cudaMemset2D_ptds_v7000),
    TT_RT(cudaMemset2DAsync_v3020),
    TT_RT(cudaMemset2DAsync_ptsz_v7000),
    TT_RT(cudaMemset3D_v3020),
    TT_RT(cudaMemset3D_ptds_v7000),
    TT_RT(cudaMemset3DAsync_v3020),
    TT_RT(cudaMemset3DAsync_ptsz_v7000),
    TT_RT(cudaStreamSynchronize_v3020),
    TT_RT(cudaStreamSynchronize_ptsz_v7000),
    TT_RT(cudaDeviceSynchronize_v3020),
    TT_RT(cudaThreadSynchronize_v3020),
    TT_RT(cudaEventSynchronize_v3020),
    TT_DRV(cuLaunch),
    TT_DRV(cuLaunchGrid),
    TT_DRV(cuLaunchGridAsync),
    TT_DRV(cuLaunchKernel),
    TT_DRV(cuLaunchKernel_ptsz),
    TT_DRV(cuLaunchKernelEx),
    TT_DRV(cuLaunchKernelEx_ptsz),
    TT_DRV(cuLaunchCooperativeKernel),
    TT_DRV(cuLaunchCooperativeKernel_ptsz),
    TT_DRV(cuLaunchCooperativeKernelMultiDevice),
    TT_DRV(cuGraphLaunch),
    TT_DRV(cuGraphLaunch_ptsz),
    TT_DRV(cuMemcpyDtoH),
    TT_DRV(cuMemcpyDtoH_v2),
    TT_DRV(cuMemcpyDtoH_v2_ptds),
    TT_DRV(cuMemcpy),
    TT_DRV(cuMemcpy_v2),
    TT_DRV(cuMemcpy_ptds),
    TT_DRV(cuMemcpy2D_v2),
    TT_DRV(cuMemcpy2D_v2_ptds),
    TT_DRV(cuMemcpy2DUnaligned_v2),
    TT_DRV(cuMemcpy2DUnaligned_v2_ptds),
    TT_DRV(cuMemcpy3D_v2),
    TT_DRV(cuMemcpy3D_v2_ptds),
    TT_DRV(cuMemcpyHtoD_v2),
    TT_DRV(cuMemcpyHtoD_v2_ptds),
    TT_DRV(cuMemcpyDtoD_v2),
    TT_DRV(cuMemcpyDtoD_v2_ptds),
    TT_DRV(cuMemcpyPeer),
    TT_DRV(cuMemcpyPeer_ptds),
    TT_DRV(cuMemcpyAsync),
    TT_DRV(cuMemcpyAsync_ptsz),
    TT_DRV(cuMemcpyHtoDAsync_v2),
    TT_DRV(cuMemcpyHtoDAsync_v2_ptsz),
    TT_DRV(cuMemcpyDtoHAsync_v2),
    TT_DRV(cuMemcpyDtoHAsync_v2_ptsz),
    TT_DRV(cuMemcpyDtoDAsync_v2),
    TT_DRV(cuMemcpyDtoDAsync_v2_ptsz),
    TT_DRV(cuMemcpy2DAsync_v2),
    TT_DRV(cuMemcpy2DAsync_v2_ptsz),
    TT_DRV(cuMemcpy3DAsync_v2),
    TT_DRV(cuMemcpy3DAsync_v2_ptsz),
    TT_DRV(cuMemcpyPeerAsync),
    TT_DRV(cuMemcpyPeerAsync_ptsz),
    TT_DRV(cuMemcpyBatchAsync_v2),
    TT_DRV(cuMemcpyBatchAsync_v2_ptsz),
    TT_DRV(cuMemcpy3DBatchAsync_v2),
    TT_DRV(cuMemcpy3DBatchAsync_v2_ptsz),
    TT_DRV(cuMemsetD8_v2),
    TT_DRV(cuMemsetD8_v2_ptds),
    TT_DRV(cuMemsetD8Async),
    TT_DRV(cuMemsetD8Async_ptsz),
    TT_DRV(cuMemsetD16_v2),
    TT_DRV(cuMemsetD16_v2_ptds),
    TT_DRV(cuMemsetD16Async),
    TT_DRV(cuMemsetD16Async_ptsz),
    TT_DRV(cuMemsetD32_v2),
    TT_DRV(cuMemsetD32_v2_ptds),
    TT_DRV(cuMemsetD32Async),
    TT_DRV(cuMemsetD32Async_ptsz),
    TT_DRV(cuMemsetD2D8_v2),
    TT_DRV(cuMemsetD2D8_v2_ptds),
    TT_DRV(cuMemsetD2D8Async),
    TT_DRV(cuMemsetD2D8Async_ptsz),
    TT_DRV(cuMemsetD2D16_v2),
    TT_DRV(cuMemsetD2D16_v2_ptds),
    TT_DRV(cuMemsetD2D16Async),
    TT_DRV(cuMemsetD2D16Async_ptsz),
    TT_DRV(cuMemsetD2D32_v2),
    TT_DRV(cuMemsetD2D32_v2_ptds),
    TT_DRV(cuMemsetD2D32Async),
    TT_DRV(cuMemsetD2D32Async_ptsz),
    TT_DRV(cuStreamSynchronize),
    TT_DRV(cuStreamSynchronize_ptsz),
    TT_DRV(cuCtxSynchronize),
    TT_DRV(cuCtxSynchronize_v2),
    TT_DRV(cuEventSynchronize),
    // No action of their own: the dispatcher tracks them (IsGraphInstantiate).
    TT_RT(cudaGraphInstantiate_v10000),
    TT_RT(cudaGraphInstantiate_v12000),
    TT_RT(cudaGraphInstantiateWithFlags_v11040),
    TT_RT(cudaGraphInstantiateWithParams_v12000),
    TT_RT(cudaGraphInstantiateWithParams_ptsz_v12000),
    TT_DRV(cuGraphInstantiate),
    TT_DRV(cuGraphInstantiate_v2),
    TT_DRV(cuGraphInstantiateWithFlags),
    TT_DRV(cuGraphInstantiateWithParams),
    TT_DRV(cuGraphInstantiateWithParams_ptsz),
};
#undef TT_RT
#undef TT_DRV
const size_t kNumTracedCallbacks = sizeof(kTracedCallbacks) / sizeof(kTracedCallbacks[0]);

bool IsGraphInstantiate(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v10000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040:
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_v12000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_ptsz_v12000:
        return true;
      default:
        return false;
    }
  }
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate:
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2:
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags:
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams:
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz:
        return true;
      default:
        return false;
    }
  }
  return false;
}

const CUpti_CallbackId kResourceCallbacks[] = {
    CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
    CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, CUPTI_CBID_RESOURCE_GRAPH_CLONED};
const size_t kNumResourceCallbacks = sizeof(kResourceCallbacks) / sizeof(kResourceCallbacks[0]);

}  // namespace tokentrace::cupti
