// The joiner on hand-built events and GPU records (what the background thread sees).
#include "core/joiner.h"

#include <gtest/gtest.h>

#include <map>

namespace tokentrace {
namespace {

KernelMode Mode(KernelMode::Kind kind, uint32_t every = 0) {
  KernelMode m;
  m.kind = kind;
  m.sample_every = every;
  return m;
}

Event Push(uint64_t id, uint64_t parent, uint32_t site, uint32_t k, uint32_t token, uint64_t t) {
  return MakeEvent(EventKind::kPush, t, id, parent, 0, site, k, token, 0);
}
Event Pop(uint64_t id, uint64_t t) { return MakeEvent(EventKind::kPop, t, id, 0, 0, 0, 0, 0, 0); }
Event Launch(uint64_t corr, uint64_t call, uint32_t token) {
  return MakeEvent(EventKind::kLaunch, 0, call, corr, 0, 0, 0, token, 0);
}
GpuActivity Kernel(uint64_t corr, int64_t begin, int64_t end, const char* name = "k") {
  GpuActivity a;
  a.correlation_id = corr;
  a.begin_ns = begin;
  a.end_ns = end;
  a.name = name;
  a.stream = 7;
  return a;
}

TEST(JoinerTest, ClosesCallsWithTimesAndParents) {
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  j.OnEvent(0, Push(1, 0, 1, 1, 1, 100), &b);
  j.OnEvent(0, Push(2, 1, 2, 1, 1, 110), &b);
  j.OnEvent(0, Pop(2, 150), &b);
  j.OnEvent(0, Pop(1, 200), &b);
  ASSERT_EQ(b.calls.size(), 2u);
  EXPECT_EQ(b.calls[0].id, 2u);
  EXPECT_EQ(b.calls[0].parent_id, 1u);
  EXPECT_EQ(b.calls[0].cpu_begin_ns, 110);
  EXPECT_EQ(b.calls[0].cpu_end_ns, 150);
  EXPECT_EQ(b.calls[1].cpu_end_ns, 200);
}

TEST(JoinerTest, NumbersCallsPerSiteAndReportsFirstSeenSites) {
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  j.OnEvent(0, Push(1, 0, 7, 0, 1, 100), &b);
  j.OnEvent(0, Pop(1, 110), &b);
  j.OnEvent(0, Push(2, 0, 9, 0, 1, 120), &b);
  j.OnEvent(0, Pop(2, 130), &b);
  j.OnEvent(0, Push(3, 0, 7, 0, 2, 140), &b);
  j.OnEvent(0, Pop(3, 150), &b);
  ASSERT_EQ(b.calls.size(), 3u);
  EXPECT_EQ(b.calls[0].k, 1u);
  EXPECT_EQ(b.calls[1].k, 1u);
  EXPECT_EQ(b.calls[2].k, 2u);
  EXPECT_EQ(j.TakeNewSites(), (std::vector<uint32_t>{7, 9}));
  EXPECT_TRUE(j.TakeNewSites().empty());
}

TEST(JoinerTest, OpenCallsAtFinishAreStoredOpenAndCounted) {
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  j.OnEvent(0, Push(1, 0, 1, 1, 1, 100), &b);
  j.OnEvent(3, Push(2, 0, 2, 1, 1, 100), &b);
  j.Finish(&b);
  ASSERT_EQ(b.calls.size(), 2u);
  for (const CallRow& c : b.calls) EXPECT_EQ(c.cpu_end_ns, -1);
  EXPECT_EQ(b.losses["unclosed_range"], 2);
}

TEST(JoinerTest, PopOfAnUnknownCallIsIgnored) {
  // Its push was dropped on a full ring (and counted there).
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  j.OnEvent(0, Push(1, 0, 1, 1, 1, 100), &b);
  j.OnEvent(0, Pop(5, 120), &b);
  EXPECT_TRUE(b.calls.empty());
  j.OnEvent(0, Pop(1, 130), &b);
  ASSERT_EQ(b.calls.size(), 1u);
  EXPECT_EQ(b.calls[0].id, 1u);
}

TEST(JoinerTest, SummaryAddsKernelsPerCallWithoutRows) {
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  j.OnEvent(0, Launch(10, 4, 2), &b);
  j.OnEvent(0, Launch(11, 4, 2), &b);
  j.OnActivity(Kernel(10, 1000, 1100), &b);
  j.OnActivity(Kernel(11, 1200, 1250), &b);
  j.EndDrain(&b);
  EXPECT_TRUE(b.kernels.empty());
  ASSERT_EQ(b.call_gpu.size(), 1u);
  EXPECT_EQ(b.call_gpu[0].call_id, 4u);
  EXPECT_EQ(b.call_gpu[0].token, 2u);
  EXPECT_EQ(b.call_gpu[0].kernels, 2u);
  EXPECT_EQ(b.call_gpu[0].busy_ns, 150);
  EXPECT_EQ(b.call_gpu[0].first_begin_ns, 1000);
  EXPECT_EQ(b.call_gpu[0].last_end_ns, 1250);
  EXPECT_EQ(j.correlation_entries(), 0u);  // matched launches are forgotten
}

TEST(JoinerTest, FullModeWritesRowsWithInternedNames) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  j.OnEvent(0, Launch(10, 4, 1), &b);
  j.OnEvent(0, Launch(11, 4, 1), &b);
  j.OnEvent(0, Launch(12, 4, 1), &b);
  j.OnActivity(Kernel(10, 0, 5, "gemm"), &b);
  j.OnActivity(Kernel(11, 5, 9, "softmax"), &b);
  j.OnActivity(Kernel(12, 9, 12, "gemm"), &b);
  j.EndDrain(&b);
  ASSERT_EQ(b.kernels.size(), 3u);
  ASSERT_EQ(b.strings.size(), 2u);
  EXPECT_EQ(b.kernels[0].name_id, b.kernels[2].name_id);
  EXPECT_NE(b.kernels[0].name_id, b.kernels[1].name_id);
  EXPECT_EQ(b.kernels[1].stream, 7u);
  EXPECT_EQ(b.kernels[1].gpu_end_ns - b.kernels[1].gpu_begin_ns, 4);
}

TEST(JoinerTest, SampleModeKeepsRowsOnSampledTokensOnly) {
  Joiner j(Mode(KernelMode::kSample, 2));
  Batch b;
  for (uint32_t token = 1; token <= 4; ++token) {
    j.OnEvent(0, Launch(token, 100 + token, token), &b);
    j.OnActivity(Kernel(token, 0, 1), &b);
  }
  j.EndDrain(&b);
  ASSERT_EQ(b.kernels.size(), 2u);
  EXPECT_EQ(b.kernels[0].token, 1u);
  EXPECT_EQ(b.kernels[1].token, 3u);
  EXPECT_EQ(b.call_gpu.size(), 4u);  // summaries for every token
}

TEST(JoinerTest, OffModeIgnoresGpuRecords) {
  Joiner j(Mode(KernelMode::kOff));
  Batch b;
  j.OnEvent(0, Launch(10, 4, 1), &b);
  j.OnActivity(Kernel(10, 0, 1), &b);
  j.EndDrain(&b);
  EXPECT_TRUE(b.kernels.empty());
  EXPECT_TRUE(b.call_gpu.empty());
}

TEST(JoinerTest, RecordBeforeItsLaunchIsJoinedWhenTheLaunchArrives) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  j.OnActivity(Kernel(10, 0, 1), &b);
  j.EndDrain(&b);
  EXPECT_TRUE(b.kernels.empty());
  EXPECT_EQ(j.pending_records(), 1u);
  j.OnEvent(0, Launch(10, 4, 3), &b);
  j.EndDrain(&b);
  ASSERT_EQ(b.kernels.size(), 1u);
  EXPECT_EQ(b.kernels[0].call_id, 4u);
  EXPECT_EQ(b.kernels[0].token, 3u);
  EXPECT_EQ(b.losses.count("unknown_correlation"), 0u);
}

