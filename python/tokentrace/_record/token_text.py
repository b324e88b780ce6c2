"""Each token's generated ids, and their text: what a per-token trace of text generation shows
next to every token (tt.load(f).tokens[k].text, `tokentrace report`, the plot, the export).

Token k's id is what the root's call k produced: the id the root's next call (k + 1) reads as
the last position of its input_ids (decoder_input_ids for an encoder-decoder), or, for the last
token, which no call reads, generate's output when tokentrace sees it (tt.trace of a generate,
and every transformers generate of a preloaded job). The prompt is the first root call's ids
(token 0). Each sequence of a batch has its own rows.

The ids go to the trace's writer as they are read (one row per sequence, with the call that
read them), so a killed job keeps them as it keeps its calls. Their text needs a tokenizer:
given (tt.trace(tokenizer=), `tokentrace run --tokenizer PATH`) or found next to the model (a
saved tokenizer, or the one a GGUF file carries); it is loaded at the end of the run, off the
job's steps (a GGUF tokenizer takes seconds), and every token's text is handed over then, in
rows beside the ids (readers prefer the row with text). Without a tokenizer the trace keeps
the ids.

The ids are read from the tensor's memory (its data pointer and strides), which runs no ATen
op: op records (and their TorchLens labels) never see tokentrace's reads. On a GPU nothing is
read inside a token (a copy would be a device op, and a wait, of tokentrace's own): every
token's ids come from generate's output at the end, so a job killed on a GPU keeps no ids, and
a hand-written loop there has none. Not yet run on a GPU.
"""

from __future__ import annotations

import ctypes
import os

from .._common import add_meta, add_rows, parameter_names
from .prompt import find_tokenizer, tokenizer_from_path

_CONTEXT = 6  # ids before a token that its text is decoded with (a leading space, a merge)
COLUMNS = ("token", "sequence", "id", "text")


