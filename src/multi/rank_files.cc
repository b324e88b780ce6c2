#include "multi/rank_files.h"

#include <dirent.h>
#include <glob.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "store/statement.h"

namespace tokentrace::multi {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The *.sqlite files directly in `dir` (not its subdirectories).
std::vector<std::string> TraceFilesIn(const std::string& dir) {
  std::vector<std::string> out;
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (EndsWith(name, ".sqlite")) out.push_back(base + "/" + name);
  }
  closedir(d);
  return out;
}

std::string MetaOf(const std::vector<std::pair<std::string, std::string>>& meta,
                   const std::string& key, bool* found = nullptr) {
  for (const auto& [k, v] : meta) {
    if (k == key) {
      if (found != nullptr) *found = true;
      return v;
    }
  }
  if (found != nullptr) *found = false;
  return "";
}

bool ParseRank(const std::string& text, int64_t* rank) {
  if (text.empty() || text.size() > 9) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *rank = v;
  return true;
}

// A `tokentrace merge` output (merge.h) has a ranks table; a rank's trace does not.
bool IsMergedFile(Reader& reader) {
  Statement q;
  std::string ignored;
  return q.Prepare(reader.db(),
                   "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ranks'",
                   &ignored) &&
         q.Step() == SQLITE_ROW;
}

}  // namespace

bool ResolveInputs(const std::vector<std::string>& inputs, std::vector<std::string>* files,
                   std::string* error) {
  std::set<std::string> seen;
  for (const std::string& in : inputs) {
    std::vector<std::string> found;
    if (IsDirectory(in)) {
      found = TraceFilesIn(in);
      if (found.empty()) {
        *error = "tokentrace: directory '" + in +
                 "' holds no trace files (accepted: a directory of *.sqlite files, a glob, "
                 "or file names)";
        return false;
      }
    } else if (in.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      if (glob(in.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) found.push_back(g.gl_pathv[i]);
      }
      globfree(&g);
      if (found.empty()) {
        *error = "tokentrace: '" + in + "' matches no file";
        return false;
      }
    } else {
      found.push_back(in);  // a missing or wrong file is named when it is opened
    }
    for (std::string& f : found) {
      if (seen.insert(f).second) files->push_back(std::move(f));
    }
  }
  std::sort(files->begin(), files->end());
  if (files->empty()) {
    *error = "tokentrace: no trace files given";
    return false;
  }
  return true;
}

