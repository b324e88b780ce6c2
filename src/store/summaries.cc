#include "store/summaries.h"

#include <algorithm>

namespace tokentrace {

template <typename Map, typename Value>
void Summaries::Wait(Map* map, uint64_t id, const Value& add) {
  auto [it, inserted] = map->try_emplace(id);
  it->second += add;
  if (inserted && map->size() > kMaxWaiting) map->erase(map->begin());  // the oldest id
}

bool Summaries::Locate(uint64_t id, const FindCall& in_file, CallKey* key) const {
  if (auto it = batch_calls_.find(id); it != batch_calls_.end()) {
    *key = it->second;
    return true;
  }
  if (auto it = state_.open_rows.find(id); it != state_.open_rows.end()) {
    *key = it->second;
    return true;
  }
  return in_file && in_file(id, &key->site_id, &key->token);
}

void Summaries::Fold(const Batch& batch, const FindCall& in_file) {
  saved_ = state_;  // small: open calls and what waits for them
  tokens_.clear();
  sites_.clear();
  blocks_.clear();
  batch_calls_.clear();
  for (const SiteRow& s : batch.sites) {
    if (s.id >= state_.is_token.size()) state_.is_token.resize(s.id + 1, 0);
    state_.is_token[s.id] = s.is_token ? 1 : 0;
  }
  batch_calls_.reserve(batch.calls.size());
  for (const CallRow& r : batch.calls) batch_calls_[r.id] = {r.site_id, r.token};

  for (const CallRow& r : batch.calls) {
    const CallKey key{r.site_id, r.token};
    const auto open = state_.open_rows.find(r.id);
    const bool first = open == state_.open_rows.end();
    const bool closed = r.cpu_end_ns != -1;
    const bool token_call = r.site_id < state_.is_token.size() && state_.is_token[r.site_id];
    SiteDelta& site = Site(key);
    TokenDelta& token = tokens_[r.token];
    if (first) {
      site.calls += 1;
      token.calls += 1;
      if (r.parent_id == 0) site.top_calls += 1;
      if (auto g = state_.gpu.find(r.id); g != state_.gpu.end()) {
        site.kernels += g->second.kernels;
        site.gpu_busy_ns += g->second.busy_ns;
        state_.gpu.erase(g);
      }
      if (auto c = state_.child_ns.find(r.id); c != state_.child_ns.end()) {
        site.cpu_self_ns -= c->second;
        blocks_[{r.site_id, BlockOf(r.token)}] -= c->second;
        state_.child_ns.erase(c);
      }
      if (token_call) {
        if (!token.has_token_call || r.cpu_begin_ns < token.cpu_begin_ns) {
          token.cpu_begin_ns = r.cpu_begin_ns;
        }
        if (!token.has_token_call || r.k < token.k) token.k = r.k;
        token.has_token_call = true;
        token.listed = true;
      }
    }
    if (token_call && closed) token.cpu_end_ns = std::max(token.cpu_end_ns, r.cpu_end_ns);
    if (!closed) {
      if (first) state_.open_rows[r.id] = key;
      continue;
    }
    if (!first) state_.open_rows.erase(open);
    // The call's time counts now, once: it is closed and the file has not counted it yet.
    const int64_t ns = r.cpu_end_ns - r.cpu_begin_ns;
    site.cpu_ns += ns;
    site.cpu_self_ns += ns;
    blocks_[{r.site_id, BlockOf(r.token)}] += ns;
    if (r.parent_id == 0) {
      site.top_cpu_ns += ns;
      continue;
    }
    CallKey parent;
    if (state_.child_ns.count(r.parent_id) == 0 && Locate(r.parent_id, in_file, &parent)) {
      Site(parent).cpu_self_ns -= ns;
      blocks_[{parent.site_id, BlockOf(parent.token)}] -= ns;
    } else {
      Wait(&state_.child_ns, r.parent_id, ns);
    }
  }

  for (const CallGpuDelta& d : batch.call_gpu) {
    TokenDelta& token = tokens_[d.token];
    token.kernels += d.kernels;
    token.gpu_busy_ns += d.busy_ns;
    if (d.token > 0 && (d.kernels != 0 || d.busy_ns != 0)) token.listed = true;
    if (d.call_id == 0) continue;  // read from call_gpu's one call-0 row
    CallKey key;
    if (state_.gpu.count(d.call_id) == 0 && Locate(d.call_id, in_file, &key)) {
      SiteDelta& site = Site(key);
      site.kernels += d.kernels;
      site.gpu_busy_ns += d.busy_ns;
    } else {
      Wait(&state_.gpu, d.call_id, Gpu{d.kernels, d.busy_ns});
    }
  }
  for (const EscapeRow& e : batch.escapes) {
    TokenDelta& token = tokens_[e.token];
    token.escapes += 1;
    if (e.token > 0) token.listed = true;
  }
  batch_calls_.clear();
}

}  // namespace tokentrace
