"""Each token's generated id and text (python/tokentrace/_record/token_text.py): what a
per-token trace of text generation shows beside every token."""

import sqlite3
import subprocess

import pytest
import torch

import tokentrace as tt


class Words:
    """A tokenizer stand-in: id i is the word "w<i>" after a space (decode as a BPE tokenizer
    does: a token's text carries its leading space)."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f" w{int(i)}" for i in ids)


def _lm():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2,
                                      bos_token_id=None, eos_token_id=None)).eval()


GEN = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False}


def test_every_token_has_the_id_generate_produced_and_its_text(tmp_path):
    lm = _lm()
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        want = lm.generate(prompt, **GEN)[0, 5:].tolist()
    trace = tt.trace(lm.generate, prompt, input_kwargs=GEN, tokenizer=Words(),
                     out=str(tmp_path / "t.sqlite"), kernels="off")
    assert [r.id for r in trace.tokens] == want  # the last from generate's output
    assert [r.text for r in trace.tokens] == [f" w{i}" for i in want]
    assert trace.prompt == " w1 w2 w3 w4 w5"
    assert trace.generated == "".join(f" w{i}" for i in want)
    assert trace.meta["tokenizer"] == "tokenizer="


def test_a_batch_keeps_each_sequence_and_the_report_counts_them(tmp_path):
    lm = _lm()
    prompt = torch.tensor([[1, 2, 3, 4, 5], [5, 4, 3, 2, 1]])
    with torch.no_grad():
        want = lm.generate(prompt, **GEN)[:, 5:].tolist()
    path = str(tmp_path / "b.sqlite")
    trace = tt.trace(lm.generate, prompt, input_kwargs=GEN, tokenizer=Words(), out=path,
                     kernels="off")
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT sequence, token, id FROM token_text WHERE text IS NOT NULL "
                           "AND token > 0 ORDER BY sequence, token").fetchall()
    assert [[i for s, _, i in rows if s == seq] for seq in (0, 1)] == want
    assert [r.id for r in trace.tokens] == want[0]  # the first sequence's
    from tokentrace._common import loader
    report = subprocess.run([loader.find_program(), "report", path], capture_output=True,
                            text=True, timeout=60)
    assert f'" w{want[0][0]}" (+1)' in report.stdout, report.stdout


def test_without_a_tokenizer_the_ids_are_kept_and_the_meta_says_so(tmp_path):
    lm = _lm()
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    trace = tt.trace(lm.generate, prompt, input_kwargs=GEN, out=str(tmp_path / "n.sqlite"),
                     kernels="off")
    assert all(r.id is not None and r.text is None for r in trace.tokens)
    assert trace.prompt is None and trace.generated is None
    assert trace.meta["tokenizer"].startswith("none found")


def test_a_hand_written_loop_has_its_tokens_and_the_last_when_it_returns_the_ids(tmp_path):
    """Without generate the last token's id is read by no call: taken from what the traced
    function returns when that is the ids (prompt and tokens), else that token has none."""
    lm = _lm()

    def loop(ids, give_back=True):
        with torch.no_grad():
            for _ in range(3):
                nxt = lm(ids).logits[:, -1].argmax(-1, keepdim=True)
                ids = torch.cat([ids, nxt], dim=1)
        return ids if give_back else None

    out = loop(torch.tensor([[1, 2, 3]]))
    kept = tt.trace(loop, torch.tensor([[1, 2, 3]]), model=lm, tokenizer=Words(),
                    out=str(tmp_path / "l.sqlite"), kernels="off")
    assert [r.id for r in kept.tokens] == out[0, 3:].tolist()
    cut = tt.trace(loop, (torch.tensor([[1, 2, 3]]), False), model=lm, tokenizer=Words(),
                   out=str(tmp_path / "m.sqlite"), kernels="off")
    assert [r.id for r in cut.tokens] == out[0, 3:5].tolist() + [None]
    assert cut.tokens[2].text is None and cut.tokens[1].text == f" w{out[0, 4].item()}"


def test_a_tokenizer_that_fails_leaves_the_ids_and_never_the_trace(tmp_path):
    class Broken:
        def decode(self, ids, skip_special_tokens=False):
            raise RuntimeError("no vocabulary")

    lm = _lm()
    with pytest.raises(RuntimeError, match="no vocabulary"):
        Broken().decode([1])
    trace = tt.trace(lm.generate, torch.tensor([[1, 2, 3]]), input_kwargs=GEN,
                     tokenizer=Broken(), out=str(tmp_path / "f.sqlite"), kernels="off")
    assert len(trace.tokens) == 4 and all(r.id is not None for r in trace.tokens)
    assert "could not" in trace.meta["tokenizer"]


def _saved_tokenizer(directory):
    """A word-level tokenizer of ids 0..63 ("w0" ... "w63"), saved as transformers saves one."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast
    core = Tokenizer(WordLevel({f"w{i}": i for i in range(64)}, unk_token="w0"))
    core.pre_tokenizer = WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=core).save_pretrained(str(directory))
    return str(directory)


