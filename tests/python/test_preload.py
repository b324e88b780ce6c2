"""Preload of an unmodified script: `tokentrace run -- python job.py`, then tt.load."""

import glob
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from tt_testutil import PYDIR, ROOT, signal_when_ready

MODEL = textwrap.dedent("""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.set_num_threads(1)
    torch.manual_seed(0)
    lm = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2)).eval()
    prompt = torch.tensor([[3, 17, 42, 8, 99]])
    gen = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False)
""")

JOB = MODEL + textwrap.dedent("""
    out = lm.generate(prompt, **gen)
    print("JOB-DONE", list(out.shape))
""")

LOGITS_JOB = MODEL + textwrap.dedent("""
    import json
    with torch.no_grad():
        out = lm.generate(prompt, output_logits=True, return_dict_in_generate=True, **gen)
    print("LOGITS", json.dumps([l.tolist() for l in out.logits]))
""")

OTHER_SITECUSTOMIZE = ("import os\nos.environ['JOBS_OWN_SITECUSTOMIZE'] = '1'\n"
                       "print('OWN-SITECUSTOMIZE')\n")
BOOT = os.path.join(PYDIR, "tokentrace", "boot")


def _native_dir():
    from tokentrace._common import loader
    builds = sorted(glob.glob(os.path.join(ROOT, "build*")))
    for d in [os.environ.get("TOKENTRACE_NATIVE_DIR")] + builds:
        if d and os.path.isfile(os.path.join(d, "tokentrace")) and \
                os.path.isfile(os.path.join(d, "libtokentrace.so")):
            return os.path.abspath(d)
    prog = loader.find_program()
    assert prog, ("the `tokentrace` program and libtokentrace.so are not built "
                  "(bash scripts/setup.sh, then source build/env.sh)")
    return os.path.dirname(prog)


def _write_job(tmp_path, text=JOB):
    job = tmp_path / "job.py"
    job.write_text(text)
    own = tmp_path / "own"
    own.mkdir(exist_ok=True)
    (own / "sitecustomize.py").write_text(OTHER_SITECUSTOMIZE)
    return job, own


def _run_cli(tmp_path, job, own, cli_args=(), **env_vars):
    native = _native_dir()
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join([PYDIR, str(own)]), TOKENTRACE_NATIVE_DIR=native)
    env.update(env_vars)
    return subprocess.run([os.path.join(native, "tokentrace"), "run", *cli_args, "--",
                           sys.executable, str(job)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)


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
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, TOKENTRACE_OUT=str(tmp_path / "run-%p-r%r.sqlite"),
                   RANK="3", TOKENTRACE_SITES="transformer.h.*.mlp",
                   TOKENTRACE_SAVE="transformer.h.1.mlp", TOKENTRACE_INPUTS="transformer.h.*.mlp")
    assert res.returncode == 0, res.stderr
    assert "JOB-DONE [1, 9]" in res.stdout
    assert "OWN-SITECUSTOMIZE" in res.stdout  # the job's own sitecustomize still ran
    files = glob.glob(str(tmp_path / "run-*-r3.sqlite"))
    assert len(files) == 1, (os.listdir(tmp_path), res.stderr)
    trace = _check(files[0], saved=True)
    assert "patch_fires" not in trace.meta
    # The root's inputs are recorded in preload mode too: step 2 read the prefill's 5 cached
    # positions per layer (GPT-2: 2 heads of 16).
    step2 = trace["self:2"].inputs
    assert list(step2["input_ids"].shape) == [1, 1]
    assert list(step2["past_key_values.layers[1].values"].shape) == [1, 2, 5, 16]
    # TOKENTRACE_INPUTS sites' too; tensors where the site is saved.
    assert list(trace["transformer.h.0.mlp:2"].inputs["hidden_states"].shape) == [1, 1, 32]
    saved = trace["transformer.h.1.mlp:2"].inputs["hidden_states"]
    assert isinstance(saved, torch.Tensor) and list(saved.shape) == [1, 1, 32]


