"""Text prompts: tokenize with a tokenizer found without network access."""

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


def find_tokenizer(model):
    for directory in _local_dirs(model):
        if any(os.path.exists(os.path.join(directory, f)) for f in _TOKENIZER_FILES):
            try:
                from transformers import AutoTokenizer
                return AutoTokenizer.from_pretrained(directory, local_files_only=True)
            except Exception as exc:
                fail(f"the tokenizer files in {directory} could not be loaded ({exc}); "
                     f"pass tokenizer=... explicitly")
    fail(f"the prompt is text but no tokenizer was found for {type(model).__name__} (tokentrace "
         f"looks only next to a locally saved model, never on the network); pass "
         f"tokenizer=AutoTokenizer.from_pretrained(...) or give token ids as a tensor")


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
