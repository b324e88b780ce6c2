#include "store/summaries.h"

#include <algorithm>

#include "core/comm_kernels.h"

namespace tokentrace {

template <typename Map, typename Value>
void Summaries::Wait(Map* map, uint64_t id, const Value& add) {
  auto [it, inserted] = map->try_emplace(id);
  it->second += add;
  if (inserted && map->size() > kMaxWaiting) map->erase(map->begin());  // the oldest id
}

void Summaries::IndexBatch(const std::vector<CallRow>& calls) {
  batch_dense_.clear();
  batch_calls_.clear();
  if (calls.empty()) return;
  uint64_t lo = calls.front().id, hi = lo;
  for (const CallRow& r : calls) {
    lo = std::min(lo, r.id);
    hi = std::max(hi, r.id);
  }
  if (hi - lo < 4 * calls.size() + 64) {
    batch_first_ = lo;
    batch_dense_.assign(hi - lo + 1, CallKey{kNoSite, 0});
    for (const CallRow& r : calls) batch_dense_[r.id - lo] = {r.site_id, r.token};
  } else {
    batch_calls_.reserve(calls.size());
    for (const CallRow& r : calls) batch_calls_[r.id] = {r.site_id, r.token};
  }
}

bool Summaries::InBatch(uint64_t id, CallKey* key) const {
  if (!batch_dense_.empty()) {
    if (id < batch_first_ || id - batch_first_ >= batch_dense_.size()) return false;
    const CallKey& k = batch_dense_[id - batch_first_];
    if (k.site_id == kNoSite) return false;
    *key = k;
    return true;
  }
  auto it = batch_calls_.find(id);
  if (it == batch_calls_.end()) return false;
  *key = it->second;
  return true;
}

Summaries::SiteDelta& Summaries::Site(const CallKey& key) {
  const size_t i = static_cast<size_t>(key.site_id) * 3 + static_cast<size_t>(PhaseOf(key.token));
  if (i >= sites_.size()) {
    sites_.resize(i + 3);
    site_touched_.resize(i + 3, 0);
  }
  if (!site_touched_[i]) {
    site_touched_[i] = 1;
    touched_sites_.push_back(static_cast<uint32_t>(i));
  }
  return sites_[i];
}

Summaries::TokenDelta& Summaries::Token(uint32_t token) {
  if (last_token_ == nullptr || token != last_token_key_) {
    last_token_ = &tokens_[token];
    last_token_key_ = token;
  }
  return *last_token_;
}

int64_t& Summaries::BlockNs(uint32_t site_id, uint32_t token) {
  const int64_t block = BlockOf(token);
  if (site_id >= open_blocks_.size()) open_blocks_.resize(site_id + 1);
  OpenBlock& open = open_blocks_[site_id];
  if (open.block == block) return open.ns;
  if (open.block < 0) {
    open_block_sites_.push_back(site_id);
  } else {
    blocks_[(static_cast<uint64_t>(site_id) << 32) | static_cast<uint64_t>(open.block)] += open.ns;
  }
  open = {block, 0};
  return open.ns;
}

void Summaries::MakeRows() {
  token_rows_.assign(tokens_.begin(), tokens_.end());
  tokens_.clear();
  last_token_ = nullptr;
  site_rows_.clear();
  std::sort(touched_sites_.begin(), touched_sites_.end());
  for (uint32_t i : touched_sites_) {
    site_rows_.push_back({{i / 3, static_cast<int>(i % 3)}, sites_[i]});
    sites_[i] = SiteDelta();
    site_touched_[i] = 0;
  }
  touched_sites_.clear();
  block_rows_.clear();
  for (uint32_t site : open_block_sites_) {
    OpenBlock& open = open_blocks_[site];
    blocks_[(static_cast<uint64_t>(site) << 32) | static_cast<uint64_t>(open.block)] += open.ns;
    open = OpenBlock();
  }
  open_block_sites_.clear();
  for (const auto& [k, ns] : blocks_) {
    block_rows_.push_back(
        {{static_cast<uint32_t>(k >> 32), static_cast<int64_t>(k & 0xffffffff)}, ns});
  }
  std::sort(block_rows_.begin(), block_rows_.end());
  blocks_.clear();
}

bool Summaries::Locate(uint64_t id, CallKey* key) const {
  if (InBatch(id, key)) return true;
  if (auto it = state_.open_rows.find(id); it != state_.open_rows.end()) {
    *key = it->second;
    return true;
  }
  return false;
}

void Summaries::Refused(const Batch& batch) {
  for (const CallRow& r : batch.calls) {
    if (r.cpu_end_ns == -1 || state_.open_rows.count(r.id) != 0) continue;  // not a lost row
    if (!refused_.insert(r.id).second) continue;
    refused_order_.push_back(r.id);
    if (refused_order_.size() > kMaxWaiting) {
      refused_.erase(refused_order_.front());
      refused_order_.pop_front();
    }
  }
}

void Summaries::Fold(const Batch& batch) {
  saved_ = state_;  // small: open calls and what waits for them
  tokens_.clear();
  last_token_ = nullptr;
  for (const SiteRow& s : batch.sites) {
    if (s.id >= state_.is_token.size()) state_.is_token.resize(s.id + 1, 0);
    state_.is_token[s.id] = s.is_token ? 1 : 0;
    if (s.id >= state_.is_collective.size()) state_.is_collective.resize(s.id + 1, 0);
    state_.is_collective[s.id] = IsCollectiveSite(s.name) ? 1 : 0;
  }
  IndexBatch(batch.calls);

  for (const CallRow& r : batch.calls) {
    const CallKey key{r.site_id, r.token};
    // Most calls were never in the file open (only token calls at a drain, and at exit).
    const auto open =
        state_.open_rows.empty() ? state_.open_rows.end() : state_.open_rows.find(r.id);
    const bool first = open == state_.open_rows.end();
    const bool closed = r.cpu_end_ns != -1;
    const bool token_call = r.site_id < state_.is_token.size() && state_.is_token[r.site_id];
    SiteDelta& site = Site(key);
    int64_t& block_ns = BlockNs(r.site_id, r.token);
    if (first) {
      TokenDelta& token = Token(r.token);
      site.calls += 1;
      token.calls += 1;
      token.first_call = std::min<uint64_t>(token.first_call, r.id);
      token.last_call = std::max<uint64_t>(token.last_call, r.id);
      if (r.parent_id == 0) site.top_calls += 1;
      if (!state_.gpu.empty()) {
        if (auto g = state_.gpu.find(r.id); g != state_.gpu.end()) {
          site.kernels += g->second.kernels;
          site.gpu_busy_ns += g->second.busy_ns;
          token.gpu_collective_ns += Collective(r.site_id) ? g->second.busy_ns : g->second.comm_ns;
          state_.gpu.erase(g);
        }
      }
      if (!state_.child_ns.empty()) {
        if (auto c = state_.child_ns.find(r.id); c != state_.child_ns.end()) {
          site.cpu_self_ns -= c->second;
          block_ns -= c->second;
          state_.child_ns.erase(c);
        }
      }
      if (!state_.waits.empty()) {
        if (auto w = state_.waits.find(r.id); w != state_.waits.end()) {
          if (!Collective(r.site_id)) {
            for (const auto& [t, ns] : w->second.calls) Token(t).wait_ns += ns;
          }
          state_.waits.erase(w);
        }
      }
      if (token_call) {
        if (!token.has_token_call || r.cpu_begin_ns < token.cpu_begin_ns) {
          token.cpu_begin_ns = r.cpu_begin_ns;
        }
        if (!token.has_token_call || r.k < token.k) token.k = r.k;
        token.has_token_call = true;
        token.listed = true;
        if (closed) token.cpu_end_ns = std::max(token.cpu_end_ns, r.cpu_end_ns);
      }
    } else if (token_call && closed) {
      TokenDelta& token = Token(r.token);
      token.cpu_end_ns = std::max(token.cpu_end_ns, r.cpu_end_ns);
    }
    if (!closed) {
      if (first) state_.open_rows[r.id] = key;
      continue;
    }
    if (!first) state_.open_rows.erase(open);
    // The call's time counts now, once: it is closed and the file has not counted it yet.
    const int64_t ns = r.cpu_end_ns - r.cpu_begin_ns;
    site.cpu_ns += ns;
    site.cpu_self_ns += ns;
    block_ns += ns;
    if (Collective(r.site_id)) {  // rare: a few calls a token where ranks wait for peers
      CallKey parent;
      if (r.parent_id == 0) {
        Token(r.token).wait_ns += ns;
      } else if ((state_.waits.empty() || state_.waits.count(r.parent_id) == 0) &&
                 Locate(r.parent_id, &parent)) {
        if (!Collective(parent.site_id)) Token(r.token).wait_ns += ns;
      } else {
        Wait(&state_.waits, r.parent_id, std::pair<uint32_t, int64_t>{r.token, ns});
      }
    }
    if (r.parent_id == 0) {
      site.top_cpu_ns += ns;
      continue;
    }
    CallKey parent;
    if ((state_.child_ns.empty() || state_.child_ns.count(r.parent_id) == 0) &&
        Locate(r.parent_id, &parent)) {
      Site(parent).cpu_self_ns -= ns;
      BlockNs(parent.site_id, parent.token) -= ns;
    } else {
      Wait(&state_.child_ns, r.parent_id, ns);
    }
  }

  for (const CallGpuDelta& d : batch.call_gpu) {
    TokenDelta& token = Token(d.token);
    token.kernels += d.kernels;
    token.gpu_busy_ns += d.busy_ns;
    if (d.token > 0 && (d.kernels != 0 || d.busy_ns != 0)) token.listed = true;
    if (d.call_id == 0) continue;  // read from call_gpu's one call-0 row
    // Earlier work of the call waiting for its row: this waits with it.
    const bool waiting = !state_.gpu.empty() && state_.gpu.count(d.call_id) != 0;
    CallKey key;
    if (!waiting && Locate(d.call_id, &key)) {
      // the call's row is in this batch, or open in the file
    } else if (!waiting && d.call_closed) {
      // Its row was handed over before: in the file, unless its write was refused or its
      // push was dropped (then a scan of the file does not count this work either).
      if (d.site_id == kNoSite || refused_.count(d.call_id) != 0) continue;
      key = CallKey{d.site_id, d.call_token};
    } else {
      Wait(&state_.gpu, d.call_id, Gpu{d.kernels, d.busy_ns, d.comm_ns});
      continue;
    }
    SiteDelta& site = Site(key);
    site.kernels += d.kernels;
    site.gpu_busy_ns += d.busy_ns;
    Token(key.token).gpu_collective_ns += Collective(key.site_id) ? d.busy_ns : d.comm_ns;
  }
  for (const EscapeRow& e : batch.escapes) {
    TokenDelta& token = Token(e.token);
    token.escapes += 1;
    if (e.token > 0) token.listed = true;
  }
  batch_dense_.clear();
  batch_calls_.clear();
  MakeRows();
}

}  // namespace tokentrace
