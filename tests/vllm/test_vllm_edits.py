"""Edits in a served model: `tokentrace run --edits` on vLLM's offline LLM.generate (CPU build,
the tiny random Llama of tiny_model.py, 4 prompts x 16 greedy tokens).

In a serving engine the patch table's token k is engine step k of served work: vLLM's start-up
runs (memory profiling, compile warm-up), of which compiled mode makes more than eager, are no
steps and count nowhere. So a rule on step 3 edits step 3 in eager and compiled mode alike
(the two modes' plain outputs differ on this random model: compiled code rounds otherwise, and
near-tied logits flip, so each mode is compared with its own plain run), and an every-call rule
fires once per layer per served step in both. Run with
the vLLM environment's interpreter (scripts/setup-vllm.sh)."""

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
from test_vllm import _env, _result, _tokentrace  # noqa: E402

LAYERS = 2  # tiny_model's num_hidden_layers


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model.make(str(tmp_path_factory.mktemp("tiny-llama")))


def _served(model_dir, mode, tmp_path, rules):
    """(token ids per prompt, the worker's trace meta, {prompt index: the steps that gave its
    tokens, in order}) of one job traced with `rules` as --edits."""
    job = [sys.executable, os.path.join(HERE, "job.py"), model_dir, mode]
    out = tmp_path / mode
    out.mkdir(parents=True)
    spec = out / "edits.json"
    spec.write_text(json.dumps(rules))
    proc = subprocess.run([_tokentrace(), "run", "--out", str(out / "trace-%p.sqlite"),
                           "--edits", str(spec), "--"] + job,
                          capture_output=True, text=True, timeout=900, env=_env())
    tokens = _result(proc)["tokens"]
    workers = []
    for name in sorted(n for n in os.listdir(out) if n.endswith(".sqlite")):
        con = sqlite3.connect(str(out / name))
        meta = dict(con.execute("SELECT key, value FROM meta"))
        if "worker" in meta.get("role", "").split(","):
            rows = con.execute("SELECT token, request, prefill_tokens, decode_tokens, position "
                               "FROM step_requests ORDER BY token").fetchall()
            workers.append((meta, rows))
        con.close()
    assert len(workers) == 1, (os.listdir(out), proc.stderr[-2000:])
    meta, rows = workers[0]
    # A step gives a request a token when it decodes, or when it computes the last of its
    # prompt; vLLM names LLM.generate's requests "<prompt index>-<suffix>".
    gave = {}
    for step, request, prefill, decode, _ in rows:
        if decode or (prefill and not _more_prefill(rows, request, step)):
            gave.setdefault(int(request.split("-")[0]), []).append(step)
    return tokens, meta, gave


def _more_prefill(rows, request, step):
    """Whether a later step computes more of `request`'s prompt (a chunked prefill)."""
    return any(r == request and s > step and p for s, r, p, _, _ in rows)


STEP = 3
# Every mlp call scaled by 1: edits nothing, fires at each call. It is in both runs compared,
# so both run the same code (in compiled mode the patch op is part of the compiled graph, which
# then rounds a little otherwise than the plain job's; near-tied logits of this random model
# flip, so a traced compiled job is compared with a traced one, not with the plain job).
IDENTITY = {"site": "model.layers.*.mlp", "op": "scale", "factor": 1.0}
# Every mlp output of step 3 filled with 50: moves every logit of that step.
AT_STEP = {"site": "model.layers.*.mlp", "op": "fill", "value": 50.0, "calls": {"token": STEP}}


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_edits_count_served_steps_only(model_dir, tmp_path, mode):
    """An every-call rule fires once per layer per served step, and a step-3 rule edits step 3:
    every token a request got before step 3 is the one it gets without that rule, and tokens
    change from step 3 on. With vLLM's start-up runs counted (compiled mode makes more of
    them), compiled mode fired more and edited an earlier step."""
    base, base_meta, _ = _served(model_dir, mode, tmp_path / "base", [IDENTITY])
    steps = int(base_meta["engine_steps"])
    assert steps >= 16  # 16 tokens for each of the 4 requests
    fires = json.loads(base_meta["patch_fires"])
    assert fires["num_fires"] == LAYERS * steps, fires

    edited, meta, gave = _served(model_dir, mode, tmp_path / "edited", [IDENTITY, AT_STEP])
    steps = int(meta["engine_steps"])  # vLLM may prefill the 4 requests in 1 or 2 steps
    assert sorted(gave) == list(range(len(base)))
    for i, at in gave.items():
        before = sum(1 for s in at if s < STEP)  # the tokens it had before step 3
        assert edited[i][:before] == base[i][:before], (i, at)
    assert edited != base
    fires = json.loads(meta["patch_fires"])
    assert fires["per_rule"] == [LAYERS * steps, LAYERS], fires  # step 3: each layer once
