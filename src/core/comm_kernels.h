// Which GPU kernels and which sites are communication: the one rule, used by the joiner
// (per-call comm time in call_gpu.gpu_comm_ns), the writer's summaries (token_stats.wait_ns,
// gpu_collective_ns), the cross-rank report and the Chrome export (category "comm").
//
// NCCL launches its collectives as kernels named by a fixed scheme (NVIDIA/nccl
// src/device/generate.py and src/device/symmetric/generate.py):
//   ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclDevKernel_SendRecv, ncclDevKernel_Generic
//   (NCCL >= 2.19); ncclSymkDevKernel_AllGather_LL, ncclSymDevKernel_... (symmetric memory);
//   ncclKernel_AllReduce_RING_LL_Sum_float (NCCL < 2.19).
// With one rank NCCL skips those: a PreMulSum reduction (all_reduce with op AVG on floats)
// runs oneRankReduce<FuncPreMulSum<T>> from an anonymous namespace in src/device/onerank.cu;
// other one-rank collectives are a plain copy or nothing.
// CUPTI reports the mangled name (_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDev...),
// other tools the demangled one (ncclDevKernel_...(ncclDevKernelArgsStorage<4096ul>)): both
// are recognised, by the function's own identifier, so a user kernel that merely mentions
// NCCL in a template argument is not.
#pragma once

#include <string>
#include <string_view>

namespace tokentrace {

bool IsCommKernel(std::string_view name);

// True for a site name that is a collective operation (c10d/NCCL/all_reduce..., matched
// case-insensitively): where a rank waits for its peers.
bool IsCollectiveSite(std::string_view name);

}  // namespace tokentrace
