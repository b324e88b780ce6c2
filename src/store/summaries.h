// The summaries a tokentrace file keeps as it is written (schema.sql: token_stats' per-token
// columns, site_stats, site_blocks), so that readers read rows that grow with tokens and
// sites instead of scanning every call.
//
// Store::Write folds each batch into deltas here (Fold), writes them in the same
// transaction as the batch's rows (one upsert per token, per site and phase, per site and
// block), and then keeps (Commit) or forgets (Rollback) what the fold learnt. So the
// summaries in a file always describe exactly the rows it holds: a killed run's file, or one
// whose writes failed on a full disk, reads the same from its summaries as from a scan.
//
// What a batch does not say, and the fold must remember between batches (owned by the
// writer's thread, like the Store):
//  * which calls the file holds open (a token call is written open at a drain and again when
//    it closes: it is counted once, and its time when it closes);
//  * closed calls whose parent is not in the file yet (the parent closes later, in a later
//    batch): their time is taken off the parent's self time when the parent arrives;
//  * GPU work of calls not in the file yet (a long call's kernels complete before it closes);
//  * calls whose write was refused (a full disk; at most kMaxWaiting, the oldest go first).
// GPU work of a call already in the file (closed) says the call's site and own token itself
// (CallGpuDelta: the joiner carries them from the launch), so the file is never read back;
// a replay of a CUDA graph counts at its own token, and at the captured call's site and
// phase. The two waiting maps hold a
// few entries per open call; a call that never reaches the file (its push was dropped on a
// full ring) leaves its entry, so each map keeps at most kMaxWaiting, the oldest ids go first
// (what such a call's children or kernels would have added is not in the file either, so the
// summaries still match a scan unless a call older than kMaxWaiting waiting ones is written).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/records.h"

namespace tokentrace {

// Tokens per site_blocks block for tokens >= 2 (schema.sql).
inline constexpr uint32_t kTokenBlock = 64;
// site_stats.phase: 0 before the first token, 1 the prefill, 2 decode.
inline int PhaseOf(uint32_t token) { return token == 0 ? 0 : token == 1 ? 1 : 2; }
inline int64_t BlockOf(uint32_t token) {
  return token <= 1 ? token : 2 + static_cast<int64_t>((token - 2) / kTokenBlock);
}

class Summaries {
 public:
  static constexpr size_t kMaxWaiting = size_t{1} << 16;

  // Per token: what this batch adds to its token_stats row.
  struct TokenDelta {
    int64_t kernels = 0, gpu_busy_ns = 0, escapes = 0, calls = 0;
    // Time in collectives (schema 6; the cross-rank report's wait and GPU communication):
    // the CPU time of the closed calls of collective sites (IsCollectiveSite) whose parent is
    // not one, and the GPU busy time of collective calls plus the communication kernels'
    // time (gpu_comm_ns) of other calls.
    int64_t wait_ns = 0, gpu_collective_ns = 0;
    bool has_token_call = false;  // begin and k below are set
    int64_t cpu_begin_ns = 0, k = 0;
    int64_t cpu_end_ns = -1;  // the latest end of a closed token call, -1: none
    bool listed = false;
    uint64_t first_call = UINT64_MAX, last_call = 0;  // ids of the calls (calls > 0)
  };
  // Per (site, phase): what this batch adds to its site_stats row.
  struct SiteDelta {
    int64_t calls = 0, cpu_ns = 0, cpu_self_ns = 0, kernels = 0, gpu_busy_ns = 0;
    int64_t top_calls = 0, top_cpu_ns = 0;
  };
  // Folds `batch` (about to be written) into the deltas below, replacing the last fold's.
  void Fold(const Batch& batch);
  void Commit() { saved_ = State(); }              // the batch is in the file
  void Rollback() { state_ = std::move(saved_); }  // it was rolled back
  // After Rollback: the closed calls of `batch` are not in the file, and their later GPU
  // work is not counted (a scan of the file finds no call to join it to).
  void Refused(const Batch& batch);
  // (token, delta) rows, in token order.
  const std::vector<std::pair<uint32_t, TokenDelta>>& tokens() const { return token_rows_; }
  // ((site, phase), delta) and ((site, block), self ns) rows, in key order.
  const std::vector<std::pair<std::pair<uint32_t, int>, SiteDelta>>& sites() const {
    return site_rows_;
  }
  const std::vector<std::pair<std::pair<uint32_t, int64_t>, int64_t>>& blocks() const {
    return block_rows_;
  }

