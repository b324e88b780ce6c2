"""Edits of site outputs (and inputs) during real runs: tt.when(selector, action, calls=...).

A rule says *where* (a site selector), *when* (a call selector: tt.prefill, tt.call(k),
tt.token(k), ranges; default every call) and *what* (a declarative op, tt.zero/fill/add/scale/
clamp/replace, or a Python callable fn(values, *, ctx) run in the hook, eager only). A bound
model runs the model's real forward/generate with the rules installed as forward hooks, and
records nothing; bound.last_report counts the fires of the last run. Specs also load from JSON
(load_spec, EditSpec.to_json), which is how preload mode (TOKENTRACE_EDITS) gets them.

Counting: each run of the bound model (one __call__ or one generate) starts fresh; k is the
site's 1-based call number within the run and the token is the root call number within the
run (so in generate, token 1 is the prefill).

This module is the public face; the feature is the subpackage _edit/, split by concern:
    calls.py         call selectors (tt.prefill, tt.call, tt.token, tt.request_token, |)
    rules.py         Rule, EditContext, the checks of tt.when's arguments
    spec.py          EditSpec, when, load_spec
    json_spec.py     the JSON form of rules (read and write)
    operations.py    the declarative ops (tt.zero, fill, add, scale, clamp, replace)
    helpers.py       TorchLens's helpers by its names (steer, zero_ablate, mean_ablate, noise,
                     project_onto, project_off, swap_with, splice_module)
    views.py         where a box lands (Ellipsis views) and the checks made at bind
    table.py         the patch table's entries, built at bind (_backend's PatchTable)
    hooks.py         EditHooks: planning, counting (where k is counted and why), the hooks
    report.py        EditReport and the skip warning
    bound.py         BoundModel
    inputs.py        edits of a call's input by path (input=)
    op_labels.py     LiveLabels: a run's ops numbered as TorchLens labels them
    op_edits.py      op-level edits (tt.when over ATen ops)
    label_memory.py  a model's last trace's op labels, handed by the trace (edits by label)
    requests.py      rules for a serving engine's requests: each step's row masks, the
                     requests each rule edited, the prefix cache's salts
The value paths ("[0].logits") are parsed in one place, _common/paths.py, shared with the
recording of inputs.
"""

from ._edit import (
    BoundModel,
    CallSelector,
    EditContext,
    EditHooks,
    EditReport,
    EditSpec,
    Rule,
    as_calls,
    call,
    every_call,
    load_spec,
    prefill,
    request_token,
    token,
    when,
)

__all__ = ["BoundModel", "CallSelector", "EditContext", "EditHooks", "EditReport", "EditSpec",
           "Rule", "as_calls", "call", "every_call", "load_spec", "prefill", "request_token",
           "token", "when"]
