"""The facts C++ and Python share come from one place, through the extension: the trace schema
(src/store/schema.sql) and its version, and the site, escape and loss kinds
(include/tokentrace/kinds.h). Python keeps no copy of them."""

import os
import re
import sqlite3

import pytest

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


def test_kinds_come_from_the_header():
    with open(os.path.join(ROOT, "include", "tokentrace", "kinds.h")) as f:
        header = f.read()

    def listed(prefix):
        return {name: int(value) for value, name in
                re.findall(r'X\(TOKENTRACE_%s_\w+, (\d+), "(\w+)"\)' % prefix, header)}
    assert native.SITE_KINDS == listed("SITE") == {"root": 0, "module": 1, "range": 2, "op": 3}
    assert native.ESCAPE_KINDS == listed("ESCAPE") and native.ESCAPE_KINDS["host_read"] == 4
    assert native.LOSS_KINDS == listed("LOSS")
    assert {"buffer_full", "save_failed", "inputs_failed"} <= set(native.LOSS_KINDS)


def test_every_loss_kind_is_documented():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("A **loss** is"):readme.index("The file is plain SQLite")]
    documented = set(re.findall(r"`(\w+)`", section))
    for name in ("calls", "kernels", "escapes", "outputs"):  # "write_failed_calls`, `_kernels"
        documented.add("write_failed_" + name)
    assert set(native.LOSS_KINDS) <= documented


def test_the_python_layer_writes_only_known_loss_kinds(tmp_path):
    path = str(tmp_path / "t.sqlite")
    con = sqlite3.connect(path)
    _store.write_schema(con)
    con.close()
    with pytest.raises(ValueError, match="unknown loss kinds"):
        _store.write_python_rows(path, losses={"saved_failed": 1})
    _store.write_python_rows(path, losses={"save_failed": 2})
    con = sqlite3.connect(path)
    assert con.execute("SELECT count FROM losses WHERE kind = 'save_failed'").fetchone() == (2,)
    con.close()


@pytest.mark.parametrize("text", ["off", "summary", "full", "sample:1", "sample:007", "sample:0",
                                  "sample:", "sample:-1", "sample:\u00b2", "sample:1000000000000",
                                  "Full", "everything", ""])
def test_kernel_modes_are_judged_by_the_cpp_parser(text):
    """Python keeps no list of kernel modes: check_kernel_mode accepts exactly what the
    C++ parser (src/core/config.cc, through _native.parse_kernel_mode) accepts, with its
    message, and never fails with a stack trace of ours ("sample:\u00b2" is a digit to
    str.isdigit)."""
    from tokentrace import TokentraceError
    from tokentrace._backend import check_kernel_mode
    try:
        native.parse_kernel_mode(text, "kernels")
        cpp_error = None
    except ValueError as exc:
        cpp_error = str(exc)
    if cpp_error is None:
        assert check_kernel_mode(text) == text
    else:
        with pytest.raises(TokentraceError) as raised:
            check_kernel_mode(text)
        assert str(raised.value) == "tokentrace: " + cpp_error
        assert native.KERNEL_MODES_ACCEPTED in cpp_error


def test_kernel_mode_default_and_non_strings():
    from tokentrace import TokentraceError
    from tokentrace._backend import check_kernel_mode
    assert native.DEFAULT_KERNEL_MODE == "summary"
    assert check_kernel_mode(None) is None  # the shim then reads TOKENTRACE_KERNELS
    with pytest.raises(TokentraceError, match="kernels=5 is not a kernel mode"):
        check_kernel_mode(5)


def test_current_gives_the_call_and_its_token(tmp_path):
    """tokentrace_current has no call number k (the background thread numbers calls; API
    version 1 returned k = 0 always): the extension gives (call id, token)."""
    assert native.API_VERSION == 2
    native.start(str(tmp_path / "current.sqlite"), "off", None)
    try:
        root = native.site("self", native.SITE_KINDS["root"])
        inner = native.site("inner", native.SITE_KINDS["module"])
        assert native.current() == (0, 0)
        for token in (1, 2):
            native.push(root)
            root_call = native.current()[0]
            native.push(inner)
            inner_call, inner_token = native.current()
            assert root_call and inner_call and inner_call != root_call
            assert inner_token == token
            native.pop()
            assert native.current() == (root_call, token)
            native.pop()
        assert native.current() == (0, 0)
    finally:
        native.stop()
