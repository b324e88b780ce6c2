// Helpers of the end-to-end tests: run nvtx_generate under LD_PRELOAD=libtokentrace.so and
// query the SQLite file it leaves.
#pragma once

#include <glob.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tt_test {

inline const std::string kShim = TT_SHIM_PATH;
inline const std::string kProgram = TT_PROGRAM_PATH;
inline const std::string kCli = TT_CLI_PATH;

struct Result {
  int status;
  std::string output;
};

// Runs a shell command line, capturing stdout and stderr.
inline Result Shell(const std::string& cmd) {
  Result r{0, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string TempDir() {
  char tmpl[] = "/tmp/tt_preload_XXXXXX";
  return mkdtemp(tmpl);
}

inline std::string Preloaded(const std::string& out, const std::string& extra = "") {
  return "env -u CUDA_INJECTION64_PATH LD_PRELOAD=" + kShim + " TOKENTRACE_OUT=" + out +
         " TOKENTRACE_FLUSH_MS=20 " + extra + " ";
}

// Rows of a query as strings.
inline std::vector<std::vector<std::string>> Query(const std::string& path,
                                                   const std::string& sql) {
  std::vector<std::vector<std::string>> rows;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << path;
    sqlite3_close(db);
    return rows;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db) << " in " << sql;
  } else {
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const unsigned char* t = sqlite3_column_text(st, i);
        row.push_back(t != nullptr ? reinterpret_cast<const char*>(t) : "NULL");
      }
      rows.push_back(row);
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows;
}

inline std::string One(const std::string& path, const std::string& sql) {
  auto rows = Query(path, sql);
  return rows.empty() || rows[0].empty() ? "" : rows[0][0];
}

// Trace files (not -wal/-shm) in `dir` whose names start with `prefix`, sorted.
inline std::vector<std::string> TraceFiles(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> files;
  glob_t g{};
  if (glob((dir + "/" + prefix + "*").c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) {
      const std::string f = g.gl_pathv[i];
      if (f.size() > 4 &&
          (f.compare(f.size() - 4, 4, "-wal") == 0 || f.compare(f.size() - 4, 4, "-shm") == 0))
        continue;
      files.push_back(f);
    }
  }
  globfree(&g);
  return files;
}

// How many calls of `site` the file holds.
inline std::string CallsOf(const std::string& path, const std::string& site) {
  return One(path,
             "SELECT COUNT(*) FROM calls c JOIN sites s ON s.id=c.site_id "
             "WHERE s.name='" +
                 site + "'");
}

// Runs nvtx_generate ARGS under the preload with EXTRA environment and expects it to succeed;
// returns the file it was told to write, OUT or a fresh one (its output in *result, if asked).
inline std::string RunPreloaded(const std::string& args, const std::string& extra = "",
                                Result* result = nullptr, std::string out = "") {
  if (out.empty()) out = TempDir() + "/t.sqlite";
  const Result r = Shell(Preloaded(out, extra) + kProgram + " " + args);
  EXPECT_EQ(r.status, 0) << r.output;
  if (result != nullptr) *result = r;
  return out;
}

}  // namespace tt_test

using namespace tt_test;  // NOLINT: test helpers
