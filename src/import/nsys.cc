// An Nsight Systems SQLite export, read into a RecordedTrace (readers.h).
#include <sqlite3.h>

#include <functional>
#include <set>
#include <string_view>

#include "import/readers.h"

namespace tokentrace::import {
namespace {

constexpr int kNvtxPushPop = 59;  // ENUM_NSYS_EVENT_TYPE: NvtxPushPopRange

// A range's site name: its text less what torch.autograd.profiler.emit_nvtx appends to each
// op's (", seq = N", ", op_id = N", ", sizes = [...]"), so that one op is one site, not one
// site a call.
std::string SiteName(std::string text) {
  for (const char* tail : {", seq = ", ", op_id = ", ", sizes = "}) {
    const size_t at = text.find(tail);
    if (at != std::string::npos) text.resize(at);
  }
  return text;
}

// globalTid / globalPid: the pid in bits 24..47, the tid in bits 0..23.
int64_t PidOf(int64_t global) { return (global >> 24) & 0xFFFFFF; }
uint64_t TidOf(int64_t global) { return static_cast<uint64_t>(global & 0xFFFFFF); }

class Export {
 public:
  ~Export() { sqlite3_close(db_); }
  bool Open(const std::string& path, std::string* error) {
    path_ = path;
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      *error = "cannot open '" + path + "': " + sqlite3_errmsg(db_);
      return false;
    }
    return true;
  }
  std::set<std::string> Columns(const std::string& table) {
    std::set<std::string> out;
    Each("PRAGMA table_info(" + table + ")", [&](sqlite3_stmt* st) { out.insert(Text(st, 1)); });
    return out;
  }
  // Runs `sql`, calling `row` for each row; false (and *error_) when SQLite refuses it.
  bool Each(const std::string& sql, const std::function<void(sqlite3_stmt*)>& row) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      error_ = sqlite3_errmsg(db_);
      return false;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) row(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
      error_ = sqlite3_errmsg(db_);
      return false;
    }
    return true;
  }
  static std::string Text(sqlite3_stmt* st, int i) {
    const unsigned char* t = sqlite3_column_text(st, i);
    return t != nullptr ? reinterpret_cast<const char*>(t) : "";
  }
  const std::string& error() const { return error_; }

 private:
  sqlite3* db_ = nullptr;
  std::string path_, error_;
};

}  // namespace

