#include "cli/serving_report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <unordered_map>

#include "cli/format.h"
#include "store/reader.h"

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

int64_t IntOrNone(const Statement& q, int column) { return q.IsNull(column) ? -1 : q.Int(column); }

// A worker's steps and requests, from its step_requests rows and its steps' times.
struct StepComposition {
  int64_t prefill = 0, decode = 0, requests = 0;
};
struct Analysis {
  std::map<uint32_t, StepComposition> by_step;
  std::vector<RequestStats> requests;  // in first-scheduled order
};

Analysis Analyse(const std::vector<StepRequestRow>& rows,
                 const std::map<uint32_t, StepTime>& steps) {
  Analysis a;
  std::unordered_map<std::string, size_t> index;
  for (const StepRequestRow& r : rows) {
    StepComposition& s = a.by_step[r.token];
    s.prefill += r.prefill, s.decode += r.decode, s.requests += 1;
    auto [it, fresh] = index.emplace(r.request, a.requests.size());
    if (fresh) a.requests.push_back({r.request, {}, 0, 0, 0, -1, -1, 0});
    RequestStats& q = a.requests[it->second];
    q.steps.push_back(r.token);
    q.prefill += r.prefill, q.decode += r.decode;
  }
  // The step that computed the last of each prompt; and each step's GPU time shared by tokens.
  std::unordered_map<std::string, int64_t> done;
  for (const StepRequestRow& r : rows) {
    RequestStats& q = a.requests[index[r.request]];
    int64_t& d = done[r.request];
    d += r.prefill;
    if (q.first_token_step == 0 && d >= q.prefill) q.first_token_step = r.token;
    const StepComposition& s = a.by_step[r.token];
    const int64_t tokens = s.prefill + s.decode;
    auto t = steps.find(r.token);
    if (t != steps.end() && tokens > 0) {
      q.gpu_ms += static_cast<double>(t->second.gpu_busy_ns) / 1e6 *
                  static_cast<double>(r.prefill + r.decode) / static_cast<double>(tokens);
    }
  }
  for (RequestStats& q : a.requests) {
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
  return a;
}

}  // namespace

bool ReadStepRequests(Reader& reader, std::vector<StepRequestRow>* out, std::string* error) {
  out->clear();
  bool present = false;
  if (!reader.HasTable("step_requests", error, &present)) return false;
  if (!present) return true;
  return reader.Rows(
      "SELECT token, request, prefill_tokens, decode_tokens, position FROM step_requests "
      "ORDER BY token, rowid",
      [&](const Statement& q) {
        StepRequestRow r;
        r.token = static_cast<uint32_t>(q.Int(0));
        r.request = q.Text(1);
        r.prefill = q.Int(2);
        r.decode = q.Int(3);
        r.position = q.Int(4);
        out->push_back(std::move(r));
      },
      error);
}

bool ReadSteps(Reader& reader, uint32_t first, uint32_t last, std::vector<StepRequestRow>* rows,
               std::map<uint32_t, StepTime>* times, std::string* error) {
  if (!ReadStepRequests(reader, rows, error)) return false;
  if (rows->empty()) return true;
  return reader.ForEachToken(
      std::max(first, rows->front().token), std::min(last, rows->back().token),
      [&](const TokenStat& t) {
        (*times)[t.token] = {t.cpu_begin_ns, t.cpu_end_ns, t.gpu_busy_ns};
      },
      error);
}

bool ReadRequestEvents(Reader& reader, std::vector<RequestEventRow>* out, std::string* error) {
  out->clear();
  bool present = false;
  if (!reader.HasTable("request_events", error, &present)) return false;
  if (!present) return true;
  // Files of the first version of the table have no role column: their rows are an engine
  // core's.
  bool has_role = false;
  if (!reader.Rows(
          "PRAGMA table_info(request_events)",
          [&](const Statement& q) { has_role = has_role || q.Text(1) == "role"; }, error)) {
    return false;
  }
  const std::string sql =
      std::string(
          "SELECT request, arrival_unix_ns, queued_ns, scheduled_ns, first_token_ns, "
          "finished_ns, first_step, first_token_step, finished_step, finish_reason, "
          "prompt_tokens, output_tokens, ") +
      (has_role ? "COALESCE(role, 'engine_core')" : "'engine_core'") +
      " FROM request_events ORDER BY queued_ns, rowid";
  return reader.Rows(
      sql,
      [&](const Statement& q) {
        RequestEventRow r;
        r.request = q.Text(0);
        r.arrival_unix_ns = IntOrNone(q, 1);
        r.queued_ns = IntOrNone(q, 2);
        r.scheduled_ns = IntOrNone(q, 3);
        r.first_token_ns = IntOrNone(q, 4);
        r.finished_ns = IntOrNone(q, 5);
        r.first_step = IntOrNone(q, 6);
        r.first_token_step = IntOrNone(q, 7);
        r.finished_step = IntOrNone(q, 8);
        r.finish_reason = q.Text(9);
        r.prompt_tokens = IntOrNone(q, 10);
        r.output_tokens = IntOrNone(q, 11);
        r.role = q.Text(12);
        out->push_back(std::move(r));
      },
      error);
}

