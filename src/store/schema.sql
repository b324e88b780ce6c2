-- The schema of a tokentrace file: the one copy. The C++ store embeds this text at build time
-- (src/store/CMakeLists.txt generates schema_sql.h from it) and applies it to a fresh file;
-- Python reads it from the extension (tokentrace._native.SCHEMA_SQL). The version it defines
-- is kSchemaVersion (src/store/schema.h); the invariants readers rely on are listed there.
--
-- Index choice: every table is written in append order (ids and tokens grow), so each commit
-- touches only the last pages of each b-tree. kernels carries no index: a row costs ~45 bytes
-- on disk and the writer appends at > 1 M rows/s; only `export` reads kernels, streaming them.
-- calls carries no index since version 4: the calls of a token lie between its first and
-- last call id (token_stats.first_call, last_call), so a window of tokens is a range of the
-- calls' rowids; files before version 4 have calls_by_token (an index on calls(token), ~11
-- bytes and a share of each call's insert), which their readers use. There is deliberately
-- no index on calls(site_id): with ~100 sites per token it dirtied ~100 random index pages
-- per commit (8x slower writes); readers use the summaries (site_stats) instead.
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sites(id INTEGER PRIMARY KEY, name TEXT, kind TEXT,
                                 is_token INTEGER);
CREATE TABLE IF NOT EXISTS calls(id INTEGER PRIMARY KEY, site_id INTEGER, k INTEGER,
                                 token INTEGER, parent_id INTEGER, thread INTEGER,
                                 cpu_begin_ns INTEGER, cpu_end_ns INTEGER);
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
-- One row per token, kept by the writer as it writes (Store::Write, one upsert per token a
-- commit): the GPU sums and escapes; since version 4 also what the tokens view used to scan
-- calls for. cpu_begin_ns / cpu_end_ns / k: the earliest begin, the latest end and the lowest
-- k among the token's token-site calls (NULL: none, a CUDA-graph replay; cpu_end_ns NULL: the
-- call never closed); calls: the calls of the token (each counted once); listed: 1 when the
-- tokens view lists the token (it has a token call, or, token > 0, kernels or an escape), 0
-- for a row that only counts calls (a killed run's token whose token call never reached the
-- file): with no GPU work and no escape, the scan below does not list it either.
-- first_call / last_call: the lowest and highest id among the token's calls (NULL: none);
-- ids are handed out at push, so across threads a token's ids may interleave with the next
-- token's: readers take `id BETWEEN first_call AND last_call AND token = T`. Files before version 4 lack the new columns; rows inserted naming only the first four
-- columns read as listed.
-- Since version 6, the time the token spent in collectives (the cross-rank report's, read
-- here instead of from calls): wait_ns, the CPU time of its closed calls of collective sites
-- (IsCollectiveSite, src/core/comm_kernels.h) whose parent is not one; gpu_collective_ns, the
-- GPU busy time of its collective calls plus the communication kernels' time (call_gpu.
-- gpu_comm_ns) of its other calls. Both by the calls' own tokens, kernels outside any call
-- not counted.
CREATE TABLE IF NOT EXISTS token_stats(token INTEGER PRIMARY KEY, kernels INTEGER,
                                       gpu_busy_ns INTEGER, escapes INTEGER,
                                       cpu_begin_ns INTEGER, cpu_end_ns INTEGER, k INTEGER,
                                       calls INTEGER DEFAULT 0, listed INTEGER DEFAULT 1,
                                       first_call INTEGER, last_call INTEGER,
                                       wait_ns INTEGER DEFAULT 0,
                                       gpu_collective_ns INTEGER DEFAULT 0);
