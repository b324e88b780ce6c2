"""TorchLens's run arguments mapped onto tokentrace's: capture=CaptureOptions(...),
episode=EpisodeSpec(...), chunk_size= (tt.trace, tt.record; _api.py calls these)."""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ._common import is_op_label, label
from ._errors import fail
from .options import CaptureOptions, EpisodeSpec, mapped_capture_fields


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


def chunked(fn, model, args, kwargs, chunk_size, chunk_paths):
    """fn run once per chunk of its batch (dim 0 of its one positional tensor), in one trace:
    each chunk is one call of the root, so one token. TorchLens's chunk_size= (forward only)."""
    if chunk_paths is not None:
        fail("chunk_paths= is not supported: tokentrace splits the one positional tensor "
             "argument along dim 0; pass the tensor to split as the first argument")
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        fail(f"chunk_size= takes an int >= 1, got {chunk_size!r}")
    if not isinstance(fn, torch.nn.Module) or fn is not model:
        fail("chunk_size= splits the batch of a model's forward: pass the model itself "
             "(tt.trace(model, x, chunk_size=...)); generate and other functions run their own "
             "loops")
    tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() > 0]
    if len(tensors) != 1:
        fail(f"chunk_size= needs exactly one positional tensor argument with a batch "
             f"dimension to split; got {len(tensors)}")
    at = tensors[0]
    pieces = torch.split(args[at], chunk_size, dim=0)

    def run_chunks(*_args, **_kwargs):
        outs = [fn(*args[:at], piece, *args[at + 1:], **kwargs) for piece in pieces]
        return outs
    return run_chunks, len(pieces)
