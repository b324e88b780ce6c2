"""vLLM's offline LLM.generate (CPU build, tiny random Llama) under `tokentrace run`, in eager
and in compiled (default) mode: the job's exit status and token ids equal the untraced run's,
each engine step of the worker is one token, and step_requests holds what each step computed
for each request. Run with the vLLM environment's interpreter (scripts/setup-vllm.sh)."""

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

vllm = pytest.importorskip("vllm", reason="the vLLM environment (scripts/setup-vllm.sh)")
pytestmark = pytest.mark.vllm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_model  # noqa: E402

NEW_TOKENS = 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model.make(str(tmp_path_factory.mktemp("tiny-llama")))


def _env(**extra):
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false")
    env.update(extra)
    return env


def _result(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _tokentrace():
    """The program beside this interpreter (pip-installed), else the one on PATH (a build's
    env.sh, as on the GPU machine)."""
    exe = os.path.join(os.path.dirname(sys.executable), "tokentrace")
    if not os.path.exists(exe):
        exe = shutil.which("tokentrace")
    assert exe, f"no tokentrace program beside {sys.executable} or on PATH"
    return exe


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_traced_vllm_job_serves_the_same_tokens_and_records_its_steps(model_dir, mode,
                                                                          tmp_path):
    job = [sys.executable, os.path.join(HERE, "job.py"), model_dir, mode]
    plain = _result(subprocess.run(job, capture_output=True, text=True, timeout=900,
                                   env=_env()))
    counted = tmp_path / "steps.txt"
    out = tmp_path / "trace-%p.sqlite"
    proc = subprocess.run([_tokentrace(), "run", "--out", str(out), "--"] + job,
                          capture_output=True, text=True, timeout=900,
                          env=_env(STEP_COUNT_FILE=str(counted)))
    traced = _result(proc)
    assert traced["tokens"] == plain["tokens"]
    assert traced["prompt_lengths"] == plain["prompt_lengths"]
    files = [p for p in tmp_path.glob("trace-*.sqlite")]
    # the worker writes the one file: the front end and the engine core call no module
    assert len(files) == 1, (files, proc.stderr[-2000:])
    con = sqlite3.connect(files[0])
    meta = dict(con.execute("SELECT key, value FROM meta"))
    assert meta["root"].startswith("vllm.step") and meta["engine"] == "vllm"
    steps = sum(line.startswith("step ") for line in counted.read_text().splitlines())
    tokens = con.execute("SELECT COUNT(*) FROM calls c JOIN sites s ON s.id = c.site_id "
                         "WHERE s.name = 'vllm.step'").fetchone()[0]
    assert tokens == steps == int(meta["engine_steps"])
    rows = con.execute("SELECT token, request, prefill_tokens, decode_tokens, position "
                       "FROM step_requests ORDER BY token").fetchall()
    by_request = {}
    for token, request, prefill, decode, position in rows:
        assert 1 <= token <= steps
        by_request.setdefault(request, []).append((token, prefill, decode, position))
    assert len(by_request) == len(traced["prompt_lengths"])
    lengths = sorted(traced["prompt_lengths"])
    prefills = sorted(sum(r[1] for r in rs) for rs in by_request.values())
    assert prefills == lengths  # each prompt computed once, as prefill
    for rs in by_request.values():
        # the last generated token is sampled, never fed back: one decode token fewer
        assert sum(r[2] for r in rs) == NEW_TOKENS - 1
        positions = [r[3] for r in rs]
        assert positions == sorted(positions)  # a request's steps go forward
    # vLLM's warm-up runs of the model (compiled mode compiles there) are before token 1
    first = con.execute("SELECT MIN(c.cpu_begin_ns) FROM calls c JOIN sites s "
                        "ON s.id = c.site_id WHERE s.name = 'vllm.step'").fetchone()[0]
    report = subprocess.run([_tokentrace(), "report", str(files[0])], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "root: vllm.step (vLLM engine steps); model LlamaForCausalLM" in report.stdout
    assert first is not None
    _check_against_vllms_metrics(con, by_request, traced["metrics"], report.stdout)


def _check_against_vllms_metrics(con, by_request, metrics, report):
    """The trace's requests and first tokens agree with vLLM's own RequestOutput.metrics: each
    request's steps from its first to the one that sampled its first token lie within what the
    engine core saw (time.monotonic(), CLOCK_MONOTONIC as the trace's times: scheduled before
    the worker's step began, the first token back after that step ended), and the report's
    per-request first token ms (the worker's view) is at most vLLM's scheduled-to-first-token
    time."""
    assert len(metrics) == len(by_request)  # vLLM filled them (disable_log_stats=False)
    assert f"requests: {len(by_request)};" in report
    times = dict((t, (b, e)) for t, b, e in con.execute(
        "SELECT c.token, c.cpu_begin_ns, c.cpu_end_ns FROM calls c JOIN sites s "
        "ON s.id = c.site_id WHERE s.name = 'vllm.step'"))
    rows = {line.split()[0]: line.split() for line in report.splitlines()
            if line.split() and line.split()[0] in by_request}
    for m in metrics:
        # vLLM's request id inside the engine is the user's id and 8 characters of a uuid
        (request,) = [r for r in by_request if r.rsplit("-", 1)[0] == m["request_id"]]
        steps = by_request[request]
        prefill = sum(s[1] for s in steps)
        done, first_token = 0, None
        for token, p, _, _ in steps:
            done += p
            if done >= prefill:
                first_token = token
                break
        begin, end = times[steps[0][0]][0], times[first_token][1]
        assert m["scheduled_ts"] * 1e9 <= begin < end <= m["first_token_ts"] * 1e9, (m, begin,
                                                                                      end)
        vllm_ms = (m["first_token_ts"] - m["scheduled_ts"]) * 1e3
        report_ms = float(rows[request][4])  # request, steps, prefill, decode, first token ms
        assert 0 < report_ms <= vllm_ms + 0.001, (request, report_ms, vllm_ms)
