"""What a new user sees in the first minutes: the output of scripts/setup.sh, of the demo, of a
trace on a machine without a GPU (no warning about tokentrace's own doing, the missing GPU said
once), and the files a finished trace leaves (one file)."""

import os
import sqlite3
import subprocess
import sys

import pytest
import torch

from tt_testutil import PYDIR, ROOT

NO_GPU_NOTICE = "tokentrace: no NVIDIA GPU here: recording module calls and tokens, not kernels"


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def _python(code, tmp_path, **extra):
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_env(**extra),
                          capture_output=True, text=True, timeout=600)


def test_setup_prints_only_its_own_progress_lines(tmp_path):
    """The heredoc that writes env.sh once ran a comment's `tokentrace plot` as a command."""
    build = os.environ.get("TOKENTRACE_NATIVE_DIR")
    if not build or not os.path.isfile(os.path.join(build, "env.sh")):
        pytest.skip("not built by scripts/setup.sh (no TOKENTRACE_NATIVE_DIR/env.sh)")
    for _ in range(2):  # the first run of a session and a rerun: both quiet
        res = subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup.sh")],
                             env=_env(BUILD_DIR=build), capture_output=True, text=True,
                             timeout=1200)
        assert res.returncode == 0, res.stderr
        noise = [line for line in res.stderr.splitlines() if not line.startswith("[setup] ")]
        assert noise == [], res.stderr
    env_sh = open(os.path.join(build, "env.sh")).read()
    assert "# the interpreter `tokentrace plot` runs" in env_sh


def test_demo_output_has_no_warnings_about_its_own_model(tmp_path):
    res = subprocess.run([sys.executable, "-m", "tokentrace.demo", "--out-dir", str(tmp_path),
                          "--tokens", "2", "--device", "cpu"], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    # On a machine without a GPU the one notice of item 4 is expected; nothing else.
    assert [line for line in lines if line != NO_GPU_NOTICE] == [], res.stderr
    assert "tokens: 2" in res.stdout


def test_readme_example_has_no_warnings_about_its_own_model(tmp_path):
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    res = _python("import warnings; warnings.simplefilter('ignore')\n" + code, tmp_path)
    assert res.returncode == 0, res.stderr
    assert [line for line in res.stderr.splitlines() if line != NO_GPU_NOTICE] == [], res.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the notice is for machines without a GPU")
def test_no_gpu_is_said_once_per_process_in_plain_words_with_the_detail_in_meta(tmp_path):
    code = """
import warnings
import torch
import tokentrace as tt
from transformers import GPT2Config, GPT2LMHeadModel
warnings.simplefilter("ignore")
torch.manual_seed(0)
cfg = GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
lm = GPT2LMHeadModel(cfg).eval()
for name in ("a.sqlite", "b.sqlite"):
    tt.trace(lm, torch.tensor([[1, 2, 3]]), out=name)
"""
    res = _python(code, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr.splitlines() == [NO_GPU_NOTICE]
    for name in ("a.sqlite", "b.sqlite"):
        con = sqlite3.connect(tmp_path / name)
        meta = dict(con.execute("SELECT key, value FROM meta"))
        con.close()
        assert meta["kernels_off"] == "no NVIDIA GPU here"
        assert "libcuda.so.1" in meta["kernels_status"]  # the detail, for `tokentrace info`
    from tokentrace._common import loader
    info = subprocess.run([loader.find_program(), "info", str(tmp_path / "a.sqlite")],
                          capture_output=True, text=True, timeout=60)
    assert "libcuda.so.1" in info.stdout and "no NVIDIA GPU here" in info.stdout, info.stdout


def test_a_finished_trace_is_one_file(tmp_path):
    """No -wal / -shm beside a trace after a clean exit, also after reading it (a Trace object
    still open at exit, trace.report(), `tokentrace report`), in-process and preloaded."""
    job = tmp_path / "job.py"
    job.write_text("""
import sys, warnings
import torch
from transformers import GPT2Config, GPT2LMHeadModel
warnings.simplefilter("ignore")
torch.manual_seed(0)
cfg = GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, bos_token_id=None,
                 eos_token_id=None)
lm = GPT2LMHeadModel(cfg).eval()
prompt = torch.tensor([[1, 2, 3]])
if sys.argv[1:] == ["in-process"]:
    import tokentrace as tt
    trace = tt.trace(lm.generate, prompt, out="in.sqlite", input_kwargs={"max_new_tokens": 2})
    trace.report()
    trace["transformer.h.0.mlp:1"]
else:
    lm.generate(prompt, max_new_tokens=2)
""")
    from tokentrace._common import loader
    program = loader.find_program()
    res = subprocess.run([sys.executable, str(job), "in-process"], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([program, "run", "--out", "run.sqlite", "--", sys.executable, str(job)],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    for name in ("in.sqlite", "run.sqlite"):
        res = subprocess.run([program, "report", name], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.sqlite", "job.py", "run.sqlite"]


def test_python_rows_ride_in_the_writers_transactions(tmp_path):
    """The Python layer's rows once took commits of their own, through a second connection
    (each commit syncs the file). Now the writer takes them into the transaction of the calls
    recorded with them: one flush commits the call and its rows together."""
    from tokentrace._common import add_losses, add_meta, add_rows, loader
    native = loader.load()
    path = str(tmp_path / "t.sqlite")
    native.start(path, "off", None)
    try:
        native.push(native.site("self", native.SITE_KINDS["root"]))
        add_rows("saved_outputs", [(1, "s.safetensors", "k")])
        add_rows("escape_sites", [(1, "x.py:3", 2)])
        add_meta({"python_save_errors": 0})
        add_losses({"save_failed": 1})
        native.pop()
        native.flush()
        con = sqlite3.connect(path)
        assert con.execute("SELECT count(*) FROM calls").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM escape_sites").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM saved_outputs").fetchone() == (1,)
        assert con.execute("SELECT value FROM meta WHERE key='python_save_errors'").fetchone() \
            == ("0",)
        assert con.execute("SELECT count FROM losses WHERE kind='save_failed'").fetchone() == (1,)
        con.close()
    finally:
        native.stop()


def test_the_first_trace_of_a_process_does_not_import_torchdynamo(tmp_path):
    """Asking whether a model is compiled once imported torch._dynamo: 1-2 s on the first
    tt.trace of every process, for a model that was never compiled."""
    code = """
import sys, warnings
import torch
import tokentrace as tt
warnings.simplefilter("ignore")
class Identity(torch.nn.Module):
    def forward(self, x):
        return x
tt.trace(Identity(), torch.zeros(1), out="t.sqlite", kernels="off")
print("torch._dynamo" in sys.modules)
"""
    res = _python(code, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False"]
