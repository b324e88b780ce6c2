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


def test_titles_fit_in_the_figure_when_kernels_were_not_recorded(tmp_path):
    """The second title once carried the whole kernel status, cut at 110 characters mid-word,
    across the whole width of the figure."""
    import sqlite3
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import tokentrace as tt
    from tokentrace.plot import _figure
    path = make_trace_file(str(tmp_path / "off.sqlite"), kernels=False)
    detail = ("tokentrace: kernels are off: no NVIDIA driver (libcuda.so.1: cannot open shared "
              "object file: No such file or directory); cuptiSubscribe failed: "
              "CUPTI_ERROR_UNKNOWN")
    con = sqlite3.connect(path)
    con.executemany("INSERT OR REPLACE INTO meta VALUES (?,?)",
                    [("kernel_mode", "summary"), ("kernels_status", detail),
                     ("kernels_off", "no NVIDIA GPU here")])
    con.commit()
    con.close()
    fig = _figure(tt.load(path), 6, plt)
    try:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            box = ax.get_window_extent(renderer)
            extent = ax.title.get_window_extent(renderer)
            assert box.x0 <= extent.x0 and extent.x1 <= box.x1, ax.title.get_text()
            assert ax.title.get_text().endswith(("time", ")")), ax.title.get_text()  # whole
        assert "no NVIDIA GPU here" in fig.axes[1].title.get_text()
    finally:
        plt.close(fig)
