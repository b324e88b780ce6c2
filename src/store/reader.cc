#include "store/reader.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "core/launch_meta.h"
#include "store/schema.h"
#include "store/statement.h"
#include "store/store.h"

namespace tokentrace {

Reader::~Reader() {
  sqlite3_close(db_);
  if (made_shm_ && !Store::BeingWritten(path_)) unlink((path_ + "-shm").c_str());
}

std::string Reader::Fail(const std::string& what) const {
  return "tokentrace: cannot read '" + path_ + "': " + what;
}

namespace {
// True for an empty file, or a SQLite file whose header says WAL mode (bytes 18 and 19 = 2).
bool IsWalModeOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char header[20] = {};
  in.read(header, sizeof header);
  if (in.gcount() == 0) return true;
  return in.gcount() == sizeof header && std::memcmp(header, "SQLite format 3", 16) == 0 &&
         header[18] == 2 && header[19] == 2;
}

// "file:<path>?immutable=1", the path percent-encoded.
std::string ImmutableUri(const std::string& path) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      uri += hex;
    }
  }
  return uri + "?immutable=1";
}
}  // namespace

std::unique_ptr<Reader> Reader::Open(const std::string& path, std::string* error) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    *error = "tokentrace: cannot open '" + path + "': " + std::strerror(errno);
    return nullptr;
  }
  if (S_ISDIR(st.st_mode)) {
    *error = "tokentrace: cannot open '" + path + "': it is a directory, not a trace file";
    return nullptr;
  }
  // Before SQLite opens it (opening a WAL-mode file creates an empty -wal): a copy of a file
  // whose writer was killed before its first checkpoint has its data only in the -wal.
  const bool has_wal = access((path + "-wal").c_str(), F_OK) == 0;
  const bool had_shm = access((path + "-shm").c_str(), F_OK) == 0;
  const bool wal_missing = !has_wal && IsWalModeOrEmpty(path);
  // Read-write without CREATE: a reader may have to recover the WAL index of a file whose
  // writer was killed, which a read-only connection cannot do. SQLite itself falls back to
  // read-only when the file is write-protected. Nothing here writes rows.
  sqlite3* db = nullptr;
  // A file with no -wal (a finished trace, or a copy) has nothing to recover: it is opened
  // immutable and read-only, so the reader leaves no -wal or -shm next to it.
  int rc = has_wal ? sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr)
                   : sqlite3_open_v2(ImmutableUri(path).c_str(), &db,
                                     SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
  if (rc != SQLITE_OK) {
    *error = "tokentrace: cannot open '" + path + "': " + sqlite3_errstr(rc);
    sqlite3_close(db);
    return nullptr;
  }
  std::unique_ptr<Reader> reader(new Reader(path, db));
  reader->made_shm_ = has_wal && !had_shm;
  sqlite3_busy_timeout(db, 5000);
  // A reader leaves the file as it found it: no checkpoint of a killed writer's WAL on close.
  sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  // Only tables are read (a view in a crafted file could be made to never end); the tokens
  // view is computed from them with our own SQL (kTokensSelectSql).
  Statement views;
  std::string msg;
  if (views.Prepare(db,
                    "SELECT name FROM sqlite_master WHERE type = 'view' AND name IN ('meta', "
                    "'sites', 'calls', 'strings', 'kernels', 'call_gpu', 'escapes', 'losses', "
                    "'token_stats', 'call_outputs', 'site_stats', 'site_blocks')",
                    &msg) &&
      views.Step() == SQLITE_ROW) {
    *error = "tokentrace: '" + path + "' is not a tokentrace trace (its '" + views.Text(0) +
             "' is a view, not a table)";
    return nullptr;
  }
  Statement version;
  if (!version.Prepare(db, "SELECT value FROM meta WHERE key = 'schema_version'", &msg)) {
    int code = sqlite3_errcode(db);
    if (code == SQLITE_NOTADB) {
      *error = "tokentrace: '" + path + "' is not a SQLite file (so not a tokentrace trace)";
    } else if (msg.find("no such table") != std::string::npos && wal_missing) {
      *error = "tokentrace: '" + path + "' has no trace data of its own and its write-ahead " +
               "log '" + path + "-wal' is missing (a writer that was killed keeps its last " +
               "data there until its next checkpoint: copy both files)";
    } else if (msg.find("no such table") != std::string::npos) {
      *error = "tokentrace: '" + path + "' is a SQLite file but not a tokentrace trace " +
               "(it has no meta table)";
    } else {
      *error = "tokentrace: cannot read '" + path + "': " + msg;
    }
    return nullptr;
  }
  rc = version.Step();
  if (rc != SQLITE_ROW) {
    *error = rc == SQLITE_DONE ? "tokentrace: '" + path +
                                     "' is a SQLite file but not a tokentrace trace (no "
                                     "meta.schema_version)"
                               : "tokentrace: cannot read '" + path + "': " + sqlite3_errmsg(db);
    return nullptr;
  }
  std::string v = version.Text(0);
  // Every version from kOldestReadableSchema up to ours opens: later versions only add tables
  // (a file of an older version lacks them, and reads as having no such rows).
  const int number = std::atoi(v.c_str());
  if (std::to_string(number) != v || number < kOldestReadableSchema ||
      number > std::atoi(kSchemaVersion)) {
    *error = "tokentrace: '" + path + "' has schema version " + v + "; this tokentrace reads " +
             "versions " + std::to_string(kOldestReadableSchema) + " to " + kSchemaVersion;
    return nullptr;
  }
  reader->schema_version_ = number;
  if (number >= kFirstSummarisedSchema) {
    Statement summaries;
    if (summaries.Prepare(db, "SELECT 1 FROM meta WHERE key = ?", &msg)) {
      summaries.BindStatic(1, kMetaSummaries);
      reader->has_summaries_ = summaries.Step() == SQLITE_ROW;
    }
  }
  if (wal_missing) {
    Statement exit_anchor;
    if (exit_anchor.Prepare(db, "SELECT 1 FROM meta WHERE key = ?", &msg)) {
      exit_anchor.BindStatic(1, kMetaAnchorExit);
      reader->misses_its_wal_ = exit_anchor.Step() != SQLITE_ROW;
    }
  }
  return reader;
}

