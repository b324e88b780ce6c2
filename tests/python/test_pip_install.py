"""`pip install .` gives what a pip user needs: the `tokentrace` command on PATH, `python -m
tokentrace`, the version, the package with its subpackages and py.typed, and a working
`tokentrace run` from the installed files alone.

No network: --no-build-isolation --no-index against this environment's scikit-build-core,
nanobind and torch, --no-deps, into a throwaway prefix. The first install leaves the torch ops
library out; a second one builds it, as a plain `pip install` does, against the torch of the
environment it installs into (test.sh runs this suite under the oldest and the newest torch we
support, so both are built against). The wheels' build directories are kept under the build
tree, one per interpreter, so only the first run compiles and later runs take seconds.
"""

import hashlib
import os
import re
import sqlite3
import subprocess
import sys
import sysconfig

import pytest

from tt_testutil import ROOT

JOB = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
cfg = GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, bos_token_id=None,
                 eos_token_id=None)
GPT2LMHeadModel(cfg).eval().generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2)
"""


def _pyproject_version():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    return re.search(r'^version = "([0-9.]+)"$', text, re.M).group(1)


def _install(tmp_path_factory, torch_ops):
    pytest.importorskip("scikit_build_core")
    pytest.importorskip("nanobind")
    prefix = tmp_path_factory.mktemp("prefix")
    build_root = os.environ.get("TOKENTRACE_NATIVE_DIR") or str(tmp_path_factory.mktemp("bw"))
    # One build directory per interpreter (and so per torch): a cached CMake build keeps the
    # torch it was configured against.
    env_id = hashlib.sha1(sys.prefix.encode()).hexdigest()[:8]
    build_dir = os.path.join(build_root, f"pip-wheel{'-ops' if torch_ops else ''}-{env_id}")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
           "--no-index", "--disable-pip-version-check", "--prefix", str(prefix),
           "-C", f"build-dir={build_dir}"]
    if not torch_ops:
        cmd += ["-C", "cmake.define.TOKENTRACE_BUILD_TORCH_OPS=OFF"]
    res = subprocess.run(cmd + [ROOT], capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stdout + res.stderr
    site = sysconfig.get_path("platlib", "posix_prefix",
                              vars={"base": str(prefix), "platbase": str(prefix)})
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TOKENTRACE_") and k != "PYTHONPATH"}
    # PATH without the development build (build/env.sh puts its `tokentrace` there).
    path = [os.path.join(prefix, "bin")] + [
        d for d in env.get("PATH", "").split(os.pathsep)
        if d and not os.path.exists(os.path.join(d, "tokentrace"))]
    env.update(PATH=os.pathsep.join(path), PYTHONPATH=site)
    return prefix, site, env, res


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return _install(tmp_path_factory, torch_ops=False)


def _run(cmd, env, cwd, timeout=600):
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_install_puts_the_command_on_path_with_the_version(installed, tmp_path):
    prefix, site, env, _ = installed
    script = os.path.join(prefix, "bin", "tokentrace")
    assert os.access(script, os.X_OK), os.listdir(os.path.join(prefix, "bin"))
    version = _pyproject_version()
    res = _run(["tokentrace", "--version"], env, tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (0, f"tokentrace {version}\n", "")
    res = _run([sys.executable, "-m", "tokentrace", "--help"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"\ntokentrace {version}\n" in res.stdout and "usage: tokentrace" in res.stdout
    res = _run([sys.executable, "-c", "import tokentrace; print(tokentrace.__file__, "
                "tokentrace.__version__)"], env, tmp_path)
    assert res.stdout.split() == [os.path.join(site, "tokentrace", "__init__.py"), version]
    package = os.path.join(site, "tokentrace")
    assert os.path.isfile(os.path.join(package, "py.typed"))  # type checkers read the annotations
    for sub in ("_common", "_backend", "_compiled", "_record", "_edit", "_read"):
        assert os.path.isfile(os.path.join(package, sub, "__init__.py")), sub


def test_installed_run_records_a_job_and_reports_it(installed, tmp_path):
    _, site, env, _ = installed
    (tmp_path / "job.py").write_text(JOB)
    res = _run(["tokentrace", "run", "--out", "t.sqlite", "--", sys.executable, "job.py"], env,
               tmp_path)
    assert res.returncode == 0, res.stderr
    res = _run(["tokentrace", "report", "t.sqlite"], env, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "tokens: 2" in res.stdout
    con = sqlite3.connect(tmp_path / "t.sqlite")
    meta = dict(con.execute("SELECT key, value FROM meta"))
    con.close()
    assert meta["tool_version"] == _pyproject_version()


def test_pip_says_nothing_alarming(installed):
    _, _, _, res = installed
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    # --prefix is not on PATH by design; pip says so about the script it installed.
    allowed = ("WARNING: The script tokentrace is installed in", "NOTE: The current PATH")
    odd = [line for line in lines if not line.lstrip().startswith(allowed)
           and "Consider adding this directory to PATH" not in line
           and "Running pip as the 'root' user" not in line]
    assert odd == [], res.stderr


def test_install_builds_the_torch_ops_library_against_the_torch_it_installs_into(
        tmp_path_factory, tmp_path):
    """A plain `pip install` into an environment with another torch than our pins (vLLM's CPU
    build wants 2.13) builds the patch table library against that torch: it loads there and
    its ops run."""
    import torch
    prefix, _, env, _ = _install(tmp_path_factory, torch_ops=True)
    code = ("import torch; from tokentrace._backend import torch_library as t; "
            "print(t.load_library()); print(t.abi()['version'], t.ABI_VERSION, torch.__version__)")
    res = _run([sys.executable, "-c", code], env, tmp_path)
    assert res.returncode == 0, res.stderr
    path, versions = res.stdout.splitlines()[-2:]
    assert path.startswith(str(prefix)), path  # the installed library, not the build tree's
    abi, expected, torch_version = versions.split()
    assert abi == expected and torch_version == torch.__version__
