#include "cli/serving_report.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>

#include "cli/format.h"

namespace tokentrace::cli {
namespace {

constexpr size_t kListedRequests = 5;  // first and slowest requests listed past 2 x this

// One request over its steps.
struct RequestStats {
  std::string id;
  std::vector<uint32_t> steps;
  int64_t prefill = 0, decode = 0;
  uint32_t first_token_step = 0;
  double ttft_ms = -1, tpot_ms = -1, gpu_ms = 0;
};

std::string Num(double v) { return v < 0 ? "-" : Fixed(v, 3); }

std::vector<std::string> Row(const RequestStats& r, bool gpu) {
  std::vector<std::string> row = {ForTerminal(r.id),
                                  std::to_string(r.steps.size()),
                                  std::to_string(r.prefill),
                                  std::to_string(r.decode),
                                  Num(r.ttft_ms),
                                  Num(r.tpot_ms)};
  if (gpu) row.push_back(Fixed(r.gpu_ms, 3));
  return row;
}

std::string RequestTable(const std::vector<const RequestStats*>& list, bool gpu) {
  std::vector<std::vector<std::string>> rows = {
      {"request", "steps", "prefill", "decode", "first token ms", "per output token ms"}};
  if (gpu) rows[0].push_back("gpu ms (shared)");
  for (const RequestStats* r : list) rows.push_back(Row(*r, gpu));
  return FormatTable(rows, "    ");
}

std::string Quantiles(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return x < 0; }), v.end());
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  return "p50 " + Fixed(Percentile(v, 50), 3) + ", p90 " + Fixed(Percentile(v, 90), 3) + ", max " +
         Fixed(v.back(), 3);
}

}  // namespace

bool ReadStepRequests(sqlite3* db, std::vector<StepRequestRow>* out, std::string* error) {
  out->clear();
  sqlite3_stmt* has = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                         "name = 'step_requests'",
                         -1, &has, nullptr) != SQLITE_OK) {
    *error = sqlite3_errmsg(db);
    return false;
  }
  const bool present = sqlite3_step(has) == SQLITE_ROW;
  sqlite3_finalize(has);
  if (!present) return true;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT token, request, prefill_tokens, decode_tokens, position FROM "
                         "step_requests ORDER BY token, rowid",
                         -1, &st, nullptr) != SQLITE_OK) {
    *error = sqlite3_errmsg(db);
    return false;
  }
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    StepRequestRow r;
    r.token = static_cast<uint32_t>(sqlite3_column_int64(st, 0));
    const unsigned char* text = sqlite3_column_text(st, 1);
    r.request = text != nullptr ? reinterpret_cast<const char*>(text) : "";
    r.prefill = sqlite3_column_int64(st, 2);
    r.decode = sqlite3_column_int64(st, 3);
    r.position = sqlite3_column_int64(st, 4);
    out->push_back(std::move(r));
  }
  const bool ok = rc == SQLITE_DONE;
  if (!ok) *error = sqlite3_errmsg(db);
  sqlite3_finalize(st);
  return ok;
}

