"""The readers' SQL: every query the package asks a trace file, kept here in the file room
beside the opening rules, so a schema change is met in one place (no file outside _file/ holds
SQL text; tests/python/test_contracts.py checks it).

- Fixed text is named in QUERIES: TraceFile.ask(name, args) runs one (its rows),
  TraceFile.ask_named(name, args) gives its rows as {column: value}; the compiled-kernel join,
  which is handed a q(sql, args), runs QUERIES[name] through it.
- Text that depends on the file or on the question (the C++ readers' token SELECT, whether the
  writer's summaries are there, a window of one token's calls, a bin width, a list of sites)
  is built by the functions below, each named for what it asks. Each returns a Query (sql,
  args): values go in as SQL parameters, and what is put into the text itself is only ever one
  of fixed choices (a table or column picked from a fixed set, the extension's token SELECT,
  a count of parameters), never a string a user gave. Run one with file.q(*query) (or
  file.rows, file.one_or_none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

QUERIES = {
    # the file's own: its meta and (before anything else is trusted) its tables and views
    "meta": "SELECT key, value FROM meta",
    "meta_value": "SELECT value FROM meta WHERE key = ?",
    "objects": "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')",
    # the sites a file lists, and which of them its calls (or the writer's summaries) name
    "sites": "SELECT id, name, kind, is_token FROM sites ORDER BY id",
    "site_kinds": "SELECT id, name, kind FROM sites",
    "site_columns": "PRAGMA table_info(sites)",
    "site_names_like": "SELECT name FROM sites WHERE name LIKE ?",
    "called_sites": "SELECT DISTINCT site_id FROM calls",
    "called_sites_summarized": "SELECT DISTINCT site_id FROM site_stats",
    # each call's own kernels and GPU busy time, and the calls' parents to add subtrees up
    "call_gpu": "SELECT call_id, kernels, gpu_busy_ns FROM call_gpu",
    "children_last_first": ("SELECT id, parent_id FROM calls WHERE parent_id IS NOT NULL "
                            "ORDER BY id DESC"),
    # the kernels one call launched itself (CallView.kernel_list), in GPU order
    "call_kernels": ("SELECT s.text, k.gpu_begin_ns, k.gpu_end_ns FROM kernels k "
                     "LEFT JOIN strings s ON s.id = k.name_id WHERE k.call_id = ? "
                     "ORDER BY k.gpu_begin_ns"),
    # every kernel record with its name (the compiled-kernel join)
    "kernel_records": ("SELECT k.call_id, k.token, s.text, k.gpu_begin_ns, k.gpu_end_ns, "
                       "k.correlation_id, k.graph_id FROM kernels k LEFT JOIN strings s "
                       "ON s.id = k.name_id"),
    # the calls' output tensors (shapes, dtypes) in the order written, and the saved ones
    "call_outputs": "SELECT call_id, path, shape, dtype FROM call_outputs ORDER BY rowid",
    "saved_outputs": "SELECT call_id, file, key FROM saved_outputs",
    # the sites whose outputs were saved (Recording.saved_sites)
    "sites_of_saved_calls": ("SELECT DISTINCT site_id FROM calls WHERE id IN "
                             "(SELECT call_id FROM saved_outputs)"),
    # the calls' inputs (trace["site:k"].inputs), in the order written
    "call_inputs": ("SELECT call_id, path, kind, type, shape, dtype, device, value, file, key "
                    "FROM call_inputs ORDER BY rowid"),
    # every call in id order (a parent before its children), for the op labels
    "calls_in_order": "SELECT id, site_id, k, parent_id, token FROM calls ORDER BY id",
    # every call in id order with its CPU times (the compiled-kernel join)
    "calls_with_times": ("SELECT id, site_id, token, parent_id, cpu_begin_ns, cpu_end_ns "
                         "FROM calls ORDER BY id"),
    # the calls of one site: (id, k); and as SiteView reads them, in k order
    "calls_of_site": "SELECT id, k FROM calls WHERE site_id = ?",
    "site_calls": ("SELECT id, k, token, parent_id, thread, cpu_begin_ns, cpu_end_ns "
                   "FROM calls WHERE site_id = ? ORDER BY k"),
    # tokens: how many the writer's totals list (prefill and decode), the last one, the calls
    "listed_tokens": "SELECT COALESCE(SUM(tokens), 0) FROM token_totals WHERE phase IN (1, 2)",
    "last_token_summarized": "SELECT COALESCE(MAX(token), 0) FROM token_stats",
    "calls_summarized": "SELECT COALESCE(SUM(calls), 0) FROM token_stats",
    # the text of the prompt and of the tokens generated (the first sequence's)
    "prompt_text": ("SELECT MAX(text) FROM token_text WHERE token = 0 GROUP BY sequence "
                    "ORDER BY sequence LIMIT 1"),
    "generated_texts": ("SELECT MAX(text) FROM token_text WHERE token > 0 AND sequence = "
                        "(SELECT MIN(sequence) FROM token_text) GROUP BY token ORDER BY token"),
    # host reads of device values by where they happened, most frequent first; the losses
    "escape_locations": ("SELECT location, SUM(count) AS n FROM escape_sites GROUP BY location "
                         "ORDER BY n DESC"),
    "losses_by_kind": "SELECT kind, SUM(count) FROM losses GROUP BY kind",
    # the op records' data flow
    "op_links": "SELECT call_id, inputs, outputs FROM op_links ORDER BY rowid",
    # a serving engine's steps and requests
    "step_requests": ("SELECT token, request, prefill_tokens, decode_tokens, position "
                      "FROM step_requests ORDER BY token, rowid"),
    "request_events": "SELECT * FROM request_events ORDER BY queued_ns, rowid",
    # per site, from the writer's summaries: CPU self time over the decode and prefill tokens
    # (the plot's costliest sites), costliest first; GPU busy time over its calls, from the
    # calls (a file without summaries)
    "site_self_totals": ("SELECT s.name, SUM(t.cpu_self_ns) AS ns FROM site_stats t "
                         "JOIN sites s ON s.id = t.site_id "
                         "WHERE t.phase > 0 AND NOT s.is_token GROUP BY s.name "
                         "ORDER BY ns DESC"),
    "site_gpu_from_calls": ("SELECT s.name, SUM(g.gpu_busy_ns) FROM call_gpu g "
                            "JOIN calls c ON c.id = g.call_id "
                            "JOIN sites s ON s.id = c.site_id GROUP BY s.name"),
}


class Query(NamedTuple):
    """A query built for its question: its text and the arguments its parameters take."""

    sql: str
    args: Sequence[Any] | dict[str, Any]


# --- building blocks (fragments of text, never run on their own) -------------------------

def _calls_of_token(has_summaries: bool) -> str:
    """The calls of the token given as the parameter :t, as a subquery: with the writer's
    summaries a range of rowids (token_stats' first and last call: schema 4 files have no
    index on calls), else a scan of the calls (Reader::CallsOfTokens in C++)."""
    if not has_summaries:
        return "(SELECT * FROM calls WHERE token BETWEEN :t AND :t)"
    tokens = "token BETWEEN :t AND :t"
    return (f"(SELECT * FROM calls WHERE id BETWEEN (SELECT min(first_call) FROM "
            f"token_stats WHERE {tokens}) AND (SELECT max(last_call) FROM token_stats "
            f"WHERE {tokens}) AND {tokens})")


def _is_token(has_is_token_column: bool) -> str:
    """Whether the site `s` is a token site: its is_token column, or for a file whose sites
    have none, whether it is the root."""
    return "s.is_token" if has_is_token_column else "s.kind = 'root'"


def _bin(token: str) -> str:
    """The bin of the token column `token` (one of the fixed names below): token 1 (the
    prefill) is bin 0 on its own; decode tokens 2.. fill bins of :width tokens."""
    return f"(CASE WHEN {token} <= 1 THEN 0 ELSE 1 + ({token} - 2) / :width END)"


def _named(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """(":p0,:p1,...", {"p0": v0, ...}): a list of values as named parameters."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ",".join(":" + n for n in names), dict(zip(names, values))


