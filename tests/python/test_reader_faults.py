"""Readers on files they did not expect (README "What is kept when something goes wrong?"):
values of the wrong type, a killed writer's -wal, a million sites or a huge name to plot,
and a preloaded job ended by Ctrl-C."""

import gc
import os
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

import tokentrace as tt
from tt_testutil import PYDIR, make_trace_file, signal_when_ready


@pytest.mark.parametrize("table,column", [("calls", "cpu_begin_ns"), ("calls", "cpu_end_ns"),
                                          ("kernels", "gpu_end_ns"), ("call_gpu", "gpu_busy_ns")])
def test_text_where_numbers_belong_is_one_error_naming_the_file(tmp_path, table, column,
                                                               monkeypatch):
    path = make_trace_file(str(tmp_path / "t.sqlite"))
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE {table} SET {column} = 'x' || {column}")
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(tt.TokentraceError) as err:
        trace = tt.load(path)
        trace.tokens
        for site in trace.sites:
            for call in trace[site]:
                call.gpu_ms
                call.kernel_list
    message = str(err.value)
    assert path in message and "wrong type where a number belongs" in message, message
    assert "\n" not in message
    # The read the error stopped, collected after the file is closed, prints nothing (no
    # "Exception ignored in ..." traceback on the user's stderr).
    trace.close()
    del err
    gc.collect()
    assert [repr(u.exc_value) for u in unraisable] == []


def _killed_writer_file(tmp_path):
    """A trace whose writer was SIGKILLed: its rows are in the -wal (no checkpoint yet)."""
    out = tmp_path / "k.sqlite"
    job = ("import os, tokentrace as tt, torch\n"
           "m = torch.nn.Sequential(torch.nn.Linear(4, 4)).eval()\n"
           f"tt.trace(lambda: [m(torch.ones(1, 4)) for _ in range(3)], out={str(out)!r})\n")
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", job], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    # What a kill leaves: the finished file turned back into a WAL file whose data is in the
    # -wal only, and no -shm (copied without it, or removed).
    copy = tmp_path / "c.sqlite"
    with sqlite3.connect(out) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    with sqlite3.connect(copy) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("INSERT INTO meta VALUES('late', '1')")
        db.commit()
        shutil.copy(str(copy) + "-wal", str(tmp_path / "saved-wal"))
        shutil.copy(copy, tmp_path / "saved")
    shutil.copy(tmp_path / "saved", copy)
    shutil.copy(tmp_path / "saved-wal", str(copy) + "-wal")
    if os.path.exists(str(copy) + "-shm"):
        os.remove(str(copy) + "-shm")
    return str(copy)


def test_a_reader_of_a_killed_writers_file_leaves_no_shm(tmp_path):
    path = _killed_writer_file(tmp_path)
    trace = tt.load(path)
    assert trace.meta.get("late") == "1"  # read through the -wal
    trace.close()
    assert not os.path.exists(path + "-shm")
    assert os.path.exists(path + "-wal")


def test_a_trace_never_closed_by_the_user_leaves_no_shm_either(tmp_path):
    path = _killed_writer_file(tmp_path)
    code = f"import tokentrace as tt\nt = tt.load({path!r})\nprint(len(t.sites))\n"
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert not os.path.exists(path + "-shm")


def _many_sites_file(path, sites, long_name=None):
    make_trace_file(path)
    with sqlite3.connect(path) as db:
        first = db.execute("SELECT MAX(id) FROM sites").fetchone()[0] + 1
        last_call = db.execute("SELECT MAX(id) FROM calls").fetchone()[0]
        names = [f"ops.{i}.x$y$" for i in range(sites)]
        if long_name is not None:
            names[0] = long_name
        db.executemany("INSERT INTO sites VALUES (?,?,?,0)",
                       ((first + i, n, "range") for i, n in enumerate(names)))
        # One call each under token 1's root (call 1), a microsecond long.
        db.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?)",
                       ((last_call + 1 + i, first + i, 1, 1, 1, 7, 2_000_000 + i,
                         2_000_000 + i + 50_000_000 * (i == 0) + 1) for i in range(sites)))
    return path


def test_plot_of_a_million_sites_draws_the_costliest_with_the_rest_as_other(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tokentrace.plot import figure
    path = _many_sites_file(str(tmp_path / "m.sqlite"), 1_000_000, long_name="r" * (1 << 20))
    fig = figure(tt.load(path), 6, plt)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) == 7 and labels[-1] == "other", labels[:3]
    assert all(len(label) <= 61 for label in labels)  # a 1 MiB name is cut to fit
    assert labels[0].startswith("rrrr") and labels[0].endswith("…")
    plt.close(fig)


def test_ctrl_c_in_a_preloaded_python_job_is_a_keyboard_interrupt_and_the_run_is_written(
        tmp_path):
    from tokentrace._common import loader
    program = loader.find_program()
    if program is None:
        pytest.skip("the tokentrace program is not built")
    job = tmp_path / "job.py"
    job.write_text("import time, torch\n"
                   "m = torch.nn.Sequential(torch.nn.Linear(4, 4)).eval()\n"
                   "for i in range(3):\n    m(torch.ones(1, 4))\n"
                   "print('READY', flush=True)\n"
                   # short sleeps: the kernel may hand the signal to one of torch's
                   # threads, and Python's main thread then sees it only when its sleep
                   # returns (a sleep(60) made this test time out, once in many runs)
                   "for _ in range(600):\n    time.sleep(0.1)\n")
    out = tmp_path / "i.sqlite"
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    returncode, _, err = signal_when_ready(
        [program, "run", "--kernels", "off", "--out", str(out), "--", sys.executable, str(job)],
        signal.SIGINT, env=env, cwd=tmp_path)
    assert "KeyboardInterrupt" in err, err  # Python still turns Ctrl-C into its exception
    assert returncode == -signal.SIGINT, err  # and ends by it, as it does untraced
    trace = tt.load(out)
    assert trace.meta.get("clock_anchor_exit"), trace.meta  # the file was closed
    assert trace.num_tokens == 3
    assert not os.path.exists(str(out) + "-wal")


def test_the_report_of_a_writer_killed_by_sigkill_says_what_is_missing(tmp_path):
    """A process killed before it exits (a serving engine SIGKILLs its workers at shutdown)
    never closes its file: the report says the end of its recording is missing, uncounted."""
    job = tmp_path / "job.py"
    job.write_text("import os, signal, time, torch\n"
                   "m = torch.nn.Linear(2, 2)\n"
                   "for _ in range(3):\n"
                   "    m(torch.randn(1, 2))\n"
                   "time.sleep(1.5)  # past the drain's first write\n"
                   "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = tmp_path / "k.sqlite"
    res = subprocess.run(["tokentrace", "run", "--out", str(out), "--", sys.executable,
                          str(job)], capture_output=True, text=True, timeout=300)
    assert res.returncode == -signal.SIGKILL, res.stderr
    report = subprocess.run(["tokentrace", "report", str(out)], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0, report.stderr
    assert ("not counted: the writer never closed this file (its process ended without "
            "exiting: killed") in report.stdout, report.stdout
    assert "tokens: 3" in report.stdout
