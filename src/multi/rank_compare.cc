#include "multi/rank_compare.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

#include "store/schema.h"
#include "store/statement.h"

namespace tokentrace::multi {
namespace {

int64_t Median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  return v[mid];
}

// One file's per-token rows, in token order.
class TokenCursor {
 public:
  bool Start(const RankFile& f, std::string* error) {
    sqlite3* db = f.reader->db();
    if (f.reader->has_summaries() && f.reader->schema_version() >= kFirstCollectiveSchema) {
      // The writer kept each token's time in collectives (token_stats.wait_ns,
      // gpu_collective_ns: the sums below, schema.sql): one row a token, no call read; the
      // tokens with calls, as below (a CUDA-graph replay has none). Its GPU time is the
      // token's (token_stats.gpu_busy_ns): kernels launched outside any call count too.
      if (!q_.Prepare(db,
                      "SELECT token, CASE WHEN cpu_begin_ns IS NOT NULL AND cpu_end_ns IS NOT "
                      "NULL THEN cpu_end_ns - cpu_begin_ns END, wait_ns, gpu_busy_ns, "
                      "gpu_collective_ns FROM token_stats WHERE token > 0 AND calls > 0 "
                      "ORDER BY token",
                      error)) {
        return Fail(f, error);
      }
      return Next(f, error);
    }
    Statement sites;
    if (!sites.Prepare(db, "SELECT id, name FROM sites", error)) return Fail(f, error);
    std::string ids;
    while (sites.Step() == SQLITE_ROW) {
      if (!IsCollectiveSite(sites.Text(1))) continue;
      ids += (ids.empty() ? "" : ",") + std::to_string(sites.Int(0));
    }
    // One token's calls at a time, in token order, no sort: before schema 4 GROUP BY token
    // walks calls_by_token; schema 4 files have no index on calls, and their tokens are walked
    // in token_stats (CROSS JOIN keeps it the outer loop), each token's calls a range of ids
    // (`+c.token`: no automatic index on calls(token), which would sort them all first).
    // A collective inside a collective (a module "all_reduce" around c10d::all_reduce) is
    // counted once: only calls whose parent is not a collective add to the wait.
    // GPU: call_gpu holds each call's own (self) kernel time, so the GPU time of a
    // collective is that of every collective call, nested or not (NCCL kernels launched
    // inside c10d::all_reduce go to it), plus, in any other call, the time of kernels that
    // are communication by name (gpu_comm_ns: NCCL kernels launched by code we do not wrap).
    // Version 3 added gpu_comm_ns; older files have no communication time (0).
    const std::string comm = f.reader->schema_version() >= 3 ? "COALESCE(g.gpu_comm_ns, 0)" : "0";
    const std::string outermost = "c.site_id IN (" + ids +
                                  ") AND (c.parent_id IS NULL OR (SELECT site_id FROM calls "
                                  "WHERE id = c.parent_id) NOT IN (" +
                                  ids + "))";
    const bool walk = f.reader->has_summaries();
    const std::string token = walk ? "t.token" : "c.token";
    const std::string from =
        walk ? "FROM token_stats t CROSS JOIN calls c ON c.id BETWEEN t.first_call AND "
               "t.last_call AND +c.token = t.token "
             : "FROM calls c ";
    const std::string sql =
        "SELECT " + token +
        ", SUM(CASE WHEN s.is_token = 1 THEN c.cpu_end_ns - c.cpu_begin_ns END), "
        "SUM(CASE WHEN " +
        outermost +
        " THEN c.cpu_end_ns - c.cpu_begin_ns ELSE 0 END), "
        "SUM(COALESCE(g.gpu_busy_ns, 0)), "
        "SUM(CASE WHEN c.site_id IN (" +
        ids + ") THEN COALESCE(g.gpu_busy_ns, 0) ELSE " + comm + " END) " + from +
        "JOIN sites s ON s.id = c.site_id "
        "LEFT JOIN call_gpu g ON g.call_id = c.id "
        "WHERE " +
        token + " > 0 GROUP BY " + token + " ORDER BY " + token;
    if (!q_.Prepare(db, sql.c_str(), error)) return Fail(f, error);
    return Next(f, error);
  }
  // Advances to the next token; done() when there is none.
  bool Next(const RankFile& f, std::string* error) {
    const int rc = q_.Step();
    if (rc == SQLITE_DONE) {
      done_ = true;
      return true;
    }
    if (rc != SQLITE_ROW) {
      *error = sqlite3_errmsg(f.reader->db());
      return Fail(f, error);
    }
    token_ = static_cast<uint32_t>(q_.Int(0));
    closed_ = !q_.IsNull(1);
    time_ns_ = q_.Int(1);
    wait_ns_ = q_.Int(2);
    gpu_ns_ = q_.Int(3);
    gpu_collective_ns_ = q_.Int(4);
    return true;
  }
  bool done() const { return done_; }
  uint32_t token() const { return token_; }
  bool closed() const { return closed_; }  // the token call ended (else: cut off)
  int64_t time_ns() const { return time_ns_; }
  int64_t wait_ns() const { return wait_ns_; }
  int64_t gpu_ns() const { return gpu_ns_; }
  int64_t gpu_collective_ns() const { return gpu_collective_ns_; }

