"""Edits of served requests: rules that name requests by tag (`"requests"`), a request's own
prefill and tokens (`"prefill"`, `{"request_token": k}`), on vLLM's CPU build with the tiny random
Llama of tiny_model.py, as a vLLM user runs it: `tokentrace run --edits` of LLM.generate (job.py)
and of the OpenAI server, requests tagged with SamplingParams(extra_args={"tokentrace": tag})
or the request body's vllm_xargs.

A tagged rule edits only the rows of the tagged requests: the others get the tokens they get
when no request is tagged, bit for bit, in eager and compiled mode; the rule's prefill edit
equals the same edit made by a plain forward hook in a job that serves those prompts alone;
vLLM's prefix cache never gives an edited request's blocks to an unedited one or the other way
round; and the worker's file says which requests each rule edited. Run with the vLLM
environment's interpreter (scripts/setup-vllm.sh)."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

pytest.importorskip("vllm", reason="the vLLM environment (scripts/setup-vllm.sh)")
pytestmark = pytest.mark.vllm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tiny_model  # noqa: E402
from test_vllm import _env, _result, _role, _serve, _tokentrace  # noqa: E402

# Every mlp output filled with 50 on the rows a rule selects: moves every later logit.
FILL = {"site": "model.layers.*.mlp", "op": "fill", "value": 50.0}
# rule 0: every row of the requests tagged "x"; rule 1: the row that makes the 5th token of the
# requests tagged "z" (the row whose input is their 4th), whichever engine step that is
RULES = [dict(FILL, requests="x"), dict(FILL, requests="z", calls={"request_token": 5})]
TAGS = ["x", None, ["y", "x"], "z"]  # 0 and 2 carry "x" (2 as one of a list), 3 "z", 1 none


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model.make(str(tmp_path_factory.mktemp("tiny-llama")))


def _job(model_dir, mode, out, rules=None, **env):
    """(job.py's result, the worker's trace file or None) of one job: traced with `rules` as
    --edits when given, else plain; `env`: job.py's JOB_* settings (JSON-encoded here)."""
    out.mkdir(parents=True)
    job = [sys.executable, os.path.join(HERE, "job.py"), model_dir, mode]
    extra = {k: v if isinstance(v, str) else json.dumps(v) for k, v in env.items()}
    if rules is None:
        proc = subprocess.run(job, capture_output=True, text=True, timeout=900,
                              env=_env(**extra))
        return _result(proc), None
    spec = out / "edits.json"
    spec.write_text(json.dumps(rules))
    proc = subprocess.run([_tokentrace(), "run", "--out", str(out / "trace-%p.sqlite"),
                           "--edits", str(spec), "--"] + job,
                          capture_output=True, text=True, timeout=900, env=_env(**extra))
    result = _result(proc)
    result["stderr"] = proc.stderr
    workers = [p for p in out.glob("trace-*.sqlite") if "worker" in _role(p).split(",")]
    assert len(workers) == 1, (list(out.iterdir()), proc.stderr[-2000:])
    return result, workers[0]


