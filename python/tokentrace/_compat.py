"""TorchLens's run arguments mapped onto tokentrace's: capture=CaptureOptions(...),
episode=EpisodeSpec(...), chunk_size= (tt.trace, tt.record; _api.py calls these)."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ._common import is_op_label, label
from ._errors import fail
from .options import CaptureOptions, DiskTarget, EpisodeSpec, mapped_capture_fields


@dataclass
class RunOptions:
    save: Any
    model: Any
    seed: int | None = None
    no_grad: bool = False
    n_steps: int | None = None

    @contextlib.contextmanager
    def around_run(self):
        if self.seed is not None:
            torch.manual_seed(self.seed)
        with torch.no_grad() if self.no_grad else contextlib.nullcontext():
            yield

    def check_steps(self, result, stacklevel):
        if self.n_steps is not None and result.num_tokens != self.n_steps:
            warnings.warn(f"tokentrace: EpisodeSpec(n_steps={self.n_steps}) but the run had "
                          f"{result.num_tokens} steps (calls of the stepped module)",
                          RuntimeWarning, stacklevel=stacklevel)


def run_options(capture, episode, save, model, call):
    """The save= and model= a run uses, with what capture= and episode= add; one error for
    an option tokentrace does not have."""
    options = RunOptions(save, model)
    if capture is not None:
        if not isinstance(capture, CaptureOptions):
            fail(f"{call}(capture=) takes tt.options.CaptureOptions(...), got "
                 f"{type(capture).__name__}")
        bad = capture.unsupported()
        if bad:
            fail(f"CaptureOptions({bad[0]}=...) is a TorchLens option tokentrace does not have; "
                 f"the ones it maps: {', '.join(mapped_capture_fields())} "
                 f"(docs/from-torchlens.md)")
        given = capture.explicit()
        if "emit_nvtx" in given and not given["emit_nvtx"]:
            fail("CaptureOptions(emit_nvtx=False): tokentrace always emits one NVTX range per "
                 "module call (that is how it records); drop emit_nvtx")
        if "detach_saved_activations" in given and not given["detach_saved_activations"]:
            fail("CaptureOptions(detach_saved_activations=False): tokentrace's saved outputs "
                 "are always detached copies; drop it")
        if "layers_to_save" in given:
            if save is not None:
                fail(f"{call}() got save= and CaptureOptions(layers_to_save=); give the sites "
                     f"to save once")
            layers = given["layers_to_save"]
            if layers == "all":
                options.save = "*"
            elif layers in (None, "none"):
                options.save = None
            elif isinstance(layers, (list, tuple, set)) or isinstance(layers, str):
                # TorchLens's layer labels (relu_1_2, linear_1:2) name ops: tt.label of each.
                items = [layers] if isinstance(layers, str) else list(layers)
                items = [label(x) if isinstance(x, str) and is_op_label(x) else x for x in items]
                options.save = items[0] if isinstance(layers, str) else items
            else:
                fail(f"CaptureOptions(layers_to_save=) takes 'all', 'none', or site names; got "
                     f"{type(layers).__name__}")
        if given.get("random_seed") is not None:
            seed = given["random_seed"]
            if not isinstance(seed, int) or isinstance(seed, bool):
                fail(f"CaptureOptions(random_seed=) takes an int, got {seed!r}")
            options.seed = seed
        options.no_grad = bool(given.get("inference_only", False))
    if episode is not None:
        if not isinstance(episode, EpisodeSpec):
            fail(f"{call}(episode=) takes tt.options.EpisodeSpec(...), got "
                 f"{type(episode).__name__}")
        bad = episode.unsupported()
        if bad:
            fail(f"EpisodeSpec({bad[0]}=...) is a TorchLens option tokentrace does not have; "
                 f"it maps stepped_module (the root) and n_steps (the steps expected)")
        stepped = episode.stepped_module
        if stepped is not None:
            if not isinstance(stepped, torch.nn.Module):
                fail(f"EpisodeSpec(stepped_module=) takes a torch.nn.Module, got "
                     f"{type(stepped).__name__}")
            if model is not None and model is not stepped:
                fail(f"{call}() got model= and EpisodeSpec(stepped_module=); give the root "
                     f"once")
            options.model = stepped
        n = episode.n_steps
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
            fail(f"EpisodeSpec(n_steps=) takes an int >= 1, got {n!r}")
        options.n_steps = n
    return options


_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*|\d+)|\[(\d+|'[^']*'|\"[^\"]*\")\]")


def _chunk_path(path):
    """TorchLens's chunk path ("0", 1, "0.mask", '1["ids"]', "0[2]") as a tuple of parts, the
    first a positional argument's index."""
    if isinstance(path, int) and not isinstance(path, bool) and path >= 0:
        return (path,)
    text = str(path) if isinstance(path, str) else None
    head = re.match(r"\d+", text or "")
    if head is None:
        fail(f"chunk_paths= takes paths that start with a positional argument's index ('0', "
             f"1, '0.mask', '1[\"ids\"]'), got {path!r}")
    parts: list[Any] = [int(head.group(0))]
    rest = text[head.end():]
    while rest:
        m = _PATH_PART.match(rest)
        if m is None:
            fail(f"chunk path {text!r}: after the index, .name, .0, [0] or [\"key\"] parts")
        part = m.group(1) if m.group(1) is not None else m.group(2)
        parts.append(int(part) if part.isdigit() else part.strip("'\""))
        rest = rest[m.end():]
    return tuple(parts)


