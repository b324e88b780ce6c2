#include "import/replay.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/event.h"
#include "core/joiner.h"
#include "core/launch_meta.h"
#include "core/site_registry.h"

namespace tokentrace::import {
namespace {

// One step of a thread, in its order: a push or pop of a range, or a launch. `at` is the time
// it is merged by: never earlier than the thread's step before it (a range that outlives the
// one below it closes that one at its own begin, before its end).
struct Step {
  ReplayStep::Kind kind;  // kPush, kPop or kLaunch
  int64_t at;
  uint32_t index;  // into the process's ranges or launches
};

// A thread's steps: its ranges (begin ascending, the longer first) and launches (by begin)
// with each range closed before the first step it does not hold.
std::vector<Step> ThreadSteps(const RecordedProcess& p, const std::vector<uint32_t>& ranges,
                              const std::vector<uint32_t>& launches) {
  std::vector<Step> steps;
  steps.reserve(2 * ranges.size() + launches.size());
  std::vector<uint32_t> open;
  int64_t now = INT64_MIN;
  // Closes the open ranges that do not hold what comes next at `until`.
  auto close_until = [&](int64_t until, auto holds) {
    while (!open.empty() && !holds(p.ranges[open.back()])) {
      now = std::max(now, std::min(until, p.ranges[open.back()].end_ns));
      steps.push_back({ReplayStep::kPop, now, open.back()});
      open.pop_back();
    }
  };
  size_t r = 0, l = 0;
  while (r < ranges.size() || l < launches.size()) {
    // At equal times a range opens before a launch: a launch at a range's begin is inside.
    const bool range_next =
        l == launches.size() ||
        (r < ranges.size() && p.ranges[ranges[r]].begin_ns <= p.launches[launches[l]].begin_ns);
    if (range_next) {
      const RecordedRange& next = p.ranges[ranges[r]];
      close_until(next.begin_ns, [&](const RecordedRange& o) {
        return o.begin_ns <= next.begin_ns && next.end_ns <= o.end_ns;
      });
      now = std::max(now, next.begin_ns);
      steps.push_back({ReplayStep::kPush, now, ranges[r]});
      open.push_back(ranges[r++]);
    } else {
      const int64_t t = p.launches[launches[l]].begin_ns;
      close_until(t, [&](const RecordedRange& o) { return t <= o.end_ns; });
      now = std::max(now, t);
      steps.push_back({ReplayStep::kLaunch, now, launches[l++]});
    }
  }
  close_until(INT64_MAX, [](const RecordedRange&) { return false; });
  return steps;
}

struct OpenCall {
  uint64_t id;
  uint32_t site;
  uint32_t token;
  bool is_token;
};

}  // namespace

std::string ChooseRoot(const RecordedProcess& p) {
  const RecordedRange* best = nullptr;
  for (const RecordedRange& r : p.ranges) {
    if (r.kind != SiteKind::kModule) continue;
    if (best == nullptr || r.begin_ns < best->begin_ns ||
        (r.begin_ns == best->begin_ns && r.end_ns > best->end_ns)) {
      best = &r;
    }
  }
  return best != nullptr ? best->name : "";
}

ReplaySchedule Schedule(const RecordedProcess& p, bool all_launches) {
  std::map<uint64_t, std::pair<std::vector<uint32_t>, std::vector<uint32_t>>> by_thread;
  for (uint32_t i = 0; i < p.ranges.size(); ++i) by_thread[p.ranges[i].thread].first.push_back(i);
  std::unordered_set<uint64_t> with_records;
  if (!all_launches) {
    for (const RecordedGpu& g : p.gpu) with_records.insert(g.activity.correlation_id);
  }
  for (uint32_t i = 0; i < p.launches.size(); ++i) {
    if (all_launches || with_records.count(p.launches[i].correlation) != 0)
      by_thread[p.launches[i].thread].second.push_back(i);
  }
  ReplaySchedule out;
  std::vector<std::vector<Step>> threads;
  for (auto& [tid, lists] : by_thread) {
    auto& [ranges, launches] = lists;
    std::stable_sort(ranges.begin(), ranges.end(), [&](uint32_t a, uint32_t b) {
      const RecordedRange &x = p.ranges[a], &y = p.ranges[b];
      return std::tie(x.begin_ns, y.end_ns) < std::tie(y.begin_ns, x.end_ns);
    });
    std::stable_sort(launches.begin(), launches.end(), [&](uint32_t a, uint32_t b) {
      return p.launches[a].begin_ns < p.launches[b].begin_ns;
    });
    out.threads.push_back(tid);
    threads.push_back(ThreadSteps(p, ranges, launches));
  }
  std::vector<uint32_t> records(p.gpu.size());
  for (uint32_t i = 0; i < records.size(); ++i) records[i] = i;
  std::stable_sort(records.begin(), records.end(), [&](uint32_t a, uint32_t b) {
    return p.gpu[a].activity.begin_ns < p.gpu[b].activity.begin_ns;
  });
  // Merge: the earliest of each thread's next step and the next GPU record; at equal times the
  // host's steps first (a record never begins before its launch).
  std::vector<size_t> next(threads.size(), 0);
  size_t record = 0, total = records.size();
  for (const auto& t : threads) total += t.size();
  out.steps.reserve(total);
  for (;;) {
    int first = -1;
    for (size_t t = 0; t < threads.size(); ++t) {
      if (next[t] < threads[t].size() &&
          (first < 0 || threads[t][next[t]].at < threads[first][next[first]].at)) {
        first = static_cast<int>(t);
      }
    }
    if (first < 0 && record == records.size()) break;
    const bool host =
        first >= 0 && (record == records.size() ||
                       threads[first][next[first]].at <= p.gpu[records[record]].activity.begin_ns);
    if (host) {
      const Step& s = threads[first][next[first]++];
      out.steps.push_back({s.kind, static_cast<uint32_t>(first), s.index});
    } else {
      out.steps.push_back({ReplayStep::kRecord, 0, records[record++]});
    }
  }
  return out;
}

bool ImportProcess(const RecordedProcess& p, const ImportOptions& options, Store* store,
                   ImportCounts* counts, std::string* error) {
  counts->root = options.root.empty() ? ChooseRoot(p) : options.root;
  std::vector<uint32_t> site_of(p.ranges.size());
  for (uint32_t i = 0; i < p.ranges.size(); ++i) {
    const RecordedRange& r = p.ranges[i];
    const SiteKind kind =
        !counts->root.empty() && r.name == counts->root ? SiteKind::kRoot : r.kind;
    site_of[i] = sites::Intern(r.name.c_str(), r.name.size(), kind);
  }
  const ReplaySchedule schedule = Schedule(p, /*all_launches=*/false);

  Joiner joiner(options.mode);
  joiner.AttributeGraphRecordsToLaunches();
  std::vector<std::vector<OpenCall>> stacks(schedule.threads.size());
  std::vector<uint32_t> token_depth(schedule.threads.size(), 0);
  std::unordered_set<uint64_t> outside;  // correlations launched outside every range
  uint64_t next_call = 0;
  uint32_t token = 0;
  Batch batch;
  batch.meta = {{"tool_version", TOKENTRACE_VERSION},
                {"pid", std::to_string(p.pid)},
                {"kernel_mode", options.mode.ToString()},
                {"kernels_status", ""},
                {"root", counts->root.empty()   ? "none (every call is token 0's)"
                         : options.root.empty() ? counts->root + " (the outermost module range)"
                                                : counts->root + " (--root)"},
                {"mode", "import"},
                {"token_range", options.token_range},
                {"imported_from", options.source},
                {"import_format", options.format},
                {kMetaAnchorStart, FormatAnchor(TakeClockAnchor())}};
  size_t items = 0;
  auto write = [&](bool last) {
    joiner.EndDrain(&batch);
    if (last) joiner.Finish(&batch);
    for (uint32_t id : joiner.TakeNewSites()) batch.sites.push_back(sites::Row(id));
    if (last) {
      if (counts->outside_ranges != 0) {
        batch.losses[LossKindName(TOKENTRACE_LOSS_IMPORT_OUTSIDE_RANGES)] +=
            static_cast<int64_t>(counts->outside_ranges);
      }
      batch.meta.emplace_back("events", std::to_string(items));
      batch.meta.emplace_back(kMetaAnchorExit, FormatAnchor(TakeClockAnchor()));
    }
    auto lost = batch.losses.find(LossKindName(TOKENTRACE_LOSS_UNKNOWN_CORRELATION));
    if (lost != batch.losses.end()) counts->no_launch += static_cast<uint64_t>(lost->second);
    const bool ok = store->Write(batch, error);
    batch = Batch();
    return ok;
  };

  for (const ReplayStep& s : schedule.steps) {
    // Calls carry the recorded thread id (its low 32 bits) as their thread.
    const uint32_t thread = static_cast<uint32_t>(schedule.threads[s.thread]);
    std::vector<OpenCall>& stack = stacks[s.thread];
    if (s.kind == ReplayStep::kPush) {
      const RecordedRange& r = p.ranges[s.index];
      const uint32_t site = site_of[s.index];
      const bool is_token = sites::IsToken(site);
      if (is_token && token_depth[s.thread] == 0) ++token;
      if (is_token) ++token_depth[s.thread];
      const uint64_t parent = stack.empty() ? 0 : stack.back().id;
      stack.push_back({++next_call, site, token, is_token});
      joiner.OnEvent(thread,
                     MakeEvent(EventKind::kPush, static_cast<uint64_t>(r.begin_ns), next_call,
                               parent, 0, site, 0, token, 0),
                     &batch);
      ++counts->calls;
    } else if (s.kind == ReplayStep::kPop) {
      const OpenCall call = stack.back();
      stack.pop_back();
      if (call.is_token && token_depth[s.thread] > 0) --token_depth[s.thread];
      joiner.OnEvent(thread,
                     MakeEvent(EventKind::kPop, static_cast<uint64_t>(p.ranges[s.index].end_ns),
                               call.id, 0, 0, call.site, 0, call.token, 0),
                     &batch);
    } else if (s.kind == ReplayStep::kLaunch) {
      const RecordedLaunch& l = p.launches[s.index];
      const OpenCall* top = stack.empty() ? nullptr : &stack.back();
      if (top == nullptr) outside.insert(l.correlation);
      joiner.OnEvent(thread,
                     MakeEvent(l.graph ? EventKind::kGraphLaunch : EventKind::kLaunch,
                               static_cast<uint64_t>(l.begin_ns), top != nullptr ? top->id : 0,
                               l.correlation, 0, 0, 0, top != nullptr ? top->token : token, 0),
                     &batch);
      ++counts->launches;
    } else {
      const RecordedGpu& g = p.gpu[s.index];
      GpuActivity a = g.activity;
      a.name = a.kind == GpuOpKind::kKernel ? g.name.c_str() : nullptr;
      a.timed = a.begin_ns != 0 && a.end_ns >= a.begin_ns;
      joiner.OnActivity(a, &batch);
      ++counts->records;
      if (!outside.empty() && outside.count(a.correlation_id) != 0) ++counts->outside_ranges;
    }
    if (++items % options.drain_items == 0 && !write(false)) return false;
  }
  counts->tokens = token;
  return write(true);
}

}  // namespace tokentrace::import
