"""The Python layer's rows, handed to the trace file's one writer.

The schema is not declared here: it is src/store/schema.sql, which the C++ store embeds and
the extension exports (schema(): SCHEMA_SQL, TOKENS_SELECT_SQL, SCHEMA_VERSION). The Python
layer never writes the file itself: it hands its rows to the session's writer through the
extension (tokentrace_add_rows, _add_meta, _add_loss), which writes them in the transactions of
the calls they belong to, under the same rules for a termination signal, a killed process and a
full disk (counted by table as write_failed_*). The tables it fills (include/tokentrace/kinds.h
TOKENTRACE_ROW_TABLES):
  call_inputs      what each call was given, by path (the native walk hands its rows itself)
  saved_outputs    tensors saved with save= (safetensors shards)
  escape_sites     host reads of tensors seen from Python
  step_requests    a serving engine's requests in each step
  request_events   a serving engine's requests, one row each
"""

import os

from .._errors import fail
from . import loader


def schema():
    """The extension, which carries the trace schema; a one-line error when it is not built."""
    native = loader.load()
    if native is None:
        fail(f"trace files cannot be read or written: {loader.unavailable_reason()}")
    return native


# The columns the Python layer's tuple rows fill, in their order (schema.sql's names; the
# writer checks them against the schema when they are handed over).
ROW_COLUMNS = {
    "call_inputs": ("call_id", "path", "kind", "type", "shape", "dtype", "device", "value",
                    "file", "key"),
    "saved_outputs": ("call_id", "file", "key"),
    "escape_sites": ("token", "location", "count"),
    "step_requests": ("token", "request", "prefill_tokens", "decode_tokens", "position"),
}


def add_rows(table, rows, columns=None):
    """Hands `rows` of `table` to the recording session's writer: tuples in ROW_COLUMNS[table]'s
    order (or `columns`'), or {column: value} dicts (request_events). Raises TokentraceError
    when no session records, ValueError for a table or column the schema does not have."""
    rows = list(rows)
    if not rows:
        return
    native = schema()
    code = native.ROW_TABLES.get(table)
    if code is None:
        raise ValueError(f"{table!r} is not a table the Python layer fills; those are "
                         f"{sorted(native.ROW_TABLES)}")
    if isinstance(rows[0], dict):  # one hand-over per set of columns
        groups = {}
        for row in rows:
            groups.setdefault(tuple(row), []).append(tuple(row.values()))
        for names, values in groups.items():
            _hand(native.add_rows, code, list(names), values)
        return
    _hand(native.add_rows, code, list(columns or ROW_COLUMNS[table]), rows)


def add_meta(meta):
    """Hands meta rows {key: value} (values as text) to the session's writer. The keys are
    include/tokentrace/kinds.h's TOKENTRACE_META_KEYS (the extension's META_KEYS); another is
    a TokentraceError (a new key is added there first)."""
    native = schema()
    for key, value in (meta or {}).items():
        try:
            _hand(native.add_meta, key, str(value))
        except ValueError as exc:
            fail(str(exc))


def add_losses(losses):
    """Adds {kind: count} to the file's losses through the session's writer; the kinds are
    include/tokentrace/kinds.h's (ValueError for another)."""
    native = schema()
    unknown = set(losses or {}) - set(native.LOSS_KINDS)
    if unknown:  # the kinds are include/tokentrace/kinds.h's; a new one is added there
        raise ValueError(f"unknown loss kinds {sorted(unknown)}; known: "
                         f"{sorted(native.LOSS_KINDS)}")
    for kind, count in (losses or {}).items():
        if count:
            _hand(native.add_loss, native.LOSS_KINDS[kind], int(count))


def _hand(entry, *args):
    try:
        entry(*args)
    except RuntimeError as exc:  # no session records: nothing can take the rows
        fail(str(exc))


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


class RowsToWriter:
    """Rows of one table that a serving engine's adapter makes while it runs (a step's
    requests, a finished request), handed to the writer as they are made: the writer commits
    them with the steps they belong to, so a process the engine kills keeps them as it keeps
    its calls. `meta`: a callable giving meta rows (the process's role and counts so far),
    handed along at most once a second (flush() hands them now). A refusal (no session
    records) is said once through `say` and never raised into the engine."""

    _META_S = 1.0

    def __init__(self, table, what, say=None, meta=None):
        self.table, self.what, self.say, self.meta = table, what, say, meta
        self.handed = 0  # rows handed so far
        self._last_meta = None
        self._said = False

    def add(self, rows):
        rows = list(rows)
        if rows:
            self._hand(lambda: add_rows(self.table, rows))
            self.handed += len(rows)
        if self.meta is not None and self.due():
            self.flush()

    def due(self):
        """A second or more since the meta rows were last handed."""
        import time
        return self._last_meta is None or time.monotonic() - self._last_meta >= self._META_S

    def flush(self):
        """Hands the meta rows now and has the writer commit what it holds (an idle engine,
        the end): a serving engine kills its processes at shutdown without their exit, often
        sooner than the writer's next commit, so what was handed is in the file before."""
        import time
        self._last_meta = time.monotonic()
        if self.meta is not None:
            self._hand(lambda: add_meta(self.meta()))
        self._hand(lambda: schema().flush())

    def _hand(self, hand):
        try:
            hand()
        except Exception as exc:  # never into the engine
            if self.say is not None and not self._said:
                self._said = True
                self.say(f"tokentrace: {self.what} could not be handed to the trace's writer "
                         f"({exc})")