# Jobs that first reach torch in other ways than `import torch` (most Hugging Face scripts
# start with transformers; vLLM probes with find_spec before importing).
FIRST_LINES = {
    "from_transformers": "from transformers import GPT2Config\n",
    "find_spec_first": ("import importlib.util\nassert importlib.util.find_spec('torch')\n"
                        "assert importlib.util.find_spec('torch')\n"),
    "import_module": "import importlib\ntorch = importlib.import_module('torch')\n",
}


@pytest.mark.parametrize("first", sorted(FIRST_LINES))
def test_jobs_that_reach_torch_another_way_are_recorded(tmp_path, first):
    job, own = _write_job(tmp_path, FIRST_LINES[first] + JOB)
    out = tmp_path / "f.sqlite"
    res = _run_cli(tmp_path, job, own, TOKENTRACE_OUT=str(out),
                   TOKENTRACE_SITES="transformer.h.*.mlp", TOKENTRACE_SAVE="transformer.h.1.mlp")
    assert res.returncode == 0, res.stderr
    assert "JOB-DONE [1, 9]" in res.stdout
    assert out.exists(), res.stderr
    _check(str(out), saved=True)


KWARGS_JOB = textwrap.dedent("""
    import torch

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, input_ids=None, positions=None):
            return self.proj(input_ids) + positions

    step = Step()
    for _ in range(3):  # by keyword, as vLLM calls its model
        step(input_ids=torch.ones(1, 4), positions=torch.zeros(1, 4))
    print("JOB-DONE")
""")


def test_the_roots_keyword_arguments_are_its_inputs_from_token_1(tmp_path):
    """The first root call, where the job attaches, is recorded like the later ones: its
    keyword arguments are its inputs (they were missing from token 1)."""
    import tokentrace as tt
    job, own = _write_job(tmp_path, KWARGS_JOB)
    out = tmp_path / "kw.sqlite"
    res = _run_cli(tmp_path, job, own, TOKENTRACE_OUT=str(out))
    assert res.returncode == 0 and "JOB-DONE" in res.stdout, res.stderr
    trace = tt.load(out)
    assert trace["self"].num_calls == 3 and trace["proj"].num_calls == 3
    for k in (1, 2, 3):
        assert list(trace[f"self:{k}"].inputs) == ["input_ids", "positions"], k


def test_torch_imported_past_the_watcher_is_said_in_one_line(tmp_path):
    """A job that takes the boot's watcher off sys.meta_path before importing torch records
    nothing, and is told so at exit instead of finding no file."""
    drop = ("import sys\nsys.meta_path[:] = [f for f in sys.meta_path "
            "if type(f).__name__ != 'AfterImport']\n")
    job, own = _write_job(tmp_path, drop + JOB)
    res = _run_cli(tmp_path, job, own, TOKENTRACE_OUT=str(tmp_path / "n.sqlite"))
    assert res.returncode == 0 and "JOB-DONE" in res.stdout, res.stderr
    said = [ln for ln in res.stderr.splitlines() if "hooks were never installed" in ln]
    assert len(said) == 1, res.stderr