  // For tests: the calls waiting for their parent, the GPU work waiting for its call.
  size_t waiting_children() const { return state_.child_ns.size(); }
  size_t waiting_gpu() const { return state_.gpu.size(); }
  size_t waiting_waits() const { return state_.waits.size(); }

 private:
  struct CallKey {
    uint32_t site_id = 0;
    uint32_t token = 0;
  };
  struct Gpu {
    int64_t kernels = 0, busy_ns = 0, comm_ns = 0;
    Gpu& operator+=(const Gpu& o) {
      kernels += o.kernels;
      busy_ns += o.busy_ns;
      comm_ns += o.comm_ns;
      return *this;
    }
  };
  // Closed collective calls whose parent is not in the file yet: (token, ns) each, counted
  // as wait when the parent arrives and is not a collective itself.
  struct Waits {
    std::vector<std::pair<uint32_t, int64_t>> calls;
    Waits& operator+=(const std::pair<uint32_t, int64_t>& c) {
      calls.push_back(c);
      return *this;
    }
  };
  struct State {
    std::vector<char> is_token;                       // by site id
    std::vector<char> is_collective;                  // by site id (IsCollectiveSite)
    std::unordered_map<uint64_t, CallKey> open_rows;  // calls the file holds open
    std::map<uint64_t, int64_t> child_ns;             // by parent id, parent not in the file
    std::map<uint64_t, Gpu> gpu;                      // by call id, call not in the file
    std::map<uint64_t, Waits> waits;                  // by parent id, parent not in the file
  };
  // Where the call `id` is: in this batch or open in the file; false: elsewhere or not yet.
  bool Locate(uint64_t id, CallKey* key) const;
  // The folded batch's calls by id: a vector over the batch's id range when ids are dense
  // (they are handed out in order, so a batch's calls are nearly consecutive), else a map.
  void IndexBatch(const std::vector<CallRow>& calls);
  bool InBatch(uint64_t id, CallKey* key) const;
  bool Collective(uint32_t site_id) const {
    return site_id < state_.is_collective.size() && state_.is_collective[site_id];
  }
  // The delta rows of a key; consecutive calls mostly share one, so the last is kept at hand.
  SiteDelta& Site(const CallKey& key);
  TokenDelta& Token(uint32_t token);
  int64_t& BlockNs(uint32_t site_id, uint32_t token);
  template <typename Map, typename Value>
  static void Wait(Map* map, uint64_t id, const Value& add);

  State state_, saved_;
  std::unordered_set<uint64_t> refused_;  // closed calls whose write was refused
  std::deque<uint64_t> refused_order_;    // the same, oldest first
  uint64_t batch_first_ = 0;
  std::vector<CallKey> batch_dense_;                   // by id - batch_first_
  std::unordered_map<uint64_t, CallKey> batch_calls_;  // when the ids are not dense
  uint32_t last_token_key_ = 0;
  TokenDelta* last_token_ = nullptr;
  // Per site, the block its calls fall in now and their sum there (calls of one batch mostly
  // share one block per site); a site's other blocks go to blocks_.
  struct OpenBlock {
    int64_t block = -1;  // -1: none
    int64_t ns = 0;
  };
  std::vector<OpenBlock> open_blocks_;      // by site id
  std::vector<uint32_t> open_block_sites_;  // sites with an open block
  // Ends the fold: the touched site and block deltas as sorted rows, the scratch cleared.
  void MakeRows();

  std::map<uint32_t, TokenDelta> tokens_;
  std::vector<std::pair<uint32_t, TokenDelta>> token_rows_;
  // Site deltas by site id * 3 + phase (site ids are small and dense), and which were touched.
  std::vector<SiteDelta> sites_;
  std::vector<uint32_t> touched_sites_;
  std::vector<char> site_touched_;
  std::unordered_map<uint64_t, int64_t> blocks_;  // (site << 32 | block) -> self ns
  std::vector<std::pair<std::pair<uint32_t, int>, SiteDelta>> site_rows_;
  std::vector<std::pair<std::pair<uint32_t, int64_t>, int64_t>> block_rows_;
};

}  // namespace tokentrace