JOB = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
lm = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2,
                                bos_token_id=None, eos_token_id=None)).eval()
out = lm.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3, min_new_tokens=3,
                  do_sample=False)
print("IDS", out[0, 3:].tolist())
"""


def test_tokentrace_run_takes_the_tokenizer_it_is_given(tmp_path):
    import json
    import os
    import sys

    from tokentrace._common import loader
    from tt_testutil import PYDIR
    tokenizer = _saved_tokenizer(tmp_path / "tok")
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYDIR, os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "run.sqlite"
    res = subprocess.run([loader.find_program(), "run", "--kernels", "off", "--tokenizer",
                          tokenizer, "--out", str(out), "--", sys.executable, str(job)],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    ids = json.loads(res.stdout.split("IDS", 1)[1])
    trace = tt.load(str(out))
    assert [r.id for r in trace.tokens] == ids  # the last from generate's output, wrapped
    from transformers import AutoTokenizer
    words = AutoTokenizer.from_pretrained(tokenizer)
    assert trace.generated.split() == words.decode(ids).split()
    assert trace.meta["tokenizer"] == f"--tokenizer {tokenizer}"
    bad = subprocess.run([loader.find_program(), "run", "--tokenizer", str(tmp_path / "nope"),
                          "--", sys.executable, str(job)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert bad.returncode == 2 and "--tokenizer=" in bad.stderr and "IDS" not in bad.stdout


def test_reading_the_ids_runs_no_op_that_op_records_see(tmp_path):
    """The ids are read from the tensor's memory: op records (and their TorchLens labels) see
    the model's ops only (a .tolist() or .numpy() there added aten::detach, aten::to,
    aten::resolve_conj and aten::resolve_neg to every token, and renumbered its ops)."""
    lm = _lm()
    with torch.no_grad():
        trace = tt.trace(lm.generate, torch.tensor([[1, 2, 3]]), input_kwargs=GEN, ops=True,
                         out=str(tmp_path / "o.sqlite"), kernels="off")
    names = {op.name for k in (1, 2) for op in trace[f"self:{k}"].ops}
    assert not names & {"aten::resolve_conj", "aten::resolve_neg", "aten::detach"}, names
    assert all(r.id is not None for r in trace.tokens)


def test_ids_tokentrace_cannot_read_are_counted_and_the_job_goes_on(tmp_path):
    """Ids tokentrace cannot read (int16 here: it reads int64 and int32) never stop the job:
    the loop runs its 3 tokens as untraced, and the trace counts each failed read."""
    lm = _lm()

    class Small(torch.nn.Module):  # a root that takes its ids as int16
        def __init__(self):
            super().__init__()
            self.lm = lm

        def forward(self, input_ids):
            return self.lm(input_ids.long()).logits

    small = Small()

    def loop(ids):
        with torch.no_grad():
            for _ in range(3):
                nxt = small(ids)[:, -1].argmax(-1, keepdim=True)
                ids = torch.cat([ids, nxt.to(ids.dtype)], dim=1)
        return ids

    want = loop(torch.tensor([[1, 2, 3]], dtype=torch.int16))
    trace = tt.trace(loop, torch.tensor([[1, 2, 3]], dtype=torch.int16), model=small,
                     tokenizer=Words(), out=str(tmp_path / "t.sqlite"), kernels="off")
    assert len(want[0]) == 6 and [r.id for r in trace.tokens] == [None] * 3
    assert trace.losses["token_ids_unread"] == 3
