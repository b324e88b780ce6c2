#include "store/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>

#include "core/fd_guard.h"
#include "store/added_rows_sql.h"
#include "store/schema.h"
#include "store/statement.h"
#include "store/summaries.h"
#include "store/token_digest.h"

namespace tokentrace {

struct Store::Statements {
  Statement begin, commit, rollback;
  Statement meta, site, string, call, call_block, kernel, kernel_block, call_gpu, escape, output,
      output_block, link, link_block, loss, token_stats, token_stats_block, site_stats, site_block,
      site_block_block, site_stats_block, token_row, token_totals, token_hist, token_slowest,
      token_slowest_floor, token_slowest_trim;
  // The Python layer's rows, by their INSERT's text (one per table and columns).
  std::map<std::string, std::unique_ptr<Statement>> added;
};

namespace {

std::string CannotWrite(const std::string& path, const std::string& reason) {
  return "tokentrace: cannot write '" + path + "': " + reason;
}

// Removes a stale file; a missing one is fine.
bool RemoveIfPresent(const std::string& path, std::string* reason) {
  if (unlink(path.c_str()) == 0 || errno == ENOENT) return true;
  *reason = "cannot remove the old '" + path + "' (" + std::strerror(errno) + ")";
  return false;
}

// The many-row tables (kernels, and calls and outputs from the Python hooks) are written in
// blocks of this many rows per INSERT statement: one step per block instead of one per row
// halves the per-row cost or better (statement start, cursor open, halt and reset dominate a
// single-row insert). 64 rows * 11 columns = 704 parameters at most.
constexpr int kBlockRows = 64;
constexpr int kKernelColumns = 11;
constexpr int kCallColumns = 8;
constexpr int kOutputColumns = 4;
constexpr char kCallsInsert[] = "INSERT OR REPLACE INTO calls VALUES";
constexpr char kKernelsInsert[] = "INSERT INTO kernels VALUES";
constexpr char kOutputsInsert[] = "INSERT INTO call_outputs VALUES";
constexpr int kLinkColumns = 3;
constexpr char kLinksInsert[] = "INSERT INTO op_links VALUES";

// "<head> (?,?,..),(?,?,..)..." for `rows` rows of `columns` parameters.
std::string InsertSql(const char* head, int rows, int columns) {
  std::string sql = head;
  for (int r = 0; r < rows; ++r) {
    sql += r == 0 ? "(" : ",(";
    for (int c = 0; c < columns; ++c) sql += c == 0 ? "?" : ",?";
    sql += ")";
  }
  return sql;
}

// Writes `rows` with `block` (kBlockRows rows per step) and the rest with `single`;
// bind(statement, first parameter, row) binds one row. False on the first failed step.
template <typename Row, typename Bind>
bool WriteInBlocks(const std::vector<Row>& rows, int columns, Statement& block, Statement& single,
                   Bind bind) {
  const size_t n = rows.size();
  size_t i = 0;
  for (; i + kBlockRows <= n; i += kBlockRows) {
    for (int r = 0; r < kBlockRows; ++r) bind(block, 1 + r * columns, rows[i + r]);
    if (!block.Run()) return false;
  }
  for (; i < n; ++i) {
    bind(single, 1, rows[i]);
    if (!single.Run()) return false;
  }
  return true;
}

void BindCall(Statement& c, int first, const CallRow& r) {
  c.Bind(first, static_cast<int64_t>(r.id));
  c.Bind(first + 1, r.site_id);
  c.Bind(first + 2, r.k);
  c.Bind(first + 3, r.token);
  if (r.parent_id == 0)
    c.BindNull(first + 4);
  else
    c.Bind(first + 4, static_cast<int64_t>(r.parent_id));
  c.Bind(first + 5, r.thread);
  c.Bind(first + 6, r.cpu_begin_ns);
  if (r.cpu_end_ns == -1)
    c.BindNull(first + 7);
  else
    c.Bind(first + 7, r.cpu_end_ns);
}

// The token_stats upsert of `rows` rows (Summaries::TokenDelta, kTokenColumns each).
constexpr int kTokenColumns = 13;
std::string TokenStatsSql(int rows) {
  return InsertSql(
             "INSERT INTO token_stats(token, kernels, gpu_busy_ns, escapes, cpu_begin_ns, "
             "cpu_end_ns, k, calls, listed, first_call, last_call, wait_ns, gpu_collective_ns) "
             "VALUES",
             rows, kTokenColumns) +
         " ON CONFLICT(token) DO UPDATE SET "
         "kernels = kernels + excluded.kernels, "
         "gpu_busy_ns = gpu_busy_ns + excluded.gpu_busy_ns, "
         "escapes = escapes + excluded.escapes, "
         "cpu_begin_ns = coalesce(min(cpu_begin_ns, excluded.cpu_begin_ns), cpu_begin_ns, "
         "  excluded.cpu_begin_ns), "
         "cpu_end_ns = coalesce(max(cpu_end_ns, excluded.cpu_end_ns), cpu_end_ns, "
         "  excluded.cpu_end_ns), "
         "k = coalesce(min(k, excluded.k), k, excluded.k), "
         "calls = calls + excluded.calls, listed = max(listed, excluded.listed), "
         "first_call = coalesce(min(first_call, excluded.first_call), first_call, "
         "  excluded.first_call), "
         "last_call = coalesce(max(last_call, excluded.last_call), last_call, "
         "  excluded.last_call), "
         "wait_ns = wait_ns + excluded.wait_ns, "
         "gpu_collective_ns = gpu_collective_ns + excluded.gpu_collective_ns";
}

void BindTokenStats(Statement& q, int first, const std::pair<uint32_t, Summaries::TokenDelta>& r) {
  const Summaries::TokenDelta& t = r.second;
  q.Bind(first, r.first);
  q.Bind(first + 1, t.kernels);
  q.Bind(first + 2, t.gpu_busy_ns);
  q.Bind(first + 3, t.escapes);
  if (t.has_token_call) {
    q.Bind(first + 4, t.cpu_begin_ns);
    q.Bind(first + 6, t.k);
  } else {
    q.BindNull(first + 4);
    q.BindNull(first + 6);
  }
  if (t.cpu_end_ns >= 0) {
    q.Bind(first + 5, t.cpu_end_ns);
  } else {
    q.BindNull(first + 5);
  }
  q.Bind(first + 7, t.calls);
  q.Bind(first + 8, t.listed ? 1 : 0);
  if (t.calls > 0) {
    q.Bind(first + 9, static_cast<int64_t>(t.first_call));
    q.Bind(first + 10, static_cast<int64_t>(t.last_call));
  } else {
    q.BindNull(first + 9);
    q.BindNull(first + 10);
  }
  q.Bind(first + 11, t.wait_ns);
  q.Bind(first + 12, t.gpu_collective_ns);
}

// The site_stats upsert of `rows` rows ((site, phase), Summaries::SiteDelta).
constexpr int kSiteStatsColumns = 9;
std::string SiteStatsSql(int rows) {
  return InsertSql("INSERT INTO site_stats VALUES", rows, kSiteStatsColumns) +
         " ON CONFLICT(site_id, phase) DO UPDATE SET calls = calls + excluded.calls, "
         "cpu_ns = cpu_ns + excluded.cpu_ns, cpu_self_ns = cpu_self_ns + excluded.cpu_self_ns, "
         "kernels = kernels + excluded.kernels, "
         "gpu_busy_ns = gpu_busy_ns + excluded.gpu_busy_ns, "
         "top_calls = top_calls + excluded.top_calls, "
         "top_cpu_ns = top_cpu_ns + excluded.top_cpu_ns";
}

void BindSiteStats(Statement& q, int first,
                   const std::pair<std::pair<uint32_t, int>, Summaries::SiteDelta>& r) {
  const Summaries::SiteDelta& d = r.second;
  q.Bind(first, r.first.first);
  q.Bind(first + 1, r.first.second);
  q.Bind(first + 2, d.calls);
  q.Bind(first + 3, d.cpu_ns);
  q.Bind(first + 4, d.cpu_self_ns);
  q.Bind(first + 5, d.kernels);
  q.Bind(first + 6, d.gpu_busy_ns);
  q.Bind(first + 7, d.top_calls);
  q.Bind(first + 8, d.top_cpu_ns);
}

// The site_blocks upsert of `rows` rows ((site, block), self ns).
constexpr int kSiteBlockColumns = 3;
std::string SiteBlocksSql(int rows) {
  return InsertSql("INSERT INTO site_blocks VALUES", rows, kSiteBlockColumns) +
         " ON CONFLICT(site_id, block) DO UPDATE SET "
         "cpu_self_ns = cpu_self_ns + excluded.cpu_self_ns";
}

void BindSiteBlock(Statement& q, int first,
                   const std::pair<std::pair<uint32_t, int64_t>, int64_t>& r) {
  q.Bind(first, r.first.first);
  q.Bind(first + 1, r.first.second);
  q.Bind(first + 2, r.second);
}

void BindOutput(Statement& o, int first, const OutputRow& r) {
  o.Bind(first, static_cast<int64_t>(r.call_id));
  o.Bind(first + 1, r.path);
  o.Bind(first + 2, r.shape);
  o.Bind(first + 3, r.dtype);
}

void BindLink(Statement& o, int first, const LinkRow& r) {
  o.Bind(first, static_cast<int64_t>(r.call_id));
  o.Bind(first + 1, r.inputs);
  o.Bind(first + 2, r.outputs);
}

// Binds one kernel row at parameters first .. first+10.
void BindKernel(Statement& k, int first, const KernelRow& r) {
  if (r.call_id == 0)
    k.BindNull(first);
  else
    k.Bind(first, static_cast<int64_t>(r.call_id));
  k.Bind(first + 1, r.token);
  k.Bind(first + 2, r.name_id);
  k.Bind(first + 3, static_cast<int64_t>(r.kind));
  k.Bind(first + 4, r.device);
  k.Bind(first + 5, r.stream);
  k.Bind(first + 6, r.gpu_begin_ns);
  k.Bind(first + 7, r.gpu_end_ns);
  k.Bind(first + 8, static_cast<int64_t>(r.correlation_id));
  k.Bind(first + 9, r.graph_id);
  k.Bind(first + 10, static_cast<int64_t>(r.graph_node_id));
}

// The token_stats rows of the tokens a batch touched (`tokens`, in token order), as the token
// digest counts them (present false: no row yet), into `out` in the same order. Tokens close
// together (a batch's are consecutive, token 0 aside) are read with one range query.
void ReadTokenRows(Statement& q,
                   const std::vector<std::pair<uint32_t, Summaries::TokenDelta>>& tokens,
                   std::vector<TokenRowState>* out) {
  constexpr uint32_t kMaxGap = 64;
  out->assign(tokens.size(), TokenRowState());
  for (size_t i = 0; i < tokens.size(); ++i) (*out)[i].token = tokens[i].first;
  size_t begin = 0;
  while (begin < tokens.size()) {
    size_t end = begin + 1;
    while (end < tokens.size() && tokens[end].first - tokens[end - 1].first <= kMaxGap) ++end;
    q.Bind(1, tokens[begin].first);
    q.Bind(2, tokens[end - 1].first);
    size_t at = begin;
    while (q.Step() == SQLITE_ROW) {
      const uint32_t token = static_cast<uint32_t>(q.Int(0));
      while (at < end && tokens[at].first < token) ++at;
      if (at == end) break;
      if (tokens[at].first != token) continue;
      TokenRowState& r = (*out)[at];
      r.present = true;
      r.listed = q.Int(1) != 0;
      r.replay = q.Int(2) != 0;
      r.closed = q.Int(3) != 0;
      r.cpu_ns = r.closed ? q.Int(4) : 0;
      r.gpu_busy_ns = q.Int(5);
      r.kernels = q.Int(6);
      r.escapes = q.Int(7);
    }
    q.Reset();
    begin = end;
  }
}

// The token_stats row the upsert inserts for a token it has no row of: the delta's values.
TokenRowState InsertedRow(uint32_t token, const Summaries::TokenDelta& d) {
  TokenRowState r;
  r.present = true;
  r.token = token;
  r.listed = d.listed;
  r.replay = !d.has_token_call;
  r.closed = d.has_token_call && d.cpu_end_ns >= 0;
  r.cpu_ns = r.closed ? d.cpu_end_ns - d.cpu_begin_ns : 0;
  r.gpu_busy_ns = d.gpu_busy_ns;
  r.kernels = d.kernels;
  r.escapes = d.escapes;
  return r;
}

}  // namespace

Store::Store(std::string path)
    : path_(std::move(path)), summaries_(new Summaries), digest_(new TokenDigestDelta) {}

Store::~Store() { Close(); }

std::unique_ptr<Store> Store::Open(const std::string& path, std::string* error) {
  if (path.empty()) {
    *error = CannotWrite(path, "the path is empty");
    return nullptr;
  }
  std::string parent = DirOf(path);
  struct stat st;
  if (stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = CannotWrite(path, "the directory '" + parent + "' does not exist");
    return nullptr;
  }
  if (BeingWritten(path)) {
    *error = CannotWrite(path,
                         "another process is writing it (a trace being recorded is never "
                         "replaced; choose another path)");
    return nullptr;
  }
  // Truncate: a previous run's WAL must not be replayed into the new file.
  std::string reason;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (!RemoveIfPresent(path + suffix, &reason)) {
      *error = CannotWrite(path, reason);
      return nullptr;
    }
  }
  std::unique_ptr<Store> store(new Store(path));
  if (!store->Connect(error)) {
    // What was made of the file goes (a full disk stops the schema half way): it is not a
    // trace, and a later Open, or another run, must not find it in the way.
    store.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) unlink((path + suffix).c_str());
    return nullptr;
  }
  return store;
}

