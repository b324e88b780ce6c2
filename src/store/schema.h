// Schema of a tokentrace file, version 3. The DDL is schema.sql, embedded at build time as
// kSchemaSql / kTokensSelectSql (generated store/schema_sql.h); Python reads both and the
// version from the extension. Version 2 adds call_inputs, version 3 call_gpu.gpu_comm_ns (GPU
// time in NCCL kernels); readers open version 1 and 2 files too (no inputs; no GPU
// communication time, read as 0).
//
// Invariants the writer keeps and readers rely on:
//  * meta.schema_version is the version that wrote the file ("1", "2" or "3"); a SQLite file
//    without it is not a tokentrace file.
//  * call_gpu holds per-call sums of CallGpuDelta. Call id 0 ("kernels launched outside any
//    call") keeps ONE row summed over all tokens, so the report can show how much GPU time
//    escaped attribution; per-token numbers for it live only in token_stats.
//  * token_stats is maintained by Store::Write from call_gpu deltas (by their token, call 0
//    included) and from escape rows, so per-token totals never need a scan of kernels.
#pragma once

#include "store/schema_sql.h"

namespace tokentrace {

inline constexpr const char* kSchemaVersion = "3";
// The oldest version readers still open (a file's version is meta.schema_version).
inline constexpr int kOldestReadableSchema = 1;

// kSchemaSql is applied to a fresh file. Readers run kTokensSelectSql themselves rather than
// trust the tokens view in a file, which a crafted file could define to never end.

}  // namespace tokentrace
