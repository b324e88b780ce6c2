"""The facts C++ and Python share come from one place, through the extension: the trace schema
(src/store/schema.sql) and its version. Python keeps no copy of them."""

import os
import sqlite3

from tokentrace import _loader, _store
from tt_testutil import ROOT

native = _loader.load()


def test_the_schema_is_the_one_file():
    with open(os.path.join(ROOT, "src", "store", "schema.sql")) as f:
        assert native.SCHEMA_SQL == f.read()
    # the readers' tokens SELECT is the view's, cut from the same text
    assert native.SCHEMA_SQL.rstrip().endswith(native.TOKENS_SELECT_SQL + ";")
    assert native.OLDEST_READABLE_SCHEMA <= native.SCHEMA_VERSION


def test_a_hand_made_file_matches_the_shims(tmp_path):
    """tests build files with _store.write_schema: the same tables, indices and view as the
    shim's (no index the shim leaves out, no tokens view that drops graph replays)."""
    path = str(tmp_path / "t.sqlite")
    con = sqlite3.connect(path)
    _store.write_schema(con)
    objects = dict(con.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE "
                               "'sqlite_%'"))
    con.close()
    assert objects["calls_by_token"] == "index" and "calls_site_k" not in objects
    assert objects["tokens"] == "view"
    assert {"saved_outputs", "escape_sites", "call_inputs"} <= set(objects)