def test_two_jobs_of_one_run_keep_their_own_files_and_tensors(tmp_path):
    """--out without %p and a command that runs the job twice: the second process writes
    '<out>.<pid>', with its own saved tensors, instead of replacing the first's file."""
    job, own = _write_job(tmp_path)
    native = _native_dir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYDIR, str(own)]),
               TOKENTRACE_NATIVE_DIR=native, TOKENTRACE_SITES="transformer.h.*.mlp",
               TOKENTRACE_SAVE="transformer.h.1.mlp")
    twice = f"{sys.executable} {job} && {sys.executable} {job}"
    res = subprocess.run([os.path.join(native, "tokentrace"), "run", "--out",
                          str(tmp_path / "t.sqlite"), "--", "sh", "-c", twice], env=env,
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("JOB-DONE") == 2
    files = sorted(f for f in glob.glob(str(tmp_path / "t.sqlite*"))
                   if not f.endswith(("-wal", "-shm", ".tensors")))
    assert len(files) == 2 and files[0] == str(tmp_path / "t.sqlite"), (files, res.stderr)
    assert "belongs to another process of this run" in res.stderr
    for f in files:
        trace = _check(f, saved=True)
        assert trace.meta["out_path"] == f
        assert os.path.isdir(f + ".tensors")


def test_boot_without_the_shim_records_nothing(tmp_path):
    """The boot dir alone (no `tokentrace run`, so no shim): the job runs, one line says why."""
    job, own = _write_job(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([BOOT, str(own)]),
               TOKENTRACE_NATIVE_DIR=_native_dir(), TOKENTRACE_OUT=str(tmp_path / "b.sqlite"))
    res = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "JOB-DONE" in res.stdout and "OWN-SITECUSTOMIZE" in res.stdout
    assert "the native shim is not recording" in res.stderr
    assert not os.path.exists(tmp_path / "b.sqlite")


def test_boot_without_the_extension_says_how_to_build_it(tmp_path):
    job, own = _write_job(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([BOOT, str(own)]),
               TOKENTRACE_NATIVE_DIR=str(empty))
    res = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert res.returncode == 0 and "JOB-DONE" in res.stdout, res.stderr
    assert "the native recorder is unavailable" in res.stderr
    assert "pip install ." in res.stderr


def test_boot_ignores_jobs_without_torch(tmp_path):
    env = dict(os.environ, PYTHONPATH=BOOT)
    res = subprocess.run([sys.executable, "-c",
                          "import sys; print('torch' in sys.modules, 'tokentrace' in sys.modules)"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "False False", res.stderr


def test_bad_sites_variable_does_not_stop_the_job(tmp_path):
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, TOKENTRACE_OUT=str(tmp_path / "b.sqlite"),
                   TOKENTRACE_SITES="decoder.*.mlp")
    assert res.returncode == 0 and "JOB-DONE" in res.stdout, res.stderr
    assert "TOKENTRACE_SITES" in res.stderr and "matches no site" in res.stderr


SPEC = [
    {"site": "transformer.h.0.mlp", "op": "scale", "factor": 0.5, "calls": {"tokens": [2, 3]}},
    {"site": "transformer.h.1.attn", "op": "zero", "index": [None, -1], "calls": "prefill"},
    {"site": "transformer.h.*.mlp", "op": "add", "operand": "delta.safetensors",
     "calls": {"call": 4}},
]


def _logits(stdout):
    line = [ln for ln in stdout.splitlines() if ln.startswith("LOGITS ")]
    assert len(line) == 1, stdout
    return torch.tensor(json.loads(line[0][len("LOGITS "):]))


def test_edits_in_preload_match_a_bound_model(tmp_path):
    from safetensors.torch import save_file

    import tokentrace as tt
    save_file({"delta": torch.linspace(-1, 1, 32)}, str(tmp_path / "delta.safetensors"))
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC))
    job, own = _write_job(tmp_path, LOGITS_JOB)

    clean = _run_cli(tmp_path, job, own, TOKENTRACE_OUT=str(tmp_path / "clean.sqlite"))
    assert clean.returncode == 0, clean.stderr
    patched = _run_cli(tmp_path, job, own, ["--edits", str(spec)],
                       TOKENTRACE_OUT=str(tmp_path / "patched.sqlite"))
    assert patched.returncode == 0, patched.stderr
    clean_logits, patched_logits = _logits(clean.stdout), _logits(patched.stdout)

    # the same model, edited in-process by the bound spec
    scope = {}
    exec(MODEL, scope)
    bound = tt.load_spec(spec).bind(scope["lm"])
    with torch.no_grad():
        plain = scope["lm"].generate(scope["prompt"], output_logits=True,
                                     return_dict_in_generate=True, **scope["gen"])
        edited = bound.generate(scope["prompt"], output_logits=True,
                                return_dict_in_generate=True, **scope["gen"])
    assert torch.equal(clean_logits, torch.stack(plain.logits))
    assert torch.equal(patched_logits, torch.stack(edited.logits))
    for k in range(4):  # every token is touched by some rule
        assert not torch.allclose(patched_logits[k], clean_logits[k]), k
    assert bound.last_report.num_fires == 5

    trace = tt.load(tmp_path / "patched.sqlite")
    fires = json.loads(trace.meta["patch_fires"])
    assert fires["num_fires"] == 5 and fires["per_rule"] == [2, 1, 2]
    assert fires["spec"] == str(spec)
    assert trace["self"].num_calls == 4
    assert "patch_fires" not in tt.load(tmp_path / "clean.sqlite").meta


