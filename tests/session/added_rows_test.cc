// The queue of what the Python layer hands to the writer (session/added_rows.h).
#include "session/added_rows.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tokentrace {
namespace {

std::unique_ptr<AddedItem> Meta(const std::string& key, const std::string& value) {
  auto item = std::make_unique<AddedItem>();
  item->what = AddedItem::What::kMeta;
  item->key = key;
  item->value = value;
  return item;
}

std::unique_ptr<AddedItem> Rows(RowTable table, int64_t first, int n) {
  auto item = std::make_unique<AddedItem>();
  item->rows.table = table;
  item->rows.columns = {"token"};
  for (int i = 0; i < n; ++i) {
    RowValue v;
    v.type = RowValue::Type::kInt;
    v.i = first + i;
    item->rows.values.push_back(v);
  }
  return item;
}

// Taken in the order added: a meta key handed twice keeps the later value in the file.
TEST(AddedQueueTest, ItemsAreTakenInTheOrderAddedIntoTheBatch) {
  AddedQueue queue;
  queue.Push(Meta("role", "worker"));
  queue.Push(Rows(TOKENTRACE_ROWS_STEP_REQUESTS, 1, 2));
  queue.Push(Meta("role", "worker,engine_core"));
  auto loss = std::make_unique<AddedItem>();
  loss->what = AddedItem::What::kLoss;
  loss->loss = TOKENTRACE_LOSS_SAVE_FAILED;
  loss->count = 4;
  queue.Push(std::move(loss));
  Batch batch;
  queue.TakeInto(&batch);
  EXPECT_TRUE(queue.empty());
  ASSERT_EQ(batch.meta.size(), 2u);
  EXPECT_EQ(batch.meta[0].second, "worker");
  EXPECT_EQ(batch.meta[1].second, "worker,engine_core");
  ASSERT_EQ(batch.added.size(), 1u);
  EXPECT_EQ(batch.added[0].rows(), 2u);
  EXPECT_EQ(batch.losses["save_failed"], 4);
}

// Threads hand rows at once, while the drain takes them: every row arrives exactly once, and
// each thread's rows in the order it handed them.
TEST(AddedQueueTest, ConcurrentHandersLoseNothingAndKeepTheirOrder) {
  AddedQueue queue;
  constexpr int kThreads = 4, kItems = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&queue, t] {
      for (int i = 0; i < kItems; ++i)
        queue.Push(Rows(TOKENTRACE_ROWS_CALL_INPUTS, t * 100000 + i, 1));
    });
  }
  std::vector<int64_t> seen;
  Batch batch;
  for (int round = 0; round < 50; ++round) queue.TakeInto(&batch);
  for (auto& t : threads) t.join();
  queue.TakeInto(&batch);
  std::vector<int64_t> last(kThreads, -1);
  for (const AddedRows& rows : batch.added) {
    const int64_t v = rows.values[0].i;
    const int t = static_cast<int>(v / 100000);
    EXPECT_GT(v % 100000, last[t]);
    last[t] = v % 100000;
    seen.push_back(v);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kItems));
}

TEST(AddedQueueTest, ClearDropsWhatIsPending) {
  AddedQueue queue;
  queue.Push(Meta("k", "v"));
  queue.Clear();
  Batch batch;
  queue.TakeInto(&batch);
  EXPECT_TRUE(batch.meta.empty());
}

}  // namespace
}  // namespace tokentrace
