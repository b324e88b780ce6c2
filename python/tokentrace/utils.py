"""TorchLens's torchlens.utils helpers that tokentrace has: list_modules(model) and
list_ops(model, x, mode=) (one traced forward, its ops counted by type)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch

from ._errors import fail


def list_modules(model: torch.nn.Module) -> list[tuple[str, type[torch.nn.Module]]]:
    """[(address, class)] of every module of `model`, the root as "self" (TorchLens's)."""
    if not isinstance(model, torch.nn.Module):
        fail(f"list_modules() takes a torch.nn.Module, got {type(model).__name__}")
    return [(address or "self", type(m)) for address, m in model.named_modules()]


def _ops_in(model: torch.nn.Module, x: Any, mode: str) -> list[tuple[str, int]]:
    from ._api import trace
    from ._common import where
    modes = {m: m.training for m in model.modules()}
    if mode == "eval":
        model.eval()
    elif mode == "train":
        model.train()
    try:
        result = trace(model, x, kernels="off", ops=True)
        counts = Counter(op.layer_type for op in result.find_sites(where(lambda op: True)))
        result.cleanup()
    finally:
        for m, training in modes.items():
            m.training = training
    return sorted(counts.items())


def list_ops(model: torch.nn.Module, x: Any, mode: str = "current"
             ) -> list[tuple[str, int]] | dict[str, list[tuple[str, int]]]:
    """[(op type, count)] of the ops one forward of `model` on `x` runs, sorted by type, as
    TorchLens's (the types are TorchLens's: "linear", "relu"); mode: "current" (the model as
    it is), "eval", "train", or "both" ({"eval": ..., "train": ...}); the model's modes are
    restored after."""
    if not isinstance(model, torch.nn.Module):
        fail(f"list_ops() takes a torch.nn.Module, got {type(model).__name__}")
    if mode == "both":
        return {"eval": _ops_in(model, x, "eval"), "train": _ops_in(model, x, "train")}
    if mode not in ("current", "eval", "train"):
        fail(f"list_ops(mode=) takes 'current', 'eval', 'train' or 'both', got {mode!r}")
    return _ops_in(model, x, mode)
