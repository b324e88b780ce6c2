"""Bad input: one clear line, raised before any model work, never a traceback from our code."""

import os
import sys

import pytest
import torch

import tokentrace as tt


def test_unknown_site_names_close_matches(gpt2, prompt):
    with pytest.raises(tt.TokentraceError, match=r"no site named 'transformer.h.1.mpl'.*"
                                                 r"did you mean 'transformer.h.1.mlp'"):
        tt.trace(gpt2, prompt, save=tt.module("transformer.h.1.mpl"))


def test_selector_matching_nothing(gpt2, prompt):
    with pytest.raises(tt.TokentraceError, match=r"matches no site.*sites look like 'self'"):
        tt.trace(gpt2, prompt, sites=tt.module("decoder.*.mlp"))


def test_non_callable():
    with pytest.raises(tt.TokentraceError, match="needs a callable.*got int"):
        tt.trace(3, torch.ones(1))


def test_callable_that_runs_no_model(prompt):
    with pytest.raises(tt.TokentraceError, match="called no torch.nn.Module.*pass a function"):
        tt.trace(lambda x: x, prompt)


@pytest.mark.parametrize("where", ["missing_dir", "readonly_dir", "is_dir", "fifo"])
def test_unwritable_output_path(tmp_path, gpt2, prompt, where):
    if where == "missing_dir":
        out = tmp_path / "nope" / "t.sqlite"
    elif where == "is_dir":
        out = tmp_path
    elif where == "fifo":  # opening it would block the caller forever
        out = tmp_path / "fifo"
        os.mkfifo(out)
    else:
        if os.geteuid() == 0:
            pytest.skip("root can write a read-only directory")
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o500)
        out = d / "t.sqlite"
    calls = []
    h = gpt2.register_forward_pre_hook(lambda m, a: calls.append(1))
    try:
        with pytest.raises(tt.TokentraceError, match="cannot write the trace to"):
            tt.trace(gpt2, prompt, out=out)
    finally:
        h.remove()
    assert not calls  # raised before any model work


def test_kernels_off_in_the_environment_is_honoured(gpt2, prompt, monkeypatch):
    """tt.trace without kernels= takes TOKENTRACE_KERNELS, as `tokentrace run` does (on a
    machine whose CUPTI misbehaves, off is the way to keep it out)."""
    monkeypatch.setenv("TOKENTRACE_KERNELS", "off")
    trace = tt.trace(gpt2, prompt)
    assert trace.meta["kernel_mode"] == "off"
    monkeypatch.delenv("TOKENTRACE_KERNELS")
    assert tt.trace(gpt2, prompt).meta["kernel_mode"] == "summary"


@pytest.mark.parametrize("k", [2**32, 2**32 + 1, 10**30])
def test_call_and_token_numbers_past_32_bits_are_refused(k):
    for select in (tt.call, tt.token):
        with pytest.raises(tt.TokentraceError, match=f"k={k} is past the largest"):
            select(k)


def test_bad_kernel_mode(gpt2, prompt):
    with pytest.raises(tt.TokentraceError,
                       match=r"is not a kernel mode \(accepted: off, summary, full"):
        tt.trace(gpt2, prompt, kernels="everything")


def test_bad_selector_types(gpt2, prompt):
    with pytest.raises(tt.TokentraceError, match="must be tt.module"):
        tt.trace(gpt2, prompt, save=42)
    with pytest.raises(tt.TokentraceError, match="at least one"):
        tt.module()


def test_bad_lookup(gpt2, prompt):
    trace = tt.trace(gpt2, prompt)
    with pytest.raises(tt.TokentraceError, match="did you mean 'transformer.h.0.mlp'"):
        trace["transformer.h.0.mlpp"]
    with pytest.raises(tt.TokentraceError, match="has 1 calls; k must be 1..1"):
        trace["transformer.h.0.mlp:2"]
    # an integer is TorchLens's ordinal over the op records (trace[0]: the root's input)
    assert "input_1" in repr(trace[0])
    with pytest.raises(tt.TokentraceError, match="no op records.*index it by site name"):
        tt.trace(gpt2, prompt, ops=False)[0]


def test_errors_are_one_line(gpt2, prompt):
    with pytest.raises(tt.TokentraceError) as info:
        tt.trace(gpt2, prompt, save=tt.module("transformer.h.1.mpl"))
    assert "\n" not in str(info.value) and str(info.value).startswith("tokentrace:")


