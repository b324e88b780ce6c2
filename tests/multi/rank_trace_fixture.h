// Synthetic rank files of one tensor-parallel launch, with known numbers.
//
// Every token t of every rank: a root call "self" spanning [t * 10 ms, ...) on the common
// (wall) axis, inside it "model.mlp" (2 ms of work, plus `slow_ms` on the slow rank at the
// slow token) and then "model.mlp.all_reduce", which ends for every rank 0.1 ms after the
// last rank's work ended: the others wait there for the slow one.
// Each rank's trace clock is the wall clock minus its own offset (as on another host); the
// clock anchors in meta record that offset.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/launch_meta.h"
#include "store/store.h"

namespace tokentrace::testing {

struct RankSpec {
  int rank = 0;
  std::string launch = "launch-1";
  uint32_t tokens = 10;     // this rank's tokens (fewer: it died after the last)
  uint32_t slow_token = 0;  // 0: no slow token in this launch
  int slow_rank = -1;
  int64_t slow_ms = 0;
  int64_t clock_offset_ns = 0;  // wall - trace of this rank
  bool exited = true;           // writes clock_anchor_exit
  bool anchors = true;
  bool nested_c10d = false;  // a "c10d::all_reduce" call inside model.mlp.all_reduce
  bool gpu = false;          // 1 ms of kernels in model.mlp; the collective's kernels span its wait
  std::string role;          // meta role (a serving engine's process); none when empty
  int pid = -1;              // meta pid; -1: 1000 + rank
};

inline constexpr int64_t kWallBase = 1700000000000000000;  // wall time of the launch
inline constexpr int64_t kTokenPeriod = 10000000;          // 10 ms
inline constexpr int64_t kWork = 2000000;                  // 2 ms
inline constexpr int64_t kReduce = 100000;                 // 0.1 ms

inline void WriteRankTrace(const std::string& path, const RankSpec& s) {
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch b;
  const int64_t off = s.clock_offset_ns;
  b.meta = {{kMetaRank, std::to_string(s.rank)},
            {kMetaHost, "host" + std::to_string(s.rank)},
            {kMetaLaunchId, s.launch},
            {"pid", std::to_string(s.pid >= 0 ? s.pid : 1000 + s.rank)},
            {kMetaWorldSize, "4"}};
  if (!s.role.empty()) b.meta.emplace_back("role", s.role);
  if (s.anchors) {
    b.meta.emplace_back(kMetaAnchorStart, FormatAnchor({kWallBase - off, kWallBase}));
    if (s.exited) {
      const int64_t end = kWallBase + (s.tokens + 1) * kTokenPeriod;
      b.meta.emplace_back(kMetaAnchorExit, FormatAnchor({end - off, end}));
    }
  }
  b.sites = {{1, "self", SiteKind::kRoot, true},
             {2, "model.mlp", SiteKind::kModule, false},
             {3, "model.mlp.all_reduce", SiteKind::kRange, false},
             {4, "c10d::all_reduce", SiteKind::kRange, false}};
  for (uint32_t t = 1; t <= s.tokens; ++t) {
    const int64_t begin = kWallBase + t * kTokenPeriod - off;  // on this rank's clock
    const bool slow_token = t == s.slow_token;
    const int64_t work = kWork + (slow_token && s.rank == s.slow_rank ? s.slow_ms * 1000000 : 0);
    const int64_t all_done = begin + kWork + (slow_token ? s.slow_ms * 1000000 : 0);
    const int64_t end = all_done + kReduce;
    const uint64_t id = 10u * t;
    b.calls.push_back({id, 1, t, t, 0, 0, begin, end});
    b.calls.push_back({id + 1, 2, t, t, id, 0, begin, begin + work});
    b.calls.push_back({id + 2, 3, t, t, id, 0, begin + work, end});
    if (s.nested_c10d) b.calls.push_back({id + 3, 4, t, t, id + 2, 0, begin + work, end});
    if (s.gpu) {  // kernels go to the innermost call: c10d::all_reduce when there is one
      const uint64_t coll = s.nested_c10d ? id + 3 : id + 2;
      b.call_gpu.push_back({id + 1, t, 1, 1000000, begin, begin + 1000000});
      b.call_gpu.push_back({coll, t, 1, end - begin - work, begin + work, end});
    }
  }
  ASSERT_TRUE(store->Write(b, &error)) << error;
}

}  // namespace tokentrace::testing
