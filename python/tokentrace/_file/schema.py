"""The trace schema into a SQLite connection, as the writer makes a new file (tests that
build files by hand use it; the package itself never writes a trace)."""


def write_schema(con):
    """Creates the whole schema in `con` (a sqlite3 connection), from the extension's copy of
    src/store/schema.sql."""
    from .._common import schema
    con.executescript(schema().SCHEMA_SQL)