TEST(JoinerTest, RecordLongAfterItsLaunchStillJoins) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  j.OnEvent(0, Launch(10, 4, 3), &b);
  for (int i = 0; i < 40; ++i) j.EndDrain(&b);
  j.OnActivity(Kernel(10, 0, 1), &b);
  j.EndDrain(&b);
  ASSERT_EQ(b.kernels.size(), 1u);
  EXPECT_EQ(b.kernels[0].call_id, 4u);
}

TEST(JoinerTest, UntimedRecordsAreCountedNotSummed) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  j.OnEvent(0, Launch(10, 4, 1), &b);
  j.OnEvent(0, Launch(11, 4, 1), &b);
  GpuActivity untimed = Kernel(10, 0, 1);
  untimed.timed = false;
  untimed.begin_ns = untimed.end_ns = 0;
  j.OnActivity(untimed, &b);
  GpuActivity timed = Kernel(11, 500, 900);
  j.OnActivity(timed, &b);
  j.EndDrain(&b);
  EXPECT_EQ(b.losses["gpu_time_missing"], 1);
  ASSERT_EQ(b.kernels.size(), 1u);
  ASSERT_EQ(b.call_gpu.size(), 1u);
  EXPECT_EQ(b.call_gpu[0].kernels, 1);
  EXPECT_EQ(b.call_gpu[0].first_begin_ns, timed.begin_ns);  // not pulled down to 0
}

TEST(JoinerTest, UnknownCorrelationIsStoredUnattributedAndCounted) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  j.OnActivity(Kernel(77, 0, 1), &b);
  for (uint32_t i = 0; i <= Joiner::kPendingDrains; ++i) j.EndDrain(&b);
  EXPECT_EQ(b.losses["unknown_correlation"], 1);
  ASSERT_EQ(b.kernels.size(), 1u);
  EXPECT_EQ(b.kernels[0].call_id, 0u);
  EXPECT_EQ(j.pending_records(), 0u);
}

// A slow job: CUPTI hands over a buffer only when it is full, which may take minutes (many
// drains). Its launch entries must still be there when the records come.
TEST(JoinerTest, LaunchEntriesOutliveDrainsWithoutDeliveries) {
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  for (uint64_t c = 1; c <= 1000; ++c) j.OnEvent(0, Launch(c, 1, 1), &b);
  for (uint32_t i = 0; i < 10 * Joiner::kCorrelationDrains; ++i) j.EndDrain(&b);
  EXPECT_EQ(j.correlation_entries(), 1000u);
  for (uint64_t c = 1; c <= 1000; ++c) j.OnActivity(Kernel(c, 0, 1), &b);
  j.EndDrain(&b);
  EXPECT_EQ(b.losses.count("unknown_correlation"), 0u);
  EXPECT_EQ(j.correlation_entries(), 0u);
}

// Entries whose records never come (failed launches) go once enough later records came.
TEST(JoinerTest, StaleLaunchEntriesAreSweptByDeliveries) {
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  for (uint64_t c = 1; c <= 1000; ++c) j.OnEvent(0, Launch(c, 1, 1), &b);
  EXPECT_EQ(j.correlation_entries(), 1000u);
  GpuActivity other = Kernel(0, 0, 1);  // records of launches seen elsewhere: unattributed
  other.timed = false;                  // (cheap: counted, not stored)
  for (uint64_t i = 0; i < Joiner::kCorrelationRecords; ++i) j.OnActivity(other, &b);
  for (uint32_t i = 0; i < 17; ++i) j.EndDrain(&b);
  EXPECT_EQ(j.correlation_entries(), 0u);
}

TEST(JoinerTest, MemcpyAndMemsetAreNamed) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  j.OnEvent(0, Launch(1, 4, 1), &b);
  j.OnEvent(0, Launch(2, 4, 1), &b);
  GpuActivity copy = Kernel(1, 0, 10, nullptr);
  copy.kind = GpuOpKind::kMemcpy;
  copy.copy_kind = 2;
  GpuActivity set = Kernel(2, 10, 12, nullptr);
  set.kind = GpuOpKind::kMemset;
  j.OnActivity(copy, &b);
  j.OnActivity(set, &b);
  ASSERT_EQ(b.strings.size(), 2u);
  EXPECT_EQ(b.strings[0].text, "[memcpy DtoH]");
  EXPECT_EQ(b.strings[1].text, "[memset]");
  EXPECT_EQ(b.kernels[0].kind, GpuOpKind::kMemcpy);
}

// Capture inside calls, instantiate (clone), replay twice: each replayed kernel belongs to
// the call that was open when its node was captured, and to its replay's token.
TEST(JoinerTest, GraphReplaysAttributeThroughCapturedNodes) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  auto node = [](uint64_t call, uint64_t node_id, uint32_t graph) {
    return MakeEvent(EventKind::kGraphNodeCreated, 0, call, node_id, 0, graph, 0, 0, 0);
  };
  auto clone = [](uint64_t orig, uint64_t node_id, uint32_t exec) {
    return MakeEvent(EventKind::kGraphNodeCloned, 0, 0, orig, node_id, exec, 0, 0, 0);
  };
  auto graph_launch = [](uint64_t corr, uint32_t token, uint32_t exec) {
    return MakeEvent(EventKind::kGraphLaunch, 0, 0, corr, 0, exec, 0, token, 0);
  };
  j.OnEvent(0, node(/*call=*/20, /*node=*/1, 5), &b);  // attention
  j.OnEvent(0, node(/*call=*/21, /*node=*/2, 5), &b);  // mlp
  j.OnEvent(0, clone(1, 101, 9), &b);
  j.OnEvent(0, clone(2, 102, 9), &b);
  for (uint32_t replay = 0; replay < 2; ++replay) {
    uint64_t corr = 500 + replay;
    j.OnEvent(0, graph_launch(corr, 7 + replay, 9), &b);
    for (uint64_t n : {101, 102}) {
      GpuActivity a = Kernel(corr, 0, 1);
      a.graph_id = 9;
      a.graph_node_id = n;
      j.OnActivity(a, &b);
    }
  }
  GpuActivity stray = Kernel(500, 0, 1);
  stray.graph_node_id = 999;  // a node we never saw created
  j.OnActivity(stray, &b);
  j.EndDrain(&b);
  ASSERT_EQ(b.kernels.size(), 5u);
  EXPECT_EQ(b.kernels[0].call_id, 20u);
  EXPECT_EQ(b.kernels[1].call_id, 21u);
  EXPECT_EQ(b.kernels[0].token, 7u);
  EXPECT_EQ(b.kernels[2].call_id, 20u);
  EXPECT_EQ(b.kernels[3].token, 8u);
  EXPECT_EQ(b.kernels[3].graph_node_id, 102u);
  EXPECT_EQ(b.losses["unknown_graph_node"], 1);
}

