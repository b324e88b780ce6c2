"""`tokentrace import` against a live trace of the same job on the GPU (mark `gpu`; skipped
without CUDA). One job (a tiny GPT-2's greedy generate on CUDA, after a warm-up generate) runs
twice: once under torch.profiler (CUDA activity, with_stack=True: module ranges), whose trace
`tokentrace import` reads, and once under `tokentrace run`. The two attributions must agree,
token for token: the same number of GPU records of each kind in the calls of each module class,
and the same records outside every call. Kineto names a module's range `Class_index`, the live
trace by its path: both are compared by the module's class (the job writes path -> class)."""

import collections
import json
import os
import sqlite3
import subprocess
import sys

import pytest

from tt_testutil import PYDIR

pytestmark = pytest.mark.gpu

NEW_TOKENS = 4
JOB = f"""
import json, os, sys
import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
lm = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2)).eval().cuda()
with open(sys.argv[1], "w") as f:
    json.dump({{name: type(m).__name__ for name, m in lm.named_modules()}}, f)
prompt = torch.tensor([[3, 17, 42, 8, 99]], device="cuda")


def run():
    with torch.no_grad():
        out = lm.generate(prompt, max_new_tokens={NEW_TOKENS}, min_new_tokens={NEW_TOKENS},
                          do_sample=False)
    torch.cuda.synchronize()
    return out


run()  # the warm-up: cuBLAS and the allocator settle alike in both runs
profile = os.environ.get("JOB_PROFILE")
if profile:
    from torch.profiler import ProfilerActivity
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                with_stack=True) as prof:
        out = run()
    prof.export_chrome_trace(profile)
else:
    out = run()
print("RESULT", json.dumps(out[0].tolist()))
"""


def _records(path, classes):
    """{token: Counter((module class or None, kind))} of a file's GPU records, the tokens
    renumbered from 1 in order; `classes(site name)` gives a site's class."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT k.token, s.name, k.kind FROM kernels k LEFT JOIN calls c ON c.id = k.call_id "
            "LEFT JOIN sites s ON s.id = c.site_id WHERE k.token > 0").fetchall()
    finally:
        con.close()
    tokens = sorted({t for t, _, _ in rows})
    out = collections.defaultdict(collections.Counter)
    for token, site, kind in rows:
        out[tokens.index(token) + 1][(None if site is None else classes(site), kind)] += 1
    return dict(out)


def test_import_of_a_torch_profiler_trace_attributes_as_the_live_trace(tmp_path):
    from test_preload import _native_dir
    native = _native_dir()
    program = os.path.join(native, "tokentrace")
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = dict(os.environ, PYTHONPATH=PYDIR, TOKENTRACE_NATIVE_DIR=native)
    profile = tmp_path / "profile.json"
    profiled = subprocess.run([sys.executable, str(job), str(tmp_path / "classes.json")],
                              env=dict(env, JOB_PROFILE=str(profile)), capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    live_path = tmp_path / "live.sqlite"
    live = subprocess.run([program, "run", "--out", str(live_path), "--kernels", "full", "--",
                           sys.executable, str(job), str(tmp_path / "classes.json")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert live.returncode == 0, live.stderr[-3000:]
    result = [line for line in live.stdout.splitlines() if line.startswith("RESULT ")]
    assert result and result == [line for line in profiled.stdout.splitlines()
                                 if line.startswith("RESULT ")]  # the same tokens

    imported_path = tmp_path / "imported.sqlite"
    said = subprocess.run([program, "import", str(profile), "--out", str(imported_path)],
                          capture_output=True, text=True, timeout=300)
    assert said.returncode == 0, said.stdout + said.stderr
    assert "(root GPT2LMHeadModel_0)" in said.stdout, said.stdout + said.stderr

    classes = json.loads((tmp_path / "classes.json").read_text())
    con = sqlite3.connect(f"file:{live_path}?mode=ro", uri=True)
    root = con.execute("SELECT name FROM sites WHERE is_token = 1").fetchone()[0]
    con.close()
    live_classes = {**{name: cls for name, cls in classes.items() if name}, root: classes[""]}
    got_live = _records(live_path, lambda site: live_classes.get(site, site))
    got_imported = _records(imported_path, lambda site: site.rsplit("_", 1)[0])
    # the live trace has the warm-up's tokens first: the profiled generate is its last ones
    assert len(got_imported) == NEW_TOKENS, sorted(got_imported)
    assert len(got_live) == 2 * NEW_TOKENS, sorted(got_live)
    last = {t - NEW_TOKENS: got_live[t] for t in range(NEW_TOKENS + 1, 2 * NEW_TOKENS + 1)}
    for token in range(1, NEW_TOKENS + 1):
        assert sum(last[token].values()) > 0, token
        assert last[token] == got_imported[token], (token, last[token], got_imported[token])
