"""Op labels against TorchLens itself: the same model and input traced by TorchLens (in a
process of its own, as its users run it) and by tokentrace give the same labels, in the same
order, with the same passes: TorchLens's loops (a module or a loop body that runs again in one
forward, a block's residual adds, an embedding's sum) and its orphans (dropped) included.
Compared: a module of the Python calls whose ATen ops are several or none, a CNN, loops (a
Linear in a loop, a block called three times, a GRU cell over time steps), and tiny GPT-2,
Llama, BERT, T5, Mixtral (MoE), Qwen2, ALBERT (one layer's parameters shared by all its
layers), BART (an orphan mask), Mamba (its slow scan) and ViT forwards.

TorchLens is a test requirement (scripts/requirements.txt); the test skips where it is not
installed (the GPU machine's preinstalled environment)."""

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tokentrace as tt
from test_op_loops import Loop, OverTime  # the loops test_op_loops.py checks by rule

pytest.importorskip("torchlens")


class Zoo(nn.Module):
    """The Python calls whose ATen ops are several or none, and ops with two outputs."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        a, b, c, d = y[0, 1:3], y[:, None], y[[0, 1]], y[y > 0]
        z = y.clone()
        z[0] = 1.0
        z[:, 1] = y[:, 2]
        t, u, w = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.as_tensor([1.0] * 4), y.new_tensor(
            [2.0] * 4)
        e, f, g = y.contiguous(), y.T, y.transpose(0, 1).contiguous()
        v, _ = y.max(dim=-1)
        m = y.min(-1).values
        r = 2 / (y.float() + 1)
        n = F.normalize(y, dim=-1)
        z += 1  # operators TorchLens names by their method: iadd, idiv, truediv, mod, and
        z /= 2
        o = (y / 3 + torch.div(y, 3) + y % 2) * ((y > 0) & ~(y > 1))
        return (a.sum() + b.sum() + c.sum() + d.sum() + z.sum() + t + u + w + e + f.T + g.T
                + v.unsqueeze(-1) + m.unsqueeze(-1) + r + n + o)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3)
        self.norm = nn.BatchNorm2d(4)
        self.head = nn.Linear(4 * 2 * 2, 3)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.norm(self.conv1(x))), 2)
        x = torch.relu(self.conv2(x))
        return torch.softmax(self.head(torch.flatten(x, 1)), dim=-1)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


class _Reused(nn.Module):
    """One block called three times, with other ops between its calls."""

    def __init__(self):
        super().__init__()
        self.block, self.head = _Block(), nn.Linear(4, 2)

    def forward(self, x):
        x = self.block(x)
        x = self.block(torch.sigmoid(x))
        x = self.block(x + 1)
        return self.head(x)


def _gpt2():
    import transformers
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=50,
                                     n_positions=32)
    return transformers.GPT2LMHeadModel(config).eval()


class _Seq2Seq(nn.Module):
    """A tiny T5 given its encoder and decoder ids as one tensor (one input, as both tools
    take it): row 0 the encoder's, row 1 the decoder's."""

    def __init__(self):
        super().__init__()
        import transformers
        self.t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
            decoder_start_token_id=0)).eval()

    def forward(self, ids):
        return self.t5(input_ids=ids[:1], decoder_input_ids=ids[1:, :2]).logits


class _Bart(nn.Module):
    """A tiny BART given its encoder and decoder ids as one tensor: its decoder makes a mask
    from torch.ones only to read it on the host, an orphan TorchLens drops."""

    def __init__(self):
        super().__init__()
        import transformers
        self.m = transformers.BartForConditionalGeneration(transformers.BartConfig(
            vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
            decoder_ffn_dim=32, max_position_embeddings=32)).eval()

    def forward(self, ids):
        return self.m(input_ids=ids[:1], decoder_input_ids=ids[1:, :2]).logits


def _case(name):
    import transformers
    torch.manual_seed(0)
    ids = torch.tensor([[1, 2, 3, 4]])
    if name == "zoo":
        return Zoo().eval(), torch.randn(2, 4)
    if name == "cnn":
        return Cnn().eval(), torch.randn(2, 1, 10, 10)
    if name == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)).eval(), ids
    if name == "bert":
        return transformers.BertModel(transformers.BertConfig(
            vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=32)).eval(), ids
    if name == "t5":
        return _Seq2Seq(), torch.tensor([[1, 2, 3, 4], [0, 5, 0, 0]])
    if name == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(
            vocab_size=64, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
            num_experts_per_tok=2)).eval(), ids
    if name == "loop":
        return Loop().eval(), torch.randn(2, 4)
    if name == "reused":
        return _Reused().eval(), torch.randn(2, 4)
    if name == "rnn":
        return OverTime().eval(), torch.randn(2, 3, 4)
    if name == "albert":  # one layer's parameters shared by its three layers
        return transformers.AlbertModel(transformers.AlbertConfig(
            vocab_size=64, embedding_size=8, hidden_size=16, num_hidden_layers=3,
            num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)).eval(), ids
    if name == "bart":
        return _Bart(), torch.tensor([[5, 6, 7, 2], [2, 5, 0, 0]])
    if name == "mamba":  # the slow path's scan: a loop no parameter anchors
        return transformers.MambaForCausalLM(transformers.MambaConfig(
            vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=1)).eval(), ids
    if name == "vit":  # one dropout module called twice, feeding the residual adds
        return transformers.ViTModel(transformers.ViTConfig(
            image_size=8, patch_size=4, num_channels=3, hidden_size=16, num_hidden_layers=1,
            num_attention_heads=2, intermediate_size=32)).eval(), torch.randn(1, 3, 8, 8)
    if name == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1)).eval(), ids
    return _gpt2(), ids


_CASES = ("zoo", "cnn", "gpt2", "llama", "bert", "t5", "mixtral", "qwen2", "loop", "reused",
          "rnn", "albert", "bart", "mamba", "vit")

# Run as a script: TorchLens's labels of every case, as JSON: [(label, type, passes)] per op
# call, in execution order (its layer_list: one entry per pass).
_ORACLE = """
import json, sys
sys.path.insert(0, {here!r})
import torchlens
from test_torchlens_oracle import _CASES, _case
out = {{}}
for name in _CASES:
    model, x = _case(name)
    log = torchlens.trace(model, x)
    out[name] = [(op.layer_label, op.layer_type, op.num_passes) for op in log.layer_list
                 if op.layer_type not in ("input", "output", "buffer", "internalsource")]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def torchlens_labels():
    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENTRACE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    run = subprocess.run([sys.executable, "-c", _ORACLE.format(here=here)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _ours(name):
    model, x = _case(name)
    with torch.no_grad():
        trace = tt.trace(model, x, kernels="off", ops=True)
    return [(s.layer_label, s.layer_type, s.num_passes)
            for s in trace.find_sites(tt.where(lambda op: True))]


@pytest.mark.parametrize("name", _CASES)
def test_op_labels_are_torchlens_labels(name, torchlens_labels):
    theirs = [tuple(op) for op in torchlens_labels[name]]
    ours = _ours(name)
    assert len(ours) == len(theirs), (ours, theirs)
    for mine, their in zip(ours, theirs):
        assert mine == their, (name, mine, their)
