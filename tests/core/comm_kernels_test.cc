// The name rule for communication kernels, on NCCL's real kernel names: mangled as CUPTI
// reports them (copied from the symbols of libnccl.so.2 2.28.9, the one torch 2.11 ships)
// and demangled, and on the names of earlier NCCL releases.
#include "core/comm_kernels.h"

#include <gtest/gtest.h>

#include "core/joiner.h"

namespace tokentrace {
namespace {

TEST(CommKernelsTest, NcclKernelsAreCommunication) {
  for (const char* name : {
           // NCCL 2.28 (generate.py: ncclDevKernel_<coll>_<redop>_<type>_<algo>_<proto>).
           "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
           "_Z38ncclDevKernel_AllReduce_Sum_u8_TREE_LL24ncclDevKernelArgsStorageILm4096EE",
           "_Z31ncclDevKernel_AllGather_RING_LL24ncclDevKernelArgsStorageILm4096EE",
           "_Z31ncclDevKernel_Broadcast_RING_LL24ncclDevKernelArgsStorageILm4096EE",
           "_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE",
           "_Z21ncclDevKernel_Generic24ncclDevKernelArgsStorageILm4096EE",
           "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
           "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
           // Symmetric-memory kernels (symmetric/generate.py), 2.28 and 2.27.
           "_Z43ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f3221ncclSymkDevWorkArgs4K",
           "_Z30ncclSymkDevKernel_AllGather_LL21ncclSymkDevWorkArgs4K",
           "ncclSymDevKernel_AllReduce_AGxLL_R_sum_f16(ncclSymDevArgs)",
           // NCCL < 2.19: ncclKernel_<coll>_<algo>_<proto>_<redop>_<type>.
           "_Z38ncclKernel_AllReduce_RING_LL_Sum_floatP11ncclDevCommmP8ncclWork",
           "ncclKernel_AllReduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)",
           // One rank, PreMulSum (all_reduce AVG): src/device/onerank.cu.
           "_ZN43_GLOBAL__N__b4148644_10_onerank_cu_"
           "fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb",
           "__nv_static_32__b4148644_10_onerank_cu_fdf47990__ZN43_GLOBAL__N__b4148644_10_onerank_"
           "cu_fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb",
           "(anonymous namespace)::oneRankReduce<FuncPreMulSum<__half>>(void*, void*, unsigned "
           "long, unsigned long, bool)",
           "void (anonymous namespace)::oneRankReduce<FuncPreMulSum<float>>(void*, void*, "
           "unsigned long, unsigned long, bool)",
       }) {
    EXPECT_TRUE(IsCommKernel(name)) << name;
  }
}

TEST(CommKernelsTest, OtherKernelsAreWork) {
  for (const char* name : {
           "ampere_sgemm_128x64_nn",
           "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()",
           "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEviT0_",
           "my_ncclDevKernel_copy",                      // not NCCL's: the prefix is not first
           "_Z6kernelI22ncclDevKernel_SendRecvEvv",      // NCCL only in a template argument
           "void gather<ncclKernel_AllReduce>(float*)",  // the same, demangled
           "ncclDevFunc_AllReduce_Sum_f32_RING_LL",      // a device function, not a kernel
           "_Z99ncclDevKernel_truncated",                // length past the end: not parsed
           "(unnamed kernel)",
           "",
       }) {
    EXPECT_FALSE(IsCommKernel(name)) << name;
  }
}

// The joiner sums communication kernels per call apart, in summary mode too (no names kept).
TEST(CommKernelsTest, JoinerSumsCommunicationPerCall) {
  KernelMode mode;
  mode.kind = KernelMode::kSummary;
  Joiner j(mode);
  Batch b;
  j.OnEvent(0, MakeEvent(EventKind::kPush, 100, 1, 0, 0, 5, 1, 1, 0), &b);
  for (uint64_t corr : {11, 12, 13}) {
    j.OnEvent(0, MakeEvent(EventKind::kLaunch, 0, 1, corr, 0, 0, 0, 1, 0), &b);
  }
  j.OnEvent(0, MakeEvent(EventKind::kPop, 900, 1, 0, 0, 0, 0, 0, 0), &b);
  const char* names[] = {
      "ampere_sgemm_128x64_nn",
      "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
      "_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"};
  const int64_t spans[] = {1000, 300, 20};
  for (int i = 0; i < 3; ++i) {
    GpuActivity a;
    a.correlation_id = 11 + static_cast<uint64_t>(i);
    a.begin_ns = 10000 * (i + 1);
    a.end_ns = a.begin_ns + spans[i];
    a.name = names[i];
    j.OnActivity(a, &b);
  }
  GpuActivity copy;  // a copy is never communication, whatever it is next to
  copy.kind = GpuOpKind::kMemcpy;
  copy.correlation_id = 14;
  copy.begin_ns = 50000;
  copy.end_ns = 50007;
  j.OnEvent(0, MakeEvent(EventKind::kLaunch, 0, 1, 14, 0, 0, 0, 1, 0), &b);
  j.OnActivity(copy, &b);
  j.EndDrain(&b);
  ASSERT_EQ(b.call_gpu.size(), 1u);
  EXPECT_EQ(b.call_gpu[0].kernels, 4u);
  EXPECT_EQ(b.call_gpu[0].busy_ns, 1327);
  EXPECT_EQ(b.call_gpu[0].comm_ns, 320);
}

}  // namespace
}  // namespace tokentrace
