// Empty-kernel launch cost, ns per launch, under whatever tool the environment loads:
//   launch_overhead                                       no tool
//   CUDA_INJECTION64_PATH=libbare_cupti_subscriber.so ... a bare CUPTI subscriber (the floor)
//   tokentrace run --kernels full -- launch_overhead      tokentrace full mode
// gpu_bench.sh runs the three as separate processes, interleaved, and compares them.
//
// Each round launches `launches` empty kernels back to back inside one NVTX range (so a
// tracer attributes them to a call, as in a traced module) and ends with a device sync; the
// round's time / launches is its ns per launch. Prints one line:
//   launch_overhead setup=<name> rounds=5 launches=20000 median_ns=... min_ns=... max_ns=...
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "nvtx3/nvToolsExt.h"

__global__ void EmptyKernel() {}

int main(int argc, char** argv) {
  const char* setup = argc > 1 ? argv[1] : "unnamed";
  const int launches = argc > 2 ? atoi(argv[2]) : 20000;
  const int rounds = argc > 3 ? atoi(argv[3]) : 5;
  if (cudaFree(nullptr) != cudaSuccess) {
    fprintf(stderr, "launch_overhead: no CUDA device (%s)\n",
            cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  for (int i = 0; i < 2000; ++i) EmptyKernel<<<1, 1>>>();  // warm-up: module load, queues
  cudaDeviceSynchronize();
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    nvtxRangePushA("launch_loop");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; ++i) EmptyKernel<<<1, 1>>>();
    cudaDeviceSynchronize();
    const auto t1 = std::chrono::steady_clock::now();
    nvtxRangePop();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / launches);
  }
  if (cudaGetLastError() != cudaSuccess) {
    fprintf(stderr, "launch_overhead: a launch failed\n");
    return 3;
  }
  std::vector<double> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  printf("launch_overhead setup=%s rounds=%d launches=%d median_ns=%.1f min_ns=%.1f max_ns=%.1f\n",
         setup, rounds, launches, sorted[sorted.size() / 2], sorted.front(), sorted.back());
  return 0;
}
