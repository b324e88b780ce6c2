"""TorchLens names that tokentrace does not have, and what to use instead.

`tl.<name>` for a TorchLens user who changed only the import: one clear AttributeError that
says it is a TorchLens feature tokentrace lacks, and what fits instead where something does
(tokentrace/__init__.py and Trace.__getattr__ ask `missing()`). docs/from-torchlens.md lists
the same names (tests/python/test_torchlens_api.py holds the two to each other).
"""

from __future__ import annotations

_GRAPH = "tokentrace records calls and kernels per token, not a graph to draw"
_GRAD = "tokentrace records inference (generation); it keeps no gradients"
_REPLAY = ("tokentrace does not re-run or fork a recorded run; run the model again with "
           "edits: tt.when(...).bind(model) or tt.trace(..., edits=...)")
_SELECTION = "no value-driven site selection; select sites by name with tt.module(...)"

# name -> (what it is in TorchLens, what to use in tokentrace or "")
MODULE_NAMES: dict[str, tuple[str, str]] = {
    # capture variants
    "span": ("a capture helper", "tt.trace(fn, ...) or tt.record(...)"),
    "tap": ("a sparse-recording helper", "tt.record(model, inputs, save=...)"),
    "pluck": ("activation extraction", "tt.record(model, inputs, save=...)"),
    "extract": ("activation extraction", "tt.record(model, inputs, save=...)"),
    "extract_dataset": ("dataset-scale extraction to disk",
                        "tt.record(...) per batch (saved tensors stream to shards)"),
    "load_extraction": ("reading an extraction", "tt.load(path)"),
    "facets": ("semantic facets", ""),
    "clear_capture_cache": ("the cache=True capture cache", "tokentrace keeps no capture cache"),
    "release_model": ("model-lifecycle release", ""),
    "AtenOp": ("an ATen dispatcher-call record", "ops=True (trace['site:k'].ops)"),
    "ActivationLookup": ("a capture result type", "tt.Trace"),
    "CapturedRun": ("a capture result type", "tt.Trace"),
    # graph, drawing, exports
    "show_model_graph": ("graph drawing", _GRAPH + "; `tokentrace plot FILE` draws tokens"),
    "render": ("graph drawing", _GRAPH + "; `tokentrace plot FILE` draws tokens"),
    "show_bundle_graph": ("bundle graph drawing", _GRAPH),
    "export": ("graph and model export",
               "`tokentrace export --chrome OUT FILE` (a Perfetto/Chrome trace)"),
    "viz": ("visualisation", "`tokentrace plot FILE`"),
    "visualization": ("visualisation", "`tokentrace plot FILE`"),
    "hash": ("structural hashes of a model", ""),
    "assert_unchanged": ("a structural-hash tripwire", ""),
    # replay, fork, editing of a recorded run
    "do": ("applying an intervention to a recorded trace", _REPLAY),
    "push": ("propagating an edit over the saved graph", _REPLAY),
    "push_from": ("propagating an edit over the saved graph", _REPLAY),
    "run": ("re-running the model under a spec", _REPLAY),
    "sweep": ("a sweep over interventions", _REPLAY + ", once per setting"),
    "patch_from": ("patching from a donor trace",
                   "tt.swap_with(donor['site:k'].out) in tt.when(...)"),
    "replace_with": ("a value-edit helper", "tt.replace(tensor) or tt.swap_with(tensor)"),
    "resample_ablate": ("resampling ablation", ""),
    "Edit": ("the edit-object type", "the actions of tt.when (tt.zero(), tt.steer(...), ...)"),
    "validate": ("replay validation of saved activations", ""),
    # gradients
    "bwd_hook": ("a backward hook", _GRAD),
    "grad_clip": ("a gradient edit", _GRAD),
    "grad_noise": ("a gradient edit", _GRAD),
    "grad_clamp": ("a gradient edit", _GRAD),
    "grad_scale": ("a gradient edit", _GRAD),
    "grad_zero": ("a gradient edit", _GRAD),
    "grad_fn": ("a backward selector", _GRAD),
    "grad_fn_label": ("a backward selector", _GRAD),
    "grad_input": ("a backward selector", _GRAD),
    "grad_output": ("a backward selector", _GRAD),
    "in_backward_pass": ("a backward selector", _GRAD),
    "without_op": ("a backward selector", _GRAD),
    # selectors tokentrace lacks
    "func_transform": ("a torch.func transform selector", ""),
    "facet": ("a mutator-only selector", ""),
    "head": ("an attention-head selector", "tt.when(..., index=(...)) on the head's slice"),
    "Selection": ("the selection algebra", _SELECTION),
    "ResolvedSelection": ("the selection algebra", _SELECTION),
    "units": ("the selection algebra", _SELECTION),
    "params": ("the selection algebra", _SELECTION),
    "random_selection": ("the selection algebra", _SELECTION),
    "top_k": ("a value-driven selection", _SELECTION),
    "top_fraction": ("a value-driven selection", _SELECTION),
    "threshold": ("a value-driven selection", _SELECTION),
    "sign": ("a value-driven selection", _SELECTION),
    "dead": ("a value-driven selection", _SELECTION),
    "saturated": ("a value-driven selection", _SELECTION),
    "low_variance": ("a value-driven selection", _SELECTION),
    "neighborhood": ("a graph region selection", _GRAPH),
    "between": ("a graph region selection", _GRAPH),
    "changed": ("a comparative selection", _SELECTION),
    "top_changed": ("a comparative selection", _SELECTION),
    "stable_across_passes": ("a comparative selection", _SELECTION),
    "pass_variance": ("a comparative selection", _SELECTION),
    "subspace": ("a subspace selection", _SELECTION),
    # data objects, units, errors
    "Layer": ("a layer record", "tt.SiteView (trace['site'])"),
    "Op": ("an op record", "tt.CallView (trace['site:k']); ops: trace['site:k'].ops"),
    "Container": ("a container view", "trace['site:k'].inputs (by path)"),
    "Quantity": ("a unit-typed quantity", "plain floats (cpu_ms, gpu_ms)"),
    "Bytes": ("a unit-typed quantity", "plain numbers"),
    "Duration": ("a unit-typed quantity", "plain floats (cpu_ms, gpu_ms)"),
    "Flops": ("a FLOP count", ""),
    "Macs": ("a MAC count", ""),
    "AmbiguousOpLookupError": ("a TorchLens error", "tt.TokentraceError"),
    "ReentrantTraceError": ("a TorchLens error", "tt.TokentraceError"),
    "merge_ranks": ("merging per-rank traces", "`tokentrace merge OUT FILE...`"),
    "merge_report": ("a cross-rank report", "`tokentrace report FILE...` (several ranks)"),
    "JaxPayloadLoadHint": ("a non-torch payload hint", ""),
    "PayloadLoadHints": ("payload load hints", ""),
    "decide_recording_of_batch": ("a recording option", ""),
    "record_kpi_in_graph": ("a recording option", ""),
    "register_tensor_connection": ("a graph-building option", _GRAPH),
    # submodules reached as attributes
    "stats": ("the statistics submodule", ""),
    "compat": ("the compatibility submodule", ""),
    "attribution": ("the attribution submodule", _GRAD),
    "repgeom": ("the representation-geometry submodule", ""),
    "partial": ("partial captures of a failed run",
                "a killed run's trace file keeps what was written (tt.load opens it)"),
    "io": ("the I/O submodule", "tt.save(trace, path) and tt.load(path)"),
    "bridge": ("bridges to other tools (MCP, SAE)", ""),
    "experimental": ("experimental features", ""),
    "callbacks": ("capture callbacks", ""),
    "accessors": ("accessor helpers", ""),
    "semantic": ("semantic annotations", ""),
    "examples": ("bundled examples", "docs/from-torchlens.md"),
    "report": ("the report submodule", "trace.report() or `tokentrace report FILE`"),
    "log_forward_pass": ("the old capture entry point", "tt.trace(model, inputs)"),
}