def test_bad_edits_file_stops_the_job_before_the_model_runs(tmp_path):
    # given by its old, deprecated name: still read, with a note
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps([{"site": "transformer.h.0.mlp", "op": "zap"}]))
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, ["--patches", str(spec)],
                   TOKENTRACE_OUT=str(tmp_path / "p.sqlite"))
    assert res.returncode == 2 and "JOB-DONE" not in res.stdout, res.stderr
    assert "tokentrace: --patches is deprecated; use --edits" in res.stderr
    assert "TOKENTRACE_EDITS: " in res.stderr and "unknown op \"zap\"" in res.stderr
    assert "stopping the job" in res.stderr


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000,
                                  '[{"site": "self", "op": "scale", "factor": ' + "7" * 5000
                                  + "}]"])
def test_an_edits_file_python_cannot_read_stops_the_job_in_one_line(tmp_path, text):
    """A spec that makes Python raise something else than our error (too deep, an integer
    of too many digits) is still a bad spec: the job stops before its model runs."""
    spec = tmp_path / "deep.json"
    spec.write_text(text)
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, ["--edits", str(spec)],
                   TOKENTRACE_OUT=str(tmp_path / "d.sqlite"))
    assert res.returncode == 2 and "JOB-DONE" not in res.stdout, res.stderr
    said = [ln for ln in res.stderr.splitlines() if "TOKENTRACE_EDITS: " in ln]
    assert len(said) == 1 and "stopping the job" in said[0] and len(said[0]) < 600, res.stderr
    assert "Traceback" not in res.stderr


def test_old_edits_variable_name_still_works_in_the_job(monkeypatch, capsys):
    from tokentrace import preload
    monkeypatch.delenv("TOKENTRACE_EDITS", raising=False)
    monkeypatch.setenv("TOKENTRACE_PATCHES", "/x/spec.json")
    monkeypatch.setattr(preload, "_state", dict(preload._state))
    assert preload._edits_variable() == ("TOKENTRACE_PATCHES", "/x/spec.json")
    assert preload._edits_variable() == ("TOKENTRACE_PATCHES", "/x/spec.json")
    assert capsys.readouterr().err == ("tokentrace: TOKENTRACE_PATCHES is deprecated; use "
                                       "TOKENTRACE_EDITS (`tokentrace run --edits`)\n")
    monkeypatch.setenv("TOKENTRACE_EDITS", "/y/spec.json")
    assert preload._edits_variable() == ("TOKENTRACE_EDITS", "/y/spec.json")


def test_edits_without_the_torch_ops_library_say_how_to_build_it(tmp_path):
    # TOKENTRACE_EDITS runs through the same native patch table as spec.bind(model)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps([{"site": "transformer.h.0.mlp", "op": "zero"}]))
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, ["--edits", str(spec)],
                   TOKENTRACE_OUT=str(tmp_path / "p.sqlite"),
                   TOKENTRACE_TORCH_OPS_LIB=str(tmp_path / "missing.so"))
    assert res.returncode == 2 and "JOB-DONE" not in res.stdout, res.stderr
    assert "TOKENTRACE_EDITS: the patch table library libtokentrace_torch_ops.so is not built" \
        in res.stderr and "stopping the job" in res.stderr


SLOW_JOB = MODEL + textwrap.dedent("""
    import sys, time
    class Ready:  # says "ready" once three tokens are done (the 4th starts), then slows down
        def __init__(self): self.n = 0
        def __call__(self, module, args):
            self.n += 1
            if self.n == 4:
                print("READY", flush=True)
            if self.n >= 4:
                time.sleep(0.05)
    lm.register_forward_pre_hook(Ready())
    lm.generate(prompt, max_new_tokens=400, min_new_tokens=400, do_sample=False)
    print("JOB-DONE")
""")


