// The summaries the writer keeps (store/summaries.h) against what a scan of the same file's
// calls computes, on hand-built batches: nested calls over several threads and batches, token
// calls written open and closed later, GPU work before and after its call reaches the file,
// CUDA-graph replay tokens, a killed run's unfinished token, writes refused by a full disk
// (tests/preload/disk_full_vfs.cc, linked in), and a file of the version before summaries.
#include "store/summaries.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/comm_kernels.h"
#include "core/joiner.h"
#include "store/reader.h"
#include "store/schema.h"
#include "store/store.h"
#include "store/token_digest.h"
#include "test_db.h"

extern "C" void tt_disk_full_from_now(int64_t bytes, int64_t refusals);

namespace tokentrace {
namespace {

using testing::QueryInt;
using testing::QueryText;
using testing::Rows;
using testing::TempPath;

void Exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  char* msg = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK) << msg;
  sqlite3_free(msg);
  sqlite3_close(db);
}

// The scans the summaries stand for, written from the definitions in schema.sql.
constexpr char kPhase[] = "CASE WHEN token = 0 THEN 0 WHEN token = 1 THEN 1 ELSE 2 END";
std::string Block() {
  return "CASE WHEN token <= 1 THEN token ELSE 2 + (token - 2) / " + std::to_string(kTokenBlock) +
         " END";
}

std::string SiteScan() {
  return std::string("WITH c AS (SELECT *, ") + kPhase +
         " AS phase, cpu_end_ns - cpu_begin_ns AS dur FROM calls), "
         "own AS (SELECT site_id, phase, count(*) AS calls, COALESCE(SUM(dur), 0) AS cpu, "
         "  SUM(parent_id IS NULL) AS top, "
         "  COALESCE(SUM(CASE WHEN parent_id IS NULL THEN dur END), 0) AS top_cpu "
         "  FROM c GROUP BY site_id, phase), "
         "kids AS (SELECT p.site_id, p.phase, SUM(k.dur) AS ns FROM c k JOIN c p "
         "  ON p.id = k.parent_id WHERE k.dur IS NOT NULL GROUP BY p.site_id, p.phase), "
         "gpu AS (SELECT c.site_id, c.phase, SUM(g.kernels) AS n, SUM(g.gpu_busy_ns) AS busy "
         "  FROM c JOIN call_gpu g ON g.call_id = c.id GROUP BY c.site_id, c.phase) "
         "SELECT own.site_id, own.phase, calls, cpu, cpu - COALESCE(kids.ns, 0), "
         "  COALESCE(gpu.n, 0), COALESCE(gpu.busy, 0), top, top_cpu "
         "FROM own LEFT JOIN kids USING (site_id, phase) LEFT JOIN gpu USING (site_id, phase) "
         "ORDER BY 1, 2";
}
constexpr char kSiteSummary[] =
    "SELECT site_id, phase, calls, cpu_ns, cpu_self_ns, kernels, gpu_busy_ns, top_calls, "
    "top_cpu_ns FROM site_stats ORDER BY 1, 2";

std::string BlockScan() {
  return "WITH c AS (SELECT *, " + Block() +
         " AS block, COALESCE(cpu_end_ns - cpu_begin_ns, 0) AS dur FROM calls), "
         "v AS (SELECT site_id, block, dur AS ns FROM c "
         "      UNION ALL SELECT p.site_id, p.block, -k.dur FROM c k JOIN c p "
         "      ON p.id = k.parent_id) "
         "SELECT site_id, block, SUM(ns) AS s FROM v GROUP BY site_id, block HAVING s != 0 "
         "ORDER BY 1, 2";
}
constexpr char kBlockSummary[] =
    "SELECT site_id, block, cpu_self_ns FROM site_blocks WHERE cpu_self_ns != 0 ORDER BY 1, 2";