-- Since version 4, kept by the writer as it writes: per site and phase (0 = token 0, before
-- the first token; 1 = token 1, the prefill; 2 = tokens >= 2, decode), by the calls' own
-- tokens: calls, CPU time of the closed calls (inclusive), CPU self time (that less the
-- closed calls directly inside them: it may be negative for a call that never closed),
-- kernels and GPU busy time attributed to the calls (self: kernels go to the innermost
-- call), top_calls / top_cpu_ns: the calls with no parent and their closed calls' time.
-- A few rows per site, upserted in place at each commit.
CREATE TABLE IF NOT EXISTS site_stats(site_id INTEGER, phase INTEGER, calls INTEGER,
                                      cpu_ns INTEGER, cpu_self_ns INTEGER, kernels INTEGER,
                                      gpu_busy_ns INTEGER, top_calls INTEGER,
                                      top_cpu_ns INTEGER,
                                      PRIMARY KEY(site_id, phase)) WITHOUT ROWID;
-- Since version 4, for the plot of a long run: each site's CPU self time per block of
-- tokens. Block 0 = token 0, block 1 = token 1, block b >= 2 = tokens 2 + 64 (b - 2) ..
-- 2 + 64 (b - 2) + 63 (kTokenBlock in src/store/summaries.h). Sites x tokens / 64 rows.
CREATE TABLE IF NOT EXISTS site_blocks(site_id INTEGER, block INTEGER, cpu_self_ns INTEGER,
                                       PRIMARY KEY(site_id, block)) WITHOUT ROWID;
-- Since version 5, kept by the writer from each token_stats row it changes (read before and
-- after its upsert: src/store/token_digest.h), so that the report of a long run reads a few
-- hundred rows, not one per token. Over the tokens the tokens view lists, by phase (as
-- site_stats: 0 = token 0, 1 = token 1, 2 = tokens >= 2):
-- token_totals: tokens, CUDA-graph replays (no token call), closed tokens and their CPU time
-- (end - begin), GPU busy time, kernels, escapes, the largest GPU busy time of a token;
-- token_hist: how many tokens' CPU time (what 0: closed tokens) and GPU busy time (what 1) fall
-- in each bucket (DigestBucket: exact below 128 ns, then 128 buckets an octave, each within
-- 0.4 % of its middle value);
-- token_slowest: the closed tokens with the longest CPU time (kSlowestTokens of them; ties: the
-- lower token).
CREATE TABLE IF NOT EXISTS token_totals(phase INTEGER PRIMARY KEY, tokens INTEGER,
                                        replays INTEGER, closed INTEGER, cpu_ns INTEGER,
                                        gpu_busy_ns INTEGER, kernels INTEGER, escapes INTEGER,
                                        max_gpu_busy_ns INTEGER);
CREATE TABLE IF NOT EXISTS token_hist(phase INTEGER, what INTEGER, bucket INTEGER,
                                      count INTEGER,
                                      PRIMARY KEY(phase, what, bucket)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS token_slowest(token INTEGER PRIMARY KEY, cpu_ns INTEGER);
-- Each call's first output tensor (shape as JSON), streamed by the Python hooks.
CREATE TABLE IF NOT EXISTS call_outputs(call_id INTEGER, path TEXT, shape TEXT, dtype TEXT);
-- Since version 7. Op data flow, from op records (outermost ATen ops): the tensors an op
-- call read (`inputs`, "slot:identity:shape" entries) and returned (`outputs`,
-- "slot:identity"), space-separated: an argument's index (a list's tensors share it) or an
-- output's, the tensor's identity (the address of its TensorImpl while it lived), and a hash
-- of an input's shape (0: not known). An input comes from the op call with the
-- largest id below the reader's that returned the same tensor; none: a model input, a
-- parameter or a buffer. The input slot 2147483647 holds no tensor: its value is a hash of
-- the op's non-tensor arguments (ints, floats, bools, int lists), which tells ops that
-- differ in them apart. A call has one row, or more when a drain ended while it was open.
CREATE TABLE IF NOT EXISTS op_links(call_id INTEGER, inputs TEXT, outputs TEXT);
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
-- Written by the Python layer's engine adapter (python/tokentrace/_engines/vllm/steps.py) while a
-- serving engine runs: one row per request scheduled in a step (the step is the token), with
-- how many of its tokens the step computes as prefill (its prompt, possibly a chunk of it) and
-- as decode, and the position of its first token in the step. Other files have none (empty).
CREATE TABLE IF NOT EXISTS step_requests(token INTEGER, request TEXT, prefill_tokens INTEGER,
                                         decode_tokens INTEGER, position INTEGER);
