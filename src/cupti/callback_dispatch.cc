#include "cupti/callback_dispatch.h"

#include "core/recorder.h"
#include "cupti/callback_classify.h"
#include "cupti/cupti_api.h"

namespace tokentrace::cupti {
namespace {

// Re-entrancy: a CUPTI callback that fires while this thread is already inside
// ours is ignored.
thread_local bool t_in_callback = false;
// Depth of traced runtime API calls open on this thread. A driver call the
// runtime makes inside cudaMemcpy or cudaLaunchKernel is already covered by the
// runtime callback, so driver callbacks are acted on only at depth 0
// (driver-API launchers such as Triton). Kept even while not recording, so a
// recording toggle mid-call cannot leave it stale.
thread_local int t_runtime_depth = 0;
// Depth of graph instantiations open on this thread (runtime and driver calls both count).
// CUPTI also reports the nodes an instantiation creates as GRAPHNODE_CREATED: they are the
// instantiation's own, not the capture's, and would otherwise take the call open now
// (usually none) over the one their CLONED event names. As NVIDIA's cuda_graphs_trace
// sample does, they are not recorded.
thread_local int t_instantiate_depth = 0;

struct Guard {
  Guard() { t_in_callback = true; }
  ~Guard() { t_in_callback = false; }
};

uint32_t GraphId(const CuptiApi* api, CUgraph graph) {
  uint32_t id = 0;
  if (graph == nullptr) return 0;
  return TT_CUPTI_CALL(api->GetGraphId(graph, &id)) == CUPTI_SUCCESS ? id : 0;
}

uint32_t GraphExecId(const CuptiApi* api, CUgraphExec exec) {
  uint32_t id = 0;
  if (exec == nullptr || api->GetGraphExecId == nullptr) return 0;
  return TT_CUPTI_CALL(api->GetGraphExecId(exec, &id)) == CUPTI_SUCCESS ? id : 0;
}

void HandleResource(const CuptiApi* api, CUpti_CallbackId cbid, const void* cbdata) {
  if (cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED &&
      cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED &&
      cbid != CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED && cbid != CUPTI_CBID_RESOURCE_GRAPH_CLONED) {
    return;
  }
  const auto* res = static_cast<const CUpti_ResourceData*>(cbdata);
  const auto* g = res ? static_cast<const CUpti_GraphData*>(res->resourceDescriptor) : nullptr;
  if (g == nullptr || api->GetGraphNodeId == nullptr || api->GetGraphId == nullptr) return;
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED) {
    // An exec instantiated from a graph captured inside a token call replays as tokens.
    // Instantiation may report an internal clone as `graph`: its original is checked too.
    recorder::GraphExecCreated(GraphId(api, g->graph), GraphId(api, g->originalGraph),
                               GraphExecId(api, g->graphExec));
    return;
  }
  if (cbid == CUPTI_CBID_RESOURCE_GRAPH_CLONED) {
    recorder::GraphCloned(GraphId(api, g->originalGraph), GraphId(api, g->graph));
    return;
  }
  uint64_t node_id = 0;
  if (TT_CUPTI_CALL(api->GetGraphNodeId(g->node, &node_id)) != CUPTI_SUCCESS) return;
  if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED) {
    if (t_instantiate_depth > 0) return;
    uint32_t graph_id = 0;
    if (TT_CUPTI_CALL(api->GetGraphId(g->graph, &graph_id)) != CUPTI_SUCCESS) return;
    recorder::GraphNodeCreated(graph_id, node_id);
    return;
  }
  uint64_t original_id = 0;
  if (TT_CUPTI_CALL(api->GetGraphNodeId(g->originalNode, &original_id)) != CUPTI_SUCCESS) {
    return;
  }
  // Instantiation clones nodes into the executable graph: key the clone by the
  // exec id, the id GraphLaunch reports. A plain cudaGraphClone has no exec:
  // use the clone's graph id.
  uint32_t owner_id = GraphExecId(api, g->graphExec);
  if (owner_id == 0 && TT_CUPTI_CALL(api->GetGraphId(g->graph, &owner_id)) != CUPTI_SUCCESS) {
    return;
  }
  recorder::GraphNodeCloned(original_id, owner_id, node_id);
}

}  // namespace

void CUPTIAPI DispatchCallback(void* userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                               const void* cbdata) {
  if (t_in_callback || cbdata == nullptr) return;
  Guard guard;
  const auto* api = static_cast<const CuptiApi*>(userdata);
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    if (api != nullptr && recorder::Active()) HandleResource(api, cbid, cbdata);
    return;
  }
  const auto* data = static_cast<const CUpti_CallbackData*>(cbdata);
  if (IsGraphInstantiate(domain, cbid)) {  // tracked even while not recording, like the depth
    if (data->callbackSite == CUPTI_API_ENTER) {
      ++t_instantiate_depth;
    } else if (t_instantiate_depth > 0) {
      --t_instantiate_depth;
    }
  }
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    if (data->callbackSite == CUPTI_API_EXIT) {
      if (t_runtime_depth > 0) --t_runtime_depth;
      return;
    }
    ++t_runtime_depth;
  } else if (data->callbackSite != CUPTI_API_ENTER || t_runtime_depth > 0) {
    return;
  }
  if (!recorder::Active()) return;
  const Action action = ClassifyCallback(domain, cbid, data->functionParams);
  switch (action.kind) {
    case Action::kLaunch:
      recorder::Launch(data->correlationId);
      break;
    case Action::kGraphLaunch:
      recorder::GraphLaunch(data->correlationId,
                            api != nullptr ? GraphExecId(api, action.graph_exec) : 0);
      break;
    case Action::kEscape:
      recorder::Escape(data->correlationId, action.escape);
      break;
    case Action::kLaunchEscape:
      recorder::Launch(data->correlationId);
      recorder::Escape(data->correlationId, action.escape);
      break;
    case Action::kNone:
      break;
  }
}

}  // namespace tokentrace::cupti
