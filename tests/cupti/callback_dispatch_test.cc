#include "cupti/callback_dispatch.h"

#include <gtest/gtest.h>

#include "cupti/cupti_api.h"
#include "tests/cupti/fake_recorder.h"

namespace tokentrace::cupti {
namespace {

using fake::RecorderCall;

// Fabricated id look-ups: a handle's id is its address value.
CUptiResult FakeExecId(CUgraphExec exec, uint32_t* id) {
  *id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(exec));
  return CUPTI_SUCCESS;
}
CUptiResult FakeGraphId(CUgraph graph, uint32_t* id) {
  *id = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(graph));
  return CUPTI_SUCCESS;
}
CUptiResult FakeNodeId(CUgraphNode node, uint64_t* id) {
  *id = reinterpret_cast<uintptr_t>(node);
  return CUPTI_SUCCESS;
}

class DispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    api_.GetGraphExecId = &FakeExecId;
    api_.GetGraphId = &FakeGraphId;
    api_.GetGraphNodeId = &FakeNodeId;
    fake::SetActive(true);
    fake::TakeCalls();
  }
  void TearDown() override { fake::SetActive(true); }

  // A CUDA-graph resource callback carrying `g`.
  void Resource(CUpti_CallbackId cbid, const CUpti_GraphData& g) {
    CUpti_ResourceData res = {};
    res.resourceDescriptor = const_cast<CUpti_GraphData*>(&g);
    DispatchCallback(&api_, CUPTI_CB_DOMAIN_RESOURCE, cbid, &res);
  }

  void Api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, CUpti_ApiCallbackSite site,
           uint32_t corr, const void* params = nullptr) {
    CUpti_CallbackData data = {};
    data.callbackSite = site;
    data.correlationId = corr;
    data.functionParams = params;
    DispatchCallback(&api_, domain, cbid, &data);
  }
  void Runtime(CUpti_CallbackId cbid, CUpti_ApiCallbackSite site, uint32_t corr,
               const void* params = nullptr) {
    Api(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, site, corr, params);
  }
  void Driver(CUpti_CallbackId cbid, CUpti_ApiCallbackSite site, uint32_t corr) {
    Api(CUPTI_CB_DOMAIN_DRIVER_API, cbid, site, corr);
  }

  CuptiApi api_;
};

TEST_F(DispatchTest, RuntimeLaunchOnEnterOnly) {
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_ENTER, 41);
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_EXIT, 41);
  const auto calls = fake::TakeCalls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, RecorderCall::kLaunch);
  EXPECT_EQ(calls[0].a, 41u);
}

TEST_F(DispatchTest, DriverCallsInsideARuntimeCallAreIgnored) {
  cudaMemcpy_v3020_params copy = {};
  copy.kind = cudaMemcpyHostToDevice;
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_API_ENTER, 1, &copy);
  Driver(CUPTI_DRIVER_TRACE_CBID_cuMemcpy, CUPTI_API_ENTER,
         2);  // the runtime's own copy
  Driver(CUPTI_DRIVER_TRACE_CBID_cuMemcpy, CUPTI_API_EXIT, 2);
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_API_EXIT, 1, &copy);
  // HtoD: a launch (the MEMCPY record joins through it), no escape, no driver-level one.
  auto copies = fake::TakeCalls();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].what, RecorderCall::kLaunch);
  EXPECT_EQ(copies[0].a, 1u);
  // Outside any runtime call a driver launch (Triton) counts, on enter only.
  Driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, 3);
  Driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_EXIT, 3);
  const auto calls = fake::TakeCalls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, RecorderCall::kLaunch);
  EXPECT_EQ(calls[0].a, 3u);
}

TEST_F(DispatchTest, SyncDeviceToHostCopyIsALaunchAndAnEscape) {
  cudaMemcpy_v3020_params copy = {};
  copy.kind = cudaMemcpyDeviceToHost;  // what .item() and .cpu() end in
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_API_ENTER, 4, &copy);
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_API_EXIT, 4, &copy);
  const auto calls = fake::TakeCalls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].what, RecorderCall::kLaunch);
  EXPECT_EQ(calls[0].a, 4u);
  EXPECT_EQ(calls[1].what, RecorderCall::kEscape);
  EXPECT_EQ(calls[1].a, 4u);
  EXPECT_EQ(calls[1].b, static_cast<uint64_t>(EscapeKind::kMemcpyDtoHSync));
}

TEST_F(DispatchTest, EscapesCarryKindAndCorrelation) {
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, CUPTI_API_ENTER, 9);
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, CUPTI_API_EXIT, 9);
  const auto calls = fake::TakeCalls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, RecorderCall::kEscape);
  EXPECT_EQ(calls[0].a, 9u);
  EXPECT_EQ(calls[0].b, static_cast<uint64_t>(EscapeKind::kStreamSync));
}

TEST_F(DispatchTest, GraphLaunchResolvesExecId) {
  cudaGraphLaunch_v10000_params p = {reinterpret_cast<cudaGraphExec_t>(uintptr_t{17}), nullptr};
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_API_ENTER, 5, &p);
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_API_EXIT, 5, &p);
  const auto calls = fake::TakeCalls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].what, RecorderCall::kGraphLaunch);
  EXPECT_EQ(calls[0].a, 5u);
  EXPECT_EQ(calls[0].b, 17u);
}