bool Store::Connect(std::string* error) {
  const std::vector<int> before = DescriptorsOfPath();
  sqlite3* db = nullptr;
  // NOMUTEX: a Store is used by one thread at a time (the background writer), so SQLite's
  // per-connection mutex is pure overhead (~20% of a kernel row's cost).
  int rc =
      sqlite3_open_v2(path_.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    int sys = db != nullptr ? sqlite3_system_errno(db) : 0;
    *error = CannotWrite(path_, sys != 0 ? std::strerror(sys) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return false;
  }
  db_ = db;
  st_ = std::make_unique<Statements>();
  sqlite3_busy_timeout(db, 2000);
  char* msg = nullptr;
  // page_size=16 KiB (set before WAL, while the file is empty): fewer page splits and page
  // headers per row (1.6x faster kernel inserts than 4 KiB); larger pages made small commits
  // rewrite too many bytes into the WAL.
  // WAL: readers in other processes never block the writer and a killed writer leaves a
  // consistent file. synchronous=NORMAL: no fsync per commit (a power loss may drop the
  // last commits, a process crash drops nothing committed).
  // cache_size=4 MiB: the writer only appends (rowid order), so it needs the right edges of the
  // trees and one drain's dirty pages; the cache is what the writer adds to the job's resident
  // memory as the file grows (a 16 MiB cache wrote no faster: store_bench, 2026-11-30). On a file
  // that exists (written again after a deletion) page_size is ignored and the schema's CREATE ...
  // IF NOT EXISTS change nothing.
  const std::string setup = std::string(
                                "PRAGMA page_size=16384; PRAGMA journal_mode=WAL; "
                                "PRAGMA synchronous=NORMAL; PRAGMA cache_size=-4096; BEGIN;") +
                            kSchemaSql + "INSERT OR REPLACE INTO meta VALUES('schema_version','" +
                            kSchemaVersion + "'); INSERT OR REPLACE INTO meta VALUES('" +
                            kMetaSummaries + "','1'); INSERT OR REPLACE INTO meta VALUES('" +
                            kMetaTokenBlock + "','" + std::to_string(kTokenBlock) + "'); COMMIT;";
  if (sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &msg) != SQLITE_OK) {
    int sys = sqlite3_system_errno(db);
    *error = CannotWrite(path_, sys != 0 ? std::strerror(sys) : (msg ? msg : "schema failed"));
    sqlite3_free(msg);
    return false;
  }
  std::string reason;
  if (!Prepare(&reason)) {
    *error = CannotWrite(path_, reason);
    return false;
  }
  lock_fd_ = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (lock_fd_ >= 0) flock(lock_fd_, LOCK_SH | LOCK_NB);
  // Best effort: without O_TMPFILE or the space, the file simply has no reserve.
  reserve_fd_ = open(DirOf(path_).c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (reserve_fd_ >= 0 && posix_fallocate(reserve_fd_, 0, kReserveBytes) != 0) ReleaseReserve();
  HoldDescriptors(before);
  return true;
}

std::vector<int> Store::DescriptorsOfPath() const {
  std::vector<int> fds;
  char real[PATH_MAX];
  if (realpath(DirOf(path_).c_str(), real) == nullptr) return fds;
  const char* slash = strrchr(path_.c_str(), '/');
  const std::string name = std::string(real) + "/" + (slash != nullptr ? slash + 1 : path_.c_str());
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  char link[PATH_MAX];
  while (dirent* e = readdir(dir)) {
    const int fd = atoi(e->d_name);
    if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(dir)) continue;
    const ssize_t n = readlinkat(dirfd(dir), e->d_name, link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    const std::string target(link, static_cast<size_t>(n));
    if (target == name || target == name + "-wal" || target == name + "-shm") fds.push_back(fd);
  }
  closedir(dir);
  return fds;
}

void Store::HoldDescriptors(const std::vector<int>& before) {
  std::vector<int> fds;
  for (int fd : DescriptorsOfPath()) {
    if (std::find(before.begin(), before.end(), fd) == before.end()) fds.push_back(fd);
  }
  for (int fd : {lock_fd_, reserve_fd_}) {
    if (fd >= 0 && std::find(fds.begin(), fds.end(), fd) == fds.end()) fds.push_back(fd);
  }
  held_.clear();
  for (int fd : fds) {
    struct stat st;
    if (fstat(fd, &st) != 0) continue;
    held_.push_back({fd, st.st_dev, st.st_ino});
    fd_guard::Guard(fd);
  }
}

bool Store::Intact(bool* deleted) {
  *deleted = false;
  for (const Held& h : held_) {
    struct stat st;
    if (fstat(h.fd, &st) != 0 || st.st_dev != h.dev || st.st_ino != h.ino) {
      Abandon("the job closed or reused its descriptor " + std::to_string(h.fd) +
              ", so nothing more is written to it");
      return false;
    }
    if (h.fd == lock_fd_ && st.st_nlink == 0) *deleted = true;
  }
  return true;
}

bool Store::CheckFiles(std::string* error) {
  bool deleted = false;
  if (!lost_.empty() || !Intact(&deleted)) {
    *error = CannotWrite(path_, lost_);
    return false;
  }
  return !deleted || WriteAgainAtPath(error);
}

void Store::Abandon(const std::string& why) {
  lost_ = why;
  // SQLite would close the descriptors: they are the job's now. The connection is kept
  // (leaked) and never used again.
  (void)st_.release();
  db_ = nullptr;
  for (const Held& h : held_) fd_guard::Unguard(h.fd);
  held_.clear();
  lock_fd_ = -1;
  reserve_fd_ = -1;
}

bool Store::WriteAgainAtPath(std::string* error) {
  // The rows so far are copied out of the deleted file (still open here) into a new one
  // beside it, which then takes the path; what is written next goes to that one.
  const std::string dir = DirOf(path_);
  const char* slash = strrchr(path_.c_str(), '/');
  const std::string copy_path = dir + "/.tokentrace-" + std::to_string(getpid()) + "-" +
                                (slash != nullptr ? slash + 1 : path_.c_str());
  auto fail = [&](const std::string& reason) {
    *error = CannotWrite(path_,
                         "it was deleted while the job wrote it, and cannot be made "
                         "again (" +
                             reason + ")");
    unlink(copy_path.c_str());
    return false;
  };
  unlink(copy_path.c_str());
  sqlite3* copy = nullptr;
  if (sqlite3_open_v2(copy_path.c_str(), &copy, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                      nullptr) != SQLITE_OK) {
    const std::string reason = copy != nullptr ? sqlite3_errmsg(copy) : "out of memory";
    sqlite3_close(copy);
    return fail(reason);
  }
  sqlite3_backup* backup = sqlite3_backup_init(copy, "main", db_, "main");
  int rc = backup != nullptr ? sqlite3_backup_step(backup, -1) : sqlite3_errcode(copy);
  if (backup != nullptr) sqlite3_backup_finish(backup);
  std::string reason = rc == SQLITE_DONE ? "" : sqlite3_errmsg(copy);
  if (rc == SQLITE_DONE &&
      sqlite3_exec(copy, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr) != SQLITE_OK) {
    reason = sqlite3_errmsg(copy);
  }
  sqlite3_close(copy);
  if (!reason.empty()) return fail(reason);
  Close();  // the deleted file goes with its last descriptor
  if (rename(copy_path.c_str(), path_.c_str()) != 0) {
    lost_ = std::string(
                "it was deleted while the job wrote it, and its copy could not take its "
                "place (") +
            std::strerror(errno) + ")";
    *error = CannotWrite(path_, lost_);
    unlink(copy_path.c_str());
    return false;
  }
  if (!Connect(error)) {
    lost_ = *error;
    return false;
  }
  notice_ = "tokentrace: '" + path_ +
            "' was deleted while the job wrote it; it is written again at that path, with "
            "everything it held";
  return true;
}

bool Store::Prepare(std::string* error) {
  Statements& s = *st_;
  return s.begin.Prepare(db_, "BEGIN", error) && s.commit.Prepare(db_, "COMMIT", error) &&
         s.rollback.Prepare(db_, "ROLLBACK", error) &&
         s.meta.Prepare(db_,
                        "INSERT INTO meta VALUES(?1,?2) "
                        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                        error) &&
         s.site.Prepare(db_, "INSERT OR REPLACE INTO sites VALUES(?1,?2,?3,?4)", error) &&
         s.string.Prepare(db_, "INSERT OR REPLACE INTO strings VALUES(?1,?2)", error) &&
         s.call.Prepare(db_, InsertSql(kCallsInsert, 1, kCallColumns).c_str(), error) &&
         s.call_block.Prepare(db_, InsertSql(kCallsInsert, kBlockRows, kCallColumns).c_str(),
                              error) &&
         s.kernel.Prepare(db_, InsertSql(kKernelsInsert, 1, kKernelColumns).c_str(), error) &&
         s.kernel_block.Prepare(db_, InsertSql(kKernelsInsert, kBlockRows, kKernelColumns).c_str(),
                                error) &&
         // All right-hand sides see the old row, so `kernels = 0` means "no kernel yet":
         // a delta without kernels must not pull first_begin down to its 0.
         s.call_gpu.Prepare(
             db_,
             "INSERT INTO call_gpu VALUES(?1,?2,?3,?4,?5,?6) ON CONFLICT(call_id) DO UPDATE SET "
             "kernels = kernels + excluded.kernels, "
             "gpu_busy_ns = gpu_busy_ns + excluded.gpu_busy_ns, "
             "gpu_comm_ns = gpu_comm_ns + excluded.gpu_comm_ns, "
             "gpu_first_begin_ns = CASE WHEN excluded.kernels = 0 THEN gpu_first_begin_ns "
             "  WHEN kernels = 0 THEN excluded.gpu_first_begin_ns "
             "  ELSE min(gpu_first_begin_ns, excluded.gpu_first_begin_ns) END, "
             "gpu_last_end_ns = CASE WHEN excluded.kernels = 0 THEN gpu_last_end_ns "
             "  WHEN kernels = 0 THEN excluded.gpu_last_end_ns "
             "  ELSE max(gpu_last_end_ns, excluded.gpu_last_end_ns) END",
             error) &&
         s.escape.Prepare(db_, "INSERT INTO escapes VALUES(?1,?2,?3,?4,?5)", error) &&
         s.output.Prepare(db_, InsertSql(kOutputsInsert, 1, kOutputColumns).c_str(), error) &&
         s.output_block.Prepare(db_, InsertSql(kOutputsInsert, kBlockRows, kOutputColumns).c_str(),
                                error) &&
         s.link.Prepare(db_, InsertSql(kLinksInsert, 1, kLinkColumns).c_str(), error) &&
         s.link_block.Prepare(db_, InsertSql(kLinksInsert, kBlockRows, kLinkColumns).c_str(),
                              error) &&
         s.loss.Prepare(db_,
                        "INSERT INTO losses VALUES(?1,?2) "
                        "ON CONFLICT(kind) DO UPDATE SET count = count + excluded.count",
                        error) &&
         // Per token (Summaries::TokenDelta): sums add up; begin, k and end keep the
         // earliest, lowest and latest of the token calls (NULL: none yet). In blocks, as
         // calls: a short token (a dozen calls) makes its row a large part of the writing.
         s.token_stats.Prepare(db_, TokenStatsSql(1).c_str(), error) &&
         s.token_stats_block.Prepare(db_, TokenStatsSql(kBlockRows).c_str(), error) &&
         s.site_stats.Prepare(db_, SiteStatsSql(1).c_str(), error) &&
         s.site_stats_block.Prepare(db_, SiteStatsSql(kBlockRows).c_str(), error) &&
         s.site_block.Prepare(db_, SiteBlocksSql(1).c_str(), error) &&
         s.site_block_block.Prepare(db_, SiteBlocksSql(kBlockRows).c_str(), error) &&
         // The token digest (store/token_digest.h): a token_stats row as it counts it, and the
         // upserts of its differences.
         s.token_row.Prepare(db_,
                             "SELECT token, listed, cpu_begin_ns IS NULL, "
                             "cpu_begin_ns IS NOT NULL AND cpu_end_ns IS NOT NULL, "
                             "cpu_end_ns - cpu_begin_ns, gpu_busy_ns, kernels, escapes "
                             "FROM token_stats WHERE token BETWEEN ?1 AND ?2 ORDER BY token",
                             error) &&
         s.token_totals.Prepare(
             db_,
             "INSERT INTO token_totals VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9) "
             "ON CONFLICT(phase) DO UPDATE SET tokens = tokens + excluded.tokens, "
             "replays = replays + excluded.replays, closed = closed + excluded.closed, "
             "cpu_ns = cpu_ns + excluded.cpu_ns, gpu_busy_ns = gpu_busy_ns + excluded.gpu_busy_ns, "
             "kernels = kernels + excluded.kernels, escapes = escapes + excluded.escapes, "
             "max_gpu_busy_ns = max(max_gpu_busy_ns, excluded.max_gpu_busy_ns)",
             error) &&
         s.token_hist.Prepare(db_,
                              "INSERT INTO token_hist VALUES(?1,?2,?3,?4) "
                              "ON CONFLICT(phase, what, bucket) DO UPDATE SET "
                              "count = count + excluded.count",
                              error) &&
         s.token_slowest.Prepare(db_,
                                 "INSERT INTO token_slowest VALUES(?1,?2) "
                                 "ON CONFLICT(token) DO UPDATE SET cpu_ns = excluded.cpu_ns",
                                 error) &&
         s.token_slowest_floor.Prepare(
             db_,
             "SELECT (SELECT count(*) FROM token_slowest), cpu_ns, token FROM token_slowest "
             "ORDER BY cpu_ns ASC, token DESC LIMIT 1",
             error) &&
         s.token_slowest_trim.Prepare(
             db_,
             ("DELETE FROM token_slowest WHERE token NOT IN (SELECT token FROM token_slowest "
              "ORDER BY cpu_ns DESC, token ASC LIMIT " +
              std::to_string(kSlowestTokens) + ")")
                 .c_str(),
             error);
}

bool Store::Write(const Batch& batch, std::string* error) {
  if (db_ == nullptr && lost_.empty()) {
    *error = CannotWrite(path_, "the store is closed");
    return false;
  }
  if (batch.empty()) return true;
  if (!CheckFiles(error)) return false;
  if (!st_->begin.Run()) {
    *error = CannotWrite(path_, sqlite3_errmsg(db_));
    return false;
  }
  bool written = false, no_memory = false;
  try {
    summaries_->Fold(batch);
    written = WriteRows(batch, error) && WriteSummaries(error) && st_->commit.Run();
    if (!written && error->empty()) *error = CannotWrite(path_, sqlite3_errmsg(db_));
  } catch (const std::bad_alloc&) {
    no_memory = true;  // the summaries or a statement's text: the transaction goes
  }
  if (!written) {
    st_->rollback.Run();
    summaries_->Rollback();
    try {
      summaries_->Refused(batch);
    } catch (const std::bad_alloc&) {
      // not remembered: later GPU work of these calls may count at their sites
    }
    slowest_floor_ns_ = -1;
    if (no_memory) {
      try {
        *error = CannotWrite(path_, "out of memory");
      } catch (const std::bad_alloc&) {
        error->clear();  // the caller still sees the failure
      }
    }
    return false;
  }
  summaries_->Commit();
  return true;
}

bool Store::WriteAdded(const AddedRows& rows, std::string* error) {
  const std::string sql = AddedRowsInsertSql(rows.table, rows.columns);
  std::unique_ptr<Statement>& st = st_->added[sql];
  if (st == nullptr) {
    auto prepared = std::make_unique<Statement>();
    if (!prepared->Prepare(db_, sql.c_str(), error)) {
      st_->added.erase(sql);
      *error = CannotWrite(path_, *error);
      return false;
    }
    st = std::move(prepared);
  }
  const size_t width = rows.columns.size();
  for (size_t at = 0; at + width <= rows.values.size(); at += width) {
    for (size_t c = 0; c < width; ++c) {
      const RowValue& v = rows.values[at + c];
      const int i = static_cast<int>(c) + 1;
      switch (v.type) {
        case RowValue::Type::kNull:
          st->BindNull(i);
          break;
        case RowValue::Type::kInt:
          st->Bind(i, v.i);
          break;
        case RowValue::Type::kReal:
          st->BindReal(i, v.d);
          break;
        case RowValue::Type::kText:
          st->Bind(i, v.s);
          break;
      }
    }
    if (!st->Run()) {
      *error = CannotWrite(path_, sqlite3_errmsg(db_));
      return false;
    }
  }
  return true;
}

bool Store::WriteSummaries(std::string* error) {
  Statements& s = *st_;
  auto fail = [&]() {
    *error = CannotWrite(path_, sqlite3_errmsg(db_));
    return false;
  };
  // The token digest counts each changed token_stats row out as it was and in as it is.
  TokenDigestDelta& digest = *digest_;
  digest.Clear();
  std::vector<TokenRowState>& before = digest_before_;
  std::vector<TokenRowState>& after = digest_after_;
  ReadTokenRows(s.token_row, summaries_->tokens(), &before);
  for (const TokenRowState& r : before) digest.Add(r, -1);
  if (!WriteInBlocks(summaries_->tokens(), kTokenColumns, s.token_stats_block, s.token_stats,
                     BindTokenStats)) {
    return fail();
  }
  // After: a row the upsert inserted is the delta itself; one it updated is read back (those
  // are few: the tokens a batch continues from the one before).
  const auto& deltas = summaries_->tokens();
  after.assign(before.size(), TokenRowState());
  digest_updated_.clear();
  for (size_t i = 0; i < deltas.size(); ++i) {
    if (before[i].present) {
      digest_updated_.push_back(deltas[i]);
    } else {
      after[i] = InsertedRow(deltas[i].first, deltas[i].second);
    }
  }
  if (!digest_updated_.empty()) {
    std::vector<TokenRowState>& updated = digest_reread_;
    ReadTokenRows(s.token_row, digest_updated_, &updated);
    for (size_t i = 0, u = 0; i < deltas.size(); ++i) {
      if (before[i].present) after[i] = updated[u++];
    }
  }
  // token_slowest: a token enters when it could be among the slowest (fewer than
  // kSlowestTokens rows, or as slow as the least slow of them), then the table is cut back.
  if (slowest_floor_ns_ < 0) {  // (its least slow row, when it is full)
    Statement& f = s.token_slowest_floor;
    const int rc = f.Step();
    slowest_floor_ns_ = 0;
    slowest_floor_token_ = UINT32_MAX;
    if (rc == SQLITE_ROW && f.Int(0) >= kSlowestTokens) {
      slowest_floor_ns_ = f.Int(1);
      slowest_floor_token_ = static_cast<uint32_t>(f.Int(2));
    } else if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      return fail();
    }
    f.Reset();
  }
  bool slowest_changed = false;
  for (size_t i = 0; i < after.size(); ++i) {
    const TokenRowState& now = after[i];
    digest.Add(now, +1);
    const TokenRowState& was = before[i];
    const bool enters = now.cpu_ns > slowest_floor_ns_ ||
                        (now.cpu_ns == slowest_floor_ns_ && now.token <= slowest_floor_token_);
    if (now.listed && now.closed && enters &&
        !(was.listed && was.closed && was.cpu_ns == now.cpu_ns)) {
      s.token_slowest.Bind(1, now.token);
      s.token_slowest.Bind(2, now.cpu_ns);
      if (!s.token_slowest.Run()) return fail();
      slowest_changed = true;
    }
  }
  if (slowest_changed) {
    if (!s.token_slowest_trim.Run()) return fail();
    slowest_floor_ns_ = -1;  // read again at the next batch
  }
  for (int phase = 0; phase < 3; ++phase) {
    if (!digest.touched(phase)) continue;
    const TokenTotals& t = digest.totals(phase);
    Statement& q = s.token_totals;
    q.Bind(1, phase);
    q.Bind(2, t.tokens);
    q.Bind(3, t.replays);
    q.Bind(4, t.closed);
    q.Bind(5, t.cpu_ns);
    q.Bind(6, t.gpu_busy_ns);
    q.Bind(7, t.kernels);
    q.Bind(8, t.escapes);
    q.Bind(9, t.max_gpu_busy_ns);
    if (!q.Run()) return fail();
  }
  for (const auto& [key, count] : digest.HistRows()) {
    Statement& q = s.token_hist;
    q.Bind(1, std::get<0>(key));
    q.Bind(2, std::get<1>(key));
    q.Bind(3, std::get<2>(key));
    q.Bind(4, count);
    if (!q.Run()) return fail();
  }
  if (!WriteInBlocks(summaries_->sites(), kSiteStatsColumns, s.site_stats_block, s.site_stats,
                     BindSiteStats)) {
    return fail();
  }
  if (!WriteInBlocks(summaries_->blocks(), kSiteBlockColumns, s.site_block_block, s.site_block,
                     BindSiteBlock)) {
    return fail();
  }
  return true;
}