def _get(roots, path):
    value = roots
    for part in path:
        try:
            value = value[part] if not isinstance(part, str) or isinstance(value, dict) \
                else getattr(value, part)
        except (KeyError, IndexError, AttributeError, TypeError):
            fail(f"chunk path {_show(path)} names nothing in the inputs")
    return value


def _replace(value, path, new):
    if not path:
        return new
    part, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        copy[part] = _replace(value[part], rest, new)
        return copy
    if isinstance(value, (list, tuple)) and isinstance(part, int):
        items = list(value)
        items[part] = _replace(value[part], rest, new)
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    import copy as copying
    clone = copying.copy(value)
    setattr(clone, part, _replace(getattr(value, part), rest, new))
    return clone


def _show(path):
    return str(path[0]) + "".join(f".{p}" for p in path[1:])


def chunked(fn, model, args, kwargs, chunk_size, chunk_paths):
    """fn run once per chunk of its batch, in one trace: each chunk is one call of the root,
    so one token. TorchLens's chunk_size= (forward only): the one positional tensor with a
    batch dimension is split along dim 0; chunk_paths= names the tensors to split together
    (paths into the positional arguments: "0", "1.mask", '0["ids"]')."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        fail(f"chunk_size= takes an int >= 1, got {chunk_size!r}"
             + ("; chunk_paths= names what chunk_size= splits" if chunk_size is None else ""))
    if not isinstance(fn, torch.nn.Module) or fn is not model:
        fail("chunk_size= splits the batch of a model's forward: pass the model itself "
             "(tt.trace(model, x, chunk_size=...)); generate and other functions run their own "
             "loops")
    if chunk_paths is None:
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() > 0]
        if len(tensors) != 1:
            fail(f"chunk_size= needs exactly one positional tensor argument with a batch "
                 f"dimension to split, got {len(tensors)}; name the ones to split with "
                 f"chunk_paths=['0', '1', ...]")
        paths = [(tensors[0],)]
    else:
        if isinstance(chunk_paths, (str, int)) or not hasattr(chunk_paths, "__iter__"):
            fail(f"chunk_paths= takes a list of paths such as ['0', '1'], got {chunk_paths!r}")
        paths = [_chunk_path(p) for p in chunk_paths]
        if not paths:
            fail("chunk_paths= names no input: give at least one path such as '0'")
    roots = tuple(args)
    sizes = []
    for path in paths:
        value = _get(roots, path)
        if not isinstance(value, torch.Tensor) or value.dim() == 0:
            fail(f"chunk path {_show(path)} must name a tensor with a batch dimension, got "
                 f"{type(value).__name__}")
        sizes.append(value.shape[0])
    if len(set(sizes)) != 1:
        fail(f"chunk_paths= tensors must have one batch size, got "
             f"{', '.join(f'{_show(p)}: {n}' for p, n in zip(paths, sizes))}")
    total = sizes[0]
    pieces = []
    for start in range(0, total, chunk_size):
        chunk = roots
        for path in paths:
            chunk = _replace(chunk, path, _get(roots, path)[start:start + chunk_size])
        pieces.append(chunk)

    def run_chunks(*_args, **_kwargs):
        return [fn(*piece, **kwargs) for piece in pieces]
    return run_chunks, len(pieces)


# TorchLens's trace arguments tokentrace takes and needs nothing for, with the values they
# accept (lookback= keeps recent ops for tl.preceded_by: op records keep every op's parents).
_TAKEN = {
    "lookback": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "lookback_payload_policy": lambda v: isinstance(v, str),
}
# TorchLens's trace arguments tokentrace does not have: what to do instead.
_REFUSED = {
    "input_size": "tokentrace runs the model on a real input: pass one",
    "backend": "tokentrace traces PyTorch models only",
}


def halt_rule(halt, call):
    """TorchLens's halt=: an edit rule (tt.when) that ends the run after the first op or
    module call the selector chooses, recorded and saved (_common/halt.py); None without
    halt=."""
    if halt is None:
        return None
    from ._common import HALT, SiteQuery, as_selector
    from ._edit import when
    selector = as_selector(halt, "halt=")
    if isinstance(selector, SiteQuery) and selector.live_problem():
        fail(f"{call}(halt={selector!r}): {selector.live_problem()}")
    return when(selector, HALT.request)


def storage_out(given, out, call):
    """out= from TorchLens's storage=tt.to_disk(path) (or streaming=), taken out of `given`."""
    for name in ("storage", "streaming"):
        if name not in given:
            continue
        target = given.pop(name)
        if target is None:
            continue
        if not isinstance(target, DiskTarget):
            fail(f"{call}({name}=) takes tt.to_disk(path) (the trace file's path), got "
                 f"{type(target).__name__}")
        if out is not None:
            fail(f"{call}() got out= and {name}=tt.to_disk(...); give the trace file's path "
                 f"once")
        if os.path.exists(target.path):
            fail(f"{call}({name}=tt.to_disk({target.path!r})): the path exists; TorchLens's "
                 f"to_disk takes a new path, pass another")
        out = target.path
    return out


