"""torch.distributed collectives inside tt.trace (not only in a preloaded job): each is a call
of its own site "c10d::<name>", and the wait for an async_op=True collective, Work.wait(), is a
call of "c10d::wait", so the cross-rank report counts it as wait. CPU, gloo."""

import os
import sqlite3
import subprocess
import sys
import textwrap

import torch
import torch.distributed as dist
from torch import nn

import tokentrace as tt
from test_preload import _native_dir
from tt_testutil import PYDIR


def _calls(path):
    with sqlite3.connect(path) as con:
        return con.execute("SELECT s.name, c.token, c.cpu_end_ns - c.cpu_begin_ns FROM calls c "
                           "JOIN sites s ON s.id = c.site_id WHERE s.name LIKE 'c10d::%' "
                           "ORDER BY c.id").fetchall()


class AllReduceNet(nn.Module):
    def forward(self, x):
        y = x * 2
        dist.all_reduce(y)  # blocking: its own wait is inside c10d::all_reduce
        work = dist.all_reduce(y, async_op=True)
        z = y + 1
        work.wait()
        return z


def test_trace_records_collectives_and_async_waits_then_removes_them(tmp_path):
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    try:
        before = (dist.all_reduce, dist.barrier, dist.Work.wait)
        net = AllReduceNet()

        def run():
            for _ in range(3):
                net(torch.ones(4))

        trace = tt.trace(run, model=net, out=str(tmp_path / "t.sqlite"))
        calls = _calls(trace.path)
        names = [n for n, _, _ in calls]
        assert names.count("c10d::all_reduce") == 6, calls
        assert names.count("c10d::wait") == 3, calls  # the async ones only
        assert {t for _, t, _ in calls} == {1, 2, 3}
        # Removed after the trace: the job's own functions again, and nothing recorded.
        assert (dist.all_reduce, dist.barrier, dist.Work.wait) == before
        assert not hasattr(dist.all_reduce, "_tokentrace_site")
        dist.all_reduce(torch.ones(2), async_op=True).wait()
    finally:
        dist.destroy_process_group()


SLOW_S = 0.3

RANK_JOB = textwrap.dedent(f"""
    import sys, time
    import torch
    import torch.distributed as dist
    from torch import nn
    import tokentrace as tt

    rank, store, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
    step = [0]

    class Layer(nn.Module):
        def forward(self, x):
            step[0] += 1
            if rank == 1 and step[0] == 2:
                time.sleep({SLOW_S})  # the straggler: rank 0 waits for it
            work = dist.all_reduce(x, async_op=True)  # returns at once
            y = x * 3  # overlapped work
            work.wait()  # rank 0 waits here for rank 1
            return y + x

    layer = Layer()

    def run():
        for _ in range(3):
            layer(torch.ones(8))

    tt.trace(run, model=layer, out=out)
    dist.destroy_process_group()
""")


def test_async_wait_is_wait_in_the_cross_rank_report(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(RANK_JOB)
    native = _native_dir()
    env = dict(os.environ, PYTHONPATH=PYDIR, TOKENTRACE_NATIVE_DIR=native, OMP_NUM_THREADS="1",
               WORLD_SIZE="2", TORCHELASTIC_RUN_ID="async-wait-test")
    procs = []
    for rank in range(2):
        procs.append(subprocess.Popen(
            [sys.executable, str(job), str(rank), str(tmp_path / "store"),
             str(tmp_path / f"rank{rank}.sqlite")],
            env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True))
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0, out
    # Rank 0 spent the straggler's sleep in c10d::wait at token 2.
    waits = {t: ns for n, t, ns in _calls(str(tmp_path / "rank0.sqlite")) if n == "c10d::wait"}
    assert sorted(waits) == [1, 2, 3], waits
    assert waits[2] >= 0.8 * SLOW_S * 1e9, waits
    files = [str(tmp_path / "rank0.sqlite"), str(tmp_path / "rank1.sqlite")]
    res = subprocess.run([os.path.join(native, "tokentrace"), "report", *files],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    # The ranks table (rank host pid tokens token_ms wait_ms ...): rank 0's wait holds the
    # sleep; the stragglers table (token, slowest rank, ...) names rank 1 at token 2.
    lines = [line.split() for line in res.stdout.splitlines()]
    row0 = next(cells for cells in lines if cells[:1] == ["0"])
    assert float(row0[5]) >= 0.8 * SLOW_S * 1000, res.stdout
    assert ["2", "1"] in [cells[:2] for cells in lines], res.stdout
