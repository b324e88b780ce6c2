"""Op records (ops=True, `tokentrace run --ops`): each ATen op is a call in its module's call,
from the RecordFunction observer of the torch ops library (cuda/torch/op_observer.cc)."""

import sqlite3

import pytest
import torch

import tokentrace as tt
from tokentrace import TokentraceError
from tokentrace._record import op_records

MLP = "transformer.h.1.mlp"


@pytest.fixture(scope="module")
def gpt2_gelu():
    """GPT-2 with the exact GELU (activation_function='gelu': one aten::gelu op)."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2,
                        activation_function="gelu")
    return GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def op_trace(gpt2_gelu, tmp_path_factory):
    prompt = torch.tensor([[3, 17, 42, 8, 99]])
    out = str(tmp_path_factory.mktemp("ops") / "ops.sqlite")
    return tt.trace(gpt2_gelu.generate, prompt, {"max_new_tokens": 3, "min_new_tokens": 3,
                                                  "do_sample": False},
                    kernels="off", out=out, ops=True)


@pytest.mark.parametrize("k,rows", [(1, 5), (3, 1)])  # prefill, then a decode step
def test_mlp_ops_are_the_aten_ops_in_order_under_their_modules(op_trace, k, rows):
    ops = op_trace[f"{MLP}:{k}"].ops
    main = [op for op in ops if op.name in ("aten::addmm", "aten::gelu")]
    assert [op.name for op in main] == ["aten::addmm", "aten::gelu", "aten::addmm"], ops
    fc, act, proj = main
    assert fc.module == f"{MLP}.c_fc:{k}" and act.module == f"{MLP}.act:{k}"
    assert proj.module == f"{MLP}.c_proj:{k}"
    # The op's output shape: Conv1D's addmm works on (positions, features).
    assert fc.shape == [rows, 128] and proj.shape == [rows, 32]
    assert act.shape == [1, rows, 128]
    # The op call is nested in the module call: its parent is that call.
    assert op_trace[f"aten::gelu:{act.k}"].parent_id == op_trace[f"{MLP}.act:{k}"].id
    assert op_trace[f"aten::gelu:{act.k}"].token == k
    assert op_trace._site("aten::gelu").kind == "op"
    assert not op_trace.losses
    assert not any(s.startswith("tokentrace::") for s in op_trace.sites)  # no op of ours
    # The module's view is still the module's: output shape unchanged by op records.
    assert list(op_trace[f"{MLP}:{k}"].out.shape) == [1, rows, 32]


def test_an_op_lists_the_ops_it_called(op_trace):
    # generate's ops outside any module call are recorded too (ops between tokens).
    linear = [op for op in op_trace["self:1"].ops if op.name == "aten::linear"]
    assert linear and linear[0].module == "lm_head:1"
    assert "aten::matmul" in linear[0].inner and "aten::mm" in linear[0].inner


def test_top_ops_per_token_and_over_the_run(op_trace):
    decode = {t.name: t for t in op_trace.top_ops(token=3, n=100)}
    # Per layer: c_attn, attn c_proj, c_fc, mlp c_proj are addmm; one gelu (2 layers).
    assert decode["aten::addmm"].calls == 8 and decode["aten::gelu"].calls == 2
    assert decode["aten::gelu"].gpu_ms is None  # kernels off
    cpu = [t.cpu_ms for t in op_trace.top_ops(token=3, n=100)]
    assert cpu == sorted(cpu, reverse=True)  # no GPU times: by CPU time
    assert "aten::mm" not in decode  # inner ops count towards their outer op (aten::linear)
    run = {t.name: t.calls for t in op_trace.top_ops(n=100)}
    assert run["aten::gelu"] == 6 and run["aten::addmm"] == 24
    assert len(op_trace.top_ops(n=3)) == 3


def test_host_reads_are_escapes_named_by_their_op(op_trace):
    con = sqlite3.connect(op_trace.path)
    names = [r[0] for r in con.execute(
        "SELECT s.name FROM escapes e JOIN calls c ON c.id = e.call_id "
        "JOIN sites s ON s.id = c.site_id")]
    assert names, "generate's stopping checks read device values"
    assert set(names) <= set(op_records.ESCAPE_OPS), names
    # One escape per read: as many as the Python layer saw (nested item ops count once).
    assert len(names) == sum(n for _, n in op_trace.escape_sites)


def test_ops_are_on_by_default_off_with_ops_false_and_the_observer_is_removed(gpt2_gelu,
                                                                              op_trace):
    # After an ops=True trace, the observer is gone again (stop finds nothing to remove).
    assert op_records.stop() is False
    # tt.trace records op records unless told not to, as TorchLens records every op.
    default = tt.trace(gpt2_gelu, torch.tensor([[1, 2, 3]]), kernels="off")
    assert op_records.stop() is False
    assert any(default._site(s).kind == "op" for s in default.sites)
    assert "aten::addmm" in [op.name for op in default["transformer.h.0.mlp:1"].ops]
    trace = tt.trace(gpt2_gelu, torch.tensor([[1, 2, 3]]), kernels="off", ops=False)
    assert not any(trace._site(s).kind == "op" for s in trace.sites)
    assert trace["transformer.h.0.mlp:1"].ops == []
    # tt.record keeps the sites it saves, without op records unless asked.
    rec = tt.record(gpt2_gelu, torch.tensor([[1, 2, 3]]), save=tt.module("transformer.h.0.mlp"),
                    generate_kwargs={"max_new_tokens": 1}, kernels="off")
    assert not any(rec._site(s).kind == "op" for s in rec.sites)


def test_bad_ops_value_is_one_clear_error(gpt2_gelu):
    with pytest.raises(TokentraceError, match=r"ops= takes True or False"):
        tt.trace(gpt2_gelu, torch.tensor([[1, 2]]), ops="yes")


def test_tokentrace_run_ops_records_the_ops_of_an_unmodified_job(tmp_path):
    from test_preload import _run_cli, _write_job
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, ("--ops",), TOKENTRACE_OUT=str(tmp_path / "ops.sqlite"),
                   TOKENTRACE_SITES="transformer.h.*.mlp")
    assert res.returncode == 0, res.stderr
    trace = tt.load(tmp_path / "ops.sqlite")
    for k in (1, 3):  # the first root call was running when the hooks went on: its later ops
        names = [op.name for op in trace[f"{MLP}:{k}"].ops]
        assert names.count("aten::addmm") == 2, names
    assert not trace.losses
    con = sqlite3.connect(trace.path)
    escapes = [r[0] for r in con.execute(
        "SELECT s.name FROM escapes e JOIN calls c ON c.id = e.call_id "
        "JOIN sites s ON s.id = c.site_id")]
    assert escapes and set(escapes) <= set(op_records.ESCAPE_OPS), escapes


def test_tokentrace_run_refuses_a_bad_ops_variable(tmp_path):
    from test_preload import _run_cli, _write_job
    job, own = _write_job(tmp_path)
    res = _run_cli(tmp_path, job, own, TOKENTRACE_OPS="yes")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == (
        "tokentrace: TOKENTRACE_OPS='yes' is not accepted (accepted: 1 to record ATen ops, "
        "0 or unset for not)")
    assert "JOB-DONE" not in res.stdout


def test_the_report_lists_top_ops_per_token(op_trace):
    # 2 layers x 4 Conv1D (attn c_attn, c_proj; mlp c_fc, c_proj): 8 addmm calls a token.
    text = op_trace.report()
    section = text[text.index("top ops per token"):text.index("losses:")]
    row = next(line.split() for line in section.splitlines()
               if line.split()[:1] == ["aten::addmm"])
    assert row[1] == "8" and row[4] == "8.0", section  # prefill calls, decode calls/token
    assert float(row[2]) > 0 and float(row[5]) > 0  # CPU time, prefill and per decode token


AFTER_OPS_JOB = """
import sys, torch, tokentrace as tt
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

