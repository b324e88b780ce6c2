"""Trace over a hand-written schema-v1 file (what the shim writes), and tt.load."""

import sqlite3

import torch

import tokentrace as tt
from tt_testutil import make_trace_file


def test_hand_written_file(trace_file):
    trace = tt.load(trace_file)
    assert type(trace) is tt.Trace
    assert trace.sites == ["self", "layer", "layer.mlp"]
    assert trace["layer.mlp"].num_calls == 4
    call = trace["layer.mlp:3"]
    assert (call.k, call.token) == (3, 2)
    assert list(trace["layer.mlp:1"].out.shape) == [1, 5, 8]
    assert list(call.out.shape) == [1, 1, 8] and call.out.dtype == torch.float32
    assert call.gpu_ms == 0.5 and call.kernels == 1
    # inclusive of children: layer = own 0.25 ms + two mlp calls
    assert trace["layer:1"].gpu_ms == 1.25 and trace["layer:1"].kernels == 4
    assert trace["self:1"].gpu_ms == 1.25
    assert call.kernel_list == [("gemm_kernel", 0.5)]
    assert abs(trace["self:1"].cpu_ms - 9.0) < 1e-9
    tokens = trace.tokens
    assert [t.token for t in tokens] == [1, 2]
    assert tokens[0].prefill and tokens[0].escapes == 2 and tokens[0].kernels == 6
    assert trace.losses == {"ring_full": 3}
    assert trace["layer"].gpu_ms == 2.5
    report = trace.report()
    assert "tokens: 2" in report and "ring_full: 3" in report and "layer.mlp" in report


def test_file_without_kernels(tmp_path):
    trace = tt.load(make_trace_file(str(tmp_path / "k.sqlite"), kernels=False))
    assert trace["layer.mlp:1"].gpu_ms is None
    assert "not recorded" in trace.report()


def test_load_of_a_trace(gpt2, prompt, tmp_path):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = tt.trace(gpt2.generate, prompt, input_kwargs={"max_new_tokens": 3},
                         out=tmp_path / "g.sqlite")
    again = tt.load(first.path)
    assert again.sites == first.sites
    assert again["transformer.h.1.mlp"].num_calls == 3
    assert list(again["transformer.h.1.mlp:2"].out.shape) == [1, 1, 32]


def test_trace_copied_without_its_wal_says_the_wal_is_missing(tmp_path):
    import sqlite3

    import pytest
    path = str(tmp_path / "copy.sqlite")
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()  # a WAL-mode file with no tables and no -wal: what a killed run's copy looks like
    with pytest.raises(tt.TokentraceError, match="write-ahead log .*-wal is missing"):
        tt.load(path)


def test_a_copy_of_an_unfinished_trace_without_its_wal_is_said_to_miss_rows(tmp_path):
    """A file its writer never closed, with no -wal beside it, may lack its last second:
    tt.load warns (no loss count covers those rows); a finished trace loads silently."""
    import shutil
    import sqlite3
    import warnings

    import pytest
    model = torch.nn.Linear(4, 4)
    finished = tt.trace(model, torch.ones(1, 4), kernels="off", out=tmp_path / "done.sqlite")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not tt.load(finished.path).misses_its_wal
    copy = str(tmp_path / "copy.sqlite")
    shutil.copy(finished.path, copy)
    con = sqlite3.connect(copy)  # as a killed writer leaves it: in WAL mode, not closed
    con.execute("DELETE FROM meta WHERE key = 'clock_anchor_exit'")
    con.commit()
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    with pytest.warns(RuntimeWarning, match="never closed this file and its -wal is not beside"):
        trace = tt.load(copy)
    assert trace.misses_its_wal and trace["self"].num_calls == 1


def test_trace_never_replaces_a_file_that_is_not_a_trace(tmp_path):
    import pytest
    path = tmp_path / "notes.sqlite"
    path.write_text("my notes, not a trace\n")
    model = torch.nn.Linear(4, 4)
    with pytest.raises(tt.TokentraceError, match="exists and is not a tokentrace trace"):
        tt.trace(model, torch.ones(1, 4), kernels="off", out=path)
    assert path.read_text() == "my notes, not a trace\n"


