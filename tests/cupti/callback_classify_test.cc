#include "cupti/callback_classify.h"

#include <gtest/gtest.h>

namespace tokentrace::cupti {
namespace {

constexpr auto kRt = CUPTI_CB_DOMAIN_RUNTIME_API;
constexpr auto kDrv = CUPTI_CB_DOMAIN_DRIVER_API;

TEST(ClassifyCallback, Launches) {
  for (CUpti_CallbackId id : {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                              CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
                              CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
                              CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000,
                              CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000}) {
    EXPECT_EQ(ClassifyCallback(kRt, id, nullptr).kind, Action::kLaunch) << id;
  }
  for (CUpti_CallbackId id :
       {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel}) {
    EXPECT_EQ(ClassifyCallback(kDrv, id, nullptr).kind, Action::kLaunch) << id;
  }
}

TEST(ClassifyCallback, Syncs) {
  Action a = ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, nullptr);
  EXPECT_EQ(a.kind, Action::kEscape);
  EXPECT_EQ(a.escape, EscapeKind::kStreamSync);
  a = ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, nullptr);
  EXPECT_EQ(a.kind, Action::kEscape);
  EXPECT_EQ(a.escape, EscapeKind::kDeviceSync);
  a = ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, nullptr);
  EXPECT_EQ(a.escape, EscapeKind::kEventSync);
  a = ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, nullptr);
  EXPECT_EQ(a.escape, EscapeKind::kStreamSync);
  a = ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, nullptr);
  EXPECT_EQ(a.escape, EscapeKind::kDeviceSync);
  a = ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize, nullptr);
  EXPECT_EQ(a.kind, Action::kEscape);
  EXPECT_EQ(a.escape, EscapeKind::kEventSync);
}

TEST(ClassifyCallback, RuntimeMemcpyByKind) {
  cudaMemcpy_v3020_params p = {};
  auto classify = [&](cudaMemcpyKind kind) {
    p.kind = kind;
    return ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, &p);
  };
  // Every copy is a launch (its MEMCPY record joins through it); a synchronous read into
  // host memory is also an escape.
  EXPECT_EQ(classify(cudaMemcpyDeviceToHost).kind, Action::kLaunchEscape);
  EXPECT_EQ(classify(cudaMemcpyDeviceToHost).escape, EscapeKind::kMemcpyDtoHSync);
  EXPECT_EQ(classify(cudaMemcpyDefault).kind, Action::kLaunchEscape);
  EXPECT_EQ(classify(cudaMemcpyHostToDevice).kind, Action::kLaunch);
  EXPECT_EQ(classify(cudaMemcpyDeviceToDevice).kind, Action::kLaunch);
  EXPECT_EQ(classify(cudaMemcpyHostToHost).kind, Action::kLaunch);
  // Without parameters the direction is unknown: a launch, not counted as an escape.
  EXPECT_EQ(ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, nullptr).kind,
            Action::kLaunch);

  cudaMemcpy2D_ptds_v7000_params p2 = {};
  p2.kind = cudaMemcpyDeviceToHost;
  EXPECT_EQ(ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000, &p2).kind,
            Action::kLaunchEscape);
  cudaMemcpy3DParms parms = {};
  parms.kind = cudaMemcpyHostToDevice;
  cudaMemcpy3D_v3020_params p3 = {&parms};
  EXPECT_EQ(ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020, &p3).kind,
            Action::kLaunch);
  parms.kind = cudaMemcpyDeviceToHost;
  EXPECT_EQ(ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020, &p3).kind,
            Action::kLaunchEscape);
  // Async copies and memsets (torch's copies and zero fills) are launches, never escapes.
  cudaMemcpyAsync_v3020_params pa = {};
  pa.kind = cudaMemcpyDeviceToHost;
  for (CUpti_CallbackId id :
       {CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
        CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
        CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
        CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000}) {
    EXPECT_EQ(ClassifyCallback(kRt, id, &pa).kind, Action::kLaunch) << id;
  }
}

TEST(ClassifyCallback, DriverMemcpy) {
  EXPECT_EQ(ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, nullptr).escape,
            EscapeKind::kMemcpyDtoHSync);
  EXPECT_EQ(ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, nullptr).kind,
            Action::kLaunchEscape);
  EXPECT_EQ(ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, nullptr).kind,
            Action::kLaunch);
  for (CUpti_CallbackId id :
       {CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds}) {
    EXPECT_EQ(ClassifyCallback(kDrv, id, nullptr).kind, Action::kLaunch) << id;
  }
  CUDA_MEMCPY2D copy = {};
  copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstMemoryType = CU_MEMORYTYPE_HOST;
  cuMemcpy2D_v2_params p = {&copy};
  EXPECT_EQ(ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2, &p).kind,
            Action::kLaunchEscape);
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  EXPECT_EQ(ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2, &p).kind,
            Action::kLaunch);
}