TEST_F(DispatchTest, InactiveRecorderGetsNothingAndDepthStaysRight) {
  fake::SetActive(false);
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_ENTER, 1);
  fake::SetActive(true);  // turned on in the middle of a runtime call
  Runtime(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_EXIT, 1);
  EXPECT_TRUE(fake::TakeCalls().empty());
  Driver(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, 2);
  EXPECT_EQ(fake::TakeCalls().size(), 1u);  // depth is back to 0
}

TEST_F(DispatchTest, GraphNodeCreatedAndCloned) {
  CUpti_GraphData g = {};
  g.graph = reinterpret_cast<CUgraph>(uintptr_t{3});
  g.node = reinterpret_cast<CUgraphNode>(uintptr_t{100});
  Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g);

  g.originalNode = g.node;
  g.node = reinterpret_cast<CUgraphNode>(uintptr_t{200});
  g.graph = reinterpret_cast<CUgraph>(uintptr_t{4});
  g.graphExec = reinterpret_cast<CUgraphExec>(uintptr_t{17});
  Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, g);
  g.graphExec = nullptr;  // cudaGraphClone: no exec, the clone's graph id
  Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, g);
  Resource(CUPTI_CBID_RESOURCE_GRAPH_CREATED, g);  // not one we handle

  const auto calls = fake::TakeCalls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].what, RecorderCall::kNodeCreated);
  EXPECT_EQ(calls[0].a, 3u);
  EXPECT_EQ(calls[0].b, 100u);
  EXPECT_EQ(calls[1].what, RecorderCall::kNodeCloned);
  EXPECT_EQ(calls[1].a, 100u);
  EXPECT_EQ(calls[1].b, 17u);
  EXPECT_EQ(calls[1].c, 200u);
  EXPECT_EQ(calls[2].b, 4u);
}

// Instantiation reports new nodes too (CREATED inside cudaGraphInstantiate), before or after
// cloning the captured ones. Only the clones are recorded: a CREATED there would give the node
// to whatever call is open at instantiation.
TEST_F(DispatchTest, NodesCreatedDuringInstantiationAreNotRecorded) {
  CUpti_GraphData g = {};
  g.graph = reinterpret_cast<CUgraph>(uintptr_t{3});
  g.node = reinterpret_cast<CUgraphNode>(uintptr_t{100});
  Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g);  // captured: recorded
  fake::TakeCalls();

  CUpti_GraphData inst = {};
  inst.graph = reinterpret_cast<CUgraph>(uintptr_t{4});
  inst.node = reinterpret_cast<CUgraphNode>(uintptr_t{200});
  inst.originalNode = g.node;
  inst.graphExec = nullptr;  // not relied upon: CUPTI may leave it unset here
  for (const auto& [domain, enter] :
       {std::pair{CUPTI_CB_DOMAIN_RUNTIME_API,
                  CUpti_CallbackId{CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000}},
        std::pair{CUPTI_CB_DOMAIN_DRIVER_API,
                  CUpti_CallbackId{CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags}}}) {
    Api(domain, enter, CUPTI_API_ENTER, 7);
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {  // the runtime's own driver call nests
      Driver(CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams, CUPTI_API_ENTER, 8);
      Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, inst);
      Driver(CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams, CUPTI_API_EXIT, 8);
    }
    Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, inst);
    Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, inst);
    Api(domain, enter, CUPTI_API_EXIT, 7);
    const auto calls = fake::TakeCalls();
    ASSERT_EQ(calls.size(), 1u) << "domain " << domain;
    EXPECT_EQ(calls[0].what, RecorderCall::kNodeCloned);
    EXPECT_EQ(calls[0].a, 100u);
    EXPECT_EQ(calls[0].b, 4u);  // no exec in the callback: the exec graph's id
    EXPECT_EQ(calls[0].c, 200u);
  }
  // After instantiation, a node created (explicit construction) is recorded again.
  Resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g);
  const auto after = fake::TakeCalls();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].what, RecorderCall::kNodeCreated);
}

TEST_F(DispatchTest, GraphExecCreatedAndGraphClonedCarryBothGraphs) {
  CUpti_GraphData g = {};
  g.graph = reinterpret_cast<CUgraph>(uintptr_t{22});
  g.originalGraph = reinterpret_cast<CUgraph>(uintptr_t{21});
  g.graphExec = reinterpret_cast<CUgraphExec>(uintptr_t{5});
  Resource(CUPTI_CBID_RESOURCE_GRAPH_CLONED, g);
  Resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, g);
  g.originalGraph = nullptr;  // a graph that is not a clone
  Resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, g);
  const auto calls = fake::TakeCalls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].what, RecorderCall::kGraphCloned);
  EXPECT_EQ(calls[0].a, 21u);
  EXPECT_EQ(calls[0].b, 22u);
  EXPECT_EQ(calls[1].what, RecorderCall::kExecCreated);
  EXPECT_EQ(calls[1].a, 22u);
  EXPECT_EQ(calls[1].b, 5u);
  EXPECT_EQ(calls[1].c, 21u);
  EXPECT_EQ(calls[2].c, 0u);
}

TEST_F(DispatchTest, NullDataAndUnknownDomainsAreIgnored) {
  DispatchCallback(&api_, CUPTI_CB_DOMAIN_RUNTIME_API,
                   CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, nullptr);
  DispatchCallback(nullptr, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
                   nullptr);
  EXPECT_TRUE(fake::TakeCalls().empty());
}

}  // namespace
}  // namespace tokentrace::cupti
