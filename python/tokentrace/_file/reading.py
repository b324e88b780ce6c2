"""A trace file opened for reading, under the opening rules every reader of the package
follows (the C++ readers follow the same in src/store/reader.cc):

- read-only; with no -wal beside the file it is opened immutable and nothing is left next to
  it; a -shm this reader made goes when it closes, unless a writer still has the file;
- a file never closed by its writer whose -wal is missing is said (RuntimeWarning), since what
  it wrote after its last checkpoint is not in it;
- a view where the schema has a table (a crafted file: a view can be made never to end) and a
  file without sites, calls or meta are refused in one line;
- the schema versions this build reads (the extension's OLDEST_READABLE_SCHEMA to
  SCHEMA_VERSION), and whether the writer's summaries are there (else tokens are computed
  from the calls: the extension's TOKENS_SCAN_SQL instead of TOKENS_SELECT_SQL);
- a query of a damaged file is one TokentraceError naming the file, never SQLite's traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import urllib.parse
import warnings
import weakref
from typing import Any, NoReturn

from .._common import schema
from .._errors import fail
from .queries import QUERIES

FileError = sqlite3.Error  # what SQLite raises, for the few callers that catch it themselves


def _wal_missing(path):
    """A WAL-mode (or empty) file with no -wal next to it: a killed writer's data may be there."""
    if os.path.exists(path + "-wal"):
        return False
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return False
    return not header or (len(header) == 20 and header[:16] == b"SQLite format 3\0"
                          and header[18] == 2 and header[19] == 2)


def _fail_not_a_trace(path: str, why: str, wal_missing: bool) -> NoReturn:
    if wal_missing:
        fail(f"{path} has no trace data of its own and its write-ahead log {path}-wal is "
             f"missing (a writer that was killed keeps its last data there until its next "
             f"checkpoint: copy both files)")
    fail(f"{path} is not a tokentrace {why}")


def _close_reader(con, path, made_shm):
    con.close()
    if made_shm and not schema().being_written(path):
        with contextlib.suppress(OSError):
            os.unlink(path + "-shm")


class TraceFile:
    """A trace file open for reading. `stacklevel`: where the warnings of opening point (the
    user's call that opened it)."""

    def __init__(self, path: str, stacklevel: int = 2) -> None:
        self.path = path
        wal_missing = _wal_missing(path)  # before SQLite opens it and makes an empty -wal
        try:
            # Names are stored as the job gave them: bytes that are not UTF-8 read as
            # replacement characters.
            uri = f"file:{urllib.parse.quote(path)}?mode=ro"
            has_wal = os.path.exists(path + "-wal")
            if not has_wal:
                uri += "&immutable=1"
            made_shm = has_wal and not os.path.exists(path + "-shm")
            self.con = sqlite3.connect(uri, uri=True, timeout=30)
            self._closer = weakref.finalize(self, _close_reader, self.con, path, made_shm)
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")
            objects = self.con.execute(QUERIES["objects"]).fetchall()
        except sqlite3.DatabaseError as exc:
            _fail_not_a_trace(path, f"SQLite file ({exc})", wal_missing)
        # Only tables are read. The table names are the schema's (src/store/schema.sql).
        ours = set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", schema().SCHEMA_SQL))
        for name, kind in objects:
            if kind == "view" and name in ours:
                fail(f"{path} is not a tokentrace trace (its '{name}' is a view, not a table)")
        self.tables = {name for name, _ in objects}
        if "sites" not in self.tables or "calls" not in self.tables:
            _fail_not_a_trace(path, "trace (no sites/calls tables)", wal_missing)
        if "meta" not in self.tables:
            _fail_not_a_trace(path, "trace (no meta table)", wal_missing)
        self.meta = dict(self.ask("meta"))
        native = schema()
        oldest, newest = native.OLDEST_READABLE_SCHEMA, native.SCHEMA_VERSION
        version = self.meta.get("schema_version")
        if version is None:
            _fail_not_a_trace(path, "trace (no meta.schema_version)", wal_missing)
        if not version.isdigit() or not oldest <= int(version) <= newest:
            fail(f"{path} has trace schema version {version}; this tokentrace reads "
                 f"versions {oldest} to {newest}")
        self.schema_version = int(version)  # the version that wrote the file
        self.misses_its_wal = wal_missing and native.META_CLOSED not in self.meta
        if self.misses_its_wal:
            warnings.warn(f"tokentrace: {path}: the writer never closed this file and its "
                          f"-wal is not beside it, so what it wrote after its last checkpoint "
                          f"(about the last second) is missing; copy {path}-wal with it",
                          RuntimeWarning, stacklevel=stacklevel + 1)
        self.has_summaries = (self.schema_version >= 4 and native.META_SUMMARIES in self.meta
                              and "site_stats" in self.tables)
        if not self.has_summaries and self.schema_version < 4:
            warnings.warn(f"tokentrace: {path} was written by an older tokentrace (schema "
                          f"{self.schema_version}, without summaries): it is summarised by "
                          f"scanning all its calls, which takes a while for a long run",
                          RuntimeWarning, stacklevel=stacklevel + 1)
        # The C++ readers' SELECT of tokens, not the file's view (a crafted file could define
        # that view to never end).
        self.tokens_sql = (native.TOKENS_SELECT_SQL if self.has_summaries
                           else native.TOKENS_SCAN_SQL)

    def q(self, sql, args=()):
        """The rows of a query, as a list."""
        try:
            return self.con.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)

    def ask(self, name: str, args: Any = ()) -> list:
        """The rows of the named query (queries.py), as q gives them."""
        return self.q(QUERIES[name], args)

    def ask_named(self, name: str, args: Any = ()) -> list[dict]:
        """The rows of the named query (queries.py) as {column: value}, as named gives them."""
        return self.named(QUERIES[name], args)

    def rows(self, sql, args=()):
        """The rows of a query as they are read (an iterator: for long results)."""
        try:
            # Not `yield from` the cursor: closing this generator (a read stopped early, then
            # collected) would close the cursor, which raises once the file is closed, and a
            # generator's close prints what it raises ("Exception ignored in ...").
            for row in self.con.execute(sql, args):
                yield row
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)

    def named(self, sql, args=()):
        """({column: value} rows, in order) of a query."""
        try:
            cursor = self.con.execute(sql, args)
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row)) for row in cursor]
        except sqlite3.DatabaseError as exc:
            self._damaged(exc)

    def one_or_none(self, sql, args=()):
        """The first row of a query, or None where there is none or the file cannot say."""
        try:
            return self.con.execute(sql, args).fetchone()
        except sqlite3.DatabaseError:
            return None

    def being_written(self) -> bool:
        return schema().being_written(self.path)

    def close(self) -> None:
        self._closer()

    def _damaged(self, exc) -> NoReturn:
        if isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc):
            fail(f"{self.path} was closed (trace.close() or trace.cleanup()); open it again "
                 f"with tt.load(path)")
        fail(f"{self.path} cannot be read: {exc} (the file is damaged or was cut short)")