bool ReadCoreSteps(Reader& reader, CoreSteps* out, std::string* error) {
  *out = CoreSteps{};
  return reader.Rows(
      "SELECT s.name, c.cpu_end_ns - c.cpu_begin_ns FROM calls c JOIN sites s "
      "ON s.id = c.site_id WHERE s.name IN ('vllm.core_step', 'vllm.schedule', 'vllm.update', "
      "'vllm.front_step') "
      "AND c.cpu_end_ns IS NOT NULL AND c.cpu_end_ns >= c.cpu_begin_ns ORDER BY c.id",
      [&](const Statement& q) {
        const std::string name = q.Text(0);
        const double ms = static_cast<double>(q.Int(1)) / 1e6;
        (name == "vllm.core_step"  ? out->step_ms
         : name == "vllm.schedule" ? out->schedule_ms
                                   : out->update_ms)
            .push_back(ms);
      },
      error);
}

namespace {

// The requests part of the engine core's and the front end's sections, over the rows of
// `role`: counts by finish, figures, and the table (first and slowest past 2 x kListedRequests).
// `queue`: with the queue column (the engine core's rows have scheduling, the front end's not).
std::string RequestsPart(const std::vector<RequestEventRow>& all, const std::string& role,
                         bool queue, const std::map<std::string, WorkerRequest>* worker,
                         bool worker_gpu) {
  auto ms = [](int64_t begin, int64_t end) {
    return begin < 0 || end < 0 ? -1.0 : static_cast<double>(end - begin) / 1e6;
  };
  std::vector<const RequestEventRow*> events;
  for (const RequestEventRow& r : all) {
    if (r.role == role) events.push_back(&r);
  }
  std::map<std::string, int64_t> reasons;
  size_t running = 0;
  std::vector<double> queued, ttft, tpot;
  std::vector<std::vector<std::string>> rows = {{"request", "prompt", "output"}};
  if (queue) rows[0].push_back("queue ms");
  for (const char* h : {"first token ms", "per output token ms", "finish"}) rows[0].push_back(h);
  if (worker != nullptr) {
    rows[0].push_back("worker steps");
    if (worker_gpu) rows[0].push_back("gpu ms (shared)");
  }
  for (const RequestEventRow* r : events) {
    const double q = ms(r->queued_ns, r->scheduled_ns), t = ms(r->queued_ns, r->first_token_ns);
    double p = -1;
    if (r->output_tokens > 1 && r->first_token_ns >= 0 && r->finished_ns >= 0) {
      p = ms(r->first_token_ns, r->finished_ns) / static_cast<double>(r->output_tokens - 1);
    }
    queued.push_back(q), ttft.push_back(t), tpot.push_back(p);
    if (r->finished_ns < 0) {
      ++running;
    } else {
      ++reasons[r->finish_reason.empty() ? "?" : r->finish_reason];
    }
    std::vector<std::string> row = {ForTerminal(r->request),
                                    r->prompt_tokens < 0 ? "-" : std::to_string(r->prompt_tokens),
                                    r->output_tokens < 0 ? "-" : std::to_string(r->output_tokens)};
    if (queue) row.push_back(Num(q));
    row.push_back(Num(t));
    row.push_back(Num(p));
    row.push_back(r->finished_ns < 0 ? "running" : ForTerminal(r->finish_reason, 20));
    if (worker != nullptr) {
      auto w = worker->find(r->request);
      row.push_back(w == worker->end() ? "-" : std::to_string(w->second.steps));
      if (worker_gpu) row.push_back(w == worker->end() ? "-" : Fixed(w->second.gpu_ms, 3));
    }
    rows.push_back(std::move(row));
  }
  std::string out = "  requests: " + std::to_string(events.size());
  std::string finished;
  for (const auto& [reason, n] : reasons) {
    finished += (finished.empty() ? "" : ", ") + ForTerminal(reason, 20) + " " + std::to_string(n);
  }
  if (!finished.empty()) out += "; finished: " + finished;
  if (running > 0) out += "; still running at the end: " + std::to_string(running);
  out += "\n";
  if (events.empty()) return out;
  out += "  " + std::string(queue ? "queue ms: " + Quantiles(queued) + "; " : "") +
         "first token ms: " + Quantiles(ttft) + "; per output token ms: " + Quantiles(tpot) + "\n";
  if (events.size() > 2 * kListedRequests) {
    // The first requests, then the slowest by first token.
    std::vector<size_t> order(events.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return ttft[a] > ttft[b]; });
    std::vector<std::vector<std::string>> first(rows.begin(), rows.begin() + 1 + kListedRequests);
    std::vector<std::vector<std::string>> slow = {rows[0]};
    for (size_t k = 0; k < kListedRequests; ++k) slow.push_back(rows[1 + order[k]]);
    out +=
        "  first " + std::to_string(kListedRequests) + " requests:\n" + FormatTable(first, "    ");
    out += "  slowest " + std::to_string(kListedRequests) + " requests (by first token):\n" +
           FormatTable(slow, "    ");
  } else {
    out += "  per request:\n" + FormatTable(rows, "    ");
  }
  return out;
}