bool ReadNsys(const std::string& path, RecordedTrace* out, std::string* error) {
  Export db;
  if (!db.Open(path, error)) return false;
  const std::string expected =
      ": expected an Nsight Systems export (nsys export --type sqlite) with "
      "CUPTI_ACTIVITY_KIND_RUNTIME and CUPTI_ACTIVITY_KIND_KERNEL";
  std::set<std::string> tables;
  if (!db.Each("SELECT name FROM sqlite_master WHERE type = 'table'",
               [&](sqlite3_stmt* st) { tables.insert(Export::Text(st, 0)); })) {
    *error = "'" + path + "' is not a readable SQLite file (" + db.error() + ")" + expected;
    return false;
  }
  if (tables.count("CUPTI_ACTIVITY_KIND_RUNTIME") == 0 ||
      tables.count("CUPTI_ACTIVITY_KIND_KERNEL") == 0 || tables.count("StringIds") == 0) {
    *error = "'" + path + "' is SQLite but no Nsight Systems export with CUDA records" + expected;
    return false;
  }
  out->format = "nsys";
  bool ok = true;
  if (tables.count("NVTX_EVENTS") != 0) {
    ok &= db.Each(
        "SELECT e.start, e.end, e.globalTid, coalesce(e.text, s.value, '') FROM NVTX_EVENTS e "
        "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = " +
            std::to_string(kNvtxPushPop) + " AND e.end IS NOT NULL",
        [&](sqlite3_stmt* st) {
          RecordedRange r;
          r.begin_ns = sqlite3_column_int64(st, 0);
          r.end_ns = sqlite3_column_int64(st, 1);
          const int64_t global = sqlite3_column_int64(st, 2);
          r.thread = TidOf(global);
          r.name = SiteName(Export::Text(st, 3));
          out->processes[PidOf(global)].ranges.push_back(std::move(r));
        });
  }
  for (const char* table : {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"}) {
    if (tables.count(table) == 0) continue;
    ok &= db.Each(
        std::string("SELECT a.start, a.globalTid, a.correlationId, s.value FROM ") + table +
            " a LEFT JOIN StringIds s ON s.id = a.nameId "
            "WHERE a.correlationId IS NOT NULL",
        [&](sqlite3_stmt* st) {
          RecordedLaunch l;
          l.begin_ns = sqlite3_column_int64(st, 0);
          const int64_t global = sqlite3_column_int64(st, 1);
          l.thread = TidOf(global);
          l.correlation = static_cast<uint64_t>(sqlite3_column_int64(st, 2));
          const std::string name = Export::Text(st, 3);
          l.graph = name.rfind("cudaGraphLaunch", 0) == 0 || name.rfind("cuGraphLaunch", 0) == 0;
          l.api = name;
          l.driver = std::string_view(table) == "CUPTI_ACTIVITY_KIND_DRIVER";
          out->processes[PidOf(global)].launches.push_back(l);
        });
  }
  struct Source {
    const char* table;
    GpuOpKind kind;
  };
  for (const Source& source : {Source{"CUPTI_ACTIVITY_KIND_KERNEL", GpuOpKind::kKernel},
                               Source{"CUPTI_ACTIVITY_KIND_MEMCPY", GpuOpKind::kMemcpy},
                               Source{"CUPTI_ACTIVITY_KIND_MEMSET", GpuOpKind::kMemset}}) {
    if (tables.count(source.table) == 0) continue;
    const std::set<std::string> columns = db.Columns(source.table);
    auto column = [&](const char* name, const char* otherwise) {
      return columns.count(name) != 0 ? std::string("r.") + name : std::string(otherwise);
    };
    const bool kernel = source.kind == GpuOpKind::kKernel;
    const std::string sql =
        "SELECT r.start, r.end, r.deviceId, r.streamId, r.correlationId, r.globalPid, " +
        column("graphId", "0") + ", " + column("graphNodeId", "0") + ", " +
        column("copyKind", "0") + ", " + column("bytes", "0") + ", " +
        (kernel ? "s.value FROM " + std::string(source.table) +
                      " r LEFT JOIN StringIds s ON s.id = r.demangledName"
                : "NULL FROM " + std::string(source.table) + " r");
    ok &= db.Each(sql, [&](sqlite3_stmt* st) {
      RecordedGpu r;
      GpuActivity& g = r.activity;
      g.kind = source.kind;
      g.begin_ns = sqlite3_column_int64(st, 0);
      g.end_ns = sqlite3_column_int64(st, 1);
      g.device = static_cast<uint32_t>(sqlite3_column_int64(st, 2));
      g.stream = static_cast<uint32_t>(sqlite3_column_int64(st, 3));
      g.correlation_id = static_cast<uint64_t>(sqlite3_column_int64(st, 4));
      const int64_t pid = PidOf(sqlite3_column_int64(st, 5));
      g.graph_id = static_cast<uint32_t>(sqlite3_column_int64(st, 6));
      g.graph_node_id = static_cast<uint64_t>(sqlite3_column_int64(st, 7));
      g.copy_kind = static_cast<uint8_t>(sqlite3_column_int64(st, 8));
      g.bytes = static_cast<uint64_t>(sqlite3_column_int64(st, 9));
      if (kernel) r.name = Export::Text(st, 10);
      out->processes[pid].gpu.push_back(std::move(r));
      ++out->records;
    });
  }
  if (!ok) {
    *error = "'" + path + "' could not be read as an Nsight Systems export (" + db.error() + ")";
    return false;
  }
  if (out->records == 0) {
    *error = "'" + path + "' has no GPU records (its CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY and " +
             "_MEMSET tables are empty): record with nsys profile -t cuda,nvtx";
    return false;
  }
  std::erase_if(out->processes, [](const auto& kv) { return kv.second.gpu.empty(); });
  return true;
}

}  // namespace tokentrace::import
