// The drain and write path on hand-built ring events and CUPTI-like buffers, into a store in
// a temp directory; a full disk comes from tests/preload/disk_full_vfs.cc, linked in.
#include "session/drainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "core/site_registry.h"
#include "session/added_rows.h"
#include "session/hand_built_buffer.h"
#include "store/test_db.h"

extern "C" void tt_disk_full_from_now(int64_t bytes, int64_t refusals);

namespace tokentrace {
namespace {

using testing::QueryInt;
using testing::QueryText;
using testing::TempPath;

uint64_t g_unbalanced = 0;  // a process-wide loss counter, as src/core keeps them
uint64_t TakeUnbalanced() { return std::exchange(g_unbalanced, 0); }

class DrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { tt_disk_full_from_now(-1, -1); }
  void TearDown() override { tt_disk_full_from_now(-1, -1); }

  DrainParts Parts() {
    DrainParts parts;
    parts.rings = [this](const std::function<void(ThreadBuffer&)>& fn) { fn(ring_); };
    parts.generation = [] { return uint8_t{0}; };
    parts.activities = &activities_;
    parts.joiner = &joiner_;
    parts.open_store = [this](std::string* error) -> std::unique_ptr<Store> {
      ++opens_;
      if (opens_ <= refuse_opens_) {
        *error = "no file yet";
        return nullptr;
      }
      return Store::Open(path_, error);
    };
    parts.meta = [this](const DrainCounts& counts) {
      ++metas_;
      return MetaRowList{{"test_events", std::to_string(counts.events())}};
    };
    parts.loss_sources = {{TOKENTRACE_LOSS_UNBALANCED_POP, &TakeUnbalanced}};
    return parts;
  }

  // One closed call of site `name` (a token), with a launch whose correlation is `corr`.
  void Call(uint64_t id, const char* name, uint64_t corr) {
    const uint32_t site = sites::Intern(name, SiteKind::kRoot);
    ring_.Append(MakeEvent(EventKind::kPush, 100 * id, id, 0, 0, site, 0, 1, 0));
    ring_.Append(MakeEvent(EventKind::kLaunch, 100 * id + 1, id, corr, 0, 0, 0, 1, 0));
    ring_.Append(MakeEvent(EventKind::kPop, 100 * id + 50, id, 0, 0, 0, 0, 0, 0));
  }
  // A CUPTI buffer with one kernel record, handed over.
  void Kernel(uint64_t corr, const char* name) {
    activities_.OnBuffer((new testing_buffers::HandBuiltBuffer())->Kernel(corr, name));
  }
  int64_t Count(const std::string& table) {
    return QueryInt(path_, "SELECT count(*) FROM " + table);
  }
  int64_t Loss(const std::string& kind) {
    return QueryInt(path_, "SELECT count FROM losses WHERE kind = '" + kind + "'");
  }

