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
    # VLLM_USE_V2_MODEL_RUNNER=0: the runner tokentrace follows (docs/serving.md), which the
    # CPU build runs anyway and a GPU would not by default
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_USE_V2_MODEL_RUNNER="0")
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


@pytest.mark.parametrize("mode", ["eager", "compiled", "in-process"])
def test_a_traced_vllm_job_serves_the_same_tokens_and_records_its_steps(model_dir, mode,
                                                                          tmp_path):
    """eager and compiled: the front end, the engine core and the worker are processes of their
    own (vLLM's CPU default), each with its file; in-process: one process holds all three, and
    one file their roles (on one GPU vLLM runs the worker in the engine core's process)."""
    job = [sys.executable, os.path.join(HERE, "job.py"), model_dir, mode]
    one = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if mode == "in-process" else {}
    plain = _result(subprocess.run(job, capture_output=True, text=True, timeout=900,
                                   env=_env(**one)))
    counted = tmp_path / "steps.txt"
    out = tmp_path / "trace-%p.sqlite"
    proc = subprocess.run([_tokentrace(), "run", "--out", str(out), "--"] + job,
                          capture_output=True, text=True, timeout=900,
                          env=_env(STEP_COUNT_FILE=str(counted), **one))
    traced = _result(proc)
    assert traced["tokens"] == plain["tokens"]
    assert traced["prompt_lengths"] == plain["prompt_lengths"]
    # the front end, the engine core and the worker write a file each (vLLM's CPU build); on
    # one GPU vLLM runs the worker in the engine core's process (the uniprocess executor), and
    # the in-process mode runs all three in one process: one file has their roles
    layout = sorted(tuple(sorted(_role(p).split(","))) for p in tmp_path.glob("trace-*.sqlite"))
    expected = [[("engine_core", "front_end", "worker")]] + (
        [] if mode == "in-process" else [[("engine_core",), ("front_end",), ("worker",)],
                                         [("engine_core", "worker"), ("front_end",)]])
    assert layout in expected, (layout, proc.stderr[-2000:])
    one_process = len(layout) == 1
    files = {role: p for p in tmp_path.glob("trace-*.sqlite") for role in _role(p).split(",")}
    con = sqlite3.connect(files["worker"])
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
    report = subprocess.run([_tokentrace(), "report", str(files["worker"])],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "root: vllm.step (vLLM engine steps); model LlamaForCausalLM" in report.stdout
    assert first is not None
    _check_against_vllms_metrics(con, by_request, traced["metrics"], report.stdout,
                                 tokens_are_worker_steps=not one_process)
    _check_the_engine_core(files, steps, traced, by_request)


def _role(path):
    with sqlite3.connect(path) as con:
        row = con.execute("SELECT value FROM meta WHERE key = 'role'").fetchone()
    return row[0] if row else None


def _check_the_engine_core(files, worker_steps, traced, by_request):
    """The engine core's file: one vllm.core_step per worker step, with its scheduling and
    update inside; one request_events row per request whose times agree with vLLM's own
    (RequestOutput.metrics: the engine core's time.monotonic(), the file's clock) and whose
    tokens and finish reason are what the job asked for; the front end's rows; and the report
    and the merge of the engine's files."""
    con = sqlite3.connect(files["engine_core"])
    meta = dict(con.execute("SELECT key, value FROM meta"))
    steps = dict(con.execute(
        "SELECT s.name, COUNT(*) FROM calls c JOIN sites s ON s.id = c.site_id "
        "WHERE s.name LIKE 'vllm.%' GROUP BY s.name"))
    assert steps["vllm.core_step"] == worker_steps == int(meta["engine_core_steps"])
    assert steps["vllm.schedule"] == steps["vllm.update"] == worker_steps
    ends = dict(con.execute("SELECT c.token, c.cpu_end_ns FROM calls c JOIN sites s "
                            "ON s.id = c.site_id WHERE s.name = 'vllm.core_step'"))
    con.row_factory = sqlite3.Row
    events = {r["request"]: dict(r) for r in con.execute(
        "SELECT * FROM request_events WHERE role = 'engine_core'")}
    assert sorted(events) == sorted(by_request)
    lengths = sorted(traced["prompt_lengths"])
    assert sorted(e["prompt_tokens"] for e in events.values()) == lengths
    us = 1000  # vLLM's times are float seconds
    for m in traced["metrics"]:
        (e,) = [e for r, e in events.items() if r.rsplit("-", 1)[0] == m["request_id"]]
        assert (e["finish_reason"], e["output_tokens"]) == ("length", NEW_TOKENS)
        assert e["queued_ns"] <= m["queued_ts"] * 1e9 + us <= e["scheduled_ns"] + 2 * us, (e, m)
        assert m["scheduled_ts"] * 1e9 + us >= e["scheduled_ns"], (e, m)
        assert m["scheduled_ts"] * 1e9 <= ends[e["first_step"]] + us, (e, m)
        assert m["first_token_ts"] * 1e9 <= e["first_token_ns"] + us, (e, m)
        assert e["first_token_ns"] <= ends[e["first_token_step"]], (e, m)
        assert e["first_token_ns"] <= e["finished_ns"], e
    _check_the_front_end(files, events, traced)
    both = sorted({str(p) for p in files.values()})
    report = subprocess.run([_tokentrace(), "report", *both], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0, report.stderr
    assert report.stdout.count(f"requests: {len(events)}; finished: length {len(events)}") == 2
    assert "\nfront end (vLLM's output processing" in report.stdout
    if len(both) > 1:  # the files of the engine's processes, read together
        assert "a vLLM engine of launch" in report.stdout
        for request in events:  # each request's row has its steps in the worker
            (row,) = [ln.split() for ln in report.stdout.splitlines()
                      if ln.split()[:1] == [request] and "length" in ln.split()
                      and len(ln.split()) >= 8]  # the engine core's table, with the worker's
            assert row[row.index("length") + 1] == str(len(by_request[request])), row
        merged = str(files["worker"]) + ".merged"  # one engine's files merged as ranks are
        done = subprocess.run([_tokentrace(), "merge", merged, *both], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        with sqlite3.connect(merged) as m:
            assert {r for (r,) in m.execute("SELECT role FROM ranks")} == {
                _role(p) for p in both}
            assert m.execute("SELECT COUNT(*) FROM request_events WHERE rank = 0").fetchone()[
                0] == len(events)


def _check_the_front_end(files, core_events, traced):
    """The front end's file (the LLM's process): its output processing steps, and one row per
    request that follows the engine core's: handed over before the engine core queued it, its
    first token and finish processed after the engine core's."""
    con = sqlite3.connect(files["front_end"])
    steps = con.execute("SELECT COUNT(*) FROM calls c JOIN sites s ON s.id = c.site_id "
                        "WHERE s.name = 'vllm.front_step'").fetchone()[0]
    meta = dict(con.execute("SELECT key, value FROM meta"))
    assert steps == int(meta["engine_front_steps"]) > 0
    con.row_factory = sqlite3.Row
    rows = {r["request"]: dict(r) for r in con.execute(
        "SELECT * FROM request_events WHERE role = 'front_end'")}
    assert sorted(rows) == sorted(core_events)
    assert sorted(r["prompt_tokens"] for r in rows.values()) == sorted(traced["prompt_lengths"])
    for request, f in rows.items():
        c = core_events[request]
        assert (f["finish_reason"], f["output_tokens"]) == ("length", NEW_TOKENS)
        assert f["arrival_unix_ns"] == c["arrival_unix_ns"]
        assert f["queued_ns"] <= c["queued_ns"], (f, c)
        assert c["first_token_ns"] <= f["first_token_ns"] <= f["finished_ns"], (f, c)
        assert c["finished_ns"] <= f["finished_ns"], (f, c)


def _check_against_vllms_metrics(con, by_request, metrics, report, tokens_are_worker_steps):
    """The trace's requests and first tokens agree with vLLM's own RequestOutput.metrics: each
    request's steps from its first to the one that sampled its first token lie within what the
    engine core saw (time.monotonic(), CLOCK_MONOTONIC as the trace's times: scheduled before
    the worker's step began, the first token back after that step ended), and the report's
    per-request first token ms (the worker's view) is at most vLLM's scheduled-to-first-token
    time. When the worker runs in the engine core's process the tokens are the engine core's
    steps, whose spans hold the worker's: the report's first token ms is then at least the
    worker's interval."""
    assert len(metrics) == len(by_request)  # vLLM filled them (disable_log_stats=False)
    assert f"requests: {len(by_request)};" in report
    times = dict((t, (b, e)) for t, b, e in con.execute(
        "SELECT c.token, c.cpu_begin_ns, c.cpu_end_ns FROM calls c JOIN sites s "
        "ON s.id = c.site_id WHERE s.name = 'vllm.step'"))
    worker_view = report.split("\nengine core (")[0]  # the serving section, not the core's
    rows = {line.split()[0]: line.split() for line in worker_view.splitlines()
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
        if tokens_are_worker_steps:
            assert 0 < report_ms <= vllm_ms + 0.001, (request, report_ms, vllm_ms)
        else:  # the tokens are the engine core's steps, around the worker's and vLLM's times
            assert (end - begin) / 1e6 <= report_ms + 0.001, (request, report_ms, begin, end)


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVED = [("the cat sat on", None), ("a dog ran", None), ("birds sang in the", None)]


def _serve(model_dir, traced_dir=None, requests=SERVED, edits=None):
    """vLLM's OpenAI server on the tiny model (under `tokentrace run` when traced_dir is
    given, with `edits` as --edits when given): the completions of `requests` ((prompt,
    vllm_xargs or None) each) one after another, then SIGINT, as a user stops it. Returns
    (exit status, the completions' texts and finish reasons, stderr)."""
    import signal
    import time
    import urllib.request
    port = _free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
           "--port", str(port), "--max-model-len", "128", "--dtype", "float32",
           "--enforce-eager"]
    if traced_dir is not None:
        run = [_tokentrace(), "run", "--out", str(traced_dir / "trace-%p.sqlite")]
        if edits is not None:
            spec = traced_dir / "edits.json"
            spec.write_text(json.dumps(edits))
            run += ["--edits", str(spec)]
        cmd = run + ["--"] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env())
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            try:
                urllib.request.urlopen(base + "/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not come up"
                time.sleep(1)
        answers = []
        for prompt, xargs in requests:
            body = json.dumps({"model": model_dir, "prompt": prompt, "max_tokens": 8,
                               "temperature": 0,
                               **({"vllm_xargs": xargs} if xargs else {})}).encode()
            request = urllib.request.Request(base + "/v1/completions", body,
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                choice = json.load(response)["choices"][0]
            answers.append((choice["text"], choice["finish_reason"]))
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    return proc.returncode, answers, err


def test_a_traced_vllm_server_answers_the_same_and_each_process_says_its_role(model_dir,
                                                                              tmp_path):
    """`vllm serve`'s OpenAI server (python -m vllm.entrypoints.openai.api_server: vllm-cpu's
    `vllm` script cannot find its own package's metadata) under `tokentrace run`, stopped with
    SIGINT after three completions: the same answers and exit status as untraced; a file per
    process with its role although vLLM ends the engine core and the worker at shutdown
    without their exit (the role goes with the rows written when the engine is idle); each
    request's row in the front end's and the engine core's file; and their report."""
    plain_status, plain, _ = _serve(model_dir)
    status, answers, err = _serve(model_dir, tmp_path)
    assert (status, answers) == (plain_status, plain), err[-3000:]
    files = {_role(p): p for p in tmp_path.glob("trace-*.sqlite")}
    assert sorted(files) == ["engine_core", "front_end", "worker"], (files, err[-2000:])
    for role in ("front_end", "engine_core"):
        with sqlite3.connect(files[role]) as con:
            reasons = [r for (r,) in con.execute(
                "SELECT finish_reason FROM request_events WHERE role = ? ORDER BY queued_ns",
                (role,))]
        assert reasons == [a[1] for a in answers], (role, reasons, answers)
    report = subprocess.run([_tokentrace(), "report", *map(str, files.values())],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "\nfront end (vLLM's output processing" in report.stdout
    assert "\nengine core (vLLM's scheduler" in report.stdout