# Trace methods of TorchLens that tokentrace's Trace lacks.
TRACE_METHODS: dict[str, tuple[str, str]] = {
    "draw": ("graph drawing", _GRAPH + "; `tokentrace plot FILE` draws tokens"),
    "fork": ("an isolated branch of a recorded run", _REPLAY),
    "do": ("applying an intervention to a recorded trace", _REPLAY),
    "set": ("setting a recorded value", _REPLAY),
    "attach_hooks": ("hooks on a recorded trace", _REPLAY),
    "push": ("propagating an edit over the saved graph", _REPLAY),
    "rerun": ("re-running the model", _REPLAY),
    "save_intervention": ("saving a spec", "spec.to_json(path) (an EditSpec)"),
    "to_agent_json": ("an agent-facing export", "`tokentrace export --chrome OUT FILE`"),
    "output_table": ("a table of outputs", "trace.summary()"),
    "reconstruct_output": ("rebuilding the model's return value", ""),
    "profile": ("a profile view", "trace.report() (per-token CPU and GPU time)"),
    "to_pandas": ("a pandas export", "trace.tokens and trace.summary()"),
    "provenance": ("provenance records", "trace.meta"),
    "layers": ("the layer list", "trace.sites"),
    "layer_list": ("the layer list", "trace.sites"),
    "grad_fn_logs": ("backward records", _GRAD),
}


def missing(name: str, where: str, table: dict[str, tuple[str, str]]) -> AttributeError:
    """The AttributeError for a TorchLens name tokentrace lacks (`where`: 'tokentrace' or
    'Trace'), or a plain one for any other name."""
    entry = table.get(name)
    if entry is None:
        return AttributeError(f"{where} has no attribute {name!r}")
    what, instead = entry
    text = (f"{where} has no attribute {name!r}: {name} is TorchLens's {what}, a TorchLens "
            f"feature tokentrace does not have")
    if instead:
        text += f"; instead: {instead}"
    return AttributeError(text + " (docs/from-torchlens.md)")
