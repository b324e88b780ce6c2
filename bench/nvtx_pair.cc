// NVTX push+pop cost, ns per pair, through whatever NVTX injection the environment sets. The
// pair is our Python hooks' (domain "tokentrace", a registered string, category 1). Needs no
// Google Benchmark, so it also builds on the GPU machine, where gpu_bench.sh runs it:
//   nvtx_pair none                                         no tool (NVTX's own no-op)
//   tokentrace run --kernels off -- nvtx_pair tokentrace   recorded by tokentrace
// bench_nvtx is the fuller version (plain strings, a naive handler, disabled paths).
//
// Each round times kBatch pairs; between rounds, untimed, tokentrace_flush (looked up at run
// time: the program does not link tokentrace) drains the rings, so a full ring never drops
// events during the timing. Prints one line:
//   nvtx_pair setup=<name> rounds=200 pairs=4096 median_ns=... min_ns=...
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "nvtx3/nvToolsExt.h"
#include "nvtx_hook_pair.h"

int main(int argc, char** argv) {
  const char* setup = argc > 1 ? argv[1] : "unnamed";
  constexpr int kBatch = 4096;  // pairs per round: 8192 events, well under a ring's 65536
  constexpr int kRounds = 200;
  auto flush = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "tokentrace_flush"));
  const nvtxDomainHandle_t domain = HookDomain();
  const nvtxEventAttributes_t attr = HookAttr("model.layers.0.mlp");
  std::vector<double> ns;
  for (int r = 0; r <= kRounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kBatch; ++i) {
      nvtxDomainRangePushEx(domain, &attr);
      nvtxDomainRangePop(domain);
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (r > 0) ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBatch);
    if (flush != nullptr) flush();
  }
  std::sort(ns.begin(), ns.end());
  std::printf("nvtx_pair setup=%s rounds=%d pairs=%d median_ns=%.2f min_ns=%.2f\n", setup, kRounds,
              kBatch, ns[ns.size() / 2], ns.front());
  return 0;
}