class TokenTexts:
    """The root's token ids, for one recording. `current_token()`: the recorder's token of the
    open call. `tokenizer`: a tokenizer, a path to load one from, or None (then looked for next
    to the model at the end). `say`: where a problem is said (None: warnings)."""

    def __init__(self, current_token, tokenizer=None, say=None):
        self.current_token = current_token
        self.tokenizer = tokenizer
        self.tokenizer_how = "tokenizer=" if tokenizer is not None else ""
        self.say = say
        self.model = None
        self.ids: dict[int, list[int]] = {}  # token -> one id per sequence (0: the prompt's)
        self.prompt: list[list[int]] = []    # the prompt's ids, per sequence
        self.on_device = False  # the root reads ids on a device: taken from generate's output
        self.prompt_length = 0
        self.outputs: list = []  # generate's outputs on a device, read at the end
        self.failed = 0
        self.last_call = 0  # the token of the last root call seen

    def hook(self, forward):
        """The root's input callable(*args, **kwargs): its ids, read inside the call."""
        names = parameter_names(forward)

        import torch
        untracked = torch._C.DisableTorchFunction  # op saves' and edits' modes see none of it

        def on_input(*args, **kwargs):
            try:
                with untracked():
                    self.see(names, args, kwargs)
            except Exception:  # never into the job
                self.failed += 1
        return on_input

    def see(self, names, args, kwargs):
        ids = kwargs.get("decoder_input_ids")
        if ids is None:
            ids = kwargs.get("input_ids")
        if ids is None:
            for name, value in zip(names, args):
                if name in ("input_ids", "decoder_input_ids"):
                    ids = value
        if ids is None or getattr(ids, "dim", lambda: 0)() != 2 or ids.dtype.is_floating_point:
            return
        token = self.current_token()
        if token <= 0:
            return
        self.last_call = token
        if ids.device.type != "cpu":
            # Read from generate's output at the end instead: a copy here would be a device op
            # (and a wait) inside the token, and an ATen op among the model's own.
            self.on_device = True
            if not self.prompt_length:
                self.prompt_length = ids.shape[1]
            return
        if not self.prompt:  # the first root call reads the prompt
            self.prompt = _read_ids(ids, last_only=False)
            self.prompt_length = len(self.prompt[0])
            add_rows("token_text", [(0, s, None, None) for s in range(len(self.prompt))],
                     COLUMNS)
            return
        self._hand(token - 1, [row[0] for row in _read_ids(ids, last_only=True)])

    def note_output(self, model, output):
        """generate's output (ids [batch, length], or an object with .sequences): the last
        token's ids, which no root call reads, and on a device every token's (they were not
        read there). Taken when its length is the prompt's plus one id a token (a generate
        whose calls are not one token each, a beam search, is left)."""
        if self.model is not None and model is not self.model:
            return
        sequences = getattr(output, "sequences", output)
        if getattr(sequences, "dim", lambda: 0)() != 2 or getattr(sequences, "dtype", None) \
                is None or sequences.dtype.is_floating_point:
            return
        last = self.last_call
        if last <= 0 or not self.prompt_length or \
                sequences.shape[1] != self.prompt_length + last:
            return
        if self.on_device:
            self.outputs.append(sequences)  # read at the end, off the job's steps
        elif last not in self.ids and len(sequences) == len(self.prompt):
            self._hand(last, [row[0] for row in _read_ids(sequences, last_only=True)])

    def _hand(self, token, ids):
        self.ids[token] = ids
        add_rows("token_text", [(token, s, int(i), None) for s, i in enumerate(ids)], COLUMNS)

    def _from_outputs(self):
        """On a device: the prompt and every token from generate's last output."""
        sequences = self.outputs[-1].cpu().tolist()
        self.prompt = [row[:self.prompt_length] for row in sequences]
        add_rows("token_text", [(0, s, None, None) for s in range(len(self.prompt))], COLUMNS)
        for token in range(1, self.last_call + 1):
            self._hand(token, [row[self.prompt_length + token - 1] for row in sequences])

    def finish(self, model):
        """At the end of the run: the copies still in flight, then every token's text when a
        tokenizer is known, and the meta saying which."""
        if self.on_device and self.outputs and not self.ids:
            self._from_outputs()
        if not self.prompt:
            return
        tokenizer = self._tokenizer(model)
        if tokenizer is None:
            add_meta({"tokenizer": "none found (ids only; tokentrace run --tokenizer PATH or "
                                   "tt.trace(tokenizer=) gives one)"})
            return
        try:
            rows = self._texts(tokenizer)
        except Exception as exc:  # a tokenizer that cannot decode these ids: they stay
            how = f"{self.tokenizer_how}: could not decode the ids ({exc}); ids only"
            if self.say is not None:
                self.say(f"tokentrace: the tokenizer ({how})")
            add_meta({"tokenizer": how})
            return
        add_rows("token_text", rows, COLUMNS)
        add_meta({"tokenizer": self.tokenizer_how})

    def _texts(self, tokenizer):
        """Each sequence's prompt and tokens with their text: token_text rows."""
        rows = []
        for s, prompt in enumerate(self.prompt):
            rows.append((0, s, None, _decode(tokenizer, prompt)))
            context = list(prompt[-_CONTEXT:])
            for token in sorted(t for t in self.ids if t > 0):
                ids = self.ids[token]
                if s >= len(ids):
                    continue
                rows.append((token, s, int(ids[s]), _piece(tokenizer, context, int(ids[s]))))
                context = (context + [int(ids[s])])[-_CONTEXT:]
        return rows

    def _tokenizer(self, model):
        tokenizer = self.tokenizer
        try:
            if isinstance(tokenizer, (str, os.PathLike)):
                self.tokenizer_how = f"--tokenizer {os.fspath(tokenizer)}"
                return tokenizer_from_path(os.fspath(tokenizer))
            if tokenizer is not None:
                return tokenizer
            found, how = find_tokenizer(model, required=False)
            self.tokenizer_how = how
            return found
        except Exception as exc:  # a tokenizer that cannot be loaded: the ids stay
            self.tokenizer_how = f"could not be loaded ({exc}); ids only"
            if self.say is not None:
                self.say(f"tokentrace: the tokenizer {self.tokenizer_how}")
            return None


_CTYPES = {"torch.int64": ctypes.c_int64, "torch.int32": ctypes.c_int32}


def _read_ids(ids, last_only):
    """The ids of a 2-d integer CPU tensor, read from its memory (its data pointer and strides):
    no ATen op runs, so op records and their TorchLens labels never see tokentrace's reads (a
    .tolist() or .numpy() runs several). [[id, ...] per row]: every column, or the last."""
    ctype = _CTYPES.get(str(ids.dtype))
    if ctype is None:
        raise TypeError(f"token ids of dtype {ids.dtype}")
    base, size = ids.data_ptr(), ids.element_size()
    rows, columns = ids.shape
    row_stride, column_stride = ids.stride()
    wanted = [columns - 1] if last_only else range(columns)
    return [[ctype.from_address(base + (r * row_stride + c * column_stride) * size).value
             for c in wanted] for r in range(rows)]


def _decode(tokenizer, ids):
    return tokenizer.decode(list(ids), skip_special_tokens=False)


def _piece(tokenizer, context, token_id):
    """The text `token_id` adds after `context` (a leading space, bytes merged with the ids
    before it), as a streamer shows it."""
    before = _decode(tokenizer, context)
    after = _decode(tokenizer, context + [token_id])
    if after.startswith(before):
        return after[len(before):]
    return _decode(tokenizer, [token_id])