def _crafted_trace(path, sql):
    """make_trace_file's trace, then `sql` run on it."""
    import sqlite3
    make_trace_file(path)
    con = sqlite3.connect(path)
    con.executescript(sql)
    con.close()
    return path


def test_unfinished_and_rootless_tokens_read_without_errors(tmp_path):
    # token 3: its root call never closed (the job was killed inside it)
    path = _crafted_trace(str(tmp_path / "killed.sqlite"),
                          "INSERT INTO calls VALUES (100, 1, 3, 3, NULL, 7, 50000000, NULL)")
    tokens = tt.load(path).tokens
    assert [(t.token, t.finished, t.cpu_ms) for t in tokens] == [
        (1, True, 9.0), (2, True, 9.0), (3, False, 0.0)]
    # a token with no root call at all (a CUDA-graph replay: one launch is one token, its
    # kernels counted in token_stats) has no begin either: it used to raise TypeError, and a
    # hand copy of the tokens view once dropped it
    path = _crafted_trace(str(tmp_path / "rootless.sqlite"),
                          "INSERT INTO token_stats(token, kernels, gpu_busy_ns, escapes) "
                          "VALUES (3, 5, 2000000, 1)")
    tokens = tt.load(path).tokens
    assert [(t.token, t.finished, t.cpu_ms, t.kernels, t.escapes) for t in tokens][2:] == [
        (3, True, 0.0, 5, 1)]


def test_the_files_tokens_view_is_not_trusted(tmp_path):
    """tt.load reads tokens with the C++ readers' SELECT (from the extension), as `tokentrace
    report` does, not with whatever view a file defines."""
    path = _crafted_trace(str(tmp_path / "crafted.sqlite"),
                          "DROP VIEW tokens; CREATE VIEW tokens AS SELECT 4 AS token, NULL AS "
                          "cpu_begin_ns, NULL AS cpu_end_ns, 0 AS kernels, 0 AS gpu_busy_ns, "
                          "1 AS escapes")
    assert [t.token for t in tt.load(path).tokens] == [1, 2]


def test_names_that_are_not_utf8_and_no_files_left_behind(tmp_path):
    import os
    path = _crafted_trace(str(tmp_path / "odd name %?#.sqlite"),
                          "UPDATE sites SET name = CAST(X'6C6179657280FF' AS TEXT) "
                          "WHERE name = 'layer'")
    trace = tt.load(path)
    assert trace.sites == ["self", "layer\ufffd\ufffd", "layer.mlp"]
    assert trace["layer\ufffd\ufffd"].num_calls == 2 and len(trace.tokens) == 2
    del trace
    # reading a finished trace leaves no -wal or -shm next to it
    assert not os.path.exists(path + "-wal") and not os.path.exists(path + "-shm")


def test_damaged_file_is_a_one_line_error(tmp_path):
    import pytest
    path = str(tmp_path / "damaged.sqlite")
    make_trace_file(path)
    # Keep the header and the schema (more than one page since schema 4), damage the calls.
    con = sqlite3.connect(path)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'calls'").fetchone()[0]
    con.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xA5" * page_size)
    with pytest.raises(tt.TokentraceError, match="cannot be read: .*damaged"):
        tt.load(path).tokens


def test_a_file_whose_tables_are_views_is_refused_at_once(tmp_path):
    """A crafted file whose `calls` is a view that never ends: refused on open (a view where
    the schema has a table), not read forever."""
    import sqlite3

    import pytest
    path = make_trace_file(str(tmp_path / "crafted.sqlite"))
    con = sqlite3.connect(path)
    con.execute("DROP TABLE calls")
    con.execute("CREATE VIEW calls AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                "FROM r) SELECT x AS id, 1 AS site_id, x AS k, 1 AS token, 0 AS parent_id, "
                "0 AS thread, 0 AS cpu_begin_ns, 1 AS cpu_end_ns FROM r")
    con.commit()
    con.close()
    with pytest.raises(tt.TokentraceError, match="its 'calls' is a view, not a table"):
        tt.load(path)