// The token digest (token_totals, token_hist, token_slowest) computed from the tokens view's
// rows, in the tables' order: "totals" rows, then "hist", then "slowest".
std::string DigestScan(const std::string& path) {
  const std::string listed = std::string("SELECT *, ") + kPhase +
                             " AS phase, cpu_begin_ns IS NOT NULL AND cpu_end_ns IS NOT NULL "
                             "AS closed FROM (" +
                             kTokensSelectSql + ")";
  std::string out = Rows(path,
                         "SELECT phase, count(*), SUM(cpu_begin_ns IS NULL), SUM(closed), "
                         "COALESCE(SUM(CASE WHEN closed THEN cpu_end_ns - cpu_begin_ns END), 0), "
                         "SUM(gpu_busy_ns), SUM(kernels), SUM(escapes), MAX(gpu_busy_ns) FROM (" +
                             listed + ") GROUP BY phase ORDER BY 1");
  // Buckets by DigestBucket, counted here from each token's values.
  std::map<std::tuple<int, int, int64_t>, int64_t> hist;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db,
                               ("SELECT phase, closed, cpu_end_ns - cpu_begin_ns, gpu_busy_ns "
                                "FROM (" +
                                listed + ")")
                                   .c_str(),
                               -1, &st, nullptr),
            SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const int phase = sqlite3_column_int(st, 0);
    if (sqlite3_column_int(st, 1) != 0) {
      ++hist[{phase, kHistCpu, DigestBucket(sqlite3_column_int64(st, 2))}];
    }
    ++hist[{phase, kHistGpu, DigestBucket(sqlite3_column_int64(st, 3))}];
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  for (const auto& [key, count] : hist) {
    out += "hist " + std::to_string(std::get<0>(key)) + "|" + std::to_string(std::get<1>(key)) +
           "|" + std::to_string(std::get<2>(key)) + "|" + std::to_string(count) + "\n";
  }
  out += Rows(path, "SELECT token, cpu_end_ns - cpu_begin_ns AS d FROM (" + listed +
                        ") WHERE closed ORDER BY d DESC, token ASC LIMIT " +
                        std::to_string(kSlowestTokens));
  return out;
}

std::string DigestSummary(const std::string& path) {
  std::string out = Rows(path, "SELECT * FROM token_totals WHERE tokens != 0 ORDER BY 1");
  const std::string hist = Rows(path, "SELECT * FROM token_hist WHERE count != 0 ORDER BY 1, 2, 3");
  size_t at = 0;
  while (at < hist.size()) {
    const size_t end = hist.find('\n', at);
    out += "hist " + hist.substr(at, end - at + 1);
    at = end + 1;
  }
  out += Rows(path, "SELECT token, cpu_ns FROM token_slowest ORDER BY cpu_ns DESC, token ASC");
  return out;
}

