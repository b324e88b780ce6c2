// Schema of a tokentrace file, version 2. The DDL is schema.sql, embedded at build time as
// kSchemaSql / kTokensSelectSql (generated store/schema_sql.h); Python reads both and the
// version from the extension. Version 2 adds call_inputs; readers open version 1 files too
// (they have no inputs).
//
// Invariants the writer keeps and readers rely on:
//  * meta.schema_version is the version that wrote the file ("1" or "2"); a SQLite file
//    without it is not a tokentrace file.
//  * call_gpu holds per-call sums of CallGpuDelta. Call id 0 ("kernels launched outside any
//    call") keeps ONE row summed over all tokens, so the report can show how much GPU time
//    escaped attribution; per-token numbers for it live only in token_stats.
//  * token_stats is maintained by Store::Write from call_gpu deltas (by their token, call 0
//    included) and from escape rows, so per-token totals never need a scan of kernels.
#pragma once

#include "store/schema_sql.h"

namespace tokentrace {

inline constexpr const char* kSchemaVersion = "2";
// The oldest version readers still open (a file's version is meta.schema_version).
inline constexpr int kOldestReadableSchema = 1;

// kSchemaSql is applied to a fresh file. Readers run kTokensSelectSql themselves rather than
// trust the tokens view in a file, which a crafted file could define to never end.

}  // namespace tokentrace