def _self_time(has_is_token_column: bool, select: str, where: str = "",
               group: str = "s.name") -> str:
    """The self time (own time less its child calls') `d.ns` of each call of a non-token site,
    joined to its site `s`, from the calls: SELECT `select` ... GROUP BY `group`, each one of
    the fixed fragments of this file."""
    return ("WITH d AS (SELECT id, parent_id, site_id, token, "
            "           COALESCE(cpu_end_ns, cpu_begin_ns) - cpu_begin_ns AS ns FROM calls), "
            "kids AS (SELECT parent_id AS id, SUM(ns) AS ns FROM d "
            "         WHERE parent_id IS NOT NULL GROUP BY parent_id) "
            f"SELECT {select} FROM d JOIN sites s ON s.id = d.site_id "
            "LEFT JOIN kids ON kids.id = d.id "
            f"WHERE d.token > 0 AND NOT ({_is_token(has_is_token_column)}) {where} "
            f"GROUP BY {group}")


# --- the readers' questions ---------------------------------------------------------------

def token_page(tokens_sql: str, has_token_text: bool, after: int, limit: int,
               offset: int) -> Query:
    """The tokens after token `after` (skipping `offset`, at most `limit`; -1: all) as
    (token, cpu_begin_ns, cpu_end_ns, kernels, gpu_busy_ns, escapes, generated id, text), read
    from `tokens_sql` (TraceFile.tokens_sql: the C++ readers' SELECT, which counts CUDA-graph
    replays). The id and text are token_text's first sequence's (the row with the text, handed
    at the end, over the row of the id alone); NULL where the file has no token_text."""
    first = "token = t.token AND sequence = (SELECT MIN(sequence) FROM token_text)"
    columns = (f"(SELECT MAX(id) FROM token_text WHERE {first}), "
               f"(SELECT MAX(text) FROM token_text WHERE {first})"
               if has_token_text else "NULL, NULL")
    return Query(f"SELECT t.token, t.cpu_begin_ns, t.cpu_end_ns, t.kernels, t.gpu_busy_ns, "
                 f"t.escapes, {columns} FROM ({tokens_sql}) t WHERE t.token > ? "
                 f"ORDER BY t.token LIMIT ? OFFSET ?", (after, limit, offset))


