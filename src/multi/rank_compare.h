// The cross-rank comparison behind `tokentrace report` over several files.
//
// Memory stays bounded in ranks x tokens: each file is read through one SQL cursor that
// yields one row per token (its token time and its time in collectives: since schema 6 the
// writer's token_stats row, which has them; before, summed by SQLite in token order over the
// calls_by_token index, or for schema 4 and 5 over token_stats and each token's range of call
// ids), and the cursors advance together, one token at a time. What is kept: per rank a few totals,
// and the `top` tokens with the largest lead. The per-site breakdown is queried afterwards only for
// those tokens.
//
// Definitions (per token and rank):
//   time  = the token call's duration (host clock);
//   wait  = time in calls of collective sites (IsCollectiveSite: c10d/NCCL/all_reduce...),
//           where a rank waits for its peers (outermost such calls only); in preload mode
//           python/tokentrace/_record/collectives.py puts torch.distributed calls in "c10d::"
//           sites;
//   work  = time - wait. Synchronous collectives make every rank's *time* about equal; the
//           rank that holds the others up is the one with the most *work*.
//   slowest rank = the most work; lead = its work minus the median work of the other ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm_kernels.h"
#include "multi/rank_files.h"

namespace tokentrace::multi {

using tokentrace::IsCollectiveSite;  // core/comm_kernels.h

struct RankTotals {
  int64_t tokens = 0;       // tokens with a closed token call
  uint32_t last_token = 0;  // the highest of them
  int64_t time_ns = 0, wait_ns = 0;
  // GPU busy time of the calls of its tokens, and the part in communication: all of it in
  // collective calls (kernels launched inside c10d::<name>), and NCCL kernels (by name,
  // core/comm_kernels.h) in any other call. On the GPU a waiting rank's collective kernels
  // run longer.
  int64_t gpu_ns = 0, gpu_collective_ns = 0;
  int64_t slowest = 0;  // tokens at which this rank had the most work (ties not counted)
};

struct Straggler {
  uint32_t token = 0;
  size_t slow = 0;  // index into the files
  int64_t time_ns = 0, work_ns = 0;
  int64_t others_work_ns = 0;  // median over the other ranks
  int64_t others_wait_ns = 0;  // median over the other ranks
  int64_t lead_ns = 0;
};

struct Comparison {
  std::vector<RankTotals> ranks;  // parallel to the files
  std::vector<Straggler> top;     // largest lead first; only leads > 0
  uint32_t max_token = 0;         // over all ranks
  int64_t compared_tokens = 0;    // tokens present in two ranks or more
};

bool CompareRanks(const std::vector<RankFile>& files, size_t top, Comparison* out,
                  std::string* error);

struct SiteLoss {
  std::string site;
  int64_t slow_ns = 0;    // the slow rank's self time at the site in that token
  int64_t others_ns = 0;  // median over the other ranks
};

// Sites where rank `slow` spent more self time than the median of the others at `token`,
// largest excess first, at most `limit`.
bool SiteLosses(const std::vector<RankFile>& files, size_t slow, uint32_t token, size_t limit,
                std::vector<SiteLoss>* out, std::string* error);

}  // namespace tokentrace::multi
