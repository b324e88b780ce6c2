#include "multi/merge.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "store/statement.h"

namespace tokentrace::multi {
namespace {

// "name TYPE, ..." and "name, ..." of one table of the attached database `src`.
struct Columns {
  std::string defs, names;
};

std::string Quote(const std::string& name) {
  std::string q = "\"";
  for (char c : name) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

bool Exec(sqlite3* db, const std::string& sql, std::string* error) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg) == SQLITE_OK) return true;
  *error = msg != nullptr ? msg : sqlite3_errmsg(db);
  sqlite3_free(msg);
  return false;
}

bool SourceTables(sqlite3* db, std::map<std::string, Columns>* tables, std::string* error) {
  Statement names;
  if (!names.Prepare(db,
                     "SELECT name FROM src.sqlite_master WHERE type = 'table' "
                     "AND name NOT LIKE 'sqlite_%' ORDER BY name",
                     error)) {
    return false;
  }
  std::vector<std::string> list;
  while (names.Step() == SQLITE_ROW) list.push_back(names.Text(0));
  for (const std::string& t : list) {
    Statement info;
    if (!info.Prepare(db, ("PRAGMA src.table_info(" + Quote(t) + ")").c_str(), error)) {
      return false;
    }
    Columns c;
    while (info.Step() == SQLITE_ROW) {
      const std::string sep = c.names.empty() ? "" : ", ";
      c.names += sep + Quote(info.Text(1));
      c.defs += sep + Quote(info.Text(1)) + " " + info.Text(2);
    }
    (*tables)[t] = c;
  }
  return true;
}

// The merged file's indices, made with their table, before its rows: the rows come in key
// order (rank, then id; a rank's tokens rise with its call ids), so each index grows at its end
// as rows are copied, which costs less than sorting every row into it afterwards (`merge` of 2
// ranks of 3.6 M calls: 4.0 s against 6.7-7.0 s; the file is 5 % larger, its index pages
// less full).
const char* IndicesOf(const std::string& table) {
  if (table == "calls") {
    return "CREATE UNIQUE INDEX calls_key ON calls(rank, id);"
           "CREATE INDEX calls_by_rank_token ON calls(rank, token);";
  }
  if (table == "sites") return "CREATE UNIQUE INDEX sites_key ON sites(rank, id);";
  return "";
}

// Copies every table of the attached `src` into main, with `rank` in front.
bool CopyRank(sqlite3* db, const RankFile& f, std::map<std::string, Columns>* made,
              std::string* error) {
  std::map<std::string, Columns> tables;
  if (!SourceTables(db, &tables, error)) return false;
  for (const auto& [table, cols] : tables) {
    auto it = made->find(table);
    if (it == made->end()) {
      if (!Exec(db,
                "CREATE TABLE main." + Quote(table) + "(rank INTEGER, " + cols.defs + ");" +
                    IndicesOf(table),
                error)) {
        return false;
      }
      it = made->emplace(table, cols).first;
    } else if (it->second.defs != cols.defs) {
      *error = "table " + table +
               " has other columns than in the files before (accepted: "
               "files of one tokentrace version)";
      return false;
    }
    if (!Exec(db,
              "INSERT INTO main." + Quote(table) + " SELECT " + std::to_string(f.rank) + ", " +
                  cols.names + " FROM src." + Quote(table),
              error)) {
      return false;
    }
  }
  return true;
}

