"""Text prompts: tokenize with a tokenizer found without network access (saved next to the
model, or inside the GGUF file it was loaded from)."""

import os

from .._errors import fail

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model",
                    "spiece.model", "vocab.txt")


def is_text(inputs):
    return isinstance(inputs, str) or (
        isinstance(inputs, (list, tuple)) and inputs and all(isinstance(x, str) for x in inputs))


def _local_dirs(model):
    seen = []
    for candidate in (getattr(model, "name_or_path", None),
                      getattr(getattr(model, "config", None), "_name_or_path", None)):
        if isinstance(candidate, str) and candidate and os.path.isdir(candidate):
            if candidate not in seen:
                seen.append(candidate)
    return seen


_LOADED: dict = {}  # (directory, gguf file or None) -> tokenizer: each is loaded once a process


def _load(directory, gguf=None):
    """AutoTokenizer.from_pretrained(directory[, gguf_file=gguf]), offline, once a process (a
    GGUF file's tokenizer takes seconds to load)."""
    key = (os.path.abspath(directory), gguf)
    if key not in _LOADED:
        from transformers import AutoTokenizer
        kwargs = {"gguf_file": gguf} if gguf is not None else {}
        _LOADED[key] = AutoTokenizer.from_pretrained(directory, local_files_only=True, **kwargs)
    return _LOADED[key]


def _ggufs(directory):
    return sorted(n for n in os.listdir(directory) if n.endswith(".gguf"))


def tokenizer_from_path(path):
    """The tokenizer saved at `path` (a directory, or a GGUF file: the tokenizer it carries),
    loaded without network access."""
    if os.path.isfile(path) and path.endswith(".gguf"):
        return _load(os.path.dirname(os.path.abspath(path)), os.path.basename(path))
    if not os.path.isdir(path):
        fail(f"no tokenizer at {path}: give a directory with a saved tokenizer, or a .gguf file")
    if not any(os.path.exists(os.path.join(path, f)) for f in _TOKENIZER_FILES) and _ggufs(path):
        return _load(path, _ggufs(path)[0])
    return _load(path)


def locate_tokenizer(model):
    """(tokenizer, where it was found) for `model`, or (None, why not): a tokenizer saved next
    to the model, or the one inside the GGUF file it was loaded from (transformers'
    from_pretrained(dir, gguf_file=...): the model directory's .gguf file). Never the network.
    A tokenizer that is there but cannot be loaded raises."""
    for directory in _local_dirs(model):
        if any(os.path.exists(os.path.join(directory, f)) for f in _TOKENIZER_FILES):
            return _load(directory), f"found next to the model: {directory}"
        ggufs = _ggufs(directory)
        if ggufs:
            return (_load(directory, ggufs[0]),
                    f"found in the model's GGUF file: {os.path.join(directory, ggufs[0])}")
    return None, "none found next to the model"


def find_tokenizer(model, required=True):
    """The tokenizer locate_tokenizer finds; without one, a TokentraceError that says how to
    give one (required), or (None, why) (not required: then (tokenizer, where))."""
    try:
        found, how = locate_tokenizer(model)
    except Exception as exc:
        if not required:
            raise
        fail(f"the tokenizer next to {type(model).__name__} could not be loaded ({exc}); "
             f"pass tokenizer=... explicitly")
    if not required:
        return found, how
    if found is None:
        fail(f"the prompt is text but no tokenizer was found for {type(model).__name__} "
             f"(tokentrace looks only next to a locally saved model, or in the GGUF file it was "
             f"loaded from, never on the network); pass "
             f"tokenizer=AutoTokenizer.from_pretrained(...) or give token ids as a tensor")
    return found


def tokenize(model, text, tokenizer):
    if tokenizer is None:
        tokenizer = find_tokenizer(model)
    if not callable(tokenizer):
        fail(f"tokenizer must be a callable tokenizer (e.g. AutoTokenizer.from_pretrained(...)), "
             f"got {type(tokenizer).__name__}")
    batch = not isinstance(text, str)
    if batch and getattr(tokenizer, "pad_token", "x") is None:
        tokenizer.pad_token = tokenizer.eos_token
    encoded = tokenizer(list(text) if batch else text, return_tensors="pt", padding=batch)
    device = _device_of(model)
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in dict(encoded).items()}


def _device_of(model):
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return "cpu"
