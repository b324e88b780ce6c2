"""The trace file as SQL: the one room of the package that speaks SQLite (`import sqlite3`
is here and nowhere else in the package).

Files: reading.py (TraceFile: a trace opened for reading under the opening rules: read-only,
a missing -wal said, views where the schema has tables refused, the schema versions this build
reads, the writer's summaries found; its queries, with a damaged file one error), copying.py
(save_copy: a trace copied into one self-contained file, for tt.save), schema.py
(write_schema: the schema into a connection, for tests that make files by hand), queries.py
(the package's SQL, offered as the module `queries`: fixed texts by name, TraceFile.ask, and
the functions that build the texts that depend on the file or the question; no file outside
_file/ holds SQL). The schema, its version range and its token SELECTs are the extension's
(src/store/schema.sql); rows are written only by the session's writer (_common/store.py hands
them over).
Imports _common and _errors only.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from . import queries
    from .copying import save_copy
    from .reading import FileError, TraceFile
    from .schema import write_schema

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
