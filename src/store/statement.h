// A prepared SQLite statement that finalizes itself (shared by the writer and the reader).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>

namespace tokentrace {

class Statement {
 public:
  Statement() = default;
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Prepares `sql` on `db`; on failure returns false with SQLite's message in *error.
  bool Prepare(sqlite3* db, const char* sql, std::string* error) {
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) != SQLITE_OK) {
      *error = sqlite3_errmsg(db);
      return false;
    }
    return true;
  }

  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void BindReal(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }
  // The text must outlive the next Step() (SQLITE_STATIC: no copy on the hot write path).
  void Bind(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
  }
  // For string literals (e.g. SiteKindName()), which live for the whole program.
  void BindStatic(int i, const char* s) { sqlite3_bind_text(stmt_, i, s, -1, SQLITE_STATIC); }

  // Returns SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  // Runs a statement that returns no rows and resets it for reuse.
  bool Run() {
    int rc = sqlite3_step(stmt_);
    sqlite3_reset(stmt_);
    return rc == SQLITE_DONE;
  }
  void Reset() { sqlite3_reset(stmt_); }

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const {
    const unsigned char* t = sqlite3_column_text(stmt_, col);
    return t == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(t));
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace tokentrace
