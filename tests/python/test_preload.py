"""Preload of an unmodified script: `tokentrace run -- python job.py`, then tt.load."""

import glob
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import PYDIR, ROOT

JOB = textwrap.dedent("""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2)).eval()
    out = lm.generate(torch.tensor([[3, 17, 42, 8, 99]]), max_new_tokens=4, min_new_tokens=4,
                      do_sample=False)
    print("JOB-DONE", list(out.shape))
""")

OTHER_SITECUSTOMIZE = "import os\nos.environ['JOBS_OWN_SITECUSTOMIZE'] = '1'\nprint('OWN-SITECUSTOMIZE')\n"


def _native_dir():
    from tokentrace import _loader
    for d in [os.environ.get("TOKENTRACE_NATIVE_DIR")] + sorted(glob.glob(os.path.join(ROOT, "build*"))):
        if d and os.path.isfile(os.path.join(d, "tokentrace")) and \
                os.path.isfile(os.path.join(d, "libtokentrace.so")):
            return os.path.abspath(d)
    prog = _loader.find_program()
    return os.path.dirname(prog) if prog else None


def _write_job(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text(OTHER_SITECUSTOMIZE)
    return job, own


def _check(path, saved):
    import tokentrace as tt
    trace = tt.load(path)
    assert trace["self"].num_calls == 4
    assert trace["transformer.h.1.mlp"].num_calls == 4
    assert list(trace["transformer.h.1.mlp:1"].out.shape) == [1, 5, 32]
    assert list(trace["transformer.h.1.mlp:2"].out.shape) == [1, 1, 32]
    assert "transformer.h.0.attn" not in trace.sites  # TOKENTRACE_SITES selected
    if saved:
        assert list(trace["transformer.h.1.mlp:3"].out.shape) == [1, 1, 32]
        assert trace["transformer.h.1.mlp:3"].out.dtype.is_floating_point
    return trace


def test_cli_run_unmodified_script(tmp_path):
    native = _native_dir()
    if native is None:
        pytest.skip("the `tokentrace` program and libtokentrace.so are not built "
                    "(cmake -S . -B build-py -DTOKENTRACE_BUILD_PYTHON=ON && ninja -C build-py)")
    job, own = _write_job(tmp_path)
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join([PYDIR, str(own)]), TOKENTRACE_NATIVE_DIR=native,
               TOKENTRACE_OUT=str(tmp_path / "run-%p-r%r.sqlite"), RANK="3",
               TOKENTRACE_SITES="transformer.h.*.mlp", TOKENTRACE_SAVE="transformer.h.1.mlp")
    env.pop("TOKENTRACE_BACKEND", None)
    res = subprocess.run([os.path.join(native, "tokentrace"), "run", "--", sys.executable,
                          str(job)], env=env, capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "JOB-DONE [1, 9]" in res.stdout
    assert "OWN-SITECUSTOMIZE" in res.stdout  # the job's own sitecustomize still ran
    files = glob.glob(str(tmp_path / "run-*-r3.sqlite"))
    assert len(files) == 1, (os.listdir(tmp_path), res.stderr)
    _check(files[0], saved=True)


def test_boot_with_python_recorder(tmp_path):
    """The boot dir alone (no shim): the pure-Python recorder writes the file at exit."""
    job, own = _write_job(tmp_path)
    env = dict(os.environ)
    boot = os.path.join(PYDIR, "tokentrace", "boot")
    env.update(PYTHONPATH=os.pathsep.join([boot, str(own)]), TOKENTRACE_BACKEND="python",
               TOKENTRACE_OUT=str(tmp_path / "py-%p.sqlite"),
               TOKENTRACE_SITES="transformer.h.*.mlp", TOKENTRACE_SAVE="transformer.h.1.mlp")
    res = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "JOB-DONE" in res.stdout and "OWN-SITECUSTOMIZE" in res.stdout
    files = glob.glob(str(tmp_path / "py-*.sqlite"))
    assert len(files) == 1, res.stderr
    _check(files[0], saved=True)


def test_boot_ignores_jobs_without_torch(tmp_path):
    boot = os.path.join(PYDIR, "tokentrace", "boot")
    env = dict(os.environ, PYTHONPATH=boot, TOKENTRACE_BACKEND="python")
    res = subprocess.run([sys.executable, "-c",
                          "import sys; print('torch' in sys.modules, 'tokentrace' in sys.modules)"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "False False", res.stderr


def test_bad_sites_variable_does_not_stop_the_job(tmp_path):
    job, own = _write_job(tmp_path)
    boot = os.path.join(PYDIR, "tokentrace", "boot")
    env = dict(os.environ, PYTHONPATH=boot, TOKENTRACE_BACKEND="python",
               TOKENTRACE_OUT=str(tmp_path / "b.sqlite"), TOKENTRACE_SITES="decoder.*.mlp")
    res = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert res.returncode == 0 and "JOB-DONE" in res.stdout
    assert "TOKENTRACE_SITES" in res.stderr and "matches no site" in res.stderr