bool Reader::Rows(const std::string& sql, const std::function<void(Statement&)>& bind,
                  const std::function<void(const Statement&)>& row, std::string* error) {
  Statement q;
  if (!q.Prepare(db_, sql.c_str(), error)) {
    *error = Fail(*error);
    return false;
  }
  if (bind) bind(q);
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) row(q);
  if (rc != SQLITE_DONE) *error = Fail(sqlite3_errmsg(db_));
  return rc == SQLITE_DONE;
}

bool Reader::HasTable(const std::string& name, std::string* error, bool* present) {
  *present = false;
  return Rows(
      "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
      [&name](Statement& q) { q.Bind(1, name); }, [present](const Statement&) { *present = true; },
      error);
}

bool Reader::Meta(std::vector<std::pair<std::string, std::string>>* out, std::string* error) {
  return Rows(
      "SELECT key, value FROM meta ORDER BY key",
      [out](const Statement& q) { out->emplace_back(q.Text(0), q.Text(1)); }, error);
}

bool Reader::Losses(std::vector<std::pair<std::string, int64_t>>* out, std::string* error) {
  return Rows(
      "SELECT kind, count FROM losses WHERE count != 0 ORDER BY kind",
      [out](const Statement& q) { out->emplace_back(q.Text(0), q.Int(1)); }, error);
}

std::string Reader::CallsOfTokens(const std::string& a, const std::string& b) const {
  const std::string tokens = "token BETWEEN " + a + " AND " + b;
  if (!has_summaries_) return "(SELECT * FROM calls WHERE " + tokens + ")";
  return "(SELECT * FROM calls WHERE id BETWEEN (SELECT min(first_call) FROM token_stats WHERE " +
         tokens + ") AND (SELECT max(last_call) FROM token_stats WHERE " + tokens + ") AND " +
         tokens + ")";
}

std::string Reader::ScanNotice() const {
  if (has_summaries_ || schema_version_ >= kFirstSummarisedSchema) return "";
  return "tokentrace: '" + path_ + "' was written by an older tokentrace (schema " +
         std::to_string(schema_version_) +
         ", without summaries): it is summarised by scanning all its calls, which takes a while "
         "for a long run";
}