def _worker_edits(path):
    """{request: {rule index: [steps, rows]}} of the worker's request_events rows, and its
    patch_fires meta."""
    with sqlite3.connect(str(path)) as con:
        rows = con.execute("SELECT request, edits FROM request_events WHERE role = 'worker'")
        edits = {request: json.loads(e) for request, e in rows}
        fires = json.loads(dict(con.execute("SELECT key, value FROM meta"))["patch_fires"])
    return edits, fires


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_tagged_rules_edit_only_their_requests_rows(model_dir, tmp_path, mode):
    """The same spec twice: no request tagged (its rules edit nothing, and the job runs the
    same code), then tagged. The untagged request's tokens are equal, bit for bit; the "x"
    requests' change from their first token; the "z" request's first 4 tokens are equal and
    its 5th on change. The worker's rows say which rule edited which request, in how many
    steps and rows; the reader and `tokentrace report` say the same."""
    base, base_file = _job(model_dir, mode, tmp_path / "base", RULES)
    edited, worker = _job(model_dir, mode, tmp_path / "edited", RULES, JOB_TAGS=TAGS)
    base_tokens, tokens = base["tokens"], edited["tokens"]
    assert tokens[1] == base_tokens[1]
    assert tokens[0] != base_tokens[0] and tokens[2] != base_tokens[2]
    assert tokens[3][:4] == base_tokens[3][:4] and tokens[3][4:] != base_tokens[3][4:]

    base_edits, base_fires = _worker_edits(base_file)
    assert base_fires["per_rule"] == [0, 0] and base_fires["served"] == {"0": 0, "1": 0}
    assert len(base_edits) == 4 and all(e == {} for e in base_edits.values())
    assert "2 rule(s) edited nothing" in base["stderr"]  # said at exit

    edits, fires = _worker_edits(worker)
    by_prompt = {int(r.split("-")[0]): e for r, e in edits.items()}
    assert sorted(by_prompt) == [0, 1, 2, 3] and by_prompt[1] == {}
    for i in (0, 2):
        steps, rows = by_prompt[i]["0"]
        # every step the request ran in: its prefill (one or more steps) and 15 decode steps
        assert steps >= 16 and rows == edited["prompt_lengths"][i] + 15, by_prompt[i]
        assert "1" not in by_prompt[i]
    assert by_prompt[3] == {"1": [1, 1]}
    assert fires["served"] == {"0": 2, "1": 1}
    assert fires["per_rule"][0] > 0 and fires["per_rule"][1] == 2  # one step, each layer
    import tokentrace as tt
    requests = tt.load(str(worker)).requests  # the reader's view of the same rows
    assert {r: q.edits for r, q in requests.items()} == {
        r: {int(k): tuple(v) for k, v in e.items()} for r, e in edits.items()}

    report = subprocess.run([_tokentrace(), "report", str(worker)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert next(x for x in lines if x.startswith("  rule 0: ")).startswith(
        "  rule 0: 2 of 4 requests"), report.stdout
    assert next(x for x in lines if x.startswith("  rule 1: ")).startswith(
        "  rule 1: 1 of 4 requests, 1 steps, 1 rows"), report.stdout


def test_a_prefill_rule_equals_a_plain_hook_serving_those_prompts_alone(model_dir, tmp_path):
    """A prefill rule on the tagged requests, served among untagged ones, gives the tagged
    requests the tokens a plain job gets with a forward hook that fills the same module
    outputs in the prefill of those prompts served alone, one after the other (job.py's
    JOB_HOOK_PREFILL: a step of more than one row is a prefill then; served together, vLLM
    may prefill one while the other decodes, in one step)."""
    rule = dict(FILL, requests="x", calls="prefill")
    edited, worker = _job(model_dir, "eager", tmp_path / "edited", [rule], JOB_TAGS=TAGS)
    prompts = __import__("job").PROMPTS
    alone, _ = _job(model_dir, "eager", tmp_path / "hook", None,
                    JOB_PROMPTS=[prompts[0], prompts[2]], JOB_ROUNDS=[[0], [1]],
                    JOB_HOOK_PREFILL="mlp:50")
    plain, _ = _job(model_dir, "eager", tmp_path / "plain", None,
                    JOB_PROMPTS=[prompts[0], prompts[2]], JOB_ROUNDS=[[0], [1]])
    assert alone["tokens"] != plain["tokens"]  # the hook's edit changes them
    assert [edited["tokens"][0], edited["tokens"][2]] == alone["tokens"]
    edits, _ = _worker_edits(worker)
    for request, e in edits.items():
        i = int(request.split("-")[0])
        assert (e == {}) == (i in (1, 3))
        if e:
            assert e["0"][1] == edited["prompt_lengths"][i]  # its prompt's rows, once each


_SENTENCE = ("the quiet river ran past the old mill and under the stone bridge where the "
             "children of the village sat on summer evenings and watched the fish rise")
# 70 words (the tiny model's tokenizer is word-level): two full 32-token blocks to reuse
LONG = f"{_SENTENCE} {_SENTENCE} and the mill wheel turned slowly in the dark"


def test_prefix_caching_keeps_edited_and_unedited_blocks_apart(model_dir, tmp_path):
    """A long prompt served twice, one request after the other (so the second finds the first's
    blocks in vLLM's prefix cache; 32-token blocks, the least vLLM's CPU attention takes).
    Unedited twice: the second reads the cache. Tagged after untagged: it reads nothing from
    the cache and gets its edit (the tokens it gets served first). Untagged after tagged: it
    reads nothing and gets the unedited tokens. Tagged twice: the second reads the cache (same
    edits, same blocks)."""
    rule = dict(FILL, requests="x", calls="prefill")
    env = dict(JOB_PROMPTS=[LONG, LONG], JOB_BLOCK_SIZE="32", JOB_NEW_TOKENS="8")
    plain, _ = _job(model_dir, "eager", tmp_path / "plain", [rule], JOB_ROUNDS=[[0], [1]], **env)
    assert plain["cached"][1] > 0, plain["cached"]  # prefix caching is on
    assert plain["tokens"][0] == plain["tokens"][1]

    tagged_second, _ = _job(model_dir, "eager", tmp_path / "t2", [rule], JOB_ROUNDS=[[0], [1]],
                            JOB_TAGS=[None, "x"], **env)
    tagged_first, _ = _job(model_dir, "eager", tmp_path / "t1", [rule], JOB_ROUNDS=[[1], [0]],
                           JOB_TAGS=[None, "x"], **env)
    both, _ = _job(model_dir, "eager", tmp_path / "both", [rule], JOB_ROUNDS=[[0], [1]],
                   JOB_TAGS=["x", "x"], **env)
    edited = tagged_first["tokens"][0]  # the tagged request, served first: nothing cached
    assert edited != plain["tokens"][0]
    assert tagged_second["cached"][1] == 0 and tagged_second["tokens"][1] == edited
    assert tagged_first["cached"][1] == 0 and tagged_first["tokens"][1] == plain["tokens"][0]
    assert both["cached"][1] > 0 and both["tokens"] == [edited, edited]


def test_tagged_requests_through_the_openai_server(model_dir, tmp_path):
    """`vllm serve`'s OpenAI server under `tokentrace run --edits`, a request tagged through
    the body's vllm_xargs: only its completion changes."""
    requests = [("the cat sat on", {"tokentrace": "x"}), ("a dog ran", None),
                ("birds sang in the", None)]
    plain_status, plain, _ = _serve(model_dir, requests=requests)
    status, answers, err = _serve(model_dir, tmp_path, requests=requests,
                                  edits=[dict(FILL, requests="x")])
    assert status == plain_status, err[-3000:]
    assert answers[1:] == plain[1:]
    assert answers[0] != plain[0], (answers, plain)
    worker = next(p for p in tmp_path.glob("trace-*.sqlite") if "worker" in _role(p))
    edits, _ = _worker_edits(worker)
    assert sorted(bool(e) for e in edits.values()) == [False, False, True], edits
