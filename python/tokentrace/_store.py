"""SQLite schema v1 (the shim's contract, see docs/trace-format.md) and the Python layer's tables.

The native shim writes meta, sites, calls, strings, kernels, call_gpu, escapes, losses,
token_stats and the tokens view, and creates call_outputs empty. The Python layer adds:
  call_outputs(call_id, path, shape, dtype)      each call's first output tensor (shape: JSON)
  saved_outputs(call_id, file, key)              tensors saved with save= (safetensors shards,
                                                 `file` relative to the SQLite file's directory)
  escape_sites(token, location, count)           host reads of tensors seen from Python
call_inputs (what each call was given, by path) is the shim's table since schema version 2
(src/store/schema.cc); the Python layer fills it. write_schema() creates the whole schema of
version 1 (tests use it to write files by hand).
"""

import os
import sqlite3

# The newest version this package reads: src/store/schema.h's kSchemaVersion (a test checks
# that a file the shim writes carries it). Versions 1 onwards open.
SCHEMA_VERSION = "2"

_CORE_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS sites(id INTEGER PRIMARY KEY, name TEXT, kind TEXT, is_token INTEGER);
CREATE TABLE IF NOT EXISTS calls(id INTEGER PRIMARY KEY, site_id INTEGER, k INTEGER,
    token INTEGER, parent_id INTEGER, thread INTEGER, cpu_begin_ns INTEGER, cpu_end_ns INTEGER);
CREATE TABLE IF NOT EXISTS strings(id INTEGER PRIMARY KEY, text TEXT);
CREATE TABLE IF NOT EXISTS kernels(call_id INTEGER, token INTEGER, name_id INTEGER,
    kind INTEGER, device INTEGER, stream INTEGER, gpu_begin_ns INTEGER, gpu_end_ns INTEGER,
    correlation_id INTEGER, graph_id INTEGER, graph_node_id INTEGER);
CREATE TABLE IF NOT EXISTS call_gpu(call_id INTEGER PRIMARY KEY, kernels INTEGER,
    gpu_busy_ns INTEGER, gpu_first_begin_ns INTEGER, gpu_last_end_ns INTEGER);
CREATE TABLE IF NOT EXISTS escapes(call_id INTEGER, token INTEGER, thread INTEGER,
    ts_ns INTEGER, kind TEXT);
CREATE TABLE IF NOT EXISTS losses(kind TEXT PRIMARY KEY, count INTEGER);
CREATE TABLE IF NOT EXISTS token_stats(token INTEGER PRIMARY KEY, kernels INTEGER,
    gpu_busy_ns INTEGER, escapes INTEGER);
CREATE INDEX IF NOT EXISTS calls_site_k ON calls(site_id, k);
CREATE VIEW IF NOT EXISTS tokens AS
    SELECT c.token AS token, MIN(c.cpu_begin_ns) AS cpu_begin_ns, MAX(c.cpu_end_ns) AS cpu_end_ns,
           COALESCE(MAX(t.kernels), 0) AS kernels, COALESCE(MAX(t.gpu_busy_ns), 0) AS gpu_busy_ns,
           COALESCE(MAX(t.escapes), 0) AS escapes
    FROM calls c JOIN sites s ON s.id = c.site_id AND s.is_token = 1
    LEFT JOIN token_stats t ON t.token = c.token
    GROUP BY c.token;
"""

_PY_SCHEMA = """
CREATE TABLE IF NOT EXISTS call_outputs(call_id INTEGER, path TEXT, shape TEXT, dtype TEXT);
CREATE TABLE IF NOT EXISTS saved_outputs(call_id INTEGER, file TEXT, key TEXT);
CREATE TABLE IF NOT EXISTS escape_sites(token INTEGER, location TEXT, count INTEGER);
"""


def connect(path, timeout=30.0):
    con = sqlite3.connect(path, timeout=timeout)
    con.execute("PRAGMA busy_timeout = %d" % int(timeout * 1000))
    return con


def write_schema(con):
    con.executescript(_CORE_SCHEMA + _PY_SCHEMA)


def ensure_python_tables(con):
    """Creates the Python layer's tables inside the caller's transaction (executescript would
    commit each CREATE on its own: a sync of the file per table)."""
    for statement in _PY_SCHEMA.split(";"):
        if statement.strip():
            con.execute(statement)


def write_python_rows(path, saved=(), escape_sites=(), meta=None, losses=None, inputs=()):
    """Adds the Python layer's rows to a trace file (the shim's or our own). Call outputs
    (shape, dtype, path) are not among them: the hooks stream those through the shim.

    saved: (call_id, file, key);
    escape_sites: (token, location, count); losses: {kind: count}, added to the shim's;
    inputs: call_inputs rows (InputRecorder.table_rows).
    Safe while the shim still writes the file (SQLite locking; we wait up to the busy
    timeout).
    """
    con = connect(path)
    con.isolation_level = None  # explicit BEGIN/COMMIT: the tables and rows in one transaction
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            ensure_python_tables(con)
            con.executemany("INSERT INTO saved_outputs(call_id, file, key) VALUES (?,?,?)", saved)
            con.executemany("INSERT INTO escape_sites(token, location, count) VALUES (?,?,?)",
                            escape_sites)
            if inputs:
                con.executemany("INSERT INTO call_inputs(call_id, path, kind, type, shape, dtype, "
                                "device, value, file, key) VALUES (?,?,?,?,?,?,?,?,?,?)", inputs)
            for key, value in (meta or {}).items():
                con.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)",
                            (key, str(value)))
            for kind, count in (losses or {}).items():
                if count:
                    con.execute("INSERT INTO losses(kind, count) VALUES (?,?) ON CONFLICT(kind) "
                                "DO UPDATE SET count = count + excluded.count", (kind, count))
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    finally:
        con.close()


def check_writable(path):
    """Raises OSError-derived message text if `path` cannot be created/written; returns abs path."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return f"the directory {directory} does not exist"
    if os.path.isdir(path):
        return f"{path} is a directory"
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            return f"{path} is not writable"
    elif not os.access(directory, os.W_OK):
        return f"the directory {directory} is not writable"
    return None