// rank_tokens: each rank's token times, from the calls, or (every input with the writer's
// summaries) from token_stats, one row per token already.
constexpr char kRankTokensFromCalls[] = R"sql(
CREATE VIEW rank_tokens AS
  SELECT c.rank AS rank, c.token AS token, MIN(c.cpu_begin_ns) AS cpu_begin_ns,
         MAX(c.cpu_end_ns) AS cpu_end_ns, MIN(c.cpu_begin_ns) + r.shift_ns AS axis_begin_ns,
         MAX(c.cpu_end_ns) + r.shift_ns AS axis_end_ns
  FROM calls c JOIN sites s ON s.rank = c.rank AND s.id = c.site_id
       JOIN ranks r ON r.rank = c.rank
  WHERE s.is_token = 1 AND c.token > 0
  GROUP BY c.rank, c.token;
)sql";
constexpr char kRankTokensFromSummaries[] = R"sql(
CREATE INDEX IF NOT EXISTS token_stats_key ON token_stats(rank, token);
CREATE VIEW rank_tokens AS
  SELECT t.rank AS rank, t.token AS token, t.cpu_begin_ns AS cpu_begin_ns,
         t.cpu_end_ns AS cpu_end_ns, t.cpu_begin_ns + r.shift_ns AS axis_begin_ns,
         t.cpu_end_ns + r.shift_ns AS axis_end_ns
  FROM token_stats t JOIN ranks r ON r.rank = t.rank
  WHERE t.listed = 1 AND t.cpu_begin_ns IS NOT NULL AND t.token > 0;
)sql";

}  // namespace

bool MergeFiles(const std::vector<RankFile>& files, const std::string& out, std::string* error) {
  for (const RankFile& f : files) {
    if (f.path == out) {
      *error = "tokentrace: the output '" + out + "' is also an input (accepted: a new file)";
      return false;
    }
  }
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string p = out + suffix;
    if (unlink(p.c_str()) != 0 && errno != ENOENT) {
      *error = "tokentrace: cannot write '" + out + "': " + std::strerror(errno);
      return false;
    }
  }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(out.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    *error = "tokentrace: cannot write '" + out + "': " + sqlite3_errmsg(db);
    sqlite3_close(db);
    return false;
  }
  std::string why;
  std::string where = out;
  // A merge is rebuilt from its inputs when it fails, so it needs no journal.
  bool ok = Exec(db,
                 "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA page_size=16384;"
                 "CREATE TABLE ranks(rank INTEGER PRIMARY KEY, path TEXT, host TEXT, "
                 "launch_id TEXT, pid TEXT, exited INTEGER, shift_ns INTEGER, role TEXT)",
                 &why);
  const std::vector<int64_t> shifts = AxisShifts(files);
  std::map<std::string, Columns> made;
  for (size_t i = 0; ok && i < files.size(); ++i) {
    const RankFile& f = files[i];
    where = f.path;
    Statement attach, rank_row;
    ok = attach.Prepare(db, "ATTACH DATABASE ?1 AS src", &why);
    if (ok) {
      attach.Bind(1, f.path);
      ok = attach.Run() || (why = sqlite3_errmsg(db), false);
    }
    ok = ok && Exec(db, "BEGIN", &why) && CopyRank(db, f, &made, &why) &&
         rank_row.Prepare(db, "INSERT INTO ranks VALUES(?1,?2,?3,?4,?5,?6,?7,?8)", &why);
    if (ok) {
      rank_row.Bind(1, f.rank);
      rank_row.Bind(2, f.path);
      rank_row.Bind(3, f.host);
      rank_row.Bind(4, f.launch_id);
      rank_row.Bind(5, f.pid);
      rank_row.Bind(6, static_cast<int64_t>(f.exited ? 1 : 0));
      rank_row.Bind(7, shifts[i]);
      rank_row.Bind(8, f.role);
      ok = rank_row.Run() || (why = sqlite3_errmsg(db), false);
    }
    ok = ok && Exec(db, "COMMIT", &why);
    std::string ignored;
    Exec(db, "DETACH DATABASE src", &ignored);
  }
  if (ok) {
    where = out;
    const bool summarised = std::all_of(files.begin(), files.end(), [](const RankFile& f) {
      return f.reader != nullptr && f.reader->has_summaries();
    });
    ok = Exec(db, summarised ? kRankTokensFromSummaries : kRankTokensFromCalls, &why);
  }
  sqlite3_close(db);
  if (!ok) *error = "tokentrace: cannot merge '" + where + "' into '" + out + "': " + why;
  return ok;
}

}  // namespace tokentrace::multi