bool HasRole(const std::vector<RequestEventRow>& events, const std::string& role) {
  return std::any_of(events.begin(), events.end(),
                     [&](const RequestEventRow& r) { return r.role == role; });
}

}  // namespace

std::string EngineCoreSection(const std::vector<RequestEventRow>& events, const CoreSteps& steps,
                              const std::map<std::string, WorkerRequest>* worker, bool worker_gpu) {
  if (!HasRole(events, "engine_core") && steps.step_ms.empty()) return "";
  std::string out =
      "\nengine core (vLLM's scheduler; vllm.core_step = its steps; request_events):\n";
  out += "  steps: " + std::to_string(steps.step_ms.size());
  if (steps.empty > 0) out += " (" + std::to_string(steps.empty) + " scheduled nothing)";
  out += "; step ms: " + Quantiles(steps.step_ms) + "\n";
  out += "  scheduling ms per step: " + Quantiles(steps.schedule_ms) +
         "; update ms per step: " + Quantiles(steps.update_ms) +
         "\n  (the rest of a step is the wait for the worker's execute and sample)\n";
  out += RequestsPart(events, "engine_core", true, worker, worker_gpu);
  if (!HasRole(events, "engine_core")) return out;
  out +=
      "  (times from the request's queueing in the scheduler: queue = until first scheduled,\n"
      "  first token = until the update that gave it back";
  out += worker == nullptr ? ")\n"
         : worker_gpu
             ? ";\n  worker steps and gpu ms: the worker's file, each step's GPU time shared "
               "among its requests by token count)\n"
             : "; worker steps: the worker's file)\n";
  return out;
}

std::string FrontEndSection(const std::vector<RequestEventRow>& events, const CoreSteps& steps) {
  if (!HasRole(events, "front_end") && steps.front_ms.empty()) return "";
  std::string out =
      "\nfront end (vLLM's output processing; vllm.front_step = its steps; request_events):\n";
  out += "  steps: " + std::to_string(steps.front_ms.size()) +
         "; output processing ms per step: " + Quantiles(steps.front_ms) + "\n";
  out += RequestsPart(events, "front_end", false, nullptr, false);
  if (!HasRole(events, "front_end")) return out;
  out +=
      "  (times from the front end's hand-over of the request to the engine: first token = until\n"
      "  its first output was processed for the caller, as generate() or the HTTP response gets "
      "it)\n";
  return out;
}

bool ReadLives(Reader& reader, std::vector<RequestEventRow>* events, CoreSteps* steps,
               std::string* error) {
  std::vector<std::pair<std::string, std::string>> meta;
  if (!ReadRequestEvents(reader, events, error) || !ReadCoreSteps(reader, steps, error) ||
      !reader.Meta(&meta, error)) {
    return false;
  }
  for (const auto& [key, value] : meta) {
    if (key == "engine_core_empty_steps") steps->empty = std::atoll(value.c_str());
  }
  return true;
}