def test_sigterm_mid_generate_keeps_what_was_recorded(tmp_path):
    # A job killed with SIGTERM (timeout, a scheduler) in the middle of generate: the file has
    # every token up to then, says how the run ended, and the job still dies by SIGTERM.
    import signal
    import sqlite3
    job, own = _write_job(tmp_path, SLOW_JOB)
    native = _native_dir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYDIR, str(own)]),
               TOKENTRACE_NATIVE_DIR=native, TOKENTRACE_FLUSH_MS="1000")
    out = tmp_path / "killed.sqlite"
    returncode, rest, err = signal_when_ready(
        [os.path.join(native, "tokentrace"), "run", "--kernels", "off", "--out", str(out), "--",
         sys.executable, str(job)], signal.SIGTERM, env=env, cwd=tmp_path)
    assert returncode == -signal.SIGTERM, err
    assert "JOB-DONE" not in rest
    with sqlite3.connect(out) as db:
        tokens = db.execute("SELECT COUNT(*) FROM tokens").fetchone()[0]
        ended = db.execute("SELECT value FROM meta WHERE key='exit_signal'").fetchone()
        mlp_calls = db.execute("SELECT COUNT(*) FROM calls c JOIN sites s ON s.id = c.site_id "
                               "WHERE s.name = 'transformer.h.1.mlp'").fetchone()[0]
    assert ended == ("SIGTERM",)
    assert 4 <= tokens < 400 and mlp_calls >= 3  # the token in progress is closed too


INPUTS_JOB = MODEL + textwrap.dedent("""
    import time
    class Ready:  # says "ready" at the 30th token, then goes on slowly until it is stopped
        def __init__(self): self.n = 0
        def __call__(self, module, args):
            self.n += 1
            if self.n == 30:
                time.sleep(0.5)  # a few of the writer's commits (one each 200 ms)
                print("READY", flush=True)
            if self.n >= 30:
                time.sleep(0.02)
    lm.register_forward_pre_hook(Ready())
    lm.generate(prompt, max_new_tokens=400, min_new_tokens=400, do_sample=False)
    print("JOB-DONE")
""")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_stopped_jobs_inputs_are_kept_with_their_calls(tmp_path, sig):
    """`--inputs` rows once waited in the Python layer (up to 20,000 of them) and were lost
    with it when the job was stopped: calls kept to token 3620, their inputs to 3350. They go
    to the writer with each call now: every block call the file keeps has its inputs."""
    import signal
    import sqlite3
    job, own = _write_job(tmp_path, INPUTS_JOB)
    native = _native_dir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYDIR, str(own)]),
               TOKENTRACE_NATIVE_DIR=native)
    out = tmp_path / "stopped.sqlite"
    returncode, rest, err = signal_when_ready(
        [os.path.join(native, "tokentrace"), "run", "--kernels", "off", "--inputs",
         "transformer.h.*", "--out", str(out), "--", sys.executable, str(job)],
        getattr(signal, sig), env=env, cwd=tmp_path)
    assert returncode == -getattr(signal, sig), err
    time.sleep(0.1)
    blocks = ("FROM calls c JOIN sites s ON s.id = c.site_id WHERE s.name IN "
              "('transformer.h.0', 'transformer.h.1')")
    with sqlite3.connect(out) as db:
        kept = db.execute("SELECT COUNT(*) " + blocks).fetchone()[0]
        without = db.execute("SELECT COUNT(*) " + blocks + " AND NOT EXISTS (SELECT 1 FROM "
                             "call_inputs i WHERE i.call_id = c.id)").fetchone()[0]
    assert kept >= 2 * 29, err
    assert without == 0, f"{without} of {kept} block calls kept without their inputs"


def _summary(trace, sites):
    """What a recording holds for `sites`: per call, the output's shape, the saved tensor, the
    recorded inputs (entries, or tensors where saved); and the meta the Python layer adds."""
    calls = {}
    for site in sites:
        for k in range(1, trace[site].num_calls + 1):
            call = trace[f"{site}:{k}"]
            calls[f"{site}:{k}"] = (list(call.out.shape) if call.out is not None else None,
                                    {p: repr(call.inputs.entry(p)) for p in call.inputs})
    meta = {key: trace.meta.get(key) for key in ("model", "inputs_of", "python_save_errors")}
    return sorted(trace.sites), calls, meta


