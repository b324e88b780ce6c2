"""tt.trace over real tiny models: numbering, shapes, tokens, text prompts, escapes."""

import os
import subprocess
import sys
import warnings

import pytest
import torch

import tokentrace as tt
from tt_testutil import PYDIR


def _trace(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tt.trace(*args, **kwargs)


def test_gpt2_generate_numbering(gpt2, prompt):
    trace = _trace(gpt2.generate, prompt, input_kwargs={"max_new_tokens": 3})
    mlp = "transformer.h.1.mlp"
    assert trace[mlp].num_calls == 3
    assert list(trace[f"{mlp}:1"].out.shape) == [1, 5, 32]
    assert list(trace[f"{mlp}:2"].out.shape) == [1, 1, 32]
    assert trace[f"{mlp}:3"].token == 3
    assert trace["self"].num_calls == 3
    assert [t.token for t in trace.tokens] == [1, 2, 3]
    assert trace.tokens[0].prefill and not trace.tokens[1].prefill
    assert trace.sites[0] == "self" and mlp in trace.sites
    attn = trace["transformer.h.0.attn:1"].out
    assert attn.path == "[0]" and attn.dtype == torch.float32
    assert trace["self:1"].out.path == "logits"
    assert trace[f"{mlp}:2"].cpu_ms >= 0
    # calls of a child lie inside the root call of the same token
    assert trace[f"{mlp}:2"].parent_id is not None
    report = trace.report()
    assert "tokens: 3" in report and "transformer" in report


def test_llama_batch_of_two(llama):
    ids = torch.tensor([[3, 17, 42, 8], [5, 6, 7, 9]])
    trace = _trace(llama.generate, ids, input_kwargs={"max_new_tokens": 4, "do_sample": False})
    v = "model.layers.0.self_attn.v_proj"
    assert trace[v].num_calls == 4
    assert list(trace[f"{v}:1"].out.shape) == [2, 4, 16]
    assert list(trace[f"{v}:4"].out.shape) == [2, 1, 16]
    assert len(trace.tokens) == 4


def test_sampling(gpt2, prompt):
    torch.manual_seed(1)
    trace = _trace(gpt2.generate, prompt, input_kwargs={"max_new_tokens": 5, "do_sample": True,
                                                       "top_k": 10})
    assert trace["transformer.h.0.mlp"].num_calls == 5


class Twice(torch.nn.Module):
    """A module called several times per step, and a recursive one."""

    def __init__(self):
        super().__init__()
        self.shared = torch.nn.Linear(4, 4)
        self.inner = Recursive()

    def forward(self, x):
        x = self.shared(x)
        x = self.shared(x)
        return self.inner(x, 2)


class Recursive(torch.nn.Module):
    def forward(self, x, depth):
        if depth:
            return self(x + 1, depth - 1)
        return x


def test_several_calls_per_step_and_recursion():
    model = Twice()
    trace = _trace(model, torch.ones(1, 4))
    assert trace["shared"].num_calls == 2
    assert trace["inner"].num_calls == 3          # outer, then two nested
    calls = trace["inner"].calls
    assert [c.k for c in calls] == [1, 2, 3]
    assert calls[1].parent_id == calls[0].id and calls[2].parent_id == calls[1].id
    assert all(c.token == 1 for c in calls)


def test_outside_generate_each_root_call_is_a_token(gpt2, prompt):
    def run():
        with torch.no_grad():
            out = gpt2(prompt, use_cache=True)
            gpt2(torch.tensor([[7]]), past_key_values=out.past_key_values, use_cache=True)

    trace = _trace(run, model=gpt2)
    assert len(trace.tokens) == 2
    assert list(trace["transformer.h.0.mlp:2"].out.shape) == [1, 1, 32]
    # A model called directly: one token.
    assert len(_trace(gpt2, prompt).tokens) == 1


def test_selected_sites_only(gpt2, prompt):
    trace = _trace(gpt2.generate, prompt, input_kwargs={"max_new_tokens": 2},
                   sites=tt.module("transformer.h.*.mlp") | "transformer.ln_f", ops=False)
    assert set(trace.sites) == {"self", "transformer.h.0.mlp", "transformer.h.1.mlp",
                                "transformer.ln_f"}


def test_save_keeps_tensors(gpt2, prompt):
    seen = []
    h = gpt2.transformer.h[1].mlp.register_forward_hook(lambda m, a, o: seen.append(o.clone()))
    try:
        trace = _trace(gpt2.generate, prompt, input_kwargs={"max_new_tokens": 3},
                       save=tt.module("transformer.h.1.mlp"))
    finally:
        h.remove()
    outs = trace["transformer.h.1.mlp"].outs
    assert len(outs) == 3 and all(torch.equal(a, b) for a, b in zip(outs, seen))
    assert isinstance(trace["transformer.h.0.mlp:1"].out, tt.OutputMeta)


def test_hooks_removed_even_on_exception(gpt2, prompt):
    class Boom(Exception):
        pass

    def explode(module, args, out):
        raise Boom()

    h = gpt2.transformer.h[0].mlp.register_forward_hook(explode)
    try:
        with pytest.raises(Boom):
            _trace(gpt2, prompt)
    finally:
        h.remove()
    assert not gpt2._forward_hooks and not gpt2._forward_pre_hooks
    for m in gpt2.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
    assert not hasattr(torch.Tensor.__dict__, "item")
    assert "item" not in torch.Tensor.__dict__
    _trace(gpt2, prompt)  # a later trace works


def test_scalar_escape_warning(gpt2, prompt):
    with pytest.warns(tt.ScalarEscapeWarning) as record:
        trace = tt.trace(gpt2.generate, prompt, input_kwargs={"max_new_tokens": 3})
    escapes = [w for w in record if issubclass(w.category, tt.ScalarEscapeWarning)]
    assert len(escapes) == 1  # once per trace
    text = str(escapes[0].message)
    assert "per token" in text and ".py:" in text
    assert escapes[0].filename == __file__  # points at the caller's line
    assert trace.escape_sites and sum(t.escapes for t in trace.tokens) > 0


def test_no_warning_without_reads():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("error", tt.ScalarEscapeWarning)
        tt.trace(model, torch.ones(1, 4))


def test_text_prompt_with_local_tokenizer(tmp_path, gpt2):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    words = ["the", "capital", "of", "france", "is", "paris", "[UNK]"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[UNK]")
    save_dir = tmp_path / "model"
    gpt2.save_pretrained(save_dir)
    fast.save_pretrained(save_dir)
    local = GPT2LMHeadModel.from_pretrained(save_dir).eval()
    trace = _trace(local.generate, "the capital of france is", input_kwargs={"max_new_tokens": 2})
    assert list(trace["transformer.h.0.mlp:1"].out.shape) == [1, 5, 32]
    # explicit tokenizer= with a model that has no local files
    trace = _trace(gpt2.generate, "the capital of", input_kwargs={"max_new_tokens": 2},
                   tokenizer=fast)
    assert list(trace["transformer.h.0.mlp:1"].out.shape) == [1, 3, 32]


def test_text_prompt_without_tokenizer_is_clear(gpt2):
    with pytest.raises(tt.TokentraceError, match="no tokenizer was found.*tokenizer="):
        tt.trace(gpt2.generate, "the capital of", input_kwargs={"max_new_tokens": 2})


def test_kernels_off_gives_none(gpt2, prompt):
    trace = _trace(gpt2, prompt, kernels="off")
    assert trace["transformer.h.0.mlp:1"].gpu_ms is None
    assert trace["transformer.h.0.mlp:1"].kernels is None
    assert trace.tokens[0].gpu_ms is None


def test_out_path_written(tmp_path, gpt2, prompt):
    path = tmp_path / "t.sqlite"
    trace = _trace(gpt2, prompt, out=path)
    assert trace.path == str(path) and path.exists()


_TRACE_AND_EXIT = """
import os, sys, torch, tokentrace as tt
m = torch.nn.Sequential(torch.nn.Linear(4, 4))
x = torch.randn(1, 4)
temp = tt.trace(m, x, kernels="off")
kept = tt.trace(m, x, kernels="off", out=sys.argv[1])
if len(sys.argv) > 2:  # a forked child that traces and exits normally (its exit handlers,
    pid = os.fork()   # inherited from the parent, run): the parent's files stay
    if pid == 0:
        child = tt.trace(m, x, kernels="off")
        print("child wrote", child.path, flush=True)
        sys.exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    print("parent still has", os.path.exists(temp.path))
print(temp.path)
"""


def _trace_in_subprocess(*args):
    env = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", _TRACE_AND_EXIT, *args], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_temporary_traces_are_removed_at_exit_and_out_files_kept(tmp_path):
    kept = tmp_path / "kept.sqlite"
    temp_path = _trace_in_subprocess(str(kept))[-1]
    assert not os.path.exists(temp_path)
    assert not os.path.exists(os.path.dirname(temp_path))
    assert kept.exists()


def test_a_forked_child_leaves_its_parents_temporary_traces(tmp_path):
    out = _trace_in_subprocess(str(tmp_path / "kept.sqlite"), "fork")
    assert out[:2] == ["child", "wrote"] and out[3:7] == ["parent", "still", "has", "True"]
    assert not os.path.exists(out[2])  # the child removed its own at its exit
    assert not os.path.exists(out[-1])  # and the parent removed its own at its exit


class _Shapes(torch.nn.Module):
    """Outputs a recorded shape must survive: high-rank, too high-rank, nested, sparse."""

    def __init__(self):
        super().__init__()
        self.patches = torch.nn.Identity()
        self.deep = torch.nn.Identity()
        self.nested = torch.nn.Identity()
        self.sparse = torch.nn.Identity()

    def forward(self, x):
        self.patches(x.reshape(2, 1, 2, 1, 2, 1, 1, 1))
        self.deep(x.reshape(2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1))
        self.nested(torch.nested.nested_tensor([x[:1], x[:2]]))
        return self.sparse(x.to_sparse())


def test_high_rank_and_odd_layout_outputs_are_recorded_without_errors(tmp_path):
    x = torch.randn(4, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = tt.trace(_Shapes(), x, kernels="off", out=tmp_path / "s.sqlite", ops=False,
                         save=tt.module("nested") | tt.module("sparse") | tt.module("patches"))
    # 8 small dims are kept whole and saved.
    assert torch.equal(trace["patches:1"].out, x.reshape(2, 1, 2, 1, 2, 1, 1, 1))
    # 12 dims: the first five, and a counted loss, never an error reading it back.
    deep = trace["deep:1"].out
    assert list(deep.shape) == [2, 1, 2, 1, 2, None] and deep.dtype == torch.float32
    assert trace.losses["output_dims_truncated"] == 1
    # Nested and sparse outputs cannot go into the tensor files: counted, warned, and the
    # trace still opens (the sparse one keeps its shape).
    assert trace.losses["save_failed"] == 2
    assert trace["sparse:1"].out.shape == torch.Size([4, 2])
    said = [str(w.message) for w in caught if "could not save" in str(w.message)]
    assert len(said) == 1 and "'nested'" in said[0] and "save_failed" in said[0]


def test_a_tensor_file_that_cannot_be_written_is_counted_not_raised(tmp_path, gpt2, prompt):
    out = tmp_path / "t.sqlite"
    # A file where the tensor folder would go (as a full disk would, the shard write fails).
    (tmp_path / "t.sqlite.tensors").write_text("in the way")
    with pytest.warns(RuntimeWarning, match="could not be written"):
        trace = tt.trace(gpt2, prompt, kernels="off", out=out, save=tt.module("transformer.h.0"))
    assert trace.losses["save_failed"] == 1
    assert trace["transformer.h.0:1"].out.shape == torch.Size([1, 5, 32])
