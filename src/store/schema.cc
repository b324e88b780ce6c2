#include "store/schema.h"

#include <string>

namespace tokentrace {

// Index choice: every table is written in append order (ids and tokens grow), so each commit
// touches only the last pages of each b-tree. kernels carries no index: a row costs ~45 bytes
// on disk and the writer appends at > 1 M rows/s; only `export` reads kernels, streaming them.
// calls is indexed by token (grows with the id, so appending) for export --tokens. There is
// deliberately no index on calls(site_id): with ~100 sites per token it dirtied ~100 random
// index pages per commit (8x slower writes); the report scans calls once instead.
const char* TokensSelectSql() {
  return R"sql(
  SELECT r.token AS token, MIN(r.b) AS cpu_begin_ns, MAX(r.e) AS cpu_end_ns,
         COALESCE(t.kernels, 0) AS kernels, COALESCE(t.gpu_busy_ns, 0) AS gpu_busy_ns,
         COALESCE(t.escapes, 0) AS escapes
  FROM (SELECT c.token AS token, c.cpu_begin_ns AS b, c.cpu_end_ns AS e
          FROM sites s JOIN calls c ON c.site_id = s.id WHERE s.is_token = 1
        UNION ALL
        -- tokens with no token call of their own: CUDA-graph replays (one launch = one token)
        SELECT token, NULL, NULL FROM token_stats WHERE token > 0) r
  LEFT JOIN token_stats t ON t.token = r.token
  GROUP BY r.token)sql";
}

const char* SchemaSql() {
  // Never destroyed: a process may create its file from an exit handler that runs after
  // static destructors (a forked child that records only then).
  static const std::string* sql = new std::string(R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sites(id INTEGER PRIMARY KEY, name TEXT, kind TEXT,
                                 is_token INTEGER);
CREATE TABLE IF NOT EXISTS calls(id INTEGER PRIMARY KEY, site_id INTEGER, k INTEGER,
                                 token INTEGER, parent_id INTEGER, thread INTEGER,
                                 cpu_begin_ns INTEGER, cpu_end_ns INTEGER);
CREATE INDEX IF NOT EXISTS calls_by_token ON calls(token);
CREATE TABLE IF NOT EXISTS strings(id INTEGER PRIMARY KEY, text TEXT);
CREATE TABLE IF NOT EXISTS kernels(call_id INTEGER, token INTEGER, name_id INTEGER,
                                   kind INTEGER, device INTEGER, stream INTEGER,
                                   gpu_begin_ns INTEGER, gpu_end_ns INTEGER,
                                   correlation_id INTEGER, graph_id INTEGER,
                                   graph_node_id INTEGER);
CREATE TABLE IF NOT EXISTS call_gpu(call_id INTEGER PRIMARY KEY, kernels INTEGER,
                                    gpu_busy_ns INTEGER, gpu_first_begin_ns INTEGER,
                                    gpu_last_end_ns INTEGER);
CREATE TABLE IF NOT EXISTS escapes(call_id INTEGER, token INTEGER, thread INTEGER,
                                   ts_ns INTEGER, kind TEXT);
CREATE TABLE IF NOT EXISTS losses(kind TEXT PRIMARY KEY, count INTEGER);
CREATE TABLE IF NOT EXISTS token_stats(token INTEGER PRIMARY KEY, kernels INTEGER,
                                       gpu_busy_ns INTEGER, escapes INTEGER);
CREATE TABLE IF NOT EXISTS call_outputs(call_id INTEGER, path TEXT, shape TEXT, dtype TEXT);
-- Since version 2. One row per leaf of a call's arguments, written by the Python layer: kind
-- 'tensor' (shape as JSON, dtype, device), 'value' (a non-tensor: its type, and `value` as a
-- Python literal for small scalars) or 'object' (a container not looked into: its type).
-- A saved input tensor is `key` in the safetensors shard `file` (relative to this file).
CREATE TABLE IF NOT EXISTS call_inputs(call_id INTEGER, path TEXT, kind TEXT, type TEXT,
                                       shape TEXT, dtype TEXT, device TEXT, value TEXT,
                                       file TEXT, key TEXT);
CREATE VIEW IF NOT EXISTS tokens AS
)sql" + std::string(TokensSelectSql()) + ";\n");
  return sql->c_str();
}

}  // namespace tokentrace
