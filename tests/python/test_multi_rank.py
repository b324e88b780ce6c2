"""A real multi-process job under `tokentrace run -- torchrun`: four ranks on the CPU (gloo),
a tiny model whose MLP is sharded by hand and joined with a plain dist.all_reduce, one rank
slowed on purpose at one token. The cross-rank report must name that rank and that token, the site
where it lost the time, and the other ranks waiting in the collective."""

import os
import re
import sqlite3
import subprocess
import sys
import textwrap

from test_preload import _native_dir
from tt_testutil import PYDIR

SLOW_RANK, SLOW_TOKEN, SLOW_S = 2, 4, 0.3

JOB = textwrap.dedent(f"""
    import time
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    step = [0]

    class ShardedMLP(nn.Module):
        # Megatron-style: up is split by columns, down by rows; all_reduce sums the parts.
        def __init__(self, d, hidden):
            super().__init__()
            self.up = nn.Linear(d, hidden // world)
            self.down = nn.Linear(hidden // world, d, bias=False)

        def forward(self, x):
            y = self.down(torch.relu(self.up(x)))
            if rank == {SLOW_RANK} and step[0] == {SLOW_TOKEN}:
                time.sleep({SLOW_S})  # the straggler
            dist.all_reduce(y)  # seen as the site c10d::all_reduce (_record/collectives.py)
            return y

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(64, 16)
            self.mlp = nn.ModuleList([ShardedMLP(16, 64) for _ in range(2)])
            self.head = nn.Linear(16, 64)

        def forward(self, ids):
            h = self.embed(ids)
            for m in self.mlp:
                h = h + m(h)
            return self.head(h)

    torch.manual_seed(0)
    lm = TinyLM().eval()
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        for _ in range(6):  # token 1 = prefill, then 5 decode steps
            step[0] += 1
            nxt = lm(ids)[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    dist.barrier()
    dist.destroy_process_group()
    print("RANK-DONE", rank)
""")


def test_torchrun_report_names_the_slow_rank_and_token(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    native = _native_dir()
    env = dict(os.environ, PYTHONPATH=PYDIR, TOKENTRACE_NATIVE_DIR=native, OMP_NUM_THREADS="1")
    for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        env.pop(v, None)
    out = tmp_path / "traces"
    out.mkdir()
    cli = os.path.join(native, "tokentrace")
    res = subprocess.run([cli, "run", "--out", str(out / "rank%r.sqlite"), "--kernels", "off",
                          "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", "4", str(job)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("RANK-DONE") == 4, res.stdout
    assert sorted(os.listdir(out)) == [f"rank{r}.sqlite" for r in range(4)], os.listdir(out)

    sites = sqlite3.connect(out / "rank0.sqlite").execute(
        "SELECT name, kind FROM sites WHERE name LIKE 'c10d::%' ORDER BY name").fetchall()
    assert ("c10d::all_reduce", "range") in sites, sites

    rep = subprocess.run([cli, "report", str(out), "--top", "3"], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    text = rep.stdout
    assert "4 ranks of launch" in text, text
    assert "every rank has every token and exited normally" in text, text
    # The first straggler row: token, slowest rank, lead, its work, others' work/wait.
    rows = text.split("others' wait ms")[1].split("\n\n")[0].strip().splitlines()[1:]
    first = rows[0].split()
    assert (int(first[0]), int(first[1])) == (SLOW_TOKEN, SLOW_RANK), text
    lead_ms, others_wait_ms = float(first[2]), float(first[5])
    assert lead_ms > 0.8 * SLOW_S * 1000, text
    assert others_wait_ms > 0.8 * SLOW_S * 1000, text  # the others waited in all_reduce
    # Where rank 2 lost it: the MLP that slept (its self time), not the collective.
    where = text.split(f"token {SLOW_TOKEN}, rank {SLOW_RANK}:")[1].splitlines()[2].split()
    assert re.fullmatch(r"mlp\.\d", where[0]), text
    assert float(where[3]) > 0.8 * SLOW_S * 1000, text
