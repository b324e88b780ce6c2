"""Writing the Python layer's rows into a trace file.

The schema is not declared here: it is src/store/schema.sql, which the C++ store embeds and
the extension exports (schema(): SCHEMA_SQL, TOKENS_SELECT_SQL, SCHEMA_VERSION). The shim
creates every table, the Python layer's included, and the Python layer fills:
  call_outputs     each call's first output tensor (streamed through the shim by the hooks)
  call_inputs      what each call was given, by path (schema version 2)
  saved_outputs    tensors saved with save= (safetensors shards)
  escape_sites     host reads of tensors seen from Python
"""

import os
import sqlite3

from .._errors import fail
from . import loader


def schema():
    """The extension, which carries the trace schema; a one-line error when it is not built."""
    native = loader.load()
    if native is None:
        fail(f"trace files cannot be read or written: {loader.unavailable_reason()}")
    return native


def connect(path, timeout=30.0):
    con = sqlite3.connect(path, timeout=timeout)
    con.execute("PRAGMA busy_timeout = %d" % int(timeout * 1000))
    return con


def write_schema(con):
    """Creates the whole schema in `con`, as the shim does for a new file (tests use it)."""
    con.executescript(schema().SCHEMA_SQL)


def write_python_rows(path, saved=(), escape_sites=(), meta=None, losses=None, inputs=(),
                      step_requests=(), request_events=()):
    """Adds the Python layer's rows to a trace file (the shim's or our own). Call outputs
    (shape, dtype, path) are not among them: the hooks stream those through the shim.

    saved: (call_id, file, key);
    escape_sites: (token, location, count); losses: {kind: count}, added to the shim's;
    inputs: call_inputs rows (InputRecorder.table_rows);
    step_requests: (token, request, prefill tokens, decode tokens, position) of an engine's
    steps (_record/vllm_steps.py);
    request_events: {column: value} rows of request_events (an engine core's requests,
    _record/vllm_core.py), by the column names of the file's table (schema.sql's).
    Safe while the shim still writes the file (SQLite locking; we wait up to the busy
    timeout).
    """
    unknown = set(losses or {}) - set(schema().LOSS_KINDS)
    if unknown:  # the kinds are include/tokentrace/kinds.h's; a new one is added there
        raise ValueError(f"unknown loss kinds {sorted(unknown)}; known: "
                         f"{sorted(schema().LOSS_KINDS)}")
    con = connect(path)
    con.isolation_level = None  # explicit BEGIN/COMMIT: the tables and rows in one transaction
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            con.executemany("INSERT INTO saved_outputs(call_id, file, key) VALUES (?,?,?)", saved)
            con.executemany("INSERT INTO escape_sites(token, location, count) VALUES (?,?,?)",
                            escape_sites)
            if step_requests:
                con.executemany("INSERT INTO step_requests(token, request, prefill_tokens, "
                                "decode_tokens, position) VALUES (?,?,?,?,?)", step_requests)
            if request_events:
                _insert_named(con, "request_events", request_events)
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
            if con.in_transaction:  # SQLite ends it itself on some errors (a full disk)
                con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
    except sqlite3.Error as exc:
        fail(f"cannot add the Python layer's rows (saved-tensor index, escape sites, inputs, "
             f"its meta and losses) to {path}: {exc}")
    finally:
        con.close()


def _insert_named(con, table, rows):
    """Inserts {column: value} rows into `table`, whose columns are read from the file (the
    schema is schema.sql's); a key that is not one of them raises ValueError."""
    columns = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    for row in rows:
        unknown = set(row) - set(columns)
        if unknown:
            raise ValueError(f"{table} has no column {sorted(unknown)}; its columns: {columns}")
        names = list(row)
        con.execute(f"INSERT INTO {table}({', '.join(names)}) VALUES "
                    f"({', '.join(':' + n for n in names)})", row)


def check_writable(path):
    """Raises OSError-derived message text if `path` cannot be created/written; returns abs path."""
    path = os.path.abspath(path)
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return f"the directory {directory} does not exist"
    if os.path.isdir(path):
        return f"{path} is a directory"
    if os.path.exists(path) and not os.path.isfile(path):
        return f"{path} is not a regular file (a FIFO, a socket or a device)"
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            return f"{path} is not writable"
    elif not os.access(directory, os.W_OK):
        return f"the directory {directory} is not writable"
    return None