bool OpenRankFiles(const std::vector<std::string>& files, bool allow_mixed_launches,
                   std::vector<RankFile>* out, std::vector<std::string>* warnings,
                   std::string* error) {
  // Every file stays open while the report streams them side by side: a WAL-mode connection
  // holds up to three descriptors (file, -wal, -shm).
  rlimit fds{};
  if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur < fds.rlim_max) {
    fds.rlim_cur = fds.rlim_max;
    setrlimit(RLIMIT_NOFILE, &fds);
    getrlimit(RLIMIT_NOFILE, &fds);
  }
  const rlim_t need = 3 * static_cast<rlim_t>(files.size()) + 32;
  if (fds.rlim_cur != RLIM_INFINITY && need > fds.rlim_cur) {
    *error = "tokentrace: " + std::to_string(files.size()) + " files need about " +
             std::to_string(need) + " open files, more than this process may have (" +
             std::to_string(fds.rlim_cur) + "); raise the hard limit (ulimit -Hn)";
    return false;
  }
  std::map<int64_t, std::string> rank_owner;
  for (const std::string& path : files) {
    RankFile f;
    f.path = path;
    f.reader = Reader::Open(path, error);
    if (!f.reader) return false;
    // The cross-rank reads stream each file once in index order: a small page cache per
    // file (SQLite's default is 2 MiB) keeps memory flat in the number of ranks.
    sqlite3_exec(f.reader->db(), "PRAGMA cache_size=-256", nullptr, nullptr, nullptr);
    if (IsMergedFile(*f.reader)) {
      *error = "tokentrace: '" + path +
               "' is a merged file (tokentrace merge), not one rank's "
               "trace (accepted: the rank files; query a merged file with SQL)";
      return false;
    }
    std::vector<std::pair<std::string, std::string>> meta;
    if (!f.reader->Meta(&meta, error)) return false;
    bool has_rank = false;
    const std::string rank = MetaOf(meta, kMetaRank, &has_rank);
    if (!has_rank || !ParseRank(rank, &f.rank)) {
      *error = "tokentrace: '" + path + "' has no rank in its meta (" +
               (has_rank ? "'" + rank + "'" : "none") +
               "); accepted: files written by tokentrace 0.1 or later, one per rank";
      return false;
    }
    f.host = MetaOf(meta, kMetaHost);
    f.launch_id = MetaOf(meta, kMetaLaunchId);
    f.world_size = MetaOf(meta, kMetaWorldSize);
    f.pid = MetaOf(meta, "pid");
    f.exit_signal = MetaOf(meta, "exit_signal");
    bool has_exit = false;
    MetaOf(meta, kMetaAnchorExit, &has_exit);
    f.exited = has_exit;
    f.has_anchor = ParseAnchor(MetaOf(meta, kMetaAnchorStart), &f.anchor) ||
                   ParseAnchor(MetaOf(meta, kMetaAnchorLast), &f.anchor);
    f.role = MetaOf(meta, "role");
    out->push_back(std::move(f));
  }
  const bool engine =
      std::all_of(out->begin(), out->end(), [](const RankFile& f) { return !f.role.empty(); });
  if (engine) {  // one engine's processes: numbered in (role, rank, pid) order
    auto order = [](const RankFile& f) { return f.role.rfind("engine_core", 0) == 0 ? 0 : 1; };
    std::stable_sort(out->begin(), out->end(), [&](const RankFile& a, const RankFile& b) {
      if (order(a) != order(b)) return order(a) < order(b);
      if (a.rank != b.rank) return a.rank < b.rank;
      return std::atoll(a.pid.c_str()) < std::atoll(b.pid.c_str());
    });
    for (size_t i = 0; i < out->size(); ++i) (*out)[i].rank = static_cast<int64_t>(i);
  }
  for (const RankFile& f : *out) {
    auto [it, fresh] = rank_owner.emplace(f.rank, f.path);
    if (!fresh) {
      *error = "tokentrace: '" + it->second + "' and '" + f.path + "' both claim rank " +
               std::to_string(f.rank) + " (accepted: one file per rank of one launch)";
      return false;
    }
  }
  std::sort(out->begin(), out->end(),
            [](const RankFile& a, const RankFile& b) { return a.rank < b.rank; });
  if (!allow_mixed_launches) {
    for (const RankFile& f : *out) {
      if (f.launch_id != out->front().launch_id) {
        *error = "tokentrace: '" + out->front().path + "' (launch '" + out->front().launch_id +
                 "') and '" + f.path + "' (launch '" + f.launch_id +
                 "') come from different launches (accepted: the files of one launch; "
                 "compare runs with `report --runs`)";
        return false;
      }
    }
  }
  for (const RankFile& f : *out) {
    if (!f.has_anchor) {
      warnings->push_back("tokentrace: warning: '" + f.path +
                          "' has no clock anchor; the ranks are not aligned in time (each "
                          "keeps its own clock)");
      break;
    }
  }
  return true;
}

std::vector<int64_t> AxisShifts(const std::vector<RankFile>& files) {
  std::vector<int64_t> shifts(files.size(), 0);
  bool all = !files.empty();
  int64_t base = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    all = all && files[i].has_anchor;
    if (files[i].has_anchor && (i == 0 || files[i].anchor.offset_ns() < base)) {
      base = files[i].anchor.offset_ns();
    }
  }
  if (!all) return shifts;  // mixed: aligning some and not others would be worse than none
  for (size_t i = 0; i < files.size(); ++i) shifts[i] = files[i].anchor.offset_ns() - base;
  return shifts;
}

}  // namespace tokentrace::multi
