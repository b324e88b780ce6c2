// Test helpers: a fresh temp path per test and one-value SQL queries on a finished file.
#pragma once

#include <sqlite3.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace tokentrace::testing {

// A path in a fresh temp directory; the directory is left for the OS to clean.
inline std::string TempPath(const std::string& name) {
  char dir[] = "/tmp/tt_store_test_XXXXXX";
  if (mkdtemp(dir) == nullptr) std::abort();
  return std::string(dir) + "/" + name;
}

// Returns the first column of the first row as int64 (or -999 on NULL, -1000 on error).
inline int64_t QueryInt(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t v = -1000;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_type(st, 0) == SQLITE_NULL ? -999 : sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

inline std::string QueryText(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string v = "<error>";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      v = t ? reinterpret_cast<const char*>(t) : "<null>";
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

// All rows of `sql`, one line each ("a|b|c"), NULL as `null_text`.
inline std::string Rows(const std::string& path, const std::string& sql,
                        const std::string& null_text = "null") {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "<cannot open>";
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    out = std::string("<error: ") + sqlite3_errmsg(db) + ">";
  } else {
    while (sqlite3_step(st) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        out += (c ? "|" : "") + (t ? std::string(reinterpret_cast<const char*>(t)) : null_text);
      }
      out += "\n";
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

}  // namespace tokentrace::testing