def run(x):
    y = model(x)  # the trace attaches here
    with torch.device("meta"):  # the process's first device block: inside the trace
        torch.empty(1)
    return y

if sys.argv[1] == "records":
    tt.trace(run, torch.ones(1, 4), kernels="off", out=sys.argv[2])  # op records: default
else:  # an op edit's mode
    bound = tt.when(tt.func("relu"), tt.zero()).bind(model)
    with bound.installed():
        run(torch.ones(1, 4))
with torch.device("meta"):
    print("DEVICES", torch.tensor([1.0]).device, torch.as_tensor([1.0]).device,
          torch.get_default_device())
"""


@pytest.mark.parametrize("how", ["records", "op mode"])
def test_a_device_block_after_a_run_with_ops_still_places_torch_tensor(how, tmp_path):
    """While op records or an op mode are on, torch.tensor is a wrapper of ours; torch caches
    its device factories by identity the first time a `with torch.device(...)` block runs. If
    that was during the run, `with torch.device("meta"): torch.tensor(...)` made CPU tensors
    for the rest of the process, and transformers' from_pretrained, which asks exactly that,
    then left a loaded Llama's rotary buffers uninitialized (SmolLM2 answered garbage in CI).
    A fresh process: the cache is filled once per process."""
    import subprocess
    import sys

    from tt_testutil import PYDIR
    job = tmp_path / "job.py"
    job.write_text(AFTER_OPS_JOB)
    env = dict(__import__("os").environ, PYTHONPATH=PYDIR)
    res = subprocess.run([sys.executable, str(job), how.split()[0], str(tmp_path / "t.sqlite")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(x for x in res.stdout.splitlines() if x.startswith("DEVICES "))
    assert line.split()[1:] == ["meta", "meta", "meta"], line
