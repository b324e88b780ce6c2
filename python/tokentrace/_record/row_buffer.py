"""Rows the Python layer adds to a trace file while the job runs (a serving engine's): kept in
memory, written at most once a second, when the engine says it is a good moment (idle), and at
the end. A process the engine kills at shutdown has then written what it had at its last idle
moment."""

from __future__ import annotations

import os
import threading
import time

from .._common import write_python_rows

_FLUSH_S = 1.0


class RowBuffer:
    """Rows of one table (a write_python_rows keyword: step_requests, request_events).

    path: the trace file, or a callable giving it (preload: once the shim has settled it).
    what: the rows in words, for the one line said when a write fails. say: that line's
    function (None: not said). meta: a callable giving meta rows written with every write
    (the process's role and counts so far: a process killed later still says what it was).
    A failed write (a full disk, a file gone) keeps the rows for the next one; nothing raises
    into the job. Nothing is written before the shim has made the file (it makes it once
    something was recorded): a write then would make a file that is no trace.
    """

    def __init__(self, path, table, what, say=None, meta=None):
        self.path, self.table, self.what, self.say = path, table, what, say
        self.meta = meta
        self._meta_written = False
        self.rows: list = []
        self.written = 0
        self._lock = threading.Lock()  # the engine's thread and the final write
        self._last = time.monotonic()
        self._said = False

    def add(self, rows):
        with self._lock:
            self.rows.extend(rows)

    def due(self):
        """A second or more since the last write."""
        return time.monotonic() - self._last >= _FLUSH_S

    def take(self):
        """The buffered rows, now the caller's to write."""
        with self._lock:
            rows, self.rows = self.rows, []
        return rows

    def flush(self):
        """Adds the buffered rows to the trace file; never raises into the job."""
        self._last = time.monotonic()
        rows = self.take()
        if not rows and (self._meta_written or self.meta is None):
            return
        path = self.path() if callable(self.path) else self.path
        if not os.path.exists(path):  # nothing recorded yet: kept for a later write
            with self._lock:
                self.rows[:0] = rows
            return
        try:
            write_python_rows(path, meta=self.meta() if self.meta is not None else None,
                              **{self.table: rows})
            self.written += len(rows)
            self._meta_written = self.meta is not None
        except Exception as exc:
            with self._lock:
                self.rows[:0] = rows
            if self.say is not None and not self._said:
                self._said = True
                self.say(f"tokentrace: {self.what} could not be added to the trace ({exc}); "
                         f"retried at the end")
