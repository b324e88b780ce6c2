"""A trace copied into one self-contained file (tt.save)."""

import sqlite3

from .._errors import fail


def save_copy(trace_file, dest, what="tt.save"):
    """Copies the open TraceFile `trace_file` to the new file `dest` with SQLite's backup (a
    consistent copy of a file still being written), in rollback-journal mode: one file, no -wal
    or -shm beside it. A failure is one TokentraceError naming `what`."""
    try:
        out = sqlite3.connect(dest)
        try:
            trace_file.con.backup(out)
            out.execute("PRAGMA journal_mode = DELETE")
        finally:
            out.close()
    except sqlite3.Error as exc:
        fail(f"{what}: could not copy {trace_file.path}: {exc}")
