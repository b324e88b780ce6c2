#include "multi/merge.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>

#include "multi/rank_trace_fixture.h"
#include "store/statement.h"

namespace tokentrace::multi {
namespace {

using testing::RankSpec;
using testing::WriteRankTrace;

int64_t One(sqlite3* db, const char* sql) {
  Statement q;
  std::string error;
  EXPECT_TRUE(q.Prepare(db, sql, &error)) << error << " in " << sql;
  EXPECT_EQ(q.Step(), SQLITE_ROW) << sql;
  return q.Int(0);
}

TEST(MergeTest, OneFileWithARankColumnThatPlainSqlQueries) {
  char dir[] = "/tmp/tt_multi_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::vector<std::string> files;
  for (int r = 0; r < 3; ++r) {
    RankSpec s{r};
    s.clock_offset_ns = r * 3000000000LL;  // three hosts' clocks, 3 s apart
    s.slow_rank = 1;
    s.slow_token = 4;
    s.slow_ms = 20;
    files.push_back(std::string(dir) + "/r" + std::to_string(r) + ".sqlite");
    WriteRankTrace(files.back(), s);
  }
  std::vector<RankFile> ranks;
  std::vector<std::string> warnings;
  std::string error;
  ASSERT_TRUE(OpenRankFiles(files, false, &ranks, &warnings, &error)) << error;
  const std::string out = std::string(dir) + "/merged.sqlite";
  ASSERT_TRUE(MergeFiles(ranks, out, &error)) << error;

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(out.c_str(), &db), SQLITE_OK);
  EXPECT_EQ(One(db, "SELECT count(*) FROM ranks"), 3);
  EXPECT_EQ(One(db, "SELECT count(*) FROM calls"), 3 * 30);
  // The same call ids in every file, told apart by rank.
  EXPECT_EQ(One(db, "SELECT count(DISTINCT id) FROM calls"), 30);
  EXPECT_EQ(One(db, "SELECT count(*) FROM (SELECT DISTINCT rank, id FROM calls)"), 90);
  EXPECT_EQ(One(db, "SELECT count(*) FROM meta WHERE key = 'rank'"), 3);
  // On the common axis every rank begins token 1 at the same instant.
  EXPECT_EQ(One(db, "SELECT count(DISTINCT axis_begin_ns) FROM rank_tokens WHERE token = 1"), 1);
  EXPECT_EQ(One(db, "SELECT count(DISTINCT cpu_begin_ns) FROM rank_tokens WHERE token = 1"), 3);
  // The documented straggler query (README): the rank with the most work at token 4.
  EXPECT_EQ(One(db,
                "SELECT c.rank FROM calls c JOIN sites s ON s.rank = c.rank AND s.id = c.site_id "
                "WHERE c.token = 4 AND s.name = 'model.mlp' "
                "ORDER BY c.cpu_end_ns - c.cpu_begin_ns DESC LIMIT 1"),
            1);
  // Calls and sites are found by (rank, id), and a rank's token by (rank, token), through the
  // merged file's indices (made before the rows were copied), not by scanning every call.
  for (const char* index : {"calls_key", "calls_by_rank_token", "sites_key"}) {
    const std::string sql =
        std::string("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = '") +
        index + "'";
    EXPECT_EQ(One(db, sql.c_str()), 1) << index;
  }
  EXPECT_EQ(One(db, "SELECT count(*) FROM calls WHERE rank = 1 AND token = 4"), 3);
  {
    Statement plan;
    ASSERT_TRUE(plan.Prepare(
        db, "EXPLAIN QUERY PLAN SELECT * FROM calls WHERE rank = 1 AND token = 4", &error))
        << error;
    ASSERT_EQ(plan.Step(), SQLITE_ROW);
    EXPECT_NE(plan.Text(3).find("calls_by_rank_token"), std::string::npos) << plan.Text(3);
  }
  sqlite3_close(db);

  // The output may not be one of the inputs.
  EXPECT_FALSE(MergeFiles(ranks, files[0], &error));
  EXPECT_NE(error.find("also an input"), std::string::npos) << error;
}

}  // namespace
}  // namespace tokentrace::multi
