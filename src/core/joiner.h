// The background thread's logic: turns ring events and GPU activity records into rows.
//
// Single-threaded by design (only the background thread touches a Joiner), plain C++, and
// driven in tests with hand-built Events and GpuActivities.
//
// Joining, in words:
//  - push/pop events of one thread rebuild that thread's call stack; a call becomes a
//    CallRow when it closes (or at Finish(), still open: counted as "unclosed_range").
//  - k (1-based call index per site) is given here, in the order pushes are seen: exact for
//    a site called from one thread; across threads, in drain order.
//  - a launch event maps its correlation id to (call, token). A GPU record with that id is
//    attributed to that call. Records may arrive before their launch event (kept pending
//    for a few drains) or long after it: CUPTI hands over a buffer only when it is full, so
//    a launch entry is given up only after kCorrelationRecords more GPU records were
//    delivered, however long that takes (not after a number of drains, which is wall time).
//    Records whose id never shows up are stored unattributed and counted as
//    "unknown_correlation".
//  - graph nodes created inside a call belong to it; instantiation clones inherit, and a
//    clone's owner is never overwritten by a later creation event for the same node; a kernel
//    replayed from a graph is attributed to its node's call, and to the graph launch's token.
//  - the kernel mode decides per record: a full row, and/or a per-call summary delta. The
//    delta also sums the busy time of communication kernels (NCCL's, by name:
//    core/comm_kernels.h), so that summary mode, which keeps no names, still tells
//    communication from work.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/event.h"
#include "core/records.h"

namespace tokentrace {

class Joiner {
 public:
  explicit Joiner(KernelMode mode, int64_t (*ticks_to_ns)(uint64_t) = nullptr);

  // Events of one thread, in the order that thread wrote them.
  void OnEvent(uint32_t thread, const Event& event, Batch* out);
  // A GPU record, in any order relative to events.
  void OnActivity(const GpuActivity& activity, Batch* out);
  // Ends one drain: retries pending records, emits summary deltas, sweeps old state.
  void EndDrain(Batch* out);
  // Ends the session: calls still open are written open (cpu_end_ns -1, counted as
  // unclosed_range), pending records are stored unattributed.
  void Finish(Batch* out);

  // An imported trace (src/import) has no graph capture events: a graph launch's records go
  // to the launch's call, as its other records do, and no unknown_graph_node is counted.
  void AttributeGraphRecordsToLaunches() { graph_records_to_launches_ = true; }

  // Sites whose first call this session saw since the last call (the file lists only the
  // sites a session used, although the registry is process-wide).
  std::vector<uint32_t> TakeNewSites() { return std::move(new_sites_); }

  // State sizes (for tests and memory checks).
  size_t correlation_entries() const { return correlations_.size(); }
  size_t pending_records() const { return pending_.size(); }
  size_t graph_nodes() const { return node_calls_.size(); }

  // Drains after which a record with no launch event is given up.
  static constexpr uint32_t kPendingDrains = 5;
  // GPU records delivered after a launch before its entry is given up: many times what the
  // pool of CUPTI buffers holds (cupti/activity_buffers.h), so a record CUPTI still has
  // cannot be behind it.
  static constexpr uint64_t kCorrelationRecords = uint64_t{1} << 22;
  // A backstop for launches that never produce a record (failed launches) while nothing
  // else is delivered: past this many entries, those older than kCorrelationDrains drains
  // go too.
  static constexpr size_t kMaxCorrelations = size_t{1} << 20;
  static constexpr uint32_t kCorrelationDrains = 100;

 private:
  // Where a launch's records go: its call, the call's site and own token (kNoSite, 0: not
  // known, the call's push was dropped), and the token it ran in.
  struct CallOf {
    uint64_t id = 0;
    uint32_t site_id = kNoSite;
    uint32_t token = 0;
  };
  struct Correlation {
    CallOf call;
    uint32_t token;      // the launch's
    uint32_t epoch;      // drain number of the launch
    uint64_t delivered;  // GPU records delivered before the launch was seen
    bool graph;          // graph launches keep their entry: one launch, many records
  };
  struct NodeOwner {
    CallOf call;
    bool cloned;  // set by an instantiation clone: a creation event does not replace it
  };
  struct Pending {
    GpuActivity activity;
    uint32_t name_id;
    uint32_t epoch;
  };

  int64_t ToNs(uint64_t ticks) const;
  uint32_t InternName(const GpuActivity& a, Batch* out);
  void Attribute(const GpuActivity& a, uint32_t name_id, const CallOf& call, uint32_t token,
                 Batch* out);
  // The open call `call_id` of `thread` (normally its innermost), as a launch inside it sees it.
  CallOf OpenCallOf(uint32_t thread, uint64_t call_id) const;
  bool TryAttribute(const GpuActivity& a, uint32_t name_id, Batch* out);
  void EmitSummaries(Batch* out);
  uint32_t NextK(uint32_t site_id);  // numbers calls per site; notes first-seen sites
  CallRow OpenCall(uint32_t thread, const Event& push_or_mark);  // the row, not yet closed
  const std::string& Text(uint32_t text_id);  // interned path/dtype strings, cached

  KernelMode mode_;
  bool graph_records_to_launches_ = false;
  int64_t (*ticks_to_ns_)(uint64_t);
  uint32_t epoch_ = 0;
  uint64_t delivered_ = 0;  // GPU records seen by OnActivity
  // Each job thread's open calls as rebuilt from its push/pop events, with each call's row
  // until its pop closes it. One of three open-call stacks, each for its own thread and time:
  // the recorder's (core/recorder.cc) is read on the job's thread at each event, and the
  // Python extension's (python/src/native.cc t_open) pairs its own hooks' opens and closes.
  // This one runs later, on the drain's thread, so it cannot read the recorder's: by then
  // that thread has moved on, and reading it would race the hot path.
  std::unordered_map<uint32_t, std::vector<CallRow>> stacks_;  // per thread
  // Open token calls already written open (cpu_end NULL), so a job killed mid-token leaves a
  // token that reads as unfinished; the row is replaced when the call closes.
  std::unordered_set<uint64_t> written_open_;
  // Op data flow of calls still open (recorder::LinksOfCurrent), written when the call closes
  // or the drain ends, whichever is first: one row a call, memory bounded by one drain.
  std::unordered_map<uint64_t, LinkRow> links_;
  void EmitLinks(uint64_t call_id, Batch* out);
  std::unordered_map<uint64_t, Correlation> correlations_;
  std::unordered_map<uint64_t, NodeOwner> node_calls_;  // graph node id -> owning call
  std::vector<Pending> pending_;
  // Transparent hash and equality: a name is looked up as a string_view, without a copy.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, NameHash, std::equal_to<>> names_;
  std::vector<bool> comm_names_;  // by name id: IsCommKernel, decided once per name
  // This drain's deltas, by (call id, token): a call captured in a graph gets records at
  // every token that replays it, and each token's kernels are that token's.
  struct CallTokenHash {
    size_t operator()(const std::pair<uint64_t, uint32_t>& k) const {
      return std::hash<uint64_t>{}(k.first * 0x9e3779b97f4a7c15ull ^ k.second);
    }
  };
  std::unordered_map<std::pair<uint64_t, uint32_t>, CallGpuDelta, CallTokenHash> summaries_;
  std::vector<uint32_t> site_calls_;  // calls seen so far, by site id
  std::vector<uint32_t> new_sites_;
  std::unordered_map<uint32_t, std::string> texts_;
};

}  // namespace tokentrace
