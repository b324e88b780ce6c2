// Hand-built traces with known numbers for the CLI tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "store/store.h"

namespace tokentrace::testing {

// Three tokens on sites self (root), h.0.attn and h.0.mlp (module).
//   token t: root call 10t, cpu from t*10 ms, lasting {4, 1.5, 1.25} ms
//            attn call 10t+1: one 0.1 ms "flash_fwd" kernel, stream 7
//            mlp call 10t+2 (thread 1): two "gemm" kernels of 0.1 ms each, stream 7
//   token 3 also has one escape. Kernel mode full, pid 4242.
//   Meta: written by this build's version; `extra_meta` adds rows or replaces them.
inline void WriteSmallTrace(
    const std::string& path, bool with_losses,
    const std::vector<std::pair<std::string, std::string>>& extra_meta = {}) {
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch b;
  b.meta = {{"kernel_mode", "full"},
            {"pid", "4242"},
            {"tool_version", TOKENTRACE_VERSION},
            {"kernels_status", ""}};
  b.meta.insert(b.meta.end(), extra_meta.begin(), extra_meta.end());
  b.sites = {{1, "self", SiteKind::kRoot, true},
             {2, "h.0.attn", SiteKind::kModule, false},
             {3, "h.0.mlp", SiteKind::kModule, false}};
  b.strings = {{1, "flash_fwd"}, {2, "gemm"}};
  const int64_t dur[] = {4000000, 1500000, 1250000};
  for (uint32_t t = 1; t <= 3; ++t) {
    int64_t base = t * 10000000LL;
    b.calls.push_back({10u * t, 1, t, t, 0, 0, base, base + dur[t - 1]});
    b.calls.push_back({10u * t + 1, 2, t, t, 10u * t, 0, base + 1000, base + 2000});
    b.calls.push_back({10u * t + 2, 3, t, t, 10u * t, 1, base + 3000, base + 4000});
    b.kernels.push_back(
        {10u * t + 1, t, 1, GpuOpKind::kKernel, 0, 7, base + 10000, base + 110000, 1, 0, 0});
    b.kernels.push_back(
        {10u * t + 2, t, 2, GpuOpKind::kKernel, 0, 7, base + 200000, base + 300000, 2, 0, 0});
    b.kernels.push_back(
        {10u * t + 2, t, 2, GpuOpKind::kKernel, 0, 7, base + 300000, base + 400000, 3, 0, 0});
    b.call_gpu.push_back({10u * t + 1, t, 1, 100000, base + 10000, base + 110000});
    b.call_gpu.push_back({10u * t + 2, t, 2, 200000, base + 200000, base + 400000});
  }
  b.escapes = {{32, 3, 1, 30003500, EscapeKind::kStreamSync}};
  b.losses = {{"cupti_dropped", 0}};
  if (with_losses) b.losses["ring_overflow"] = 12;
  ASSERT_TRUE(store->Write(b, &error)) << error;
}

}  // namespace tokentrace::testing
