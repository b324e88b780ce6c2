"""Where one language runs the other's program: `tokentrace plot` runs Python (matplotlib),
trace.report() runs the `tokentrace` program. Each way that fails is one line that says what
is missing, never a traceback."""

import os
import subprocess
import sys

import pytest

from tokentrace import TokentraceError
from tokentrace._common import loader
from tokentrace._read import render_report
from tt_testutil import make_trace_file


def _plot(tmp_path, python):
    program = loader.find_program()
    assert program, "the `tokentrace` program is not built (bash scripts/setup.sh)"
    path = make_trace_file(str(tmp_path / "h.sqlite"))
    env = dict(os.environ, TOKENTRACE_PYTHON=str(python))
    return subprocess.run([program, "plot", path, "-o", str(tmp_path / "h.png")], env=env,
                          capture_output=True, text=True, timeout=300)


def _wrapper(tmp_path, body):
    """An interpreter as TOKENTRACE_PYTHON names one: this Python, run by a script."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return script


def _one_line(res, status, *words):
    assert res.returncode == status, (res.returncode, res.stderr)
    assert res.stderr.startswith("tokentrace: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    for word in words:
        assert word in res.stderr, res.stderr


def test_plot_program_draws_with_the_python_it_is_given(tmp_path):
    pytest.importorskip("matplotlib")
    res = _plot(tmp_path, sys.executable)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "h.png").stat().st_size > 1000


def test_plot_program_without_an_interpreter(tmp_path):
    _one_line(_plot(tmp_path, tmp_path / "no-python"), 127, "cannot run", "TOKENTRACE_PYTHON")


def test_plot_program_with_a_python_that_lacks_the_package(tmp_path):
    python = _wrapper(tmp_path, f'exec "{sys.executable}" -I "$@"')  # -I: no PYTHONPATH
    _one_line(_plot(tmp_path, python), 1, "cannot import", "set TOKENTRACE_PYTHON")


def test_plot_program_with_a_python_that_lacks_matplotlib(tmp_path):
    stub = tmp_path / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    python = _wrapper(tmp_path,
                      f'PYTHONPATH="{stub.parent}:$PYTHONPATH" exec "{sys.executable}" "$@"')
    _one_line(_plot(tmp_path, python), 2, "needs matplotlib")


def test_report_of_a_file_that_is_not_a_trace_is_the_programs_line(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("not a database\n")
    with pytest.raises(TokentraceError) as err:
        render_report(path)
    assert "\n" not in str(err.value) and "Traceback" not in str(err.value)
    assert str(path) in str(err.value)


def test_report_without_the_program_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "find_program", lambda: None)
    with pytest.raises(TokentraceError, match=r"program is not built.*scripts/setup.sh"):
        render_report(make_trace_file(str(tmp_path / "h.sqlite")))
