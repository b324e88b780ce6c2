// The SQL of the Python layer's rows (AddedRows, core/records.h): the INSERT the store runs for
// them, and the check, when they are handed over, that their table and columns are the
// schema's (so a bad column is one error on the adding thread, never a failed transaction that
// takes the calls with it).
#pragma once

#include <string>
#include <vector>

#include "core/records.h"

namespace tokentrace {

// "INSERT INTO <table>(<c1>,...) VALUES (?,...)".
std::string AddedRowsInsertSql(RowTable table, const std::vector<std::string>& columns);

// True when `columns` of `table` are the schema's (checked on an in-memory database made from
// schema.sql, once per distinct table and columns); else false with a one-line message.
// Thread-safe.
bool CheckAddedColumns(RowTable table, const std::vector<std::string>& columns, std::string* error);

}  // namespace tokentrace
