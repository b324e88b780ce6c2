"""TorchLens's option objects, for trace(..., capture=CaptureOptions(...)) and
trace(..., episode=EpisodeSpec(...)): the options tokentrace has are mapped to its own
arguments; one it does not have, set to anything but TorchLens's default, is one error that
names it and says what is accepted.

    tt.trace(model, x, capture=tt.options.CaptureOptions(layers_to_save=["1"], random_seed=0))
    tt.trace(loop, x, episode=tt.options.EpisodeSpec(stepped_module=model, n_steps=8))
"""

from __future__ import annotations

from typing import Any

from ._errors import fail

# TorchLens's CaptureOptions fields and their defaults (TorchLens 2.3x).
_CAPTURE_DEFAULTS: dict[str, Any] = {
    "layers_to_save": "all", "transform": None, "save_raw_input": "small",
    "batch_render": "auto", "output_transform": None, "output_style": None,
    "output_head": None, "save_raw_output": "small", "layer_visualizers": None,
    "save_visualizations": False, "keep_orphans": False, "output_device": "same",
    "save_arg_values": False, "save_grads": None, "capture_tensor_grad_hooks": True,
    "save_code_context": False, "save_rng_states": False, "random_seed": None,
    "source_context_lines": 7, "optimizer": None, "compute_input_output_distances": True,
    "detach_saved_activations": False, "recurrence_detection": True,
    "intervention_ready": False, "capture_container_structure": False, "hooks": None,
    "unwrap_when_done": False, "verbose": False, "backward_ready": False,
    "inference_only": False, "name": None, "cache": False, "cache_dir": None,
    "module_filter": None, "stop_after": None, "jax_control_flow": "unroll",
    "jax_max_control_flow_unroll": 64, "module_identity_mode": None, "payload_policy": None,
    "save_preview": False, "emit_nvtx": False, "measure_python_peak_memory": False,
    "save_budget": "auto", "distributed_witness": "none", "raise_on_nan": False,
    "track_nonfinite": False, "structure_only": False,
}

# What tokentrace does with the fields it has (any value is taken for these).
_CAPTURE_MAPPED = {
    "layers_to_save": "save= ('all': every site; a list of site names; 'none' or None: none)",
    "random_seed": "torch.manual_seed(seed) before the run",
    "inference_only": "the run under torch.no_grad()",
    "capture_container_structure": "always on: inputs by path, outputs' first tensor by path",
    "emit_nvtx": "always on: every module call is an NVTX range",
    "detach_saved_activations": "always on: saved outputs are detached copies",
    "verbose": "no effect (tokentrace prints only warnings)",
    "intervention_ready": "always: a trace's edits run on the model (tt.when(...).bind, "
                          "edits=, trace.run), nothing to prepare",
    "save_code_context": "no effect: tokentrace keeps no source code context of an op",
}

_EPISODE_DEFAULTS: dict[str, Any] = {
    "stepped_module": None, "n_steps": None, "step_axis": -1, "step_output_kind": "tokens",
    "step_output_from": None, "forced_tokens": None, "state": (), "rng": "managed",
    "escalated_from": None, "reason": None, "expected_tokens": None,
    "acknowledge_step_cost": False, "feed": "open", "on_feed_break": "disclose",
    "crossings": (),
}
_EPISODE_MAPPED = ("stepped_module", "n_steps", "acknowledge_step_cost", "reason")


def _unknown(kind, name, known):
    fail(f"{kind}({name}=...): TorchLens has no such option either; its options are "
         f"{', '.join(sorted(known))}")


class _Options:
    _kind = ""
    _defaults: dict[str, Any] = {}

    def __init__(self, **fields: Any) -> None:
        for name in fields:
            if name not in self._defaults:
                _unknown(self._kind, name, self._defaults)
        self._set = dict(fields)  # what the caller set: the only fields that mean anything

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._defaults:
            return self._set.get(name, self._defaults[name])
        raise AttributeError(f"{self._kind} has no field {name!r}")

    def explicit(self) -> dict[str, Any]:
        """The fields the caller set, with their values."""
        return dict(self._set)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._set.items())
        return f"{self._kind}({inner})"


class CaptureOptions(_Options):
    """TorchLens's capture options. Mapped: layers_to_save, random_seed, inference_only,
    capture_container_structure, emit_nvtx, detach_saved_activations, verbose,
    intervention_ready (always ready), save_code_context (no effect); any other field set to
    a value other than TorchLens's default is an error at trace(). Each is also taken as a
    keyword argument of tt.trace / tt.record (capture_container_structure=True), as in
    TorchLens."""

    _kind = "CaptureOptions"
    _defaults = _CAPTURE_DEFAULTS

    def unsupported(self) -> list[str]:
        return [name for name, value in self._set.items()
                if name not in _CAPTURE_MAPPED and value != _CAPTURE_DEFAULTS[name]]


class EpisodeSpec(_Options):
    """TorchLens's spec of a custom generation loop: stepped_module is the root (each of its
    top-level calls is one token), n_steps the number of steps expected (a warning when the
    run had another number). tokentrace records long loops as any trace, so there is no step
    ceiling to acknowledge."""

    _kind = "EpisodeSpec"
    _defaults = _EPISODE_DEFAULTS

    def unsupported(self) -> list[str]:
        return [name for name, value in self._set.items()
                if name not in _EPISODE_MAPPED and value != _EPISODE_DEFAULTS[name]]


def mapped_capture_fields() -> dict[str, str]:
    """{field: what tokentrace does with it} (docs and errors)."""
    return dict(_CAPTURE_MAPPED)


_TO_DISK_OPTIONS = ("retain_in_memory", "include_custom_attributes", "include_buffer_values",
                    "async_writes", "max_pending_bytes")


class DiskTarget:
    """What tt.to_disk(path) returns: trace(..., storage=tt.to_disk(path)) writes the trace
    file at `path` (tokentrace's out=); trace files always stream to disk."""

    def __init__(self, path: Any) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"tt.to_disk({self.path!r})"


def to_disk(path: Any, **options: Any) -> DiskTarget:
    """TorchLens's tl.to_disk(path): the storage= target of a trace, here its trace file's
    path (out=); TorchLens's options (retain_in_memory, async_writes, ...) are taken and do
    nothing (tokentrace streams every trace to its file and saved tensors to shards)."""
    import os
    if not isinstance(path, (str, os.PathLike)):
        fail(f"to_disk() takes a path (str or os.PathLike), got {type(path).__name__}")
    bad = [name for name in options if name not in _TO_DISK_OPTIONS]
    if bad:
        fail(f"to_disk({bad[0]}=...): TorchLens has no such option either; its options are "
             f"{', '.join(_TO_DISK_OPTIONS)}")
    return DiskTarget(path)