// The summary deltas say each call's site and own token (carried from the launch, so the
// writer never reads the call back), and a captured call replayed at two tokens in one drain
// gets one delta per token: each token's kernels are that token's.
TEST(JoinerTest, DeltasCarryTheCallsSiteAndEachReplaysToken) {
  Joiner j(Mode(KernelMode::kSummary));
  Batch b;
  j.OnEvent(0, Push(20, 0, /*site=*/4, 1, /*token=*/1, 10), &b);  // captured at token 1
  j.OnEvent(0, MakeEvent(EventKind::kGraphNodeCreated, 0, 20, 1, 0, 5, 0, 1, 0), &b);
  j.OnEvent(0, Pop(20, 20), &b);
  j.OnEvent(0, MakeEvent(EventKind::kGraphNodeCloned, 0, 0, 1, 101, 9, 0, 0, 0), &b);
  j.OnEvent(0, Push(30, 0, /*site=*/6, 1, /*token=*/7, 30), &b);  // open across the drain
  j.OnEvent(0, Launch(600, 30, 7), &b);
  for (uint32_t token : {7u, 8u}) {
    j.OnEvent(0, MakeEvent(EventKind::kGraphLaunch, 0, 0, 500 + token, 0, 9, 0, token, 0), &b);
    GpuActivity a = Kernel(500 + token, 100 * token, 100 * token + 10 * token);
    a.graph_id = 9;
    a.graph_node_id = 101;
    j.OnActivity(a, &b);
  }
  j.OnActivity(Kernel(600, 0, 5), &b);
  j.EndDrain(&b);
  std::map<std::pair<uint64_t, uint32_t>, CallGpuDelta> got;
  for (const CallGpuDelta& d : b.call_gpu) got[{d.call_id, d.token}] = d;
  ASSERT_EQ(got.size(), 3u);
  for (uint32_t token : {7u, 8u}) {
    const CallGpuDelta& d = got.at({20, token});
    EXPECT_EQ(d.kernels, 1u);
    EXPECT_EQ(d.busy_ns, 10 * token);
    EXPECT_EQ(d.site_id, 4u);
    EXPECT_EQ(d.call_token, 1u);
    EXPECT_TRUE(d.call_closed);
  }
  const CallGpuDelta& open = got.at({30, 7});
  EXPECT_EQ(open.site_id, 6u);
  EXPECT_EQ(open.call_token, 7u);
  EXPECT_FALSE(open.call_closed);
  // A launch whose call's push was dropped: its site is not known.
  Batch next;
  j.OnEvent(1, Launch(700, 999, 7), &next);
  j.OnActivity(Kernel(700, 0, 5), &next);
  j.EndDrain(&next);
  ASSERT_EQ(next.call_gpu.size(), 1u);
  EXPECT_EQ(next.call_gpu[0].site_id, kNoSite);
  EXPECT_TRUE(next.call_gpu[0].call_closed);
}

// Instantiation may also report the exec's node as created, after its clone event, while
// no call (or an unrelated one) is open: the clone's owner stays.
TEST(JoinerTest, CloneOwnerIsNotOverwrittenByACreationEvent) {
  Joiner j(Mode(KernelMode::kFull));
  Batch b;
  j.OnEvent(0, MakeEvent(EventKind::kGraphNodeCreated, 0, 20, 1, 0, 5, 0, 0, 0), &b);
  j.OnEvent(0, MakeEvent(EventKind::kGraphNodeCloned, 0, 0, 1, 101, 9, 0, 0, 0), &b);
  j.OnEvent(0, MakeEvent(EventKind::kGraphNodeCreated, 0, 0, 101, 0, 9, 0, 0, 0), &b);
  j.OnEvent(0, MakeEvent(EventKind::kGraphLaunch, 0, 0, 500, 0, 9, 0, 3, 0), &b);
  GpuActivity a = Kernel(500, 0, 1);
  a.graph_node_id = 101;
  j.OnActivity(a, &b);
  ASSERT_EQ(b.kernels.size(), 1u);
  EXPECT_EQ(b.kernels[0].call_id, 20u);
  EXPECT_EQ(b.kernels[0].token, 3u);
}

}  // namespace
}  // namespace tokentrace