def capture_with(capture, given, call):
    """capture= with CaptureOptions fields given as keyword arguments of trace/record (TorchLens
    takes both spellings); a keyword that is no such field is one error."""
    for name in [n for n in given if n in _TAKEN]:
        value = given.pop(name)
        if not _TAKEN[name](value):
            fail(f"{call}({name}=) takes {'an int >= 0' if name == 'lookback' else 'a str'}, "
                 f"got {value!r}")
    refused = next((n for n in given if n in _REFUSED), None)
    if refused is not None:
        fail(f"{call}({refused}=) is a TorchLens argument tokentrace does not have; instead: "
             f"{_REFUSED[refused]}")
    if not given:
        return capture
    fields = CaptureOptions._defaults
    unknown = [name for name in given if name not in fields]
    if unknown:
        fail(f"{call}() got an unexpected keyword argument {unknown[0]!r}: it takes "
             f"tokentrace's arguments and TorchLens's CaptureOptions fields "
             f"({', '.join(mapped_capture_fields())}, ...)")
    merged = dict(capture.explicit()) if isinstance(capture, CaptureOptions) else {}
    if capture is not None and not isinstance(capture, CaptureOptions):
        fail(f"{call}(capture=) takes tt.options.CaptureOptions(...), got "
             f"{type(capture).__name__}")
    both = sorted(set(merged) & set(given))
    if both:
        fail(f"{call}() got {both[0]}= and CaptureOptions({both[0]}=); give it once")
    merged.update(given)
    return CaptureOptions(**merged)
