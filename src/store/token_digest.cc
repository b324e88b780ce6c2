#include "store/token_digest.h"

#include <algorithm>
#include <cmath>

#include "store/summaries.h"

namespace tokentrace {

namespace {
constexpr int kSubBits = 7;  // 128 buckets an octave
constexpr int64_t kExactBelow = int64_t{1} << kSubBits;
uint64_t Key(int phase, int what, int64_t bucket) {
  return static_cast<uint64_t>(phase * 2 + what) << 32 | static_cast<uint64_t>(bucket);
}
}  // namespace

int64_t DigestBucket(int64_t ns) {
  if (ns < kExactBelow) return ns < 0 ? 0 : ns;
  const int top = 63 - __builtin_clzll(static_cast<unsigned long long>(ns));  // >= kSubBits
  const int64_t sub = (ns >> (top - kSubBits)) & (kExactBelow - 1);
  return (static_cast<int64_t>(top - kSubBits + 1) << kSubBits) + sub;
}

int64_t DigestBucketValue(int64_t bucket) {
  if (bucket < kExactBelow) return bucket;
  const int top = static_cast<int>(bucket >> kSubBits) + kSubBits - 1;
  const int64_t sub = bucket & (kExactBelow - 1);
  const int64_t low = (kExactBelow + sub) << (top - kSubBits);
  const int64_t width = int64_t{1} << (top - kSubBits);
  return low + width / 2;
}

int64_t DigestPercentile(const std::vector<std::pair<int64_t, int64_t>>& buckets, double p) {
  int64_t n = 0;
  for (const auto& [bucket, count] : buckets) n += count;
  if (n <= 0) return 0;
  int64_t rank = static_cast<int64_t>(std::ceil(p / 100.0 * static_cast<double>(n)));
  rank = std::clamp<int64_t>(rank, 1, n);
  for (const auto& [bucket, count] : buckets) {
    rank -= count;
    if (rank <= 0) return DigestBucketValue(bucket);
  }
  return DigestBucketValue(buckets.back().first);
}

void TokenDigestDelta::Clear() {
  for (int p = 0; p < 3; ++p) {
    totals_[p] = TokenTotals();
    touched_[p] = false;
  }
  hist_.clear();
}

void TokenDigestDelta::Add(const TokenRowState& row, int sign) {
  if (!row.present || !row.listed) return;
  const int phase = PhaseOf(row.token);
  TokenTotals& t = totals_[phase];
  touched_[phase] = true;
  t.tokens += sign;
  t.replays += row.replay ? sign : 0;
  t.gpu_busy_ns += sign * row.gpu_busy_ns;
  t.kernels += sign * row.kernels;
  t.escapes += sign * row.escapes;
  if (sign > 0) t.max_gpu_busy_ns = std::max(t.max_gpu_busy_ns, row.gpu_busy_ns);
  hist_[Key(phase, kHistGpu, DigestBucket(row.gpu_busy_ns))] += sign;
  if (row.closed) {
    t.closed += sign;
    t.cpu_ns += sign * row.cpu_ns;
    hist_[Key(phase, kHistCpu, DigestBucket(row.cpu_ns))] += sign;
  }
}

std::vector<std::pair<std::tuple<int, int, int64_t>, int64_t>> TokenDigestDelta::HistRows() const {
  std::vector<std::pair<std::tuple<int, int, int64_t>, int64_t>> rows;
  for (const auto& [key, count] : hist_) {
    if (count == 0) continue;
    const int kind = static_cast<int>(key >> 32);
    rows.push_back({{kind / 2, kind % 2, static_cast<int64_t>(key & 0xffffffffu)}, count});
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace tokentrace