  ThreadBuffer ring_{4096, 3};
  ActivityHandoff activities_;
  Joiner joiner_{KernelMode{KernelMode::kFull}};
  const std::string path_ = TempPath("drain.sqlite");
  int opens_ = 0;
  int refuse_opens_ = 0;
  int metas_ = 0;
};

TEST_F(DrainerTest, EventsAndRecordsBecomeRows) {
  Drainer drainer(Parts());
  Call(1, "drainer.rows", 10);
  ring_.Append(MakeEvent(EventKind::kPush, 1, 77, 0, 0, 1, 0, 1, 5));  // another session's
  Kernel(10, "gemm");
  activities_.OnDropped(2);
  g_unbalanced = 4;
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(Count("calls"), 1);
  EXPECT_EQ(QueryInt(path_, "SELECT thread FROM calls WHERE id = 1"), 3);
  EXPECT_EQ(QueryInt(path_, "SELECT call_id FROM kernels"), 1);
  EXPECT_EQ(QueryText(path_, "SELECT text FROM strings s JOIN kernels k ON k.name_id = s.id"),
            "gemm");
  EXPECT_EQ(QueryText(path_, "SELECT name FROM sites s JOIN calls c ON c.site_id = s.id"),
            "drainer.rows");
  EXPECT_EQ(Loss("cupti_dropped"), 2);
  EXPECT_EQ(Loss("unbalanced_pop"), 4);
  EXPECT_EQ(drainer.counts().drained, 4u);
  EXPECT_TRUE(drainer.all_written());
}

TEST_F(DrainerTest, NothingToWriteCreatesNoFile) {
  Drainer drainer(Parts());
  std::string error;
  EXPECT_TRUE(drainer.Drain(false, &error));
  EXPECT_EQ(opens_, 0);
  EXPECT_NE(access(path_.c_str(), F_OK), 0);
}

TEST_F(DrainerTest, MetaRowsGoFirstAndOnceThenAgainAtTheEnd) {
  refuse_opens_ = 1;  // the first write cannot create the file
  Drainer drainer(Parts());
  Call(1, "drainer.meta", 10);
  std::string error;
  EXPECT_FALSE(drainer.Drain(false, &error));
  EXPECT_EQ(error, "no file yet");
  EXPECT_EQ(metas_, 0);
  Call(2, "drainer.meta", 11);
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(metas_, 1);
  EXPECT_EQ(QueryText(path_, "SELECT value FROM meta WHERE key = 'test_events'"), "6");
  EXPECT_EQ(Loss("write_failed_calls"), 1);  // call 1, counted with the first rows written
  Call(3, "drainer.meta", 12);
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(metas_, 1);
  EXPECT_EQ(Count("calls"), 2);
  ASSERT_TRUE(drainer.WriteFinal({{"exit_signal", "SIGTERM"}}, &error)) << error;
  EXPECT_EQ(metas_, 2);
  EXPECT_EQ(QueryText(path_, "SELECT value FROM meta WHERE key = 'test_events'"), "9");
  EXPECT_EQ(QueryText(path_, "SELECT value FROM meta WHERE key = 'exit_signal'"), "SIGTERM");
}

TEST_F(DrainerTest, AFailedWriteIsCountedAndWhatItNeedsIsWrittenNext) {
  Drainer drainer(Parts());
  Call(1, "drainer.first", 10);
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  tt_disk_full_from_now(0, 1);  // one refused write, then space returns
  Call(2, "drainer.lost", 11);
  Kernel(11, "lost_kernel");
  EXPECT_FALSE(drainer.Drain(false, &error));
  EXPECT_NE(error.find("write_failed_*"), std::string::npos) << error;
  EXPECT_FALSE(drainer.all_written());
  Call(3, "drainer.first", 12);
  error.clear();
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_TRUE(drainer.all_written());
  EXPECT_EQ(Count("calls"), 2);  // 1 and 3: call 2's row is gone, and counted
  EXPECT_EQ(Loss("write_failed_calls"), 1);
  EXPECT_EQ(Loss("write_failed_kernels"), 1);
  // The site the lost call named is kept for the file all the same.
  EXPECT_EQ(QueryInt(path_, "SELECT count(*) FROM sites WHERE name = 'drainer.lost'"), 1);
}

TEST_F(DrainerTest, TheFinalWriteUsesTheReserveForTheCounts) {
  tt_disk_full_from_now(int64_t{1} << 40, -1);  // the store's reserve counts against the disk
  Drainer drainer(Parts());
  Call(1, "drainer.final", 10);
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  tt_disk_full_from_now(0, -1);  // full for good
  Call(2, "drainer.final", 11);
  EXPECT_FALSE(drainer.Drain(false, &error));
  error.clear();
  EXPECT_FALSE(drainer.WriteFinal({}, &error));
  EXPECT_TRUE(drainer.all_written()) << error;
  drainer.store()->Close();
  EXPECT_EQ(Loss("write_failed_calls"), 1);
  EXPECT_EQ(Count("calls"), 1);
}

TEST_F(DrainerTest, RowsThatNeverFitAreReportedAtTheEnd) {
  Drainer drainer(Parts());
  Call(1, "drainer.never", 10);
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  tt_disk_full_from_now(0, -1);  // full for good; the reserve is no help (not counted)
  Call(2, "drainer.never", 11);
  Call(3, "drainer.never", 12);
  EXPECT_FALSE(drainer.Drain(false, &error));
  error.clear();
  EXPECT_FALSE(drainer.WriteFinal({}, &error));
  EXPECT_FALSE(drainer.all_written());
  EXPECT_NE(error.find("' misses 2 calls that could not be written"), std::string::npos) << error;
}

TEST_F(DrainerTest, ASignalStopDrainsInStepsUntilItsDeadline) {
  Drainer drainer(Parts());
  for (uint64_t id = 1; id <= 5; ++id) Call(id, "drainer.steps", 100 + id);  // 15 events
  int64_t now = 0;
  DrainBudget budget(
      2, [&] { return now++; }, 3);  // two steps of 3 events, then the deadline
  drainer.DrainSteps(&budget);
  EXPECT_EQ(drainer.counts().drained, 6u);
  EXPECT_EQ(drainer.counts().left, 9u);
  EXPECT_EQ(ring_.Pending(), 0u);
  EXPECT_EQ(Count("calls"), 2);  // each step was written
  EXPECT_EQ(Loss("signal_deadline"), 9);
}

// A drain writes each chunk (here 3 events of the ring) before it takes the next: however
// large the rings, a kill loses at most one chunk and no batch grows with them.
TEST_F(DrainerTest, ADrainWritesEachChunkBeforeTakingTheNext) {
  DrainParts parts = Parts();
  parts.chunk_events = 3;
  std::vector<int64_t> calls_in_file;  // what the file held each time the rings were read
  auto rings = parts.rings;
  parts.rings = [&](const std::function<void(ThreadBuffer&)>& fn) {
    calls_in_file.push_back(access(path_.c_str(), F_OK) == 0 ? Count("calls") : -1);
    rings(fn);
  };
  Drainer drainer(std::move(parts));
  for (uint64_t id = 1; id <= 5; ++id) Call(id, "drainer.chunks", 200 + id);  // 15 events
  Kernel(203, "gemm");
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(calls_in_file, (std::vector<int64_t>{-1, 1, 2, 3, 4}));
  EXPECT_EQ(Count("calls"), 5);
  EXPECT_EQ(QueryInt(path_, "SELECT call_id FROM kernels"), 3);  // joined after every chunk
  EXPECT_EQ(ring_.Pending(), 0u);
}

// A termination signal's stop is asked for while a drain runs: the drain ends after the chunk
// it wrote, so the stop does not wait for every ring to empty; the rest stays for later.
TEST_F(DrainerTest, AStopAskedForBySignalEndsADrainAfterItsChunk) {
  DrainParts parts = Parts();
  parts.chunk_events = 3;
  parts.interrupted = [] { return true; };
  Drainer drainer(std::move(parts));
  for (uint64_t id = 1; id <= 4; ++id) Call(id, "drainer.interrupted", 300 + id);
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(drainer.counts().drained, 3u);
  EXPECT_EQ(ring_.Pending(), 9u);
  ASSERT_TRUE(drainer.WriteFinal({}, &error)) << error;  // the final drain is never cut short
  EXPECT_EQ(Count("calls"), 4);
}

TEST_F(DrainerTest, TheTestOnlySlowDrainTakesOneStepPerDrain) {
  DrainParts parts = Parts();
  parts.slow_drain_ms = 1;
  parts.step_events = 3;
  Drainer drainer(std::move(parts));
  Call(1, "drainer.slow", 10);
  Call(2, "drainer.slow", 11);
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(drainer.counts().drained, 3u);
  ASSERT_TRUE(drainer.WriteFinal({}, &error)) << error;  // the final drain takes all
  EXPECT_EQ(drainer.counts().drained, 6u);
  EXPECT_EQ(Count("calls"), 2);
}

// One call_inputs row of call `id`, handed over as the Python layer does.
std::unique_ptr<AddedItem> InputRow(uint64_t id) {
  auto item = std::make_unique<AddedItem>();
  item->rows.table = TOKENTRACE_ROWS_CALL_INPUTS;
  item->rows.columns = {"call_id", "path"};
  item->rows.values.resize(2);
  item->rows.values[0].type = RowValue::Type::kInt;
  item->rows.values[0].i = static_cast<int64_t>(id);
  item->rows.values[1].type = RowValue::Type::kText;
  item->rows.values[1].s = "x";
  return item;
}

// Rows handed over go into the chunk read after them, so a call's rows (handed while it was
// open) are committed with the call or before it, never after: a kill between two chunks
// leaves no call without its rows.
TEST_F(DrainerTest, HandedRowsRideWithTheChunkThatClosesTheirCalls) {
  AddedQueue queue;
  DrainParts parts = Parts();
  parts.chunk_events = 3;
  parts.added = [&queue](Batch* batch) { queue.TakeInto(batch); };
  std::vector<std::pair<int64_t, int64_t>> in_file;  // (calls, rows) each time rings are read
  auto rings = parts.rings;
  parts.rings = [&](const std::function<void(ThreadBuffer&)>& fn) {
    if (access(path_.c_str(), F_OK) == 0)
      in_file.emplace_back(Count("calls"), Count("call_inputs"));
    rings(fn);
  };
  Drainer drainer(std::move(parts));
  for (uint64_t id = 1; id <= 4; ++id) {
    queue.Push(InputRow(id));
    Call(id, "drainer.rows", 400 + id);
  }
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  for (const auto& [calls, rows] : in_file) EXPECT_GE(rows, calls);
  EXPECT_EQ(Count("calls"), 4);
  EXPECT_EQ(Count("call_inputs"), 4);
  EXPECT_TRUE(queue.empty());
}

// A full disk: the handed rows of the failed write are counted by table, as calls are.
TEST_F(DrainerTest, HandedRowsOfAFailedWriteAreCountedByTable) {
  AddedQueue queue;
  DrainParts parts = Parts();
  parts.added = [&queue](Batch* batch) { queue.TakeInto(batch); };
  Drainer drainer(std::move(parts));
  Call(1, "drainer.rows_full", 10);
  std::string error;
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  tt_disk_full_from_now(0, 1);
  queue.Push(InputRow(2));
  queue.Push(InputRow(2));
  Call(2, "drainer.rows_full", 11);
  EXPECT_FALSE(drainer.Drain(false, &error));
  Call(3, "drainer.rows_full", 12);
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(Count("call_inputs"), 0);
  EXPECT_EQ(Loss("write_failed_inputs"), 2);
}

// No memory while a chunk is built or written (here: the handed rows cannot be taken): the
// chunk is dropped and its events counted as no_memory; nothing is thrown out of the drain,
// and the next drain writes what comes after, with the count.
TEST_F(DrainerTest, AChunkWithNoMemoryIsDroppedAndCountedAndTheNextDrainGoesOn) {
  DrainParts parts = Parts();
  bool starved = true;
  parts.added = [&starved](Batch*) {
    if (starved) throw std::bad_alloc();
  };
  Drainer drainer(std::move(parts));
  Call(1, "drainer.starved", 10);
  std::string error;
  EXPECT_FALSE(drainer.Drain(false, &error));
  EXPECT_EQ(drainer.no_memory(), 3u);
  starved = false;
  Call(2, "drainer.starved", 11);
  ASSERT_TRUE(drainer.Drain(false, &error)) << error;
  EXPECT_EQ(drainer.no_memory(), 0u);
  EXPECT_EQ(Count("calls"), 1);
  EXPECT_EQ(Loss("no_memory"), 3);
}

}  // namespace
}  // namespace tokentrace