def test_load_errors(tmp_path):
    with pytest.raises(tt.TokentraceError, match="no trace file"):
        tt.load(tmp_path / "missing.sqlite")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(tt.TokentraceError, match="not a tokentrace"):
        tt.load(junk)


def test_edit_errors(llama):
    with pytest.raises(tt.TokentraceError, match="did you mean"):
        tt.when(tt.module("model.layers.0.self_attn.v_prj"), tt.zero()).bind(llama)
    with pytest.raises(tt.TokentraceError, match="edit op.*or a callable"):
        tt.when(tt.module("model.layers.0.self_attn.v_proj"), 3)
    with pytest.raises(tt.TokentraceError, match="calls="):
        tt.when("model.layers.0.self_attn.v_proj", tt.zero(), calls="prefill")
    with pytest.raises(tt.TokentraceError, match="1-based"):
        tt.call(0)
    with pytest.raises(tt.TokentraceError, match="index="):
        tt.zero(index=(slice(None), "a"))
    # only knowable at run time (position 9 of a 3-token prompt): skipped, counted, warned
    bound = tt.when("model.layers.0.self_attn.v_proj", tt.zero(index=(0, 9))).bind(llama)
    with pytest.warns(tt.EditSkipWarning, match="out of range for dimension 1 of size 3"):
        bound(torch.tensor([[1, 2, 3]]))
    assert bound.last_report.num_skips == 1 and bound.last_report.num_fires == 0
    # knowable at bind time (v_proj has 16 output features): an error before any model work
    with pytest.raises(tt.TokentraceError, match="does not broadcast"):
        tt.when("model.layers.0.self_attn.v_proj", tt.add(torch.ones(5))).bind(llama)


def test_missing_extension_says_how_to_build_it(gpt2, prompt, monkeypatch):
    from tokentrace._common import loader
    monkeypatch.setattr(loader, "load", lambda: None)
    monkeypatch.setattr(loader, "unavailable_reason",
                        lambda: "the native extension is not built (no _native*.so)")
    with pytest.raises(tt.TokentraceError) as err:
        tt.trace(gpt2, prompt)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("tokentrace: the native recorder is unavailable: the native "
                           "extension is not built (no _native*.so); build it: pip install . , "
                           "or scripts/setup.sh and PYTHONPATH=python TOKENTRACE_NATIVE_DIR=build")
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in gpt2.modules())


def test_plot_without_matplotlib_says_what_is_missing(tmp_path, monkeypatch, capsys):
    from tokentrace import plot as plot_mod
    from tt_testutil import make_trace_file
    path = make_trace_file(str(tmp_path / "t.sqlite"))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(tt.TokentraceError, match="needs matplotlib"):
        plot_mod.plot(path, str(tmp_path / "t.png"))
    assert plot_mod.main([path]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


FULL_DISK_JOB = """
import sys, warnings, torch
import tokentrace as tt
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
lm = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2)).eval()
gen = {"max_new_tokens": 40, "min_new_tokens": 40, "do_sample": False}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    trace = tt.trace(lm.generate, torch.tensor([[3, 17, 42]]), gen, out=sys.argv[1],
                     kernels="off", save=tt.module("transformer.h.1.mlp"))
said = [str(w.message) for w in caught if "could not be written whole" in str(w.message)]
print("RESULT", len(said), sum(trace.losses.values()) > 0)
"""


@pytest.mark.parametrize("budget", [600_000, 1_000_000])
def test_a_full_disk_after_the_run_still_returns_the_trace(tmp_path, budget):
    """The disk fills during the run (a SQLite VFS that refuses to grow files past `budget`
    bytes, tests/preload/disk_full_vfs.cc): tt.trace returns the trace it has and warns once,
    instead of raising "stop failed" and losing generate's result."""
    import glob
    import subprocess

    from tt_testutil import PYDIR, ROOT
    vfs = sorted(glob.glob(os.path.join(ROOT, "build*", "libtt_disk_full.so")))
    if not vfs:
        pytest.skip("libtt_disk_full.so is not built (the C++ tests' build)")
    env = dict(os.environ, LD_PRELOAD=vfs[0], TT_DISK_FULL_AFTER=str(budget),
               PYTHONPATH=os.pathsep.join([PYDIR, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-c", FULL_DISK_JOB, str(tmp_path / "t.sqlite")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "RESULT 1 " in res.stdout, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr

