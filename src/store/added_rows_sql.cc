#include "store/added_rows_sql.h"

#include <sqlite3.h>

#include <mutex>
#include <set>

#include "store/schema.h"

namespace tokentrace {

std::string AddedRowsInsertSql(RowTable table, const std::vector<std::string>& columns) {
  std::string sql = std::string("INSERT INTO ") + RowTableName(table) + "(";
  std::string params;
  for (size_t i = 0; i < columns.size(); ++i) {
    sql += (i ? "," : "") + columns[i];
    params += i ? ",?" : "?";
  }
  return sql + ") VALUES (" + params + ")";
}

namespace {

bool Identifier(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

}  // namespace

bool CheckAddedColumns(RowTable table, const std::vector<std::string>& columns,
                       std::string* error) {
  const std::string what = std::string("rows of ") + RowTableName(table);
  if (columns.empty()) {
    *error = "tokentrace: " + what + " name no column";
    return false;
  }
  for (const std::string& c : columns) {
    if (!Identifier(c)) {
      *error = "tokentrace: " + what + ": '" + c + "' is not a column name";
      return false;
    }
  }
  const std::string sql = AddedRowsInsertSql(table, columns);
  static std::mutex mutex;
  static std::set<std::string>* known = new std::set<std::string>();  // checked already
  static sqlite3* schema_db = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (known->count(sql) != 0) return true;
  if (schema_db == nullptr) {
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_MEMORY, nullptr) !=
            SQLITE_OK ||
        sqlite3_exec(db, kSchemaSql, nullptr, nullptr, nullptr) != SQLITE_OK) {
      *error = "tokentrace: cannot check " + what +
               " against the schema: " + (db != nullptr ? sqlite3_errmsg(db) : "no memory");
      sqlite3_close(db);
      return false;
    }
    schema_db = db;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(schema_db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    *error = "tokentrace: " + what + ": " + sqlite3_errmsg(schema_db);
    sqlite3_finalize(stmt);
    return false;
  }
  sqlite3_finalize(stmt);
  known->insert(sql);
  return true;
}

}  // namespace tokentrace