TEST(ClassifyCallback, GraphLaunchCarriesExec) {
  auto* exec = reinterpret_cast<cudaGraphExec_t>(0x1000);
  cudaGraphLaunch_v10000_params rp = {exec, nullptr};
  Action a = ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, &rp);
  EXPECT_EQ(a.kind, Action::kGraphLaunch);
  EXPECT_EQ(static_cast<void*>(a.graph_exec), static_cast<void*>(exec));
  cuGraphLaunch_params dp = {reinterpret_cast<CUgraphExec>(0x2000), nullptr};
  a = ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, &dp);
  EXPECT_EQ(a.kind, Action::kGraphLaunch);
  EXPECT_EQ(static_cast<void*>(a.graph_exec), reinterpret_cast<void*>(0x2000));
}

TEST(ClassifyCallback, OthersAreNone) {
  EXPECT_EQ(ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, nullptr).kind,
            Action::kNone);
  EXPECT_EQ(ClassifyCallback(kRt, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000, nullptr).kind,
            Action::kNone);
  EXPECT_EQ(ClassifyCallback(kDrv, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, nullptr).kind,
            Action::kNone);
  // Same numeric id, other domain: the domain decides.
  EXPECT_EQ(ClassifyCallback(CUPTI_CB_DOMAIN_RESOURCE,
                             CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, nullptr)
                .kind,
            Action::kNone);
}

// Every enabled id means something (with parameters that make copies count), and every id
// that means something is enabled.
TEST(ClassifyCallback, TableMatchesClassification) {
  cudaMemcpy3DParms parms = {};
  parms.kind = cudaMemcpyDeviceToHost;
  CUDA_MEMCPY3D copy3 = {};
  copy3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  copy3.dstMemoryType = CU_MEMORYTYPE_HOST;
  // A buffer that reads as any of the parameter structs with a DtoH direction.
  union {
    cudaMemcpy_v3020_params m;
    cudaMemcpy2D_v3020_params m2;
    cudaMemcpyFromSymbol_v3020_params ms;
    cudaMemcpy3D_v3020_params m3;
    unsigned char raw[256];
  } any = {};
  ASSERT_GT(kNumTracedCallbacks, 40u);
  for (size_t i = 0; i < kNumTracedCallbacks; ++i) {
    const TracedCallback& cb = kTracedCallbacks[i];
    if (IsGraphInstantiate(cb.domain, cb.cbid)) continue;  // tracked, no action (dispatch)
    const void* params = nullptr;
    CUDA_MEMCPY2D copy2 = {};
    cuMemcpy2D_v2_params p2 = {&copy2};
    cuMemcpy3D_v2_params p3 = {&copy3};
    copy2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    copy2.dstMemoryType = CU_MEMORYTYPE_HOST;
    if (cb.domain == kRt) {
      any = {};
      switch (cb.cbid) {
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_ptds_v7000:
          any.m3.p = &parms;
          break;
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000:
          any.m2.kind = cudaMemcpyDeviceToHost;
          break;
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020:
        case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_ptds_v7000:
          any.ms.kind = cudaMemcpyDeviceToHost;
          break;
        default:
          any.m.kind = cudaMemcpyDeviceToHost;
      }
      params = &any;
    } else {
      switch (cb.cbid) {
        case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2:
        case CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds:
          params = &p3;
          break;
        default:
          params = &p2;
      }
    }
    EXPECT_NE(ClassifyCallback(cb.domain, cb.cbid, params).kind, Action::kNone)
        << "domain " << cb.domain << " cbid " << cb.cbid;
  }
  // Reverse direction: scan every runtime/driver id; a non-none action must be enabled.
  auto enabled = [](CUpti_CallbackDomain d, CUpti_CallbackId id) {
    for (size_t i = 0; i < kNumTracedCallbacks; ++i) {
      if (kTracedCallbacks[i].domain == d && kTracedCallbacks[i].cbid == id) return true;
    }
    return false;
  };
  for (CUpti_CallbackId id = 0; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id) {
    if (ClassifyCallback(kRt, id, nullptr).kind != Action::kNone) {
      EXPECT_TRUE(enabled(kRt, id)) << "runtime cbid " << id;
    }
  }
  for (CUpti_CallbackId id = 0; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id) {
    if (ClassifyCallback(kDrv, id, nullptr).kind != Action::kNone) {
      EXPECT_TRUE(enabled(kDrv, id)) << "driver cbid " << id;
    }
  }
}

}  // namespace
}  // namespace tokentrace::cupti