bool Store::WriteRows(const Batch& batch, std::string* error) {
  Statements& s = *st_;
  auto fail = [&]() {
    *error = CannotWrite(path_, sqlite3_errmsg(db_));
    return false;
  };
  for (const auto& [key, value] : batch.meta) {
    s.meta.Bind(1, key);
    s.meta.Bind(2, value);
    if (!s.meta.Run()) return fail();
  }
  for (const SiteRow& r : batch.sites) {
    s.site.Bind(1, r.id);
    s.site.Bind(2, r.name);
    s.site.BindStatic(3, SiteKindName(r.kind));
    s.site.Bind(4, r.is_token ? 1 : 0);
    if (!s.site.Run()) return fail();
  }
  for (const StringRow& r : batch.strings) {
    s.string.Bind(1, r.id);
    s.string.Bind(2, r.text);
    if (!s.string.Run()) return fail();
  }
  if (!WriteInBlocks(batch.calls, kCallColumns, s.call_block, s.call, BindCall)) return fail();
  // The hot loop of the writer (one row per kernel in full mode): bind and step only.
  if (!WriteInBlocks(batch.kernels, kKernelColumns, s.kernel_block, s.kernel, BindKernel)) {
    return fail();
  }
  for (const CallGpuDelta& d : batch.call_gpu) {
    s.call_gpu.Bind(1, static_cast<int64_t>(d.call_id));
    s.call_gpu.Bind(2, d.kernels);
    s.call_gpu.Bind(3, d.busy_ns);
    s.call_gpu.Bind(4, d.first_begin_ns);
    s.call_gpu.Bind(5, d.last_end_ns);
    s.call_gpu.Bind(6, d.comm_ns);
    if (!s.call_gpu.Run()) return fail();
  }
  for (const EscapeRow& r : batch.escapes) {
    s.escape.Bind(1, static_cast<int64_t>(r.call_id));
    s.escape.Bind(2, r.token);
    s.escape.Bind(3, r.thread);
    s.escape.Bind(4, r.ts_ns);
    s.escape.BindStatic(5, EscapeKindName(r.kind));
    if (!s.escape.Run()) return fail();
  }
  if (!WriteInBlocks(batch.outputs, kOutputColumns, s.output_block, s.output, BindOutput) ||
      !WriteInBlocks(batch.links, kLinkColumns, s.link_block, s.link, BindLink)) {
    return fail();
  }
  for (const AddedRows& rows : batch.added) {
    if (!WriteAdded(rows, error)) return false;
  }
  for (const auto& [kind, count] : batch.losses) {
    s.loss.Bind(1, kind);
    s.loss.Bind(2, count);
    if (!s.loss.Run()) return fail();
  }
  return true;
}