bool Reader::Counts(TraceCounts* out, std::string* error) {
  // With summaries: calls from site_stats, tokens from token_stats, kernels and escapes from
  // the tables' last rowid (append-only tables, never deleted from: the rowid is the count).
  const std::string sql =
      has_summaries_
          ? "SELECT (SELECT count(*) FROM sites), "
            "(SELECT COALESCE(SUM(calls), 0) FROM site_stats), "
            "(SELECT COALESCE(max(rowid), 0) FROM kernels), "
            "(" +
                std::string(has_digest() ? "SELECT COALESCE(SUM(tokens), 0) FROM token_totals"
                                         : "SELECT count(*) FROM token_stats WHERE listed = 1") +
                "), "
                "(SELECT COALESCE(max(rowid), 0) FROM escapes), (SELECT count(*) FROM strings)"
          : "SELECT (SELECT count(*) FROM sites), (SELECT count(*) FROM calls), "
            "(SELECT count(*) FROM kernels), (SELECT count(*) FROM (" +
                std::string(kTokensScanSql) +
                ")), "
                "(SELECT count(*) FROM escapes), (SELECT count(*) FROM strings)";
  Statement q;
  if (!q.Prepare(db_, sql.c_str(), error)) {
    *error = Fail(*error);
    return false;
  }
  if (q.Step() != SQLITE_ROW) {
    *error = Fail(sqlite3_errmsg(db_));
    return false;
  }
  *out = {q.Int(0), q.Int(1), q.Int(2), q.Int(3), q.Int(4), q.Int(5)};
  return true;
}

bool Reader::Tokens(std::vector<TokenStat>* out, std::string* error) {
  return ForEachToken(
      0, UINT32_MAX, [out](const TokenStat& t) { out->push_back(t); }, error);
}

bool Reader::ForEachToken(uint32_t first, uint32_t last,
                          const std::function<void(const TokenStat&)>& fn, std::string* error,
                          int64_t limit) {
  return Rows(
      "SELECT token, cpu_begin_ns, cpu_end_ns, kernels, gpu_busy_ns, escapes FROM (" +
          std::string(has_summaries_ ? kTokensSelectSql : kTokensScanSql) +
          ") WHERE token BETWEEN ?1 AND ?2 ORDER BY token LIMIT ?3",
      [&](Statement& q) {
        q.Bind(1, first);
        q.Bind(2, last);
        q.Bind(3, limit);  // SQLite: a negative LIMIT is none
      },
      [&fn](const Statement& q) {
        TokenStat t;
        t.token = static_cast<uint32_t>(q.Int(0));
        t.graph_replay = q.IsNull(1);
        t.cpu_begin_ns = t.graph_replay ? 0 : q.Int(1);
        t.cpu_end_ns = q.IsNull(2) ? -1 : q.Int(2);
        t.kernels = q.Int(3);
        t.gpu_busy_ns = q.Int(4);
        t.escapes = q.Int(5);
        fn(t);
      },
      error);
}

bool Reader::has_digest() const { return has_summaries_ && schema_version_ >= kFirstDigestSchema; }