def test_preload_records_what_trace_records_with_the_same_options(tmp_path):
    """One recording set-up (python/tokentrace/_record/attach.py): sites=, save= and inputs_of= of
    tt.trace and TOKENTRACE_SITES/SAVE/INPUTS of a preloaded job give the same trace (the
    first root call aside: preload opens it from inside, with its positional arguments)."""
    import tokentrace as tt
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, TOKENTRACE_OUT=str(tmp_path / "pre.sqlite"),
                   TOKENTRACE_SITES="transformer.h.*.mlp", TOKENTRACE_SAVE="transformer.h.1.mlp",
                   TOKENTRACE_INPUTS="transformer.h.*.mlp")
    assert res.returncode == 0, res.stderr
    preloaded = tt.load(tmp_path / "pre.sqlite")
    scope = {}
    exec(MODEL, scope)
    traced = tt.trace(scope["lm"].generate, scope["prompt"], scope["gen"],
                      sites=tt.module("transformer.h.*.mlp"),
                      save=tt.module("transformer.h.1.mlp"),
                      inputs_of=tt.module("transformer.h.*.mlp"), out=tmp_path / "tr.sqlite",
                      ops=False)  # as `tokentrace run` without --ops
    mlps = ["transformer.h.0.mlp", "transformer.h.1.mlp"]
    assert _summary(preloaded, mlps) == _summary(traced, mlps)
    for k in range(1, 5):
        call = f"transformer.h.1.mlp:{k}"
        assert torch.equal(preloaded[call].out, traced[call].out)
        assert torch.equal(preloaded[call].inputs["hidden_states"],
                           traced[call].inputs["hidden_states"])
    assert preloaded["self"].num_calls == traced["self"].num_calls == 4
    assert [t.escapes for t in preloaded.tokens][1:] == [t.escapes for t in traced.tokens][1:]


AFTER_IMPORT_JOB = """
import sys
sys.path.insert(0, {boot!r})
sys.path.insert(0, {pkgs!r})
from _tokentrace_after_import import after_import
seen = []
after_import("done_mod", lambda m: seen.append(("done", m.LAST)))
after_import("fresh_mod", lambda m: seen.append(("fresh", m.LAST)))
import done_mod                     # fresh_mod's body runs inside it
print("after done_mod:", seen)
import later_mod                    # any import after: mid_mod's watcher fires now
print("after later_mod:", seen)
print("returned:", after_import("later_mod", lambda m: seen.append(("now", m.LAST))), seen[-1])
"""


def test_a_callback_runs_once_a_modules_body_has_run_however_it_is_imported(tmp_path):
    """after_import (the boot's, which vLLM's engine-core adapter waits with): a module not yet
    imported calls back right after its body; one whose import is under way when the watcher
    goes on (its body imports what installs it, as vLLM's module imports torch) calls back at
    the first import after its body; one already imported calls back at once. Each once, with
    the whole module."""
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    (pkgs / "done_mod.py").write_text("import fresh_mod\nLAST = 'done'\n")
    (pkgs / "fresh_mod.py").write_text(
        "import sys\nfrom _tokentrace_after_import import after_import\n"
        "seen = sys.modules['__main__'].seen\n"
        "after_import('fresh_mod', lambda m: seen.append(('mid', m.LAST)))\n"
        "LAST = 'fresh'\n")
    (pkgs / "later_mod.py").write_text("LAST = 'later'\n")
    job = tmp_path / "job.py"
    job.write_text(AFTER_IMPORT_JOB.format(boot=os.path.join(PYDIR, "tokentrace", "boot"),
                                           pkgs=str(pkgs)))
    res = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    # fresh_mod: the first watcher (put on before) right after its body; the second (put on
    # during its body) not until the next import; done_mod right after its body
    assert lines[0] == "after done_mod: [('fresh', 'fresh'), ('done', 'done')]", lines
    assert lines[1] == ("after later_mod: [('fresh', 'fresh'), ('done', 'done'), "
                        "('mid', 'fresh')]"), lines
    assert lines[2] == "returned: None ('now', 'later')", lines
