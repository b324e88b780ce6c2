-- The schema of a tokentrace file: the one copy. The C++ store embeds this text at build time
-- (src/store/CMakeLists.txt generates schema_sql.h from it) and applies it to a fresh file;
-- Python reads it from the extension (tokentrace._native.SCHEMA_SQL). The version it defines
-- is kSchemaVersion (src/store/schema.h); the invariants readers rely on are listed there.
--
-- Index choice: every table is written in append order (ids and tokens grow), so each commit
-- touches only the last pages of each b-tree. kernels carries no index: a row costs ~45 bytes
-- on disk and the writer appends at > 1 M rows/s; only `export` reads kernels, streaming them.
-- calls is indexed by token (grows with the id, so appending) for export --tokens. There is
-- deliberately no index on calls(site_id): with ~100 sites per token it dirtied ~100 random
-- index pages per commit (8x slower writes); the report scans calls once instead.
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
-- gpu_comm_ns: the part of gpu_busy_ns in communication kernels (NCCL's, recognised by name:
-- src/core/comm_kernels.h). Files written before it was added lack the column (read as 0).
CREATE TABLE IF NOT EXISTS call_gpu(call_id INTEGER PRIMARY KEY, kernels INTEGER,
                                    gpu_busy_ns INTEGER, gpu_first_begin_ns INTEGER,
                                    gpu_last_end_ns INTEGER, gpu_comm_ns INTEGER);
CREATE TABLE IF NOT EXISTS escapes(call_id INTEGER, token INTEGER, thread INTEGER,
                                   ts_ns INTEGER, kind TEXT);
CREATE TABLE IF NOT EXISTS losses(kind TEXT PRIMARY KEY, count INTEGER);
CREATE TABLE IF NOT EXISTS token_stats(token INTEGER PRIMARY KEY, kernels INTEGER,
                                       gpu_busy_ns INTEGER, escapes INTEGER);
-- Each call's first output tensor (shape as JSON), streamed by the Python hooks.
CREATE TABLE IF NOT EXISTS call_outputs(call_id INTEGER, path TEXT, shape TEXT, dtype TEXT);
-- Since version 2. One row per leaf of a call's arguments, written by the Python layer: kind
-- 'tensor' (shape as JSON, dtype, device), 'value' (a non-tensor: its type, and `value` as a
-- Python literal for small scalars) or 'object' (a container not looked into: its type).
-- A saved input tensor is `key` in the safetensors shard `file` (relative to this file).
CREATE TABLE IF NOT EXISTS call_inputs(call_id INTEGER, path TEXT, kind TEXT, type TEXT,
                                       shape TEXT, dtype TEXT, device TEXT, value TEXT,
                                       file TEXT, key TEXT);
-- Written by the Python layer when a run ends: outputs saved with save= (`key` in the
-- safetensors shard `file`, relative to this file), and host reads of tensor values by source
-- line. Files that predate this file's creating them lack these two tables (read as empty).
CREATE TABLE IF NOT EXISTS saved_outputs(call_id INTEGER, file TEXT, key TEXT);
CREATE TABLE IF NOT EXISTS escape_sites(token INTEGER, location TEXT, count INTEGER);
-- Written by the Python layer's engine adapter (python/tokentrace/_record/vllm_steps.py) while a
-- serving engine runs: one row per request scheduled in a step (the step is the token), with
-- how many of its tokens the step computes as prefill (its prompt, possibly a chunk of it) and
-- as decode, and the position of its first token in the step. Other files have none (empty).
CREATE TABLE IF NOT EXISTS step_requests(token INTEGER, request TEXT, prefill_tokens INTEGER,
                                         decode_tokens INTEGER, position INTEGER);
-- One row per token. Readers do not trust this view in a file (a crafted file could define it
-- to never end): they run the SELECT after `AS` themselves (kTokensSelectSql, cut from this
-- text at build time; it must stay the last statement). Tokens with no token call of their
-- own are CUDA-graph replays (one launch = one token): token_stats has them.
CREATE VIEW IF NOT EXISTS tokens AS
  SELECT r.token AS token, MIN(r.b) AS cpu_begin_ns, MAX(r.e) AS cpu_end_ns,
         COALESCE(t.kernels, 0) AS kernels, COALESCE(t.gpu_busy_ns, 0) AS gpu_busy_ns,
         COALESCE(t.escapes, 0) AS escapes
  FROM (SELECT c.token AS token, c.cpu_begin_ns AS b, c.cpu_end_ns AS e
          FROM sites s JOIN calls c ON c.site_id = s.id WHERE s.is_token = 1
        UNION ALL
        SELECT token, NULL, NULL FROM token_stats WHERE token > 0) r
  LEFT JOIN token_stats t ON t.token = r.token
  GROUP BY r.token;
