"""python -m tokentrace.plot over a hand-written file and a real trace."""

import os
import subprocess
import sys

import pytest

from tt_testutil import PYDIR, make_trace_file

pytest.importorskip("matplotlib")


def _run(*args):
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tokentrace.plot", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_plot_hand_file(tmp_path):
    path = make_trace_file(str(tmp_path / "h.sqlite"))
    out = tmp_path / "h.png"
    res = _run(path, "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 1000


def test_plot_real_trace_in_process(tmp_path, gpt2, prompt):
    import warnings
    import tokentrace as tt
    from tokentrace.plot import plot
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trace = tt.trace(gpt2.generate, prompt, input_kwargs={"max_new_tokens": 3},
                         out=tmp_path / "g.sqlite")
    out = plot(trace.path, str(tmp_path / "g.png"))
    assert os.path.getsize(out) > 1000


def test_plot_bad_file(tmp_path):
    res = _run(str(tmp_path / "missing.sqlite"))
    assert res.returncode == 2 and res.stderr.startswith("tokentrace:")
    assert "Traceback" not in res.stderr
