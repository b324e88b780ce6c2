#include "multi/run_compare.h"

#include <sqlite3.h>

#include "store/schema.h"
#include "store/statement.h"

namespace tokentrace::multi {
namespace {

// Rows (name, prefill?, ns) of `sql` added (sign +1) or subtracted (-1) into out->self.
bool AddSites(Reader& reader, const char* sql, int sign, RunProfile* out, std::string* error) {
  Statement q;
  if (!q.Prepare(reader.db(), sql, error)) return false;
  int rc;
  while ((rc = q.Step()) == SQLITE_ROW) {
    PhaseTimes& t = out->self[q.Text(0)];
    (q.Int(1) != 0 ? t.prefill_ns : t.decode_ns) += sign * q.Int(2);
  }
  if (rc != SQLITE_DONE) *error = sqlite3_errmsg(reader.db());
  return rc == SQLITE_DONE;
}

}  // namespace

bool ProfileRun(Reader& reader, RunProfile* out, std::string* error) {
  out->path = reader.path();
  // The tokens as our SQL computes them: a file's own views are not trusted (store/schema.h).
  const std::string sql = "SELECT token = 1, COUNT(*), SUM(cpu_end_ns - cpu_begin_ns) FROM (" +
                          std::string(reader.has_summaries() ? kTokensSelectSql : kTokensScanSql) +
                          ") WHERE token > 0 AND cpu_end_ns IS NOT NULL GROUP BY token = 1";
  Statement tokens;
  bool ok = tokens.Prepare(reader.db(), sql.c_str(), error);
  int rc = SQLITE_DONE;
  while (ok && (rc = tokens.Step()) == SQLITE_ROW) {
    if (tokens.Int(0) != 0) {
      out->has_prefill = true;
      out->token.prefill_ns = tokens.Int(2);
    } else {
      out->decode_tokens = tokens.Int(1);
      out->token.decode_ns = tokens.Int(2);
    }
  }
  if (ok && rc != SQLITE_DONE) {
    *error = sqlite3_errmsg(reader.db());
    ok = false;
  }
  // With summaries: each site's self time per phase as the writer kept it (closed calls less
  // their closed children). Else inclusive time of every closed call, then minus each closed
  // call's closed children (of closed parents only: a killed run's open calls differ).
  if (reader.has_summaries()) {
    ok = ok && AddSites(reader,
                        "SELECT s.name, t.phase = 1, SUM(t.cpu_self_ns) FROM site_stats t "
                        "JOIN sites s ON s.id = t.site_id WHERE t.phase > 0 "
                        "GROUP BY s.name, t.phase = 1",
                        1, out, error);
    if (!ok) *error = "tokentrace: cannot read '" + reader.path() + "': " + *error;
    return ok;
  }
  ok = ok &&
       AddSites(reader,
                "SELECT s.name, c.token = 1, SUM(c.cpu_end_ns - c.cpu_begin_ns) FROM calls c "
                "JOIN sites s ON s.id = c.site_id WHERE c.token > 0 AND c.cpu_end_ns IS NOT NULL "
                "GROUP BY s.name, c.token = 1",
                1, out, error) &&
       AddSites(reader,
                "SELECT s.name, p.token = 1, SUM(c.cpu_end_ns - c.cpu_begin_ns) FROM calls c "
                "JOIN calls p ON p.id = c.parent_id JOIN sites s ON s.id = p.site_id "
                "WHERE c.token > 0 AND c.cpu_end_ns IS NOT NULL AND p.cpu_end_ns IS NOT NULL "
                "GROUP BY s.name, p.token = 1",
                -1, out, error);
  if (!ok) *error = "tokentrace: cannot read '" + reader.path() + "': " + *error;
  return ok;
}

}  // namespace tokentrace::multi