std::string ServingSection(const std::vector<StepRequestRow>& rows,
                           const std::map<uint32_t, StepTime>& steps, bool gpu) {
  if (rows.empty()) return "";
  // Per step: its tokens, requests, and whether it held prefill, decode or both.
  struct Step {
    int64_t prefill = 0, decode = 0, requests = 0;
  };
  std::map<uint32_t, Step> by_step;
  std::vector<RequestStats> requests;
  std::unordered_map<std::string, size_t> index;
  for (const StepRequestRow& r : rows) {
    Step& s = by_step[r.token];
    s.prefill += r.prefill, s.decode += r.decode, s.requests += 1;
    auto [it, fresh] = index.emplace(r.request, requests.size());
    if (fresh) requests.push_back({r.request, {}, 0, 0, 0, -1, -1, 0});
    RequestStats& q = requests[it->second];
    q.steps.push_back(r.token);
    q.prefill += r.prefill, q.decode += r.decode;
  }
  // The step that computed the last of each prompt; and each step's GPU time shared by tokens.
  std::unordered_map<std::string, int64_t> done;
  for (const StepRequestRow& r : rows) {
    RequestStats& q = requests[index[r.request]];
    int64_t& d = done[r.request];
    d += r.prefill;
    if (q.first_token_step == 0 && d >= q.prefill) q.first_token_step = r.token;
    const Step& s = by_step[r.token];
    const int64_t tokens = s.prefill + s.decode;
    auto t = steps.find(r.token);
    if (t != steps.end() && tokens > 0) {
      q.gpu_ms += static_cast<double>(t->second.gpu_busy_ns) / 1e6 *
                  static_cast<double>(r.prefill + r.decode) / static_cast<double>(tokens);
    }
  }
  for (RequestStats& q : requests) {
    auto first = steps.find(q.steps.front());
    auto token = steps.find(q.first_token_step);
    auto last = steps.find(q.steps.back());
    if (first == steps.end() || token == steps.end() || token->second.end_ns < 0) continue;
    q.ttft_ms = static_cast<double>(token->second.end_ns - first->second.begin_ns) / 1e6;
    const auto after = static_cast<double>(std::count_if(
        q.steps.begin(), q.steps.end(), [&](uint32_t s) { return s > q.first_token_step; }));
    if (after > 0 && last != steps.end() && last->second.end_ns >= 0) {
      q.tpot_ms = static_cast<double>(last->second.end_ns - token->second.end_ns) / 1e6 / after;
    }
  }

  size_t prefill_only = 0, decode_only = 0, mixed = 0;
  std::vector<double> tokens_per_step, requests_per_step;
  for (const auto& [token, s] : by_step) {
    if (s.prefill > 0 && s.decode > 0) {
      ++mixed;
    } else if (s.prefill > 0) {
      ++prefill_only;
    } else {
      ++decode_only;
    }
    tokens_per_step.push_back(static_cast<double>(s.prefill + s.decode));
    requests_per_step.push_back(static_cast<double>(s.requests));
  }
  const size_t empty = steps.size() > by_step.size() ? steps.size() - by_step.size() : 0;
  int64_t prefill = 0, decode = 0;
  for (const RequestStats& q : requests) prefill += q.prefill, decode += q.decode;

  std::string out = "\nserving (engine steps = tokens; step_requests):\n";
  out += "  steps with requests: " + std::to_string(by_step.size()) + " (prefill-only " +
         std::to_string(prefill_only) + ", decode-only " + std::to_string(decode_only) +
         ", mixed " + std::to_string(mixed) + ")";
  if (empty > 0) out += "; " + std::to_string(empty) + " without (left out below)";
  out += "\n  tokens per step: " + Quantiles(tokens_per_step) +
         "; requests per step: " + Quantiles(requests_per_step) + "\n";
  out += "  requests: " + std::to_string(requests.size()) + "; tokens computed: prefill " +
         std::to_string(prefill) + ", decode " + std::to_string(decode) + "\n";
  std::vector<double> ttft, tpot;
  for (const RequestStats& q : requests) ttft.push_back(q.ttft_ms), tpot.push_back(q.tpot_ms);
  out +=
      "  first token ms: " + Quantiles(ttft) + "; per output token ms: " + Quantiles(tpot) + "\n";
  std::vector<const RequestStats*> listed;
  if (requests.size() <= 2 * kListedRequests) {
    for (const RequestStats& q : requests) listed.push_back(&q);
    out += "  per request:\n" + RequestTable(listed, gpu);
  } else {
    for (size_t i = 0; i < kListedRequests; ++i) listed.push_back(&requests[i]);
    out +=
        "  first " + std::to_string(kListedRequests) + " requests:\n" + RequestTable(listed, gpu);
    std::vector<const RequestStats*> slow;
    for (const RequestStats& q : requests) slow.push_back(&q);
    std::stable_sort(slow.begin(), slow.end(), [](const RequestStats* a, const RequestStats* b) {
      return a->ttft_ms > b->ttft_ms;
    });
    slow.resize(kListedRequests);
    out += "  slowest " + std::to_string(kListedRequests) + " requests (by first token):\n" +
           RequestTable(slow, gpu);
  }
  out +=
      "  (the worker's view: times from a request's first step; its queue time is the\n"
      "  engine core's, not in this file";
  out +=
      gpu ? ";\n  gpu ms: each step's GPU time shared among its requests by token count)\n" : ")\n";
  return out;
}

}  // namespace tokentrace::cli