def token_calls_from(has_summaries: bool, token: int, first_id: int) -> Query:
    """(id, site_id, k, parent_id, cpu_begin_ns, cpu_end_ns) of the calls of `token` from the
    call `first_id` on, in id order (a call's subtree and what follows it: CallView.ops)."""
    return Query("SELECT id, site_id, k, parent_id, cpu_begin_ns, cpu_end_ns FROM "
                 f"{_calls_of_token(has_summaries)} WHERE id >= :id ORDER BY id",
                 {"t": token, "id": first_id})


def outermost_op_calls(op_sites: Sequence[int], has_summaries: bool,
                       token: int | None = None) -> Query:
    """(id, site_id, cpu_begin_ns, cpu_end_ns) of the calls of the sites `op_sites` whose
    parent is none of them (the outermost ops: Trace.top_ops), over the run or one token."""
    marks, args = _named("s", op_sites)
    calls = "calls"
    if token is not None:
        calls = _calls_of_token(has_summaries)
        args["t"] = int(token)
    return Query(f"SELECT c.id, c.site_id, c.cpu_begin_ns, c.cpu_end_ns FROM {calls} c "
                 f"LEFT JOIN calls p ON p.id = c.parent_id WHERE c.site_id IN ({marks}) "
                 f"AND (p.site_id IS NULL OR p.site_id NOT IN ({marks}))", args)


SHARD_TABLES = ("saved_outputs", "call_inputs")  # the tables that name safetensors shards


def shard_files(table: str) -> Query:
    """The shard files (relative to the trace) that `table`, one of SHARD_TABLES, names."""
    if table not in SHARD_TABLES:
        raise ValueError(f"{table!r} names no shards (one of {SHARD_TABLES})")
    return Query(f"SELECT DISTINCT file FROM {table} WHERE file IS NOT NULL AND file != ''", ())


# --- the plot's questions (plot.py) -------------------------------------------------------

def _token_latency(tokens_sql: str) -> str:
    """Each token's (token, CPU wall ns of its root call) from `tokens_sql`, tokens > 0."""
    return (f"SELECT token, cpu_end_ns - cpu_begin_ns AS ns FROM ({tokens_sql}) "
            "WHERE token > 0")


