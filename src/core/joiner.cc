#include "core/joiner.h"

#include <algorithm>

#include "core/comm_kernels.h"
#include "core/recorder.h"
#include "core/site_registry.h"

namespace tokentrace {

Joiner::Joiner(KernelMode mode, int64_t (*ticks_to_ns)(uint64_t))
    : mode_(mode), ticks_to_ns_(ticks_to_ns) {}

int64_t Joiner::ToNs(uint64_t ticks) const {
  return ticks_to_ns_ != nullptr ? ticks_to_ns_(ticks) : static_cast<int64_t>(ticks);
}

const std::string& Joiner::Text(uint32_t text_id) {
  auto it = texts_.find(text_id);
  if (it == texts_.end()) it = texts_.emplace(text_id, sites::Row(text_id).name).first;
  return it->second;
}

uint32_t Joiner::NextK(uint32_t site_id) {
  if (site_id >= site_calls_.size()) site_calls_.resize(site_id + 1, 0);
  if (site_calls_[site_id] == 0) new_sites_.push_back(site_id);
  return ++site_calls_[site_id];
}

Joiner::CallOf Joiner::OpenCallOf(uint32_t thread, uint64_t call_id) const {
  CallOf call;
  call.id = call_id;
  if (call_id == 0) return call;
  auto it = stacks_.find(thread);
  if (it == stacks_.end()) return call;
  for (auto row = it->second.rbegin(); row != it->second.rend(); ++row) {  // the top, mostly
    if (row->id == call_id) {
      call.site_id = row->site_id;
      call.token = row->token;
      break;
    }
  }
  return call;
}

CallRow Joiner::OpenCall(uint32_t thread, const Event& e) {
  CallRow row;
  row.id = e.call_id;
  row.site_id = e.site_id;
  row.k = NextK(e.site_id);
  row.token = e.token;
  row.parent_id = e.a;
  row.thread = thread;
  row.cpu_begin_ns = ToNs(e.ticks);
  return row;
}

void Joiner::OnEvent(uint32_t thread, const Event& e, Batch* out) {
  switch (e.kind) {
    case EventKind::kPush:
      stacks_[thread].push_back(OpenCall(thread, e));
      break;
    case EventKind::kPop: {
      auto& stack = stacks_[thread];
      // Normally the top. If the push was dropped (ring full) the id is absent: ignore the
      // pop (the drop is already counted). Calls above a found id lost their pops: they are
      // closed here and counted.
      auto it = std::find_if(stack.rbegin(), stack.rend(),
                             [&](const CallRow& c) { return c.id == e.call_id; });
      if (it == stack.rend()) break;
      const int64_t end = ToNs(e.ticks);
      size_t index = static_cast<size_t>(stack.rend() - it) - 1;
      for (size_t i = stack.size(); i-- > index + 1;) {
        out->losses[LossKindName(TOKENTRACE_LOSS_UNCLOSED_RANGE)] += 1;
        stack[i].cpu_end_ns = end;
        out->calls.push_back(stack[i]);
        written_open_.erase(stack[i].id);
      }
      stack[index].cpu_end_ns = end;
      out->calls.push_back(stack[index]);
      written_open_.erase(stack[index].id);
      if (e.a != 0) {  // its output 0's identity (recorder::PopWithOutput)
        LinkRow& row = links_[e.call_id];
        row.call_id = e.call_id;
        row.outputs.insert(0, "0:" + std::to_string(e.a) + (row.outputs.empty() ? "" : " "));
      }
      if (!links_.empty()) EmitLinks(stack[index].id, out);
      stack.resize(index);
      break;
    }
    case EventKind::kMark: {  // a zero-length call
      CallRow row = OpenCall(thread, e);
      row.cpu_end_ns = row.cpu_begin_ns;
      out->calls.push_back(row);
      break;
    }
    case EventKind::kLaunch:
    case EventKind::kGraphLaunch:
      if (mode_.kind != KernelMode::kOff) {
        correlations_[e.a] = Correlation{OpenCallOf(thread, e.call_id), e.token, epoch_, delivered_,
                                         e.kind == EventKind::kGraphLaunch};
      }
      break;
    case EventKind::kEscape: {
      EscapeRow row;
      row.call_id = e.call_id;
      row.token = e.token;
      row.thread = thread;
      row.ts_ns = ToNs(e.ticks);
      row.kind = static_cast<EscapeKind>(e.k);
      out->escapes.push_back(row);
      break;
    }
    case EventKind::kOutput: {
      // Packing: recorder.cc WriteOutput.
      const uint32_t ndim = (e.k >> 24) & 0x7f;
      const bool narrow = (e.k & 0x80000000u) != 0;
      const uint32_t words[recorder::kMaxWideOutputDims] = {
          static_cast<uint32_t>(e.a), static_cast<uint32_t>(e.a >> 32), static_cast<uint32_t>(e.b),
          static_cast<uint32_t>(e.b >> 32), e.token};
      OutputRow row;
      row.call_id = e.call_id;
      row.path = Text(e.site_id);
      row.dtype = Text(e.k & 0xffffff);
      row.shape.push_back('[');  // not = "[", for which GCC 12 gives a false -Wrestrict
      const uint32_t limit = narrow ? recorder::kMaxOutputDims : recorder::kMaxWideOutputDims;
      const uint32_t kept = ndim < limit ? ndim : limit;
      for (uint32_t i = 0; i < kept; ++i) {
        if (i > 0) row.shape += ", ";
        row.shape += std::to_string(narrow ? (words[i / 2] >> (16 * (i % 2))) & 0xffff : words[i]);
      }
      if (ndim > kept) {
        row.shape += ", null";  // JSON: more dims than the record holds
        out->losses[LossKindName(TOKENTRACE_LOSS_OUTPUT_DIMS_TRUNCATED)] += 1;
      }
      row.shape += "]";
      out->outputs.push_back(std::move(row));
      break;
    }
    case EventKind::kLink: {
      // Packing: recorder.cc LinksOfCurrent (two entries; the second's slot kNoLink: none).
      const uint32_t slots[2] = {e.site_id, e.k};
      const uint64_t tensors[2] = {e.a, e.b};
      const uint32_t shapes[2] = {static_cast<uint32_t>(e.ticks),
                                  static_cast<uint32_t>(e.ticks >> 32)};
      LinkRow& row = links_[e.call_id];
      row.call_id = e.call_id;
      for (int i = 0; i < 2 && slots[i] != recorder::kNoLink; ++i) {
        const bool output = (slots[i] & recorder::kLinkOutput) != 0;
        std::string& to = output ? row.outputs : row.inputs;
        if (!to.empty()) to += ' ';
        to += std::to_string(slots[i] & ~recorder::kLinkOutput);
        to += ':';
        to += std::to_string(tensors[i]);
        if (!output) {  // an input's shape hash
          to += ':';
          to += std::to_string(shapes[i]);
        }
      }
      break;
    }
    case EventKind::kGraphNodeCreated: {
      // Instantiation may report its nodes as created too (the dispatcher filters what it
      // can see): the clone event, which names the captured original, wins.
      const NodeOwner owner{OpenCallOf(thread, e.call_id), false};
      auto [it, inserted] = node_calls_.try_emplace(e.a, owner);
      if (!inserted && !it->second.cloned) it->second = owner;
      break;
    }
    case EventKind::kGraphNodeCloned: {
      auto it = node_calls_.find(e.a);
      if (it != node_calls_.end()) {
        NodeOwner owner = it->second;
        owner.cloned = true;
        node_calls_[e.b] = owner;
      }
      break;
    }
  }
}

namespace {

std::string_view NameOf(const GpuActivity& a) {
  if (a.kind == GpuOpKind::kKernel) return a.name != nullptr ? a.name : "(unnamed kernel)";
  if (a.kind == GpuOpKind::kMemset) return "[memset]";
  switch (a.copy_kind) {
    case 1:
      return "[memcpy HtoD]";
    case 2:
      return "[memcpy DtoH]";
    case 8:
      return "[memcpy DtoD]";
    default:
      return "[memcpy]";
  }
}

}  // namespace

uint32_t Joiner::InternName(const GpuActivity& a, Batch* out) {
  // Looked up as a view of the record's own name (in its CUPTI buffer): a name seen before,
  // almost every record's, is hashed and compared in place and never copied.
  const std::string_view name = NameOf(a);
  if (auto it = names_.find(name); it != names_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(names_.size() + 1);
  names_.emplace(name, id);
  out->strings.push_back(StringRow{id, std::string(name)});
  comm_names_.resize(id + 1, false);
  comm_names_[id] = a.kind == GpuOpKind::kKernel && IsCommKernel(name);
  return id;
}

void Joiner::Attribute(const GpuActivity& a, uint32_t name_id, const CallOf& call, uint32_t token,
                       Batch* out) {
  const uint64_t call_id = call.id;
  if (mode_.FullRowsFor(token)) {
    KernelRow row;
    row.call_id = call_id;
    row.token = token;
    row.name_id = name_id;
    row.kind = a.kind;
    row.device = a.device;
    row.stream = a.stream;
    row.gpu_begin_ns = a.begin_ns;
    row.gpu_end_ns = a.end_ns;
    row.correlation_id = a.correlation_id;
    row.graph_id = a.graph_id;
    row.graph_node_id = a.graph_node_id;
    out->kernels.push_back(row);
  }
  // Kernels outside any call are summed per token (call id 0, one entry per token).
  CallGpuDelta& d = summaries_[{call_id, token}];
  if (d.kernels == 0) {
    d.call_id = call_id;
    d.token = token;
    d.site_id = call.site_id;
    d.call_token = call.token;
    d.first_begin_ns = a.begin_ns;
    d.last_end_ns = a.end_ns;
  }
  d.kernels += 1;
  const int64_t busy = std::max<int64_t>(0, a.end_ns - a.begin_ns);
  d.busy_ns += busy;
  if (name_id < comm_names_.size() && comm_names_[name_id]) d.comm_ns += busy;
  d.first_begin_ns = std::min(d.first_begin_ns, a.begin_ns);
  d.last_end_ns = std::max(d.last_end_ns, a.end_ns);
}

bool Joiner::TryAttribute(const GpuActivity& a, uint32_t name_id, Batch* out) {
  auto it = correlations_.find(a.correlation_id);
  if (it == correlations_.end()) return false;
  const Correlation c = it->second;
  CallOf call = c.call;
  if (a.graph_node_id != 0 && !graph_records_to_launches_) {
    auto node = node_calls_.find(a.graph_node_id);
    if (node != node_calls_.end()) {
      call = node->second.call;
    } else {
      out->losses[LossKindName(TOKENTRACE_LOSS_UNKNOWN_GRAPH_NODE)] += 1;
    }
  }
  if (!c.graph) correlations_.erase(it);
  Attribute(a, name_id, call, c.token, out);
  return true;
}

void Joiner::OnActivity(const GpuActivity& a, Batch* out) {
  if (mode_.kind == KernelMode::kOff) return;
  ++delivered_;
  if (!a.timed) {  // its zero times would corrupt the call's GPU span and busy time
    out->losses[LossKindName(TOKENTRACE_LOSS_GPU_TIME_MISSING)] += 1;
    return;
  }
  const uint32_t name_id = InternName(a, out);
  if (TryAttribute(a, name_id, out)) return;
  GpuActivity copy = a;
  copy.name = nullptr;  // not valid after this call; the name is interned already
  pending_.push_back(Pending{copy, name_id, epoch_});
}

void Joiner::EmitSummaries(Batch* out) {
  if (summaries_.empty()) return;
  // A call not open on its thread's stack now has closed, and its row was handed over with
  // this drain's rows or before (or never will be: its push was dropped, kNoSite).
  std::vector<uint64_t> open;
  for (const auto& [thread, stack] : stacks_) {
    for (const CallRow& row : stack) open.push_back(row.id);
  }
  std::sort(open.begin(), open.end());
  for (auto& [key, delta] : summaries_) {
    delta.call_closed =
        delta.call_id != 0 && !std::binary_search(open.begin(), open.end(), delta.call_id);
    out->call_gpu.push_back(delta);
  }
  summaries_.clear();
}

void Joiner::EmitLinks(uint64_t call_id, Batch* out) {
  auto it = links_.find(call_id);
  if (it == links_.end()) return;
  out->links.push_back(std::move(it->second));
  links_.erase(it);
}

void Joiner::EndDrain(Batch* out) {
  // Data flow of calls still open (or whose pop was lost): written now, the rest later
  for (auto& [call_id, row] : links_) out->links.push_back(std::move(row));
  links_.clear();
  // Records that arrived before their launch event: retry now that more events are in.
  std::vector<Pending> still;
  for (Pending& p : pending_) {
    if (TryAttribute(p.activity, p.name_id, out)) continue;
    if (epoch_ - p.epoch >= kPendingDrains) {
      out->losses[LossKindName(TOKENTRACE_LOSS_UNKNOWN_CORRELATION)] += 1;
      Attribute(p.activity, p.name_id, CallOf{}, 0, out);
    } else {
      still.push_back(p);
    }
  }
  pending_.swap(still);
  EmitSummaries(out);
  for (const auto& [thread, stack] : stacks_) {
    for (const CallRow& row : stack) {
      if (sites::IsToken(row.site_id) && written_open_.insert(row.id).second) {
        out->calls.push_back(row);  // still open: cpu_end_ns is -1 (NULL in the file)
      }
    }
  }
  // Launch entries whose records never came (failed launches) and graph launches long
  // finished: bounded memory however long the run. Aged by what CUPTI delivered since, so a
  // slow job whose records wait in a buffer for minutes keeps its entries.
  if (epoch_ % 16 == 0) {
    const bool crowded = correlations_.size() > kMaxCorrelations;
    std::erase_if(correlations_, [this, crowded](const auto& kv) {
      return delivered_ - kv.second.delivered >= kCorrelationRecords ||
             (crowded && epoch_ - kv.second.epoch >= kCorrelationDrains);
    });
  }
  ++epoch_;
}

void Joiner::Finish(Batch* out) {
  for (Pending& p : pending_) {
    if (TryAttribute(p.activity, p.name_id, out)) continue;
    out->losses[LossKindName(TOKENTRACE_LOSS_UNKNOWN_CORRELATION)] += 1;
    Attribute(p.activity, p.name_id, CallOf{}, 0, out);
  }
  pending_.clear();
  EmitSummaries(out);
  for (auto& [thread, stack] : stacks_) {
    for (CallRow& row : stack) {
      out->losses[LossKindName(TOKENTRACE_LOSS_UNCLOSED_RANGE)] += 1;
      row.cpu_end_ns = -1;
      out->calls.push_back(row);
    }
    stack.clear();
  }
  written_open_.clear();
}

}  // namespace tokentrace
