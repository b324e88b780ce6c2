// Schema of a tokentrace file. The DDL is schema.sql, embedded at build time as
// kSchemaSql / kTokensSelectSql / kTokensScanSql (generated store/schema_sql.h); Python reads
// them and the version from the extension. Version 2 adds call_inputs, version 3
// call_gpu.gpu_comm_ns (GPU time in NCCL kernels), version 4 the summaries the writer keeps
// (token_stats' per-token columns, site_stats, site_blocks: store/summaries.h) and
// step_requests (a serving engine's steps, written by the Python layer), version 5 the token
// digest (token_totals, token_hist, token_slowest: store/token_digest.h), version 6
// token_stats' wait_ns and gpu_collective_ns, version 7 op_links (op data flow), version 8
// token_text (each token's generated id and text, handed over by the Python layer), version 9
// request_events.edits (which edit rules changed a served request's rows); readers open
// versions 1 to 4 too (version 4: the report reads one row per token instead of the digest;
// before that: no inputs; no GPU communication time, read as 0; no summaries: read by
// scanning the calls, said once on stderr).
//
// Invariants the writer keeps and readers rely on:
//  * meta.schema_version is the version that wrote the file (1 to kSchemaVersion); a SQLite file
//    without it is not a tokentrace file.
//  * call_gpu holds per-call sums of CallGpuDelta. Call id 0 ("kernels launched outside any
//    call") keeps ONE row summed over all tokens, so the report can show how much GPU time
//    escaped attribution; per-token numbers for it live only in token_stats.
//  * token_stats is maintained by Store::Write from call_gpu deltas (by their token, call 0
//    included) and from escape rows, so per-token totals never need a scan of kernels.
//  * A file with meta.summaries (kMetaSummaries, written with the schema by Store::Open) has
//    token_stats' per-token columns, site_stats and site_blocks kept in the same transaction
//    as the rows they sum: they equal what a scan of its calls computes. A file without it
//    (older, or built by hand) is read by scanning (kTokensScanSql and the readers' scans).
//  * Schema 4 files have no index on calls: token T's calls are those with ids between T's
//    token_stats.first_call and last_call (and token = T); Reader::CallsOfTokens builds the
//    window, through calls_by_token for older files.
#pragma once

#include "store/schema_sql.h"

namespace tokentrace {

inline constexpr const char* kSchemaVersion = "9";
// The first version whose writer keeps summaries, and the meta key that says a file has them.
inline constexpr int kFirstSummarisedSchema = 4;
// The first version whose writer keeps the token digest (token_totals, token_hist,
// token_slowest: store/token_digest.h).
inline constexpr int kFirstDigestSchema = 5;
// The first version whose token_stats has wait_ns and gpu_collective_ns.
inline constexpr int kFirstCollectiveSchema = 6;
inline constexpr const char* kMetaSummaries = "summaries";
// Tokens per site_blocks block (kTokenBlock, store/summaries.h), for readers of the file.
inline constexpr const char* kMetaTokenBlock = "token_block";
// The oldest version readers still open (a file's version is meta.schema_version).
inline constexpr int kOldestReadableSchema = 1;

// kSchemaSql is applied to a fresh file. Readers run kTokensSelectSql themselves rather than
// trust the tokens view in a file, which a crafted file could define to never end.

}  // namespace tokentrace
