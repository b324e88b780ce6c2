"""NCCL on a real GPU: the kernels NCCL launches for torch.distributed collectives are
recognised by name (src/core/comm_kernels.h) and count as communication: call_gpu.gpu_comm_ns,
the cross-rank report's "gpu coll ms" column and the Chrome export's category "comm".

Run by scripts/gpu-check.sh in a step of its own (the two-GPU test skips on a one-GPU machine,
which must not fail the step that runs every other gpu test). With one rank NCCL launches no
kernel for a SUM all_reduce (a copy or nothing: NVIDIA/nccl src/device/onerank.cu), but it
does for AVG on floats (PreMulSum, kernel oneRankReduce): the one-GPU test uses AVG."""

import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from test_preload import _native_dir
from tt_testutil import PYDIR

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (dist.is_available() and dist.is_nccl_available()),
                       reason="torch has no NCCL backend"),
]

JOB = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    from torch import nn
    import tokentrace as tt

    rank, world, store, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + store, rank=rank, world_size=world)
    op = dist.ReduceOp.AVG if world == 1 else dist.ReduceOp.SUM

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(256, 256)

        def forward(self, x):
            y = self.lin(x)
            dist.all_reduce(y, op=op)
            return y

    layer = Layer().cuda()
    x = torch.randn(64, 256, device="cuda")

    def run():
        with torch.no_grad():
            for _ in range(4):
                layer(x)

    tt.trace(run, model=layer, out=out, kernels="full")
    dist.destroy_process_group()
""")


def _run_ranks(tmp_path, world):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = dict(os.environ, PYTHONPATH=PYDIR, TOKENTRACE_NATIVE_DIR=_native_dir(),
               WORLD_SIZE=str(world), TORCHELASTIC_RUN_ID=f"nccl-{world}")
    store = str(tmp_path / "store")
    procs = [subprocess.Popen([sys.executable, str(job), str(r), str(world), store,
                               str(tmp_path / f"rank{r}.sqlite")],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    for p in procs:
        out, _ = p.communicate(timeout=150)
        assert p.returncode == 0, out
    return [str(tmp_path / f"rank{r}.sqlite") for r in range(world)]


def _cli(*args):
    res = subprocess.run([os.path.join(_native_dir(), "tokentrace"), *args], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _comm_events(files, tmp_path):
    path = str(tmp_path / "all.json")
    _cli("export", *files, "--chrome", path)
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [e for e in events if e.get("cat") == "comm"]


def test_one_rank_nccl_kernels_are_communication(tmp_path):
    [path] = _run_ranks(tmp_path, 1)
    comm = _comm_events([path], tmp_path)
    assert comm, "no kernel of the NCCL all_reduce was recognised as communication"
    assert {e["args"]["site"].rsplit(":", 1)[0] for e in comm} == {"c10d::all_reduce"}, comm[:3]
    assert len(comm) >= 4  # one per token
    with sqlite3.connect(path) as con:
        comm_ns = con.execute("SELECT SUM(gpu_comm_ns) FROM call_gpu").fetchone()[0]
    assert comm_ns > 0
    # The same kernels, summed by the joiner: within the export's rounding (1 ns per event).
    assert abs(comm_ns - sum(e["dur"] for e in comm) * 1000) <= len(comm) * 2


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_ranks_nccl_kernels_are_the_gpu_comm_column(tmp_path):
    files = _run_ranks(tmp_path, 2)
    comm = _comm_events(files, tmp_path)
    assert any("ncclDevKernel_AllReduce" in e["name"] or "ncclKernel_AllReduce" in e["name"]
               for e in comm), comm[:3]
    report = _cli("report", *files)
    # The ranks table: rank host pid tokens token_ms wait_ms work_ms gpu_ms gpu_coll_ms ...
    rows = [line.split() for line in report.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert len(rows) >= 2, report
    for row in rows[:2]:
        assert float(row[8]) > 0, report