 private:
  static bool Fail(const RankFile& f, std::string* error) {
    *error = "tokentrace: cannot read '" + f.path + "': " + *error;
    return false;
  }
  Statement q_;
  bool done_ = false, closed_ = false;
  uint32_t token_ = 0;
  int64_t time_ns_ = 0, wait_ns_ = 0, gpu_ns_ = 0, gpu_collective_ns_ = 0;
};

// Self time per site name of one token of one file (a call's time minus its children's).
bool SelfTimes(const RankFile& f, uint32_t token, std::map<std::string, int64_t>* out,
               std::string* error) {
  Statement q;
  if (!q.Prepare(f.reader->db(),
                 ("SELECT c.id, c.parent_id, s.name, c.cpu_end_ns - c.cpu_begin_ns FROM " +
                  f.reader->CallsOfTokens("?1", "?1") +
                  " c JOIN sites s ON s.id = c.site_id WHERE c.cpu_end_ns IS NOT NULL")
                     .c_str(),
                 error)) {
    *error = "tokentrace: cannot read '" + f.path + "': " + *error;
    return false;
  }
  q.Bind(1, static_cast<int64_t>(token));
  struct Call {
    int64_t parent;
    std::string site;
    int64_t self;
  };
  std::unordered_map<int64_t, Call> calls;
  while (q.Step() == SQLITE_ROW) {
    calls[q.Int(0)] = {q.IsNull(1) ? 0 : q.Int(1), q.Text(2), q.Int(3)};
  }
  std::unordered_map<int64_t, int64_t> children;
  for (const auto& [id, c] : calls) {
    if (calls.count(c.parent) != 0) children[c.parent] += c.self;
  }
  for (const auto& [id, c] : calls) {
    (*out)[c.site] += c.self - (children.count(id) != 0 ? children[id] : 0);
  }
  return true;
}

}  // namespace

bool CompareRanks(const std::vector<RankFile>& files, size_t top, Comparison* out,
                  std::string* error) {
  const size_t n = files.size();
  std::vector<std::unique_ptr<TokenCursor>> cursors;
  for (const RankFile& f : files) {
    cursors.push_back(std::make_unique<TokenCursor>());
    if (!cursors.back()->Start(f, error)) return false;
  }
  out->ranks.assign(n, RankTotals{});
  std::vector<size_t> present;
  std::vector<int64_t> work(n), time(n), wait(n), others, waits;
  while (true) {
    bool any = false;
    uint32_t token = 0;
    for (const auto& c : cursors) {
      if (c->done()) continue;
      token = any ? std::min(token, c->token()) : c->token();
      any = true;
    }
    if (!any) break;
    present.clear();
    for (size_t i = 0; i < n; ++i) {
      TokenCursor& c = *cursors[i];
      if (c.done() || c.token() != token) continue;
      if (c.closed()) {
        RankTotals& r = out->ranks[i];
        ++r.tokens;
        r.last_token = token;
        r.time_ns += c.time_ns();
        r.wait_ns += c.wait_ns();
        r.gpu_ns += c.gpu_ns();
        r.gpu_collective_ns += c.gpu_collective_ns();
        time[i] = c.time_ns();
        wait[i] = c.wait_ns();
        work[i] = c.time_ns() - c.wait_ns();
        present.push_back(i);
      }
      if (!c.Next(files[i], error)) return false;
    }
    out->max_token = std::max(out->max_token, token);
    if (present.size() < 2) continue;
    ++out->compared_tokens;
    size_t slow = present.front();
    for (size_t i : present) {
      if (work[i] > work[slow]) slow = i;
    }
    Straggler s;
    s.token = token;
    s.slow = slow;
    s.time_ns = time[slow];
    s.work_ns = work[slow];
    others.clear();
    waits.clear();
    for (size_t i : present) {
      if (i == slow) continue;
      others.push_back(work[i]);
      waits.push_back(wait[i]);
    }
    s.others_work_ns = Median(others);
    s.others_wait_ns = Median(waits);
    s.lead_ns = s.work_ns - s.others_work_ns;
    if (s.lead_ns <= 0) continue;  // a tie: nobody held the others up
    ++out->ranks[slow].slowest;
    if (out->top.size() < top || s.lead_ns > out->top.back().lead_ns) {
      out->top.push_back(s);
      std::sort(out->top.begin(), out->top.end(),
                [](const Straggler& a, const Straggler& b) { return a.lead_ns > b.lead_ns; });
      if (out->top.size() > top) out->top.pop_back();
    }
  }
  return true;
}

bool SiteLosses(const std::vector<RankFile>& files, size_t slow, uint32_t token, size_t limit,
                std::vector<SiteLoss>* out, std::string* error) {
  std::map<std::string, int64_t> mine;
  if (!SelfTimes(files[slow], token, &mine, error)) return false;
  std::map<std::string, std::vector<int64_t>> theirs;
  size_t others = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i == slow) continue;
    std::map<std::string, int64_t> t;
    if (!SelfTimes(files[i], token, &t, error)) return false;
    if (t.empty()) continue;  // this rank has no such token
    ++others;
    for (const auto& [site, ns] : t) theirs[site].push_back(ns);
  }
  for (const auto& [site, ns] : mine) {
    std::vector<int64_t> v = theirs[site];
    v.resize(others, 0);  // ranks without the site spent 0 there
    SiteLoss l{site, ns, Median(v)};
    if (l.slow_ns > l.others_ns) out->push_back(l);
  }
  std::sort(out->begin(), out->end(), [](const SiteLoss& a, const SiteLoss& b) {
    return a.slow_ns - a.others_ns > b.slow_ns - b.others_ns;
  });
  if (out->size() > limit) out->resize(limit);
  return true;
}

}  // namespace tokentrace::multi