-- Written by the Python layer's engine adapters (python/tokentrace/_engines/vllm/core.py,
-- front.py, steps.py): one row per request as one process of a serving engine saw it, `role`
-- engine_core (the scheduler), front_end (the process that takes requests and returns
-- outputs; its rows have no scheduling) or worker (the model's process, when edit rules
-- served per request ran there: `edits` is JSON {rule index: [steps, rows]} of the rules that
-- edited the request's rows, "{}" for none; its other columns are NULL). One file may hold
-- several roles' rows (one process).
-- arrival_unix_ns is the front end's wall clock (when the request arrived); the other times
-- are this file's CLOCK_MONOTONIC ns: queued (handed to the scheduler, or by the front end to
-- the engine), first scheduled (the start of the scheduling that first took it), first token
-- (the end of the update that gave its first output token; the front end: of the output
-- processing that got it), finished (likewise, or the abort). The *_step columns are the
-- tokens of those events. A request still running when the file was last written has NULL
-- finish columns. Files that predate this table lack it (read as empty).
CREATE TABLE IF NOT EXISTS request_events(role TEXT, request TEXT, arrival_unix_ns INTEGER,
                                          queued_ns INTEGER, scheduled_ns INTEGER,
                                          first_token_ns INTEGER, finished_ns INTEGER,
                                          first_step INTEGER, first_token_step INTEGER,
                                          finished_step INTEGER, finish_reason TEXT,
                                          prompt_tokens INTEGER, output_tokens INTEGER,
                                          edits TEXT);
-- Written by the Python layer (python/tokentrace/_record/token_text.py) through the writer, with
-- the token it belongs to: each token's generated id per sequence of the batch (the id the
-- root's next call reads, or generate's output for the last token) and, when a tokenizer was
-- known, its text. Token 0 holds each sequence's prompt (id NULL, text the prompt's). Files
-- that predate this table lack it (read as no text).
CREATE TABLE IF NOT EXISTS token_text(token INTEGER, sequence INTEGER, id INTEGER, text TEXT);
CREATE INDEX IF NOT EXISTS token_text_by_token ON token_text(token);
-- The SQL texts below are cut from this file at build time (src/store/CMakeLists.txt) and
-- must stay its last statements, in this order. Readers do not trust these views in a file
-- (a crafted file could define one to never end): they run the SELECT after `AS` themselves
-- (kTokensScanSql, kTokensSelectSql). Tokens with no token call of their own are CUDA-graph
-- replays (one launch = one token): token_stats has them.
--
-- tokens_from_calls: one row per token computed from the calls (what a file without
-- summaries is read with, and what the summaries are checked against).
CREATE VIEW IF NOT EXISTS tokens_from_calls AS
  SELECT r.token AS token, MIN(r.b) AS cpu_begin_ns, MAX(r.e) AS cpu_end_ns,
         COALESCE(t.kernels, 0) AS kernels, COALESCE(t.gpu_busy_ns, 0) AS gpu_busy_ns,
         COALESCE(t.escapes, 0) AS escapes
  FROM (SELECT c.token AS token, c.cpu_begin_ns AS b, c.cpu_end_ns AS e
          FROM sites s JOIN calls c ON c.site_id = s.id WHERE s.is_token = 1
        UNION ALL
        SELECT token, NULL, NULL FROM token_stats
        WHERE token > 0 AND (kernels != 0 OR gpu_busy_ns != 0 OR escapes != 0)) r
  LEFT JOIN token_stats t ON t.token = r.token
  GROUP BY r.token;
-- tokens: one row per token, read from the writer's summary (files with meta.summaries).
CREATE VIEW IF NOT EXISTS tokens AS
  SELECT token, cpu_begin_ns, cpu_end_ns, COALESCE(kernels, 0) AS kernels,
         COALESCE(gpu_busy_ns, 0) AS gpu_busy_ns, COALESCE(escapes, 0) AS escapes
  FROM token_stats WHERE listed = 1;