std::map<std::string, WorkerRequest> WorkerRequests(const std::vector<StepRequestRow>& rows,
                                                    const std::map<uint32_t, StepTime>& steps) {
  std::map<std::string, WorkerRequest> out;
  for (const RequestStats& q : Analyse(rows, steps).requests) {
    out[q.id] = {q.steps.size(), q.gpu_ms};
  }
  return out;
}

std::string ServingSection(const std::vector<StepRequestRow>& rows,
                           const std::map<uint32_t, StepTime>& steps, bool gpu) {
  if (rows.empty()) return "";
  Analysis a = Analyse(rows, steps);
  const auto& by_step = a.by_step;
  std::vector<RequestStats>& requests = a.requests;

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

bool ReadServedEdits(Reader& reader, ServedEdits* out, std::string* error) {
  *out = ServedEdits{};
  // SQLite's JSON functions read the JSON the Python layer wrote; a value that is not valid
  // JSON (a file written by hand) is left out. A SQLite built without them (JSON1 is built in
  // since 3.38; distributions enabled it before) reads no served edits, said in the section.
  std::string json_error;
  if (!reader.Rows(
          "SELECT CAST(j.key AS INTEGER) FROM meta m, json_each(m.value, '$.served') j "
          "WHERE m.key = 'patch_fires' AND json_valid(m.value) ORDER BY 1",
          [&](const Statement& q) { out->rules.push_back(q.Int(0)); }, &json_error)) {
    if (json_error.find("json") == std::string::npos) {
      *error = json_error;
      return false;
    }
    out->unread = "this SQLite has no JSON functions (" + json_error + ")";
    return true;
  }
  if (out->rules.empty()) return true;
  bool present = false, has_edits = false;
  if (!reader.HasTable("request_events", error, &present)) return false;
  if (!present) return true;
  if (!reader.Rows(
          "PRAGMA table_info(request_events)",
          [&](const Statement& q) { has_edits = has_edits || q.Text(1) == "edits"; }, error)) {
    return false;
  }
  if (!has_edits) return true;
  if (!reader.Rows(
          "SELECT COUNT(*) FROM request_events WHERE role = 'worker'",
          [&](const Statement& q) { out->requests = q.Int(0); }, error)) {
    return false;
  }
  return reader.Rows(
      "SELECT CAST(j.key AS INTEGER), e.request, json_extract(j.value, '$[0]'), "
      "json_extract(j.value, '$[1]') FROM request_events e, json_each(e.edits) j "
      "WHERE e.role = 'worker' AND json_valid(e.edits) ORDER BY 1, e.rowid",
      [&](const Statement& q) {
        out->edits.push_back({q.Int(0), q.Text(1), IntOrNone(q, 2), IntOrNone(q, 3)});
      },
      error);
}

std::string EditsSection(const ServedEdits& served) {
  if (!served.unread.empty()) {
    return "\nedits of served requests: not read: " + served.unread + "\n";
  }
  if (served.rules.empty()) return "";
  std::string out =
      "\nedits of served requests (rules by their index in the spec; request_events, role "
      "worker):\n";
  for (int64_t rule : served.rules) {
    std::vector<const RequestEdit*> mine;
    int64_t steps = 0, rows = 0;
    for (const RequestEdit& e : served.edits) {
      if (e.rule != rule) continue;
      mine.push_back(&e);
      steps += std::max<int64_t>(e.steps, 0);
      rows += std::max<int64_t>(e.rows, 0);
    }
    out += "  rule " + std::to_string(rule) + ": ";
    if (mine.empty()) {
      out += "no request (of " + std::to_string(served.requests) + ")\n";
      continue;
    }
    out += std::to_string(mine.size()) + " of " + std::to_string(served.requests) + " requests, " +
           std::to_string(steps) + " steps, " + std::to_string(rows) + " rows: ";
    for (size_t i = 0; i < mine.size() && i < kListedRequests; ++i) {
      if (i > 0) out += ", ";
      out += ForTerminal(mine[i]->request) + " (" + std::to_string(mine[i]->steps) + " steps, " +
             std::to_string(mine[i]->rows) + " rows)";
    }
    if (mine.size() > kListedRequests) {
      out += " and " + std::to_string(mine.size() - kListedRequests) + " more";
    }
    out += "\n";
  }
  return out;
}

}  // namespace tokentrace::cli