bool Reader::Digest(TokenDigestRead* out, std::string* error) {
  *out = TokenDigestRead();
  auto fail = [&]() {
    *error = Fail(sqlite3_errmsg(db_));
    return false;
  };
  Statement totals, hist, slowest;
  if (!totals.Prepare(db_,
                      "SELECT phase, tokens, replays, closed, cpu_ns, gpu_busy_ns, kernels, "
                      "escapes, max_gpu_busy_ns FROM token_totals WHERE phase BETWEEN 0 AND 2",
                      error) ||
      !hist.Prepare(db_,
                    "SELECT phase, what, bucket, count FROM token_hist WHERE phase BETWEEN 0 "
                    "AND 2 AND what IN (0, 1) AND count > 0 ORDER BY phase, what, bucket",
                    error) ||
      !slowest.Prepare(db_, "SELECT token FROM token_slowest ORDER BY cpu_ns DESC, token ASC",
                       error)) {
    *error = Fail(*error);
    return false;
  }
  int rc;
  while ((rc = totals.Step()) == SQLITE_ROW) {
    TokenTotals& t = out->totals[totals.Int(0)];
    t = {totals.Int(1), totals.Int(2), totals.Int(3), totals.Int(4),
         totals.Int(5), totals.Int(6), totals.Int(7), totals.Int(8)};
  }
  if (rc != SQLITE_DONE) return fail();
  while ((rc = hist.Step()) == SQLITE_ROW) {
    const int64_t phase = hist.Int(0);
    auto& v = hist.Int(1) == kHistCpu ? out->cpu[phase] : out->gpu[phase];
    v.emplace_back(hist.Int(2), hist.Int(3));
  }
  if (rc != SQLITE_DONE) return fail();
  while ((rc = slowest.Step()) == SQLITE_ROW && out->slowest.size() < kSlowestTokens) {
    out->slowest.push_back(static_cast<uint32_t>(slowest.Int(0)));
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return fail();
  return true;
}

namespace {
// Sites by GPU then CPU self time from the calls `W` (the table, or the calls of a window of
// tokens): CPU self time = a site's closed calls minus the closed calls they contain. All
// calls are read straight from the table (one pass); a window as CallsOfTokens.
std::string TopSitesScan(const std::string& from) {
  std::string sql =
      "WITH d AS (SELECT id, site_id, parent_id, cpu_end_ns - cpu_begin_ns AS dur "
      "           FROM W WHERE cpu_end_ns IS NOT NULL), "
      "ch AS (SELECT p.site_id AS site_id, SUM(d.dur) AS child "
      "       FROM d JOIN calls p ON p.id = d.parent_id GROUP BY p.site_id), "
      "g AS (SELECT c.site_id AS site_id, count(*) AS calls, "
      "             SUM(COALESCE(g.kernels, 0)) AS kernels, "
      "             SUM(COALESCE(g.gpu_busy_ns, 0)) AS busy, "
      "             SUM(COALESCE(c.cpu_end_ns - c.cpu_begin_ns, 0)) AS cpu "
      "      FROM W c LEFT JOIN call_gpu g ON g.call_id = c.id "
      "      GROUP BY c.site_id) "
      "SELECT s.name, s.kind, g.calls, g.kernels, g.busy, "
      "       g.cpu - COALESCE(ch.child, 0) "
      "FROM g JOIN sites s ON s.id = g.site_id LEFT JOIN ch ON ch.site_id = g.site_id ";
  for (size_t at; (at = sql.find(" W ")) != std::string::npos;)
    sql.replace(at, 3, " " + from + " ");
  return sql;
}
// The same from the writer's per-site summaries: a few rows per site.
constexpr char kTopSitesSummary[] =
    "SELECT s.name, s.kind, SUM(t.calls), SUM(t.kernels), SUM(t.gpu_busy_ns), "
    "       SUM(t.cpu_self_ns) "
    "FROM site_stats t JOIN sites s ON s.id = t.site_id GROUP BY t.site_id ";
constexpr char kOutsideAnyCall[] =
    "UNION ALL "
    "SELECT '(outside any call)', '', 0, kernels, gpu_busy_ns, 0 FROM call_gpu "
    "WHERE call_id = 0 AND kernels > 0 ";
constexpr char kTopSitesOrder[] = "ORDER BY 5 DESC, 6 DESC, 1 LIMIT ?1";
}  // namespace

bool Reader::TopSites(int limit, std::vector<SiteGpu>* out, std::string* error) {
  const std::string sql = (has_summaries_ ? std::string(kTopSitesSummary) : TopSitesScan("calls")) +
                          kOutsideAnyCall + kTopSitesOrder;
  return Rows(
      sql, [limit](Statement& q) { q.Bind(1, limit); },
      [out](const Statement& q) {
        out->push_back({q.Text(0), q.Text(1), q.Int(2), q.Int(3), q.Int(4), q.Int(5)});
      },
      error);
}

bool Reader::TopSitesOf(uint32_t first, uint32_t last, int limit, std::vector<SiteGpu>* out,
                        std::string* error) {
  return Rows(
      TopSitesScan(CallsOfTokens("?2", "?3")) + kTopSitesOrder,
      [&](Statement& q) {
        q.Bind(1, limit);
        q.Bind(2, first);
        q.Bind(3, last);
      },
      [out](const Statement& q) {
        out->push_back({q.Text(0), q.Text(1), q.Int(2), q.Int(3), q.Int(4), q.Int(5)});
      },
      error);
}

bool Reader::Before(BeforeTokens* out, std::string* error) {
  Statement q;
  if (!q.Prepare(db_,
                 ("WITH o AS (SELECT c.id, c.cpu_begin_ns AS b, c.cpu_end_ns AS e, s.name "
                  "           FROM " +
                  CallsOfTokens("0", "0") +
                  " c JOIN sites s ON s.id = c.site_id "
                  "           WHERE COALESCE(c.parent_id, 0) = 0 "
                  "             AND s.kind IN ('module', 'root')) "
                  "SELECT (SELECT count(*) FROM o), "
                  "       (SELECT COALESCE(SUM(e - b), 0) FROM o WHERE e IS NOT NULL), "
                  "       (SELECT COALESCE(SUM(kernels), 0) FROM token_stats WHERE token = 0), "
                  "       (SELECT COALESCE(SUM(gpu_busy_ns), 0) FROM token_stats WHERE token = 0), "
                  "       (SELECT group_concat(name, ', ') FROM "
                  "          (SELECT DISTINCT name FROM o ORDER BY id LIMIT 3))")
                     .c_str(),
                 error)) {
    *error = Fail(*error);
    return false;
  }
  const int rc = q.Step();
  if (rc != SQLITE_ROW) {
    *error = Fail(sqlite3_errmsg(db_));
    return false;
  }
  *out = {q.Int(0), q.Int(1), q.Int(2), q.Int(3), q.Text(4)};
  return true;
}

bool Reader::TopOps(int limit, std::vector<OpPhases>* out, std::string* error, uint32_t first,
                    uint32_t last) {
  // Op records are rare: a file without op sites is not scanned for them.
  bool any = false;
  if (!Rows(
          "SELECT 1 FROM sites WHERE kind = 'op' LIMIT 1", [&any](const Statement&) { any = true; },
          error)) {
    return false;
  }
  if (!any) return true;
  return Rows(
      "WITH o AS (SELECT c.id, c.site_id, c.token, "
      "                  COALESCE(c.cpu_end_ns - c.cpu_begin_ns, 0) AS cpu "
      "           FROM calls c JOIN sites s ON s.id = c.site_id "
      "           LEFT JOIN calls p ON p.id = c.parent_id "
      "           LEFT JOIN sites ps ON ps.id = p.site_id "
      "           WHERE s.kind = 'op' AND c.token BETWEEN max(1, ?2) AND ?3 "
      "             AND (ps.kind IS NULL OR ps.kind != 'op')) "
      "SELECT s.name, "
      "  SUM(o.token = 1), SUM(IIF(o.token = 1, o.cpu, 0)), "
      "  SUM(IIF(o.token = 1, COALESCE(g.gpu_busy_ns, 0), 0)), "
      "  SUM(o.token > 1), SUM(IIF(o.token > 1, o.cpu, 0)), "
      "  SUM(IIF(o.token > 1, COALESCE(g.gpu_busy_ns, 0), 0)) "
      "FROM o JOIN sites s ON s.id = o.site_id "
      "LEFT JOIN call_gpu g ON g.call_id = o.id "
      "GROUP BY o.site_id ORDER BY 7 DESC, 6 DESC, 3 DESC, 1 LIMIT ?1",
      [&](Statement& q) {
        q.Bind(1, limit);
        q.Bind(2, first);
        q.Bind(3, last);
      },
      [out](const Statement& q) {
        out->push_back({q.Text(0), q.Int(1), q.Int(2), q.Int(3), q.Int(4), q.Int(5), q.Int(6)});
      },
      error);
}

namespace {
// One token's rows of token_text: the first sequence's id and text (a row handed with the text
// at the end wins over the row of its id handed while the job ran), and the sequences.
constexpr char kTokenTextSql[] =
    "SELECT token, sequence, MAX(id), MAX(text), MAX(text IS NOT NULL) FROM token_text "
    "WHERE token BETWEEN ?1 AND ?2 GROUP BY token, sequence ORDER BY token, sequence";
}  // namespace

bool Reader::TokenTextsIn(uint32_t first, uint32_t last, std::map<uint32_t, TokenText>* out,
                          std::string* error) {
  bool present = false;
  if (!HasTable("token_text", error, &present)) return false;
  if (!present) return true;
  return Rows(
      kTokenTextSql,
      [&](Statement& q) {
        q.Bind(1, first);
        q.Bind(2, last);
      },
      [out](const Statement& q) {
        TokenText& t = (*out)[static_cast<uint32_t>(q.Int(0))];
        if (t.sequences++ > 0) return;
        t.id = q.IsNull(2) ? -1 : q.Int(2);
        t.has_text = q.Int(4) != 0;
        t.text = q.Text(3);
      },
      error);
}

bool Reader::TokenTexts(const std::vector<uint32_t>& tokens, std::map<uint32_t, TokenText>* out,
                        std::string* error) {
  for (uint32_t token : tokens) {
    if (out->count(token) == 0 && !TokenTextsIn(token, token, out, error)) return false;
  }
  return true;
}

bool Reader::GeneratedText(size_t max_bytes, std::string* text, bool* more, std::string* error) {
  text->clear();
  *more = false;
  bool present = false;
  if (!HasTable("token_text", error, &present)) return false;
  if (!present) return true;
  return Rows(
      "SELECT MAX(text) FROM token_text WHERE token > 0 AND sequence = (SELECT MIN(sequence) "
      "FROM token_text) GROUP BY token HAVING MAX(text) IS NOT NULL ORDER BY token LIMIT 4096",
      [&](const Statement& q) {
        if (*more) return;
        const std::string piece = q.Text(0);
        if (text->size() + piece.size() > max_bytes) {
          *more = true;
          return;
        }
        *text += piece;
      },
      error);
}

bool Reader::FirstTimestamp(uint32_t first, uint32_t last, int64_t* ns, bool* found,
                            std::string* error) {
  Statement q;
  if (!q.Prepare(
          db_,
          ("SELECT min(t) FROM (SELECT min(cpu_begin_ns) AS t FROM " + CallsOfTokens("?1", "?2") +
           " UNION ALL"
           " SELECT min(gpu_begin_ns) FROM kernels WHERE token BETWEEN ?1 AND ?2)")
              .c_str(),
          error)) {
    *error = Fail(*error);
    return false;
  }
  q.Bind(1, first);
  q.Bind(2, last);
  if (q.Step() != SQLITE_ROW) {
    *error = Fail(sqlite3_errmsg(db_));
    return false;
  }
  *found = !q.IsNull(0);
  *ns = *found ? q.Int(0) : 0;
  return true;
}

bool Reader::ForEachCall(uint32_t first, uint32_t last,
                         const std::function<void(const CallEvent&)>& fn, std::string* error) {
  CallEvent e;
  return Rows(
      "SELECT c.id, s.name, c.k, c.token, c.thread, c.cpu_begin_ns, c.cpu_end_ns, s.is_token "
      "FROM " +
          CallsOfTokens("?1", "?2") + " c LEFT JOIN sites s ON s.id = c.site_id",
      [&](Statement& q) {
        q.Bind(1, first);
        q.Bind(2, last);
      },
      [&](const Statement& q) {
        e.id = static_cast<uint64_t>(q.Int(0));
        e.site = q.Text(1);
        e.k = static_cast<uint32_t>(q.Int(2));
        e.token = static_cast<uint32_t>(q.Int(3));
        e.thread = static_cast<uint32_t>(q.Int(4));
        e.cpu_begin_ns = q.Int(5);
        e.cpu_end_ns = q.IsNull(6) ? -1 : q.Int(6);
        e.is_token = q.Int(7) != 0;
        fn(e);
      },
      error);
}

bool Reader::ForEachKernel(uint32_t first, uint32_t last,
                           const std::function<void(const KernelEvent&)>& fn, std::string* error) {
  KernelEvent e;
  return Rows(
      "SELECT k.kind, k.token, k.device, k.stream, k.gpu_begin_ns, k.gpu_end_ns, "
      "       k.correlation_id, n.text, s.name, c.k "
      "FROM kernels k LEFT JOIN strings n ON n.id = k.name_id "
      "LEFT JOIN calls c ON c.id = k.call_id "
      "LEFT JOIN sites s ON s.id = c.site_id "
      "WHERE k.token BETWEEN ?1 AND ?2",
      [&](Statement& q) {
        q.Bind(1, first);
        q.Bind(2, last);
      },
      [&](const Statement& q) {
        e.kind = static_cast<int>(q.Int(0));
        e.token = static_cast<uint32_t>(q.Int(1));
        e.device = static_cast<uint32_t>(q.Int(2));
        e.stream = static_cast<uint32_t>(q.Int(3));
        e.gpu_begin_ns = q.Int(4);
        e.gpu_end_ns = q.Int(5);
        e.correlation_id = static_cast<uint64_t>(q.Int(6));
        e.name = q.Text(7);
        e.call = q.IsNull(8) ? std::string() : q.Text(8) + ":" + std::to_string(q.Int(9));
        fn(e);
      },
      error);
}

bool ReadMetaValue(const std::string& path, const std::string& key, std::string* value) {
  value->clear();
  struct stat st;
  if (stat(path.c_str(), &st) != 0 && errno == ENOENT) return true;
  std::string error;
  auto reader = Reader::Open(path, &error);
  std::vector<std::pair<std::string, std::string>> meta;
  if (!reader || !reader->Meta(&meta, &error)) return false;
  for (const auto& [k, v] : meta) {
    if (k == key) *value = v;
  }
  return true;
}

}  // namespace tokentrace