bool Store::BeingWritten(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool busy = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);  // also drops the lock if we got it
  return busy;
}

void Store::Checkpoint() {
  std::string ignored;  // said by the next write
  if (db_ != nullptr && CheckFiles(&ignored)) {
    sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  }
}

bool Store::ReleaseReserve() {
  if (reserve_fd_ < 0) return false;
  fd_guard::Unguard(reserve_fd_);
  std::erase_if(held_, [this](const Held& h) { return h.fd == reserve_fd_; });
  close(reserve_fd_);
  reserve_fd_ = -1;
  return true;
}

void Store::Close() {
  bool deleted = false;
  if (db_ != nullptr && !Intact(&deleted)) return;  // abandoned: nothing of it is closed
  for (const Held& h : held_) fd_guard::Unguard(h.fd);
  held_.clear();
  ReleaseReserve();
  if (db_ != nullptr) {
    st_.reset();  // statements must be finalized before close
    sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
    // A finished trace is one file, to copy or mail as it is: leaving WAL mode removes the
    // -wal and -shm files, and readers of a rollback-journal file create neither. Only
    // possible when no other connection is open (a reader of the live file); then the file
    // stays in WAL mode, as valid, with its -wal and -shm until that reader's writer-side close.
    sqlite3_exec(db_, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
    db_ = nullptr;
  }
  if (lock_fd_ >= 0) close(lock_fd_);  // the file is complete: a later run may replace it
  lock_fd_ = -1;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace tokentrace
