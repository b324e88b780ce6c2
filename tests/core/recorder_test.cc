// The hot path and the joiner together, as the background thread uses them.
#include "core/recorder.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "core/buffer_registry.h"
#include "core/joiner.h"
#include "core/site_registry.h"

namespace tokentrace {
namespace {

KernelMode Mode(KernelMode::Kind kind) {
  KernelMode m;
  m.kind = kind;
  return m;
}

// Drains every ring (current generation only) into the joiner.
void DrainInto(Joiner& joiner, Batch* batch) {
  const uint8_t gen = recorder::Generation();
  buffers::ForEach([&](ThreadBuffer& ring) {
    ring.Drain([&](const Event& e) {
      if (e.generation == gen) joiner.OnEvent(ring.thread_index(), e, batch);
    });
    if (uint64_t d = ring.TakeDropped()) batch->losses["buffer_full"] += static_cast<int64_t>(d);
  });
}

std::map<uint64_t, CallRow> ById(const Batch& b) {
  std::map<uint64_t, CallRow> m;
  for (const CallRow& c : b.calls) m[c.id] = c;
  return m;
}

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override { recorder::BeginSession(1 << 12); }
  void TearDown() override {
    recorder::EndSession();
    Batch ignored;
    Joiner j(Mode(KernelMode::kOff));
    DrainInto(j, &ignored);
  }
};

TEST_F(RecorderTest, InactiveRecordsNothing) {
  recorder::EndSession();
  uint32_t site = sites::Intern("rec.idle", SiteKind::kModule);
  recorder::Push(site);
  recorder::Pop();
  Joiner joiner(Mode(KernelMode::kSummary));
  Batch batch;
  DrainInto(joiner, &batch);
  EXPECT_TRUE(batch.calls.empty());
}

// Three tokens of a generate-shaped run: root > block > mlp, the block called twice per
// token. Calls carry per-site k, their token and their parent.
TEST_F(RecorderTest, NumbersCallsTokensAndParents) {
  uint32_t root = sites::Intern("self", SiteKind::kRoot);
  uint32_t block = sites::Intern("rec.block", SiteKind::kModule);
  uint32_t mlp = sites::Intern("rec.block.mlp", SiteKind::kModule);
  for (int t = 0; t < 3; ++t) {
    recorder::Push(root);
    for (int rep = 0; rep < 2; ++rep) {
      recorder::Push(block);
      recorder::Push(mlp);
      auto cur = recorder::Current();
      EXPECT_EQ(cur.site_id, mlp);
      EXPECT_EQ(cur.token, static_cast<uint32_t>(t + 1));
      recorder::Pop();
      recorder::Pop();
    }
    recorder::Pop();
  }
  Joiner joiner(Mode(KernelMode::kSummary));
  Batch batch;
  DrainInto(joiner, &batch);
  ASSERT_EQ(batch.calls.size(), 3u + 6u + 6u);
  auto calls = ById(batch);
  std::map<uint32_t, int> per_site;
  for (auto& [id, c] : calls) {
    ++per_site[c.site_id];
    EXPECT_GE(c.cpu_end_ns, c.cpu_begin_ns);
    if (c.site_id == root) {
      EXPECT_EQ(c.parent_id, 0u);
      EXPECT_EQ(c.token, c.k);  // each root call is a token
    } else {
      ASSERT_TRUE(calls.count(c.parent_id));
      EXPECT_EQ(calls[c.parent_id].site_id, c.site_id == mlp ? block : root);
      EXPECT_EQ(c.token, calls[c.parent_id].token);
    }
  }
  // k counts each site's calls in call order (the map is ordered by id = per-thread order).
  std::map<uint32_t, uint32_t> last_k;
  for (auto& [id, c] : calls) {
    EXPECT_EQ(c.k, last_k[c.site_id] + 1) << "site " << c.site_id;
    last_k[c.site_id] = c.k;
  }
  EXPECT_EQ(per_site[root], 3);
  EXPECT_EQ(per_site[block], 6);
  EXPECT_EQ(per_site[mlp], 6);
}

TEST_F(RecorderTest, NestedRootCallIsNotANewToken) {
  uint32_t root = sites::Intern("self", SiteKind::kRoot);
  recorder::Push(root);
  recorder::Push(root);  // e.g. a wrapper model calling the same root
  EXPECT_EQ(recorder::Current().token, 1u);
  recorder::Pop();
  recorder::Pop();
  recorder::Push(root);
  EXPECT_EQ(recorder::Current().token, 2u);
  recorder::Pop();
}

TEST_F(RecorderTest, UnbalancedPopsAreCountedNotCrashed) {
  recorder::TakeUnbalancedPops();
  recorder::Pop();
  recorder::Pop();
  EXPECT_EQ(recorder::TakeUnbalancedPops(), 2u);
}

// A thread whose ring cannot be allocated (here a `ulimit -v` below the ring's size) drops
// its events and counts them as no_memory; nothing is thrown into the job's thread. Runs in
// the death test's child: exits 0 when both events were counted.
[[noreturn]] void PushUnderAnAddressSpaceLimit() {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const rlim_t now = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
  rlimit limit{};
  limit.rlim_cur = limit.rlim_max = now + (rlim_t{256} << 20);
  if (pages == 0 || setrlimit(RLIMIT_AS, &limit) != 0) std::exit(3);
  recorder::BeginSession(1u << 24);  // 768 MiB a ring: more than the limit leaves
  const uint32_t site = sites::Intern("rec.no_memory", SiteKind::kModule);
  recorder::TakeNoMemory();
  std::thread([site] {
    recorder::Push(site);
    recorder::Pop();
  }).join();
  std::exit(recorder::TakeNoMemory() == 2 ? 0 : 1);
}

TEST(RecorderNoMemory, ARingThatCannotBeAllocatedIsCountedNotThrown) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(PushUnderAnAddressSpaceLimit(), ::testing::ExitedWithCode(0), "");
}

TEST_F(RecorderTest, OtherThreadsSeeTheCurrentToken) {
  uint32_t root = sites::Intern("self", SiteKind::kRoot);
  uint32_t work = sites::Intern("rec.worker", SiteKind::kRange);
  recorder::Push(root);
  std::thread worker([&] {
    recorder::Push(work);
    recorder::Pop();
  });
  worker.join();
  recorder::Pop();
  Joiner joiner(Mode(KernelMode::kSummary));
  Batch batch;
  DrainInto(joiner, &batch);
  ASSERT_EQ(batch.calls.size(), 2u);
  for (const CallRow& c : batch.calls) EXPECT_EQ(c.token, 1u);
  EXPECT_NE(batch.calls[0].thread, batch.calls[1].thread);
}

TEST_F(RecorderTest, LaunchesJoinKernelRecordsToTheOpenCall) {
  uint32_t root = sites::Intern("self", SiteKind::kRoot);
  uint32_t lin = sites::Intern("rec.linear", SiteKind::kModule);
  recorder::Push(root);
  recorder::Push(lin);
  recorder::Launch(101);
  recorder::Escape(102, EscapeKind::kStreamSync);
  recorder::Pop();
  recorder::Pop();
  Joiner joiner(Mode(KernelMode::kFull));
  Batch batch;
  DrainInto(joiner, &batch);
  GpuActivity k;
  k.correlation_id = 101;
  k.begin_ns = 1000;
  k.end_ns = 1500;
  k.name = "gemm";
  joiner.OnActivity(k, &batch);
  joiner.EndDrain(&batch);
  auto calls = ById(batch);
  ASSERT_EQ(batch.kernels.size(), 1u);
  EXPECT_EQ(calls[batch.kernels[0].call_id].site_id, lin);
  EXPECT_EQ(batch.kernels[0].token, 1u);
  ASSERT_EQ(batch.escapes.size(), 1u);
  EXPECT_EQ(calls[batch.escapes[0].call_id].site_id, lin);
  EXPECT_EQ(batch.escapes[0].kind, EscapeKind::kStreamSync);
}

TEST_F(RecorderTest, FullRingLosesEventsButCountsThem) {
  recorder::EndSession();
  recorder::BeginSession(64);
  uint32_t site = sites::Intern("rec.flood", SiteKind::kRange);
  // This thread's ring may already exist with a larger capacity (rings are reused across
  // sessions), so flood from a fresh thread.
  std::thread t([&] {
    for (int i = 0; i < 100; ++i) {
      recorder::Push(site);
      recorder::Pop();
    }
  });
  t.join();
  Joiner joiner(Mode(KernelMode::kSummary));
  Batch batch;
  DrainInto(joiner, &batch);
  EXPECT_EQ(batch.losses["buffer_full"] + static_cast<int64_t>(batch.calls.size()) * 2, 200);
  EXPECT_EQ(batch.calls.size(), 32u);
}

}  // namespace
}  // namespace tokentrace

namespace tokentrace {
namespace {

TEST_F(RecorderTest, OutputsStreamAsRowsWithShapeDtypeAndPath) {
  uint32_t site = sites::Intern("rec.proj", SiteKind::kModule);
  recorder::Push(site);
  const uint64_t call = recorder::Current().call_id;
  const int64_t shape3[] = {1, 5, 32};
  recorder::Output(call, "logits", "bfloat16", 3, shape3);
  const int64_t big5[] = {1, 131072, 2048, 0x7fffffff, 65535};
  recorder::Output(call, "", "float32", 5, big5);
  // 6 to 10 dims are kept whole when each is below 65536 (a vision model's patch grid).
  const int64_t patches[] = {8, 3, 14, 16, 14, 16, 0, 65535, 1, 2};
  recorder::Output(call, "", "float16", 10, patches);
  // Otherwise the first five, a null, and a counted loss: one dim too large, or 11 dims.
  const int64_t wide7[] = {1, 2, 3, 4, 5, 65536, 7};
  recorder::Output(call, "", "float32", 7, wide7);
  const int64_t eleven[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  recorder::Output(call, "", "float32", 11, eleven);
  recorder::Pop();
  Joiner joiner(Mode(KernelMode::kOff));
  Batch batch;
  DrainInto(joiner, &batch);
  ASSERT_EQ(batch.outputs.size(), 5u);
  EXPECT_EQ(batch.outputs[0].call_id, call);
  EXPECT_EQ(batch.outputs[0].path, "logits");
  EXPECT_EQ(batch.outputs[0].dtype, "bfloat16");
  EXPECT_EQ(batch.outputs[0].shape, "[1, 5, 32]");
  EXPECT_EQ(batch.outputs[1].shape, "[1, 131072, 2048, 2147483647, 65535]");
  EXPECT_EQ(batch.outputs[2].shape, "[8, 3, 14, 16, 14, 16, 0, 65535, 1, 2]");
  EXPECT_EQ(batch.outputs[2].dtype, "float16");
  EXPECT_EQ(batch.outputs[3].shape, "[1, 2, 3, 4, 5, null]");
  EXPECT_EQ(batch.outputs[4].shape, "[1, 2, 3, 4, 5, null]");
  EXPECT_EQ(batch.losses["output_dims_truncated"], 2);
  // Output strings are not sites: the file lists only the site that was called.
  EXPECT_EQ(joiner.TakeNewSites(), std::vector<uint32_t>{site});
}

// The Python wrappers' path: interned path and dtype, attached to the innermost open call;
// nothing when no call is open.
TEST_F(RecorderTest, OutputOfCurrentGoesToTheInnermostOpenCall) {
  const uint32_t outer = sites::Intern("rec.outer", SiteKind::kModule);
  const uint32_t inner = sites::Intern("rec.inner", SiteKind::kModule);
  const uint32_t path = sites::Intern("[0]", SiteKind::kText);
  const uint32_t dtype = sites::Intern("float16", SiteKind::kText);
  const int64_t shape[] = {2, 1, 64};
  recorder::OutputOfCurrent(path, dtype, 3, shape);  // no call open: dropped
  recorder::Push(outer);
  recorder::Push(inner);
  const uint64_t inner_call = recorder::Current().call_id;
  recorder::OutputOfCurrent(path, dtype, 3, shape);
  recorder::Pop();
  const uint64_t outer_call = recorder::Current().call_id;
  recorder::OutputOfCurrent(path, dtype, 1, shape);
  recorder::Pop();
  Joiner joiner(Mode(KernelMode::kOff));
  Batch batch;
  DrainInto(joiner, &batch);
  ASSERT_EQ(batch.outputs.size(), 2u);
  EXPECT_EQ(batch.outputs[0].call_id, inner_call);
  EXPECT_EQ(batch.outputs[0].path, "[0]");
  EXPECT_EQ(batch.outputs[0].dtype, "float16");
  EXPECT_EQ(batch.outputs[0].shape, "[2, 1, 64]");
  EXPECT_EQ(batch.outputs[1].call_id, outer_call);
  EXPECT_EQ(batch.outputs[1].shape, "[2]");
  EXPECT_NE(inner_call, outer_call);
}

}  // namespace
}  // namespace tokentrace

namespace tokentrace {
namespace {

// Drains what was recorded, then gives the joiner one kernel record per correlation id:
// the token each launch was counted in, in order.
std::vector<uint32_t> TokensOfLaunches(std::initializer_list<uint64_t> correlations) {
  Joiner joiner(Mode(KernelMode::kFull));
  Batch batch;
  DrainInto(joiner, &batch);
  for (uint64_t corr : correlations) {
    GpuActivity a;
    a.correlation_id = corr;
    a.begin_ns = 100;
    a.end_ns = 200;
    a.name = "k";
    joiner.OnActivity(a, &batch);
  }
  joiner.EndDrain(&batch);
  std::vector<uint32_t> tokens;
  for (const KernelRow& k : batch.kernels) tokens.push_back(k.token);
  return tokens;
}

// A graph captured inside a token call replays as tokens; an exec made from any other graph
// does not, even when its exec id equals a token graph's id (CUPTI numbers graphs and execs
// separately).
TEST_F(RecorderTest, OnlyExecsOfTokenGraphsStartTokens) {
  const uint32_t root = sites::Intern("graphs.self", SiteKind::kRoot);
  recorder::Push(root);  // token 1: the capture
  recorder::GraphNodeCreated(/*graph_id=*/7, /*node_id=*/100);
  recorder::Pop();
  recorder::GraphExecCreated(/*graph_id=*/7, /*original_graph_id=*/0, /*graph_exec_id=*/3);
  recorder::GraphNodeCreated(/*graph_id=*/3, /*node_id=*/200);  // a plain graph, no token
  recorder::GraphExecCreated(/*graph_id=*/3, /*original_graph_id=*/0, /*graph_exec_id=*/7);
  recorder::GraphLaunch(1001, 3);  // token 2
  recorder::GraphLaunch(1002, 3);  // token 3
  recorder::GraphLaunch(1003, 7);  // exec 7 is not a token graph's exec: still token 3
  EXPECT_EQ(TokensOfLaunches({1001, 1002, 1003}), (std::vector<uint32_t>{2, 3, 3}));
}

// Instantiation may go through a clone of the captured graph: a clone of a token graph (and
// an exec whose graph CUPTI reports with the token graph as its original) replays as tokens.
TEST_F(RecorderTest, ClonesOfTokenGraphsReplayAsTokens) {
  const uint32_t root = sites::Intern("graphs.self", SiteKind::kRoot);
  recorder::Push(root);  // token 1
  recorder::GraphNodeCreated(/*graph_id=*/21, /*node_id=*/300);
  recorder::Pop();
  recorder::GraphCloned(/*original_graph_id=*/21, /*clone_graph_id=*/22);
  recorder::GraphExecCreated(/*graph_id=*/22, /*original_graph_id=*/0, /*graph_exec_id=*/5);
  recorder::GraphExecCreated(/*graph_id=*/23, /*original_graph_id=*/21, /*graph_exec_id=*/6);
  recorder::GraphCloned(/*original_graph_id=*/99, /*clone_graph_id=*/24);  // not a token graph
  recorder::GraphExecCreated(/*graph_id=*/24, /*original_graph_id=*/99, /*graph_exec_id=*/8);
  recorder::GraphLaunch(2001, 5);  // token 2
  recorder::GraphLaunch(2002, 6);  // token 3
  recorder::GraphLaunch(2003, 8);  // still token 3
  EXPECT_EQ(TokensOfLaunches({2001, 2002, 2003}), (std::vector<uint32_t>{2, 3, 3}));
}

// Op data flow: each tensor an op read or returned, by identity, on the innermost open call;
// entries go two to an event and come out as one row a call, written when it closes, inputs
// and outputs apart, each with its slot; a tensor identity of 64 bits survives, an entry
// without a slot (kNoLink) is skipped; nothing when no call is open. A call still open when
// the drain ends has its entries so far written then, the rest in a row of its own later.
// An op's output 0 may come with its pop (PopWithOutput), first among its outputs. An input
// keeps its shape hash (0 without one).
TEST_F(RecorderTest, LinksGoToTheInnermostOpenCallWithSlotAndIdentity) {
  const uint32_t outer = sites::Intern("rec.link_outer", SiteKind::kModule);
  const uint32_t op = sites::Intern("aten::add", SiteKind::kOp);
  const uint32_t none_slots[] = {0};
  const uint64_t none_tensors[] = {7};
  recorder::LinksOfCurrent(1, none_slots, none_tensors, nullptr);  // no call open: dropped
  recorder::Push(outer);
  recorder::Push(op);
  const uint64_t op_call = recorder::Current().call_id;
  const uint32_t slots[] = {0, recorder::kNoLink, 2, TOKENTRACE_LINK_ARGS,
                            recorder::kLinkOutput | 1};
  const uint64_t tensors[] = {0x7f00deadbeef0010ull, 99, 0x7f00deadbeef0020ull, 12345,
                              0x7f00deadbeef0030ull};
  const uint32_t shapes[] = {0xfffffff0u, 5, 77, 0, 9};
  recorder::LinksOfCurrent(5, slots, tensors, shapes);
  recorder::LinksOfCurrent(0, slots, tensors, shapes);  // nothing
  recorder::PopWithOutput(0x7f00deadbeef0040ull);       // output 0, in the pop's event
  recorder::Push(op);                                   // open across the end of the drain
  const uint64_t open_call = recorder::Current().call_id;
  const uint32_t in_slot[] = {0};
  recorder::LinksOfCurrent(1, in_slot, tensors, nullptr);
  Joiner joiner(Mode(KernelMode::kOff));
  Batch batch;
  DrainInto(joiner, &batch);
  joiner.EndDrain(&batch);
  ASSERT_EQ(batch.links.size(), 2u);
  EXPECT_EQ(batch.links[0].call_id, op_call);
  EXPECT_EQ(batch.links[0].inputs, "0:" + std::to_string(0x7f00deadbeef0010ull) +
                                       ":4294967280 2:" + std::to_string(0x7f00deadbeef0020ull) +
                                       ":77 2147483647:12345:0");
  EXPECT_EQ(batch.links[0].outputs, "0:" + std::to_string(0x7f00deadbeef0040ull) +
                                        " 1:" + std::to_string(0x7f00deadbeef0030ull));
  EXPECT_EQ(batch.links[1].call_id, open_call);
  EXPECT_EQ(batch.links[1].inputs, "0:" + std::to_string(0x7f00deadbeef0010ull) + ":0");
  EXPECT_EQ(batch.links[1].outputs, "");
  const uint32_t out_slot[] = {recorder::kLinkOutput};
  recorder::LinksOfCurrent(1, out_slot, tensors, nullptr);
  recorder::Pop();
  recorder::Pop();
  Batch later;
  DrainInto(joiner, &later);
  joiner.EndDrain(&later);
  ASSERT_EQ(later.links.size(), 1u);
  EXPECT_EQ(later.links[0].call_id, open_call);
  EXPECT_EQ(later.links[0].inputs, "");
  EXPECT_EQ(later.links[0].outputs, "0:" + std::to_string(0x7f00deadbeef0010ull));
}

// A session that asks for larger rings (op records) after one that made this thread's ring
// smaller gets the larger ring: the old one is retired and freed after a drain, its events
// read first; a later session asking for less keeps the larger ring.
TEST_F(RecorderTest, ARingGrowsWhenALaterSessionWantsALargerOne) {
  const uint32_t site = sites::Intern("rec.grow", SiteKind::kModule);
  const auto my_capacity = [&] {
    // The ring of the event just written: the only one with events pending.
    uint32_t capacity = 0;
    buffers::ForEach([&](ThreadBuffer& ring) {
      if (ring.Pending() > 0) capacity = ring.capacity();
    });
    return capacity;
  };
  const auto session = [&](uint32_t capacity) {
    recorder::EndSession();
    Batch ignored;
    Joiner j(Mode(KernelMode::kOff));
    DrainInto(j, &ignored);
    recorder::BeginSession(capacity);
    recorder::Push(site);
    recorder::Pop();
  };
  session(1u << 12);
  EXPECT_EQ(my_capacity(), 1u << 12);
  session(1u << 15);
  EXPECT_EQ(my_capacity(), 1u << 15);
  Joiner joiner(Mode(KernelMode::kOff));
  Batch batch;
  DrainInto(joiner, &batch);
  EXPECT_EQ(batch.calls.size(), 1u);  // the new ring's call; nothing lost
  session(1u << 12);
  EXPECT_EQ(my_capacity(), 1u << 15);  // rings only grow
}

}  // namespace
}  // namespace tokentrace