// Per token with calls: its time in collectives as the cross-rank report scans the calls for
// it (src/multi/rank_compare.cc before schema 6): closed calls of collective sites whose
// parent is in the file and not one (or who have none), the GPU time of collective calls and
// the communication kernels' time of the others.
std::string CollectiveScan(const std::string& path) {
  std::string ids;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT id, name FROM sites", -1, &st, nullptr), SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const unsigned char* name = sqlite3_column_text(st, 1);
    if (name != nullptr && IsCollectiveSite(reinterpret_cast<const char*>(name))) {
      ids += (ids.empty() ? "" : ",") + std::to_string(sqlite3_column_int64(st, 0));
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  const std::string in = "(" + ids + ")";
  return Rows(path,
              "SELECT c.token, COALESCE(SUM(CASE WHEN c.site_id IN " + in +
                  " AND c.cpu_end_ns IS NOT NULL AND (c.parent_id IS NULL OR EXISTS (SELECT 1 "
                  "FROM calls p WHERE p.id = c.parent_id AND p.site_id NOT IN " +
                  in +
                  ")) THEN c.cpu_end_ns - c.cpu_begin_ns END), 0), "
                  "COALESCE(SUM(CASE WHEN c.site_id IN " +
                  in +
                  " THEN g.gpu_busy_ns ELSE g.gpu_comm_ns END), 0) "
                  "FROM calls c LEFT JOIN call_gpu g ON g.call_id = c.id GROUP BY c.token "
                  "ORDER BY 1");
}

// Every summary equals its scan; the tokens view's two SELECTs give the same rows.
void ExpectSummariesMatchScan(const std::string& path) {
  EXPECT_EQ(DigestSummary(path), DigestScan(path));
  EXPECT_EQ(Rows(path,
                 "SELECT token, wait_ns, gpu_collective_ns FROM token_stats WHERE calls > 0 "
                 "ORDER BY 1"),
            CollectiveScan(path));
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key = 'summaries'"), "1");
  const std::string tokens = Rows(path, std::string(kTokensSelectSql) + " ORDER BY token");
  EXPECT_EQ(tokens, Rows(path, std::string(kTokensScanSql) + " ORDER BY 1"));
  EXPECT_FALSE(tokens.empty());
  EXPECT_EQ(
      Rows(path,
           "SELECT token, calls, first_call, last_call FROM token_stats WHERE calls > 0 "
           "ORDER BY 1"),
      Rows(path, "SELECT token, count(*), min(id), max(id) FROM calls GROUP BY token ORDER BY 1"));
  EXPECT_EQ(Rows(path, "SELECT token, k FROM token_stats WHERE k IS NOT NULL ORDER BY 1"),
            Rows(path,
                 "SELECT c.token, min(c.k) FROM calls c JOIN sites s ON s.id = c.site_id "
                 "WHERE s.is_token = 1 GROUP BY c.token ORDER BY 1"));
  const std::string sites = Rows(path, kSiteSummary);
  EXPECT_EQ(sites, Rows(path, SiteScan()));
  EXPECT_FALSE(sites.empty());
  EXPECT_EQ(Rows(path, kBlockSummary), Rows(path, BlockScan()));
}

// Builds batches: calls open on a per-thread stack, closed in stack order, as the joiner does.
struct Calls {
  uint64_t next_id = 1;
  uint32_t k[16] = {};
  int64_t now = 1000000;
  std::vector<CallRow> open[4];  // per thread

  CallRow& Open(uint32_t thread, uint32_t site, uint32_t token) {
    CallRow r;
    r.id = next_id++;
    r.site_id = site;
    r.k = ++k[site];
    r.token = token;
    r.parent_id = open[thread].empty() ? 0 : open[thread].back().id;
    r.thread = thread;
    r.cpu_begin_ns = now += 1000;
    open[thread].push_back(r);
    return open[thread].back();
  }
  void Close(uint32_t thread, Batch* b) {
    CallRow r = open[thread].back();
    open[thread].pop_back();
    r.cpu_end_ns = now += 700 + 13 * static_cast<int64_t>(r.site_id);
    b->calls.push_back(r);
  }
};

std::vector<SiteRow> Sites() {
  return {{1, "self", SiteKind::kRoot, true},
          {2, "model.layers.0", SiteKind::kModule, false},
          {3, "model.layers.0.mlp", SiteKind::kModule, false},
          {4, "sampler", SiteKind::kRange, false},
          {5, "encoder", SiteKind::kModule, false},
          {6, "model.layers.0.all_reduce", SiteKind::kModule, false},
          {7, "c10d::allreduce_", SiteKind::kRange, false}};
}

// Writes `batches`, each in one Write.
void WriteAll(Store* store, std::vector<Batch>* batches) {
  std::string error;
  for (Batch& b : *batches) ASSERT_TRUE(store->Write(b, &error)) << error;
  batches->clear();
}

TEST(SummariesTest, NestedCallsOverThreadsAndBatchesMatchAScan) {
  const std::string path = TempPath("nested.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Calls c;
  std::vector<Batch> out(1);
  out[0].sites = Sites();
  // Token 0: an encoder called before the first token, with a child.
  c.Open(0, 5, 0);
  c.Open(0, 3, 0);
  c.Close(0, &out.back());
  c.Close(0, &out.back());
  for (uint32_t t = 1; t <= 150; ++t) {
    CallRow& root = c.Open(0, 1, t);
    // Every 7th token's root is written open first (a drain while the token runs), and
    // closed in a later batch.
    if (t % 7 == 0) out.back().calls.push_back(root);
    const uint64_t layer = c.Open(0, 2, t).id;
    c.Open(0, 3, t);
    // GPU work of the mlp call before the call closes: it waits for the call's row.
    out.back().call_gpu.push_back({c.open[0].back().id, t, 2, 5000 + t, 1, 2, 0});
    if (t % 3 == 0) out.emplace_back();  // a batch ends with the parent open
    c.Close(0, &out.back());
    c.Close(0, &out.back());
    // A sampler range on thread 1, under nothing (a top-level call of another thread).
    c.Open(1, 4, t);
    c.Close(1, &out.back());
    c.Close(0, &out.back());
    if (t % 5 == 0) out.emplace_back();
    // GPU work arriving after its call is in the file (its site and token carried with it,
    // as the joiner does), and outside calls.
    out.back().call_gpu.push_back({layer, t, 1, 300, 1, 2, 0, 2, t, true});
    out.back().call_gpu.push_back({0, t, 1, 40, 1, 2, 0});
    if (t % 11 == 0) out.back().escapes.push_back({layer, t, 0, c.now, EscapeKind::kStreamSync});
  }
  WriteAll(store.get(), &out);
  store->Close();
  ExpectSummariesMatchScan(path);
  // The numbers themselves, for one site: 150 mlp calls, 2 kernels each in decode.
  EXPECT_EQ(QueryInt(path, "SELECT calls FROM site_stats WHERE site_id = 3 AND phase = 2"), 149);
  EXPECT_EQ(QueryInt(path, "SELECT SUM(kernels) FROM site_stats WHERE site_id = 3"), 300);
  EXPECT_EQ(QueryInt(path, "SELECT SUM(calls) FROM token_stats"), 2 + 150 * 4);
}

// The time in collectives (token_stats.wait_ns, gpu_collective_ns, schema 6), what the
// cross-rank report reads: a module all_reduce around c10d (counted once), c10d straight
// under a layer, c10d at the top of another thread, children closing in a batch before their
// parent's, under a token call written open at a drain, a collective whose parent never
// reaches the file, GPU work of collectives before and after their calls are in the file, and
// NCCL kernels in a call that is not a collective.
TEST(SummariesTest, TimeInCollectivesMatchesAScan) {
  const std::string path = TempPath("collectives.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Calls c;
  std::vector<Batch> out(1);
  out[0].sites = Sites();
  for (uint32_t t = 1; t <= 40; ++t) {
    CallRow& root = c.Open(0, 1, t);
    if (t % 4 == 0) out.back().calls.push_back(root);  // written open at a drain
    c.Open(0, 2, t);
    c.Open(0, 6, t);  // the module all_reduce ...
    c.Open(0, 7, t);  // ... around c10d
    out.back().call_gpu.push_back({c.open[0].back().id, t, 1, 9000 + t, 1, 2, 9000 + t});
    c.Close(0, &out.back());
    if (t % 3 == 0) out.emplace_back();  // c10d in the file, the module and layer not yet
    c.Close(0, &out.back());
    c.Open(0, 7, t);  // c10d straight under the layer
    const uint64_t direct = c.open[0].back().id;
    c.Close(0, &out.back());
    c.Open(0, 3, t);  // an mlp whose kernels include NCCL's (code we do not wrap)
    out.back().call_gpu.push_back({c.open[0].back().id, t, 3, 800, 1, 2, 300});
    c.Close(0, &out.back());
    if (t % 5 == 0) out.emplace_back();
    c.Close(0, &out.back());  // the layer
    c.Open(1, 7, t);          // c10d at the top of thread 1
    c.Close(1, &out.back());
    c.Close(0, &out.back());  // the root
    // GPU work of a collective after its call is in the file (its site carried with it).
    out.back().call_gpu.push_back({direct, t, 1, 450, 1, 2, 450, 7, t, true});
  }
  // A collective whose parent (id 99999, its push dropped) never reaches the file.
  out.back().calls.push_back({c.next_id++, 7, 99, 40, 99999, 0, c.now + 10, c.now + 900});
  WriteAll(store.get(), &out);
  store->Close();
  ExpectSummariesMatchScan(path);
  EXPECT_GT(QueryInt(path, "SELECT SUM(wait_ns) FROM token_stats"), 0);
  EXPECT_GT(QueryInt(path, "SELECT MIN(gpu_collective_ns) FROM token_stats WHERE token > 0"),
            9000 + 450 + 300 - 1);
}

TEST(SummariesTest, GraphReplayTokensAndCallsWhoseParentNeverArrives) {
  const std::string path = TempPath("graph.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Calls c;
  Batch b;
  b.sites = Sites();
  for (uint32_t t = 1; t <= 2; ++t) {
    c.Open(0, 1, t);
    c.Open(0, 2, t);
    c.Close(0, &b);
    c.Close(0, &b);
  }
  ASSERT_TRUE(store->Write(b, &error)) << error;
  // Tokens 3..70: CUDA-graph replays, no token call; kernels go to the captured call (id 2).
  Batch replays;
  for (uint32_t t = 3; t <= 70; ++t) {
    replays.call_gpu.push_back({2, t, 4, 1000, 1, 2, 0, /*site=*/2, /*call's token=*/1, true});
  }
  // A call whose parent (id 999, its push dropped) never reaches the file.
  CallRow orphan{c.next_id++, 3, 1, 70, 999, 0, c.now + 10, c.now + 500};
  replays.calls.push_back(orphan);
  ASSERT_TRUE(store->Write(replays, &error)) << error;
  store->Close();
  ExpectSummariesMatchScan(path);
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  std::vector<TokenStat> tokens;
  ASSERT_TRUE(reader->Tokens(&tokens, &error)) << error;
  ASSERT_EQ(tokens.size(), 70u);
  EXPECT_FALSE(tokens[1].graph_replay);
  EXPECT_TRUE(tokens[2].graph_replay);
  EXPECT_EQ(tokens[69].kernels, 4);
}

// The joiner and the writer together, as a run joins them: eager tokens whose kernels
// complete drains after their calls closed, then a decode graph captured in token 2 and
// replayed at tokens 3..60, several replays a drain. Each replay's kernels are its own
// token's (token_stats against the kernel rows), and at the captured calls' sites, in the
// phase of the token that captured them (site_stats against a scan).
TEST(SummariesTest, TheJoinersDeltasOverDrainsAndGraphReplaysMatchAScan) {
  const std::string path = TempPath("joined.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  KernelMode full;
  full.kind = KernelMode::kFull;
  Joiner joiner(full);
  uint64_t id = 1, corr = 1, ticks = 1000;
  std::vector<GpuActivity> in_flight;  // launched, their records not delivered yet
  auto event = [&](EventKind kind, uint64_t call, uint64_t a, uint32_t site, uint32_t token,
                   Batch* b) {
    joiner.OnEvent(0, MakeEvent(kind, ticks += 100, call, a, 0, site, 0, token, 0), b);
  };
  auto kernel = [&](uint64_t correlation, uint64_t node) {
    GpuActivity a;
    a.correlation_id = correlation;
    a.begin_ns = static_cast<int64_t>(ticks);
    a.end_ns = a.begin_ns + 50 + static_cast<int64_t>(node);
    a.name = "gemm";
    a.graph_id = node != 0 ? 9 : 0;
    a.graph_node_id = node;
    in_flight.push_back(a);
  };
  std::vector<Batch> out(1);
  out[0].sites = Sites();
  for (uint32_t t = 1; t <= 60; ++t) {
    if (t <= 2) {  // eager: root > layer > mlp, two kernels in the mlp
      const uint64_t root = id++, layer = id++, mlp = id++;
      event(EventKind::kPush, root, 0, 1, t, &out.back());
      event(EventKind::kPush, layer, root, 2, t, &out.back());
      event(EventKind::kPush, mlp, layer, 3, t, &out.back());
      for (uint64_t node = 1; node <= 2; ++node) {
        const uint64_t c = corr++;
        event(EventKind::kLaunch, mlp, c, 0, t, &out.back());
        if (t == 2) {  // captured: the nodes are the mlp's, no records now
          event(EventKind::kGraphNodeCreated, mlp, node, 5, t, &out.back());
          joiner.OnEvent(0,
                         MakeEvent(EventKind::kGraphNodeCloned, 0, 0, node, 100 + node, 9, 0, 0, 0),
                         &out.back());
        } else {
          kernel(c, 0);
        }
      }
      event(EventKind::kPop, mlp, 0, 0, 0, &out.back());
      event(EventKind::kPop, layer, 0, 0, 0, &out.back());
      event(EventKind::kPop, root, 0, 0, 0, &out.back());
    } else {  // a replay: one launch, the captured nodes' records
      const uint64_t c = corr++;
      joiner.OnEvent(0, MakeEvent(EventKind::kGraphLaunch, ticks += 100, 0, c, 0, 0, 9, t, 0),
                     &out.back());
      kernel(c, 101);
      kernel(c, 102);
    }
    // Records come a few tokens late; a drain every 4 tokens.
    if (t % 3 == 0 || t == 60) {
      for (const GpuActivity& a : in_flight) joiner.OnActivity(a, &out.back());
      in_flight.clear();
    }
    if (t % 4 == 0) {
      joiner.EndDrain(&out.back());
      out.emplace_back();
    }
  }
  joiner.Finish(&out.back());
  WriteAll(store.get(), &out);
  store->Close();
  ExpectSummariesMatchScan(path);
  EXPECT_EQ(Rows(path, "SELECT token, kernels FROM token_stats WHERE kernels > 0 ORDER BY 1"),
            Rows(path, "SELECT token, count(*) FROM kernels GROUP BY token ORDER BY 1"));
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM token_stats WHERE token = 37"), 2);
  // The mlp (site 3): 2 eager kernels at token 1 (prefill), 2 x 58 replayed in decode.
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM site_stats WHERE site_id = 3 AND phase = 1"), 2);
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM site_stats WHERE site_id = 3 AND phase = 2"),
            2 * 58);
}

TEST(SummariesTest, AKilledRunsUnfinishedTokenMatchesAScan) {
  const std::string path = TempPath("killed.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Calls c;
  Batch b;
  b.sites = Sites();
  c.Open(0, 1, 1);
  c.Open(0, 2, 1);
  c.Close(0, &b);
  c.Close(0, &b);
  // Token 2 runs when the job is killed: its root was written open at a drain, one child
  // closed, another still open; token 3's calls (another thread) closed but its root never
  // reached the file.
  CallRow& root = c.Open(0, 1, 2);
  b.calls.push_back(root);
  c.Open(0, 2, 2);
  c.Close(0, &b);
  c.Open(0, 2, 2);
  c.Open(1, 4, 3);
  c.Close(1, &b);
  ASSERT_TRUE(store->Write(b, &error)) << error;
  store.reset();  // nothing more is written: as after a SIGKILL
  ExpectSummariesMatchScan(path);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM token_stats WHERE listed = 1"), 2);
  EXPECT_EQ(QueryInt(path, "SELECT cpu_end_ns IS NULL FROM token_stats WHERE token = 2"), 1);
  EXPECT_EQ(QueryInt(path, "SELECT calls FROM token_stats WHERE token = 3"), 1);
}

TEST(SummariesTest, WritesRefusedByAFullDiskLeaveSummariesOfWhatTheFileHolds) {
  const std::string path = TempPath("full.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Calls c;
  Batch first;
  first.sites = Sites();
  c.Open(0, 1, 1);
  c.Open(0, 2, 1);
  c.Close(0, &first);
  ASSERT_TRUE(store->Write(first, &error)) << error;
  // The children of the root, and kernels waiting for it, are refused by a full disk...
  Batch refused;
  for (int i = 0; i < 400; ++i) {
    c.Open(0, 3, 1);
    refused.call_gpu.push_back({c.open[0].back().id, 1, 1, 10, 1, 2, 0});
    refused.call_gpu.push_back({1, 1, 3, 77, 1, 2, 0});
    c.Close(0, &refused);
  }
  tt_disk_full_from_now(0, 1);
  EXPECT_FALSE(store->Write(refused, &error));
  tt_disk_full_from_now(-1, -1);
  // ... then space returns and the root closes.
  Batch last;
  c.Close(0, &last);
  last.call_gpu.push_back({1, 1, 5, 500, 1, 2, 0});
  // Kernels of a refused child, completing late: the call is not in the file, so they count
  // for the token but at no site (as a scan, which finds no call to join them to).
  last.call_gpu.push_back({refused.calls.back().id, 1, 2, 99, 1, 2, 0, 3, 1, true});
  ASSERT_TRUE(store->Write(last, &error)) << error;
  store->Close();
  ExpectSummariesMatchScan(path);
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM site_stats WHERE site_id = 1 AND phase = 1"), 5);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM site_stats WHERE site_id = 3"), 0);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM calls WHERE site_id = 3"), 0);
}

// Schema 4 has no index on calls: a window of tokens is the rowid range of its first and last
// calls. Ids interleave across tokens when threads run calls of two tokens at once.
TEST(SummariesTest, AWindowOfTokensReadsTheCallsOfThoseTokensOnly) {
  const std::string path = TempPath("window.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Batch b;
  b.sites = Sites();
  // Thread 0 runs the tokens; thread 1's sampler call of token t starts after token t + 1's
  // root (a higher id than some of t + 1's calls) and closes later.
  uint64_t id = 1;
  int64_t now = 1000;
  std::vector<CallRow> late;
  for (uint32_t t = 1; t <= 30; ++t) {
    const uint64_t root = id++;
    b.calls.push_back({id++, 2, t, t, root, 0, now + 10, now + 20});
    b.calls.push_back({root, 1, t, t, 0, 0, now, now + 30});
    if (!late.empty()) b.calls.push_back(late.back());
    late.push_back({id++, 4, t, t - 1 == 0 ? 1 : t - 1, 0, 1, now + 5, now + 50});
    now += 100;
  }
  ASSERT_TRUE(store->Write(b, &error)) << error;
  store->Close();
  ExpectSummariesMatchScan(path);
  EXPECT_EQ(QueryInt(path,
                     "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND "
                     "tbl_name = 'calls'"),
            0);
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  for (uint32_t t : {1u, 7u, 29u}) {
    std::vector<uint64_t> ids;
    ASSERT_TRUE(reader->ForEachCall(
        t, t + 1, [&](const CallEvent& e) { ids.push_back(e.id); }, &error))
        << error;
    std::sort(ids.begin(), ids.end());
    std::string want = Rows(path, "SELECT id FROM calls WHERE token BETWEEN " + std::to_string(t) +
                                      " AND " + std::to_string(t + 1) + " ORDER BY id");
    std::string got;
    for (uint64_t i : ids) got += std::to_string(i) + "\n";
    EXPECT_EQ(got, want) << "tokens " << t << ".." << t + 1;
    std::vector<SiteGpu> sites;
    ASSERT_TRUE(reader->TopSitesOf(t, t, 10, &sites, &error)) << error;
    int64_t calls = 0;
    for (const SiteGpu& s : sites) calls += s.calls;
    EXPECT_EQ(calls,
              QueryInt(path, "SELECT count(*) FROM calls WHERE token = " + std::to_string(t)));
  }
}

// A file of the version before summaries: the store's file, taken back to schema 3.
void TakeBackToSchema3(const std::string& path) {
  Exec(path,
       "DROP TABLE site_stats; DROP TABLE site_blocks; DROP VIEW tokens_from_calls; "
       "DROP VIEW tokens; "
       "ALTER TABLE token_stats DROP COLUMN cpu_begin_ns; "
       "ALTER TABLE token_stats DROP COLUMN cpu_end_ns; ALTER TABLE token_stats DROP COLUMN k; "
       "ALTER TABLE token_stats DROP COLUMN calls; ALTER TABLE token_stats DROP COLUMN listed; "
       "ALTER TABLE token_stats DROP COLUMN first_call; "
       "ALTER TABLE token_stats DROP COLUMN last_call; "
       "CREATE INDEX calls_by_token ON calls(token); "
       "DELETE FROM meta WHERE key IN ('summaries', 'token_block'); "
       "UPDATE meta SET value = '3' WHERE key = 'schema_version'; "
       "CREATE VIEW tokens AS " +
           std::string(kTokensScanSql) + ";");
}

TEST(SummariesTest, AFileOfSchema3IsReadByScanningAndSaysSo) {
  const std::string path = TempPath("old.sqlite");
  std::string error;
  {
    auto store = Store::Open(path, &error);
    ASSERT_NE(store, nullptr) << error;
    Calls c;
    Batch b;
    b.sites = Sites();
    for (uint32_t t = 1; t <= 3; ++t) {
      c.Open(0, 1, t);
      c.Open(0, 2, t);
      b.call_gpu.push_back({c.open[0].back().id, t, 2, 900, 1, 2, 0});
      c.Close(0, &b);
      c.Close(0, &b);
    }
    ASSERT_TRUE(store->Write(b, &error)) << error;
  }
  std::vector<TokenStat> fast, slow;
  std::vector<SiteGpu> fast_sites, slow_sites;
  TraceCounts fast_counts, slow_counts;
  {
    auto reader = Reader::Open(path, &error);
    ASSERT_NE(reader, nullptr) << error;
    EXPECT_TRUE(reader->has_summaries());
    EXPECT_EQ(reader->ScanNotice(), "");
    ASSERT_TRUE(reader->Tokens(&fast, &error) && reader->TopSites(10, &fast_sites, &error) &&
                reader->Counts(&fast_counts, &error))
        << error;
  }
  TakeBackToSchema3(path);
  auto reader = Reader::Open(path, &error);
  ASSERT_NE(reader, nullptr) << error;
  EXPECT_EQ(reader->schema_version(), 3);
  EXPECT_FALSE(reader->has_summaries());
  EXPECT_NE(reader->ScanNotice().find("older tokentrace (schema 3, without summaries)"),
            std::string::npos)
      << reader->ScanNotice();
  ASSERT_TRUE(reader->Tokens(&slow, &error) && reader->TopSites(10, &slow_sites, &error) &&
              reader->Counts(&slow_counts, &error))
      << error;
  ASSERT_EQ(fast.size(), 3u);
  ASSERT_EQ(slow.size(), fast.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    EXPECT_EQ(slow[i].cpu_begin_ns, fast[i].cpu_begin_ns);
    EXPECT_EQ(slow[i].cpu_end_ns, fast[i].cpu_end_ns);
    EXPECT_EQ(slow[i].gpu_busy_ns, fast[i].gpu_busy_ns);
  }
  ASSERT_EQ(slow_sites.size(), fast_sites.size());
  for (size_t i = 0; i < fast_sites.size(); ++i) {
    EXPECT_EQ(slow_sites[i].name, fast_sites[i].name);
    EXPECT_EQ(slow_sites[i].calls, fast_sites[i].calls);
    EXPECT_EQ(slow_sites[i].gpu_busy_ns, fast_sites[i].gpu_busy_ns);
    EXPECT_EQ(slow_sites[i].cpu_self_ns, fast_sites[i].cpu_self_ns);
  }
  EXPECT_EQ(slow_counts.calls, fast_counts.calls);
  EXPECT_EQ(slow_counts.tokens, fast_counts.tokens);
  EXPECT_EQ(slow_counts.calls, 6);
}

// The token digest over tokens of varied length (the slowest ten change as the run goes on;
// some roots written open and closed a batch later, GPU work arriving after its token's row):
// equal to its scan after every batch, not only at the end.
TEST(SummariesTest, TheTokenDigestMatchesAScanAfterEveryBatch) {
  const std::string path = TempPath("digest.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  ASSERT_NE(store, nullptr) << error;
  Calls c;
  Batch b;
  b.sites = Sites();
  uint64_t x = 12345;
  for (uint32_t t = 1; t <= 400; ++t) {
    CallRow& root = c.Open(0, 1, t);
    if (t % 9 == 0) b.calls.push_back(root);  // written open, closed in the next batch
    c.Open(0, 2, t);
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    c.now += static_cast<int64_t>(x >> 44);  // 0 .. 1 M ns more in this token
    c.Close(0, &b);
    c.Close(0, &b);
    b.call_gpu.push_back({0, t, 1, static_cast<int64_t>(x >> 50), 1, 2, 0});
    if (t % 4 == 0 || t % 9 == 0) {
      ASSERT_TRUE(store->Write(b, &error)) << error;
      b = Batch();
      if (t % 36 == 0) {
        const std::string now = DigestSummary(path);
        ASSERT_EQ(now, DigestScan(path)) << "after token " << t;
      }
      // Kernels of an earlier token, after its row is in the file.
      b.call_gpu.push_back({0, t - 3, 1, 777, 1, 2, 0});
    }
  }
  ASSERT_TRUE(store->Write(b, &error)) << error;
  store->Close();
  ExpectSummariesMatchScan(path);
  EXPECT_EQ(QueryInt(path, "SELECT count(*) FROM token_slowest"), kSlowestTokens);
  EXPECT_EQ(QueryInt(path, "SELECT SUM(tokens) FROM token_totals"), 400);
}

// A bucket's middle value is within 0.4 % of every value in it, buckets keep the values'
// order, and the percentile of the digest is the bucket of the exact one.
TEST(TokenDigestTest, BucketsAreOrderedAndClose) {
  int64_t last = -1;
  for (int64_t v = 0; v < (int64_t{1} << 40); v = v < 1000 ? v + 1 : v + v / 997) {
    const int64_t b = DigestBucket(v);
    EXPECT_GE(b, last) << v;
    last = b;
    const double mid = static_cast<double>(DigestBucketValue(b));
    EXPECT_LE(std::abs(mid - static_cast<double>(v)), 0.004 * static_cast<double>(v) + 0.5) << v;
  }
  std::vector<int64_t> values;
  for (int64_t i = 1; i <= 1000; ++i) values.push_back(i * i * 37);
  std::map<int64_t, int64_t> counts;
  for (int64_t v : values) ++counts[DigestBucket(v)];
  const std::vector<std::pair<int64_t, int64_t>> buckets(counts.begin(), counts.end());
  for (double p : {50.0, 90.0, 99.0, 100.0}) {
    const int64_t exact = values[static_cast<size_t>(std::ceil(p / 100.0 * 1000)) - 1];
    EXPECT_EQ(DigestBucket(DigestPercentile(buckets, p)), DigestBucket(exact)) << p;
  }
  EXPECT_EQ(DigestPercentile({}, 50), 0);
}

}  // namespace
}  // namespace tokentrace
