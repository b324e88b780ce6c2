"""transformers' generate compiling the model itself, traced (attaching to a job that compiles
must not change what runs). On CUDA with a static cache, generate runs
its decode steps through torch.compile(model.__call__) (its auto-compile, mode
"reduce-overhead"); here, on the CPU, the same path is taken with CompileConfig's
_compile_all_devices. The trace's wrappers are out of TorchDynamo's sight in those calls
(python/tokentrace/_compiled/call.py): the same graphs and graph breaks as untraced, the same
tokens, no recompile after the trace; each compiled call is a token, and with ops=True its
kernels are attributed to the modules inside. Also under `tokentrace run`, unmodified."""

import textwrap

import pytest
import torch

import tokentrace as tt
from test_compiled_llama import LLAMA, NEW_TOKENS, check_decode_attribution
from test_compiled_llama import _generate as _generate_model

MODEL = LLAMA + """
# generate compiles the model for its decode steps: what it does on CUDA with a static cache
from transformers.generation.configuration_utils import CompileConfig
compile_config = CompileConfig(dynamic=False, mode="default")
compile_config._compile_all_devices = True
kwargs["compile_config"] = compile_config
"""


def _generate(traced):
    return _generate_model(traced, MODEL, "compiled the model's __call__ while traced",
                           again=True)


@pytest.mark.slow
def test_generate_compiling_the_model_itself_decodes_compiled_while_traced():
    plain_ids, plain_counts, _, _ = _generate(traced=False)
    ids, counts, trace, (after_ids, after_counts) = _generate(traced=True)
    assert plain_counts[0] == 0 and plain_counts[1] >= 1
    assert counts == plain_counts  # no graph break, no added graph: no eager fallback
    assert torch.equal(ids, plain_ids)  # the same tokens
    assert trace["self"].num_calls == NEW_TOKENS  # the eager prefill, then compiled calls
    assert trace["model.layers.0.mlp"].num_calls == 1  # inside the compiled calls: not calls
    assert trace.losses.get("compiled_unattributed", 0) == 0
    check_decode_attribution(trace, NEW_TOKENS)
    # After the trace the compiled code runs on, untraced: no guard failed, no recompile.
    assert after_counts == counts
    assert torch.equal(after_ids, plain_ids)


@pytest.mark.slow
def test_tokentrace_run_ops_on_a_job_whose_generate_compiles_the_model(tmp_path):
    from test_preload import _run_cli, _write_job
    job, own = _write_job(tmp_path, textwrap.dedent(MODEL) + textwrap.dedent("""
        from torch._dynamo.utils import counters
        with torch.no_grad():
            out = lm.generate(prompt, **kwargs)
        print("IDS", out.tolist())
        print("BREAKS", sum(counters["graph_break"].values()))
        """))
    res = _run_cli(tmp_path, job, own, ("--ops", "--kernels", "off"),
                   TOKENTRACE_OUT=str(tmp_path / "c.sqlite"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "BREAKS 0" in res.stdout.splitlines()
    assert "compiled the model's __call__ while traced" in res.stderr  # said once, when it happened
    assert res.stderr.count("compiled the model's __call__ while traced") == 1
    trace = tt.load(tmp_path / "c.sqlite")
    assert trace["self"].num_calls == NEW_TOKENS
    assert trace.losses.get("compiled_unattributed", 0) == 0
    check_decode_attribution(trace, NEW_TOKENS)
