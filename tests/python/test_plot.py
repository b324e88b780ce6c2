"""python -m tokentrace.plot over a hand-written file and a real trace."""

import os
import subprocess
import sys

import pytest

from tt_testutil import PYDIR, make_trace_file

pytest.importorskip("matplotlib")


_OLD_FILE = "was written by an older tokentrace"


def _errors(stderr):
    """stderr less the one line saying that a file of an older schema is read by scanning its
    calls (make_trace_file writes schema 1)."""
    lines = stderr.splitlines(keepends=True)
    assert sum(_OLD_FILE in line for line in lines) <= 1, stderr
    return "".join(line for line in lines if _OLD_FILE not in line)


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
    from tokentrace.plot import figure
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
    fig = figure(tt.load(path), 6, plt)
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


@pytest.mark.parametrize("out", ["missing-folder/x.png", ".", "x.notaformat"])
def test_an_output_the_plot_cannot_write_is_one_line(tmp_path, out):
    """-o in a missing folder printed savefig's traceback; a folder or an image format
    matplotlib cannot write must be one line too."""
    path = make_trace_file(str(tmp_path / "h.sqlite"))
    res = _run(path, "-o", str(tmp_path / out))
    assert res.returncode == 2, res.stderr
    err = _errors(res.stderr)
    assert err.startswith("tokentrace: plot") and err.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr


def test_a_trace_without_tokens_is_one_line(tmp_path):
    import sqlite3
    path = make_trace_file(str(tmp_path / "empty.sqlite"))
    con = sqlite3.connect(path)
    con.execute("DELETE FROM calls")
    con.execute("DELETE FROM token_stats")
    con.commit()
    con.close()
    res = _run(path, "-o", str(tmp_path / "e.png"))
    assert res.returncode == 2 and "has no tokens" in res.stderr, res.stderr
    assert _errors(res.stderr).count("\n") == 1
    assert res.stderr.startswith(f"tokentrace: {path} {_OLD_FILE} (schema 1, without "
                                 f"summaries)"), res.stderr


def _long_trace(path, tokens):
    """The hand file's shape (self > layer > layer.mlp x2) over many tokens, token 1 slower."""
    import sqlite3
    make_trace_file(path, kernels=False)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM calls")
    rows, cid = [], 0
    for tok in range(1, tokens + 1):
        base = tok * 10_000_000
        extra = 4_000_000 if tok == 1 else 0
        root = cid = cid + 1
        rows.append((root, 1, tok, tok, None, 7, base, base + 9_000_000 + extra))
        layer = cid = cid + 1
        rows.append((layer, 2, tok, tok, root, 7, base + 1_000_000, base + 8_000_000 + extra))
        for j in range(2):
            cid += 1
            rows.append((cid, 3, 2 * tok + j, tok, layer, 7, base + 2_000_000 + j * 2_000_000,
                         base + 3_000_000 + j * 2_000_000))
    con.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?)", rows)
    con.commit()
    con.close()
    return path


def test_a_long_run_is_binned_and_summed_in_sql(tmp_path, monkeypatch):
    """A plot drew one bar per token and site and summed self times in Python over every call
    (75 s and 1.7 GB for 50,000 tokens). Past MAX_BARS tokens each bar is the mean
    of a bin, the prefill keeps its own bar, and the means are the per-token ones."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import tokentrace as tt
    from tokentrace import plot as plot_mod
    monkeypatch.setattr(plot_mod, "MAX_BARS", 10)
    trace = tt.load(_long_trace(str(tmp_path / "long.sqlite"), 91))
    fig = plot_mod.figure(trace, 6, plt)
    try:
        ax1 = fig.axes[0]
        bars = list(ax1.patches)
        series = len(ax1.get_legend().get_texts())  # layer, layer.mlp, other
        assert series == 3 and len(bars) == 3 * 10  # prefill + 90 decode tokens in 9 bins of 10
        tops = {}
        for bar in bars:
            x = round(bar.get_x() + bar.get_width() / 2, 3)
            tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
        assert tops[1.0] == pytest.approx(13.0)       # the prefill alone: 13 ms
        assert tops[2 + 4.5] == pytest.approx(9.0)    # tokens 2..11: 9 ms each
        assert "mean of 10 tokens" in ax1.get_xlabel()
        mlp = next(c for c in ax1.containers if c.get_label() == "layer.mlp")
        assert mlp.patches[1].get_height() == pytest.approx(2.0)  # two 1 ms calls per token
    finally:
        plt.close(fig)


def test_reading_a_trace_does_not_import_torch(tmp_path):
    """tt.load imported torch (~0.5 GB, seconds) before reading a byte; plot and the Python
    views of a long run then cost torch's import, not their SQL."""
    path = make_trace_file(str(tmp_path / "h.sqlite"))
    code = ("import sys, tokentrace as tt; t = tt.load(sys.argv[1]); t.tokens; "
            "t['layer'].num_calls; print('torch' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"