def token_latency_range(tokens_sql: str, first: int, last: int) -> Query:
    """(first token, tokens, summed CPU wall ns: 0 for a token without a finished root call)
    of the tokens `first` to `last`, read from `tokens_sql` (TraceFile.tokens_sql)."""
    return Query("SELECT MIN(token), COUNT(*), SUM(COALESCE(ns, 0)) FROM "
                 f"({_token_latency(tokens_sql)}) WHERE token BETWEEN ? AND ?", (first, last))


def token_latency_bins(tokens_sql: str, width: int) -> Query:
    """(bin, first token, tokens, summed CPU wall ns) per bin of `width` decode tokens (the
    prefill is bin 0 on its own), in bin order, read from `tokens_sql`."""
    return Query(f"SELECT {_bin('token')} AS bin, MIN(token), COUNT(*), "
                 f"SUM(COALESCE(ns, 0)) FROM ({_token_latency(tokens_sql)}) "
                 "GROUP BY bin ORDER BY bin", {"width": int(width)})


def site_self_totals_from_calls(has_is_token_column: bool) -> Query:
    """(site name, self ns over all tokens) of each non-token site, costliest first, summed
    from the calls (a file without the writer's summaries: QUERIES["site_self_totals"])."""
    return Query(_self_time(has_is_token_column,
                            "s.name, SUM(d.ns - COALESCE(kids.ns, 0)) AS ns")
                 + " ORDER BY ns DESC", ())


def site_self_time_bins(has_is_token_column: bool, width: int, names: Sequence[str]) -> Query:
    """(bin, site name, self ns) of the sites `names` per bin of `width` decode tokens (the
    prefill is bin 0), summed from the calls."""
    marks, args = _named("n", names)
    args["width"] = int(width)
    return Query(_self_time(has_is_token_column,
                            f"{_bin('d.token')} AS bin, s.name, "
                            "SUM(d.ns - COALESCE(kids.ns, 0))",
                            where=f"AND s.name IN ({marks})", group="bin, s.name"), args)


def site_block_bins(blocks_per_bin: int, names: Sequence[str]) -> Query:
    """(bin, site name, self ns) of the sites `names` per bin of `blocks_per_bin` blocks of
    site_blocks (the writer's per-block summaries; block 1 is the prefill, bin 0)."""
    marks, args = _named("n", names)
    args["per_bin"] = int(blocks_per_bin)
    return Query("SELECT CASE WHEN b.block <= 1 THEN 0 ELSE 1 + (b.block - 2) / :per_bin END "
                 "AS bin, s.name, SUM(b.cpu_self_ns) FROM site_blocks b "
                 f"JOIN sites s ON s.id = b.site_id WHERE b.block > 0 AND s.name IN ({marks}) "
                 "GROUP BY bin, s.name", args)


SITE_SUM_COLUMNS = {"self": "t.cpu_self_ns", "gpu": "t.gpu_busy_ns"}


def site_sums(column: str) -> Query:
    """(site name, sum over its calls) from the writer's site_stats: CPU self ns (`column`
    "self") or GPU busy ns ("gpu")."""
    return Query(f"SELECT s.name, SUM({SITE_SUM_COLUMNS[column]}) FROM site_stats t "
                 "JOIN sites s ON s.id = t.site_id GROUP BY s.name", ())


def token_calls_with_sites(has_summaries: bool, has_is_token_column: bool,
                           token: int) -> Query:
    """(id, parent_id, site name, is a token site) of the calls of `token`, in id order."""
    return Query(f"SELECT c.id, c.parent_id, s.name, {_is_token(has_is_token_column)} "
                 f"FROM {_calls_of_token(has_summaries)} c "
                 "JOIN sites s ON s.id = c.site_id ORDER BY c.id", {"t": int(token)})


def last_tokens(has_token_stats: bool) -> Query:
    """The last token the calls name, and where the file has token_stats the last it lists
    (one row each; NULL where there is none): a file without the writer's summaries
    (QUERIES["last_token_summarized"] with them)."""
    src = ["SELECT MAX(token) FROM calls"]
    if has_token_stats:
        src.append("SELECT MAX(token) FROM token_stats")
    return Query(" UNION ALL ".join(src), ())
