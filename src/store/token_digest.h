// What the report shows of a long run's tokens, kept by the writer (schema.sql: token_totals,
// token_hist, token_slowest) so that a reader of a 10,000,000-token file reads a few hundred
// rows instead of one per token.
//
// Store::WriteSummaries reads each token_stats row it changes before and after its upsert
// (TokenRowState) and folds the difference here: the row's old contribution out, its new one
// in. So the digest always describes exactly the token_stats rows in the file, in the same
// transaction (a rolled-back batch leaves it as it was), however many batches a token's row
// takes to fill (its call written open and then closed, its kernels arriving later).
//
// Buckets (DigestBucket): values below 128 ns are exact; above, 128 buckets an octave (the
// value's top 8 significant bits), so a bucket's middle value is within 0.4 % of every value
// in it. The report uses the digest only where it cannot afford one row per token
// (kExactTokens) and says so.
#pragma once

#include <cstdint>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace tokentrace {

// The closed tokens with the longest CPU time that token_slowest keeps.
inline constexpr int kSlowestTokens = 10;
// token_hist.what
inline constexpr int kHistCpu = 0;  // a closed token's CPU time (end - begin)
inline constexpr int kHistGpu = 1;  // a token's GPU busy time

int64_t DigestBucket(int64_t ns);
// The middle of a bucket's range (its value for bucket < 128).
int64_t DigestBucketValue(int64_t bucket);
// The value at percentile p (rank ceil(p / 100 * n), as Percentile in cli/format.h) of the
// values counted in `buckets` ((bucket, count), in bucket order); 0 when empty.
int64_t DigestPercentile(const std::vector<std::pair<int64_t, int64_t>>& buckets, double p);

// One token_stats row as the digest counts it. present: the row exists.
struct TokenRowState {
  bool present = false, listed = false;
  uint32_t token = 0;
  bool replay = false;  // no token call (cpu_begin_ns NULL): a CUDA-graph replay
  bool closed = false;  // cpu_end_ns not NULL
  int64_t cpu_ns = 0;   // end - begin, closed only
  int64_t gpu_busy_ns = 0, kernels = 0, escapes = 0;
};

// token_totals' row of one phase (PhaseOf in store/summaries.h), as a delta or as read.
struct TokenTotals {
  int64_t tokens = 0, replays = 0, closed = 0, cpu_ns = 0, gpu_busy_ns = 0, kernels = 0,
          escapes = 0, max_gpu_busy_ns = 0;
};

// The difference a batch makes to the digest.
class TokenDigestDelta {
 public:
  void Clear();
  // Counts `row` in (sign +1) or out (-1). max_gpu_busy_ns only grows (a token's GPU time
  // does): counting out leaves it.
  void Add(const TokenRowState& row, int sign);
  const TokenTotals& totals(int phase) const { return totals_[phase]; }
  bool touched(int phase) const { return touched_[phase]; }
  // ((phase, what, bucket), count delta), nonzero ones only, in key order.
  std::vector<std::pair<std::tuple<int, int, int64_t>, int64_t>> HistRows() const;

 private:
  TokenTotals totals_[3];
  bool touched_[3] = {false, false, false};
  // by (phase * 2 + what) << 32 | bucket
  std::unordered_map<uint64_t, int64_t> hist_;
};

}  // namespace tokentrace
