"""Edits of site outputs (and inputs) during real runs: tt.when(selector, action, calls=...).

A rule says *where* (a site selector), *when* (a call selector: tt.prefill, tt.call(k),
tt.token(k), ranges; default every call) and *what* (a declarative op from _edit_ops, or a
Python callable fn(values, *, ctx) run in the hook, eager only). A bound model runs the
model's real forward/generate with the rules installed as forward hooks, and records nothing;
bound.last_report counts the fires of the last run. Specs also load from JSON (load_spec,
EditSpec.to_json), which is how preload mode (TOKENTRACE_EDITS) gets them.

Counting: each run of the bound model (one __call__ or one generate) starts fresh; k is the
site's 1-based call number within the run and the token is the root call number within the
run (so in generate, token 1 is the prefill).

This module is the public face; the feature is split by concern:
    _calls.py        call selectors (tt.prefill, tt.call, tt.token, |)
    _rules.py        Rule, EditContext, the checks of tt.when's arguments
    _edit_spec.py    EditSpec, when, load_spec
    _edit_json.py    the JSON form of rules (read and write)
    _edit_ops.py    the declarative ops (tt.zero, fill, add, scale, clamp, replace)
    _edit_view.py    where a box lands (Ellipsis views) and the checks made at bind
    _edit_table.py   the patch table's entries, built at bind (_torch_ops.PatchTable)
    _edit_hooks.py   EditHooks: planning, counting (where k is counted and why), the hooks
    _edit_report.py  EditReport and the skip warning
    _bound.py        BoundModel
    _paths.py        the one parser of value paths ("[0].logits"), shared with input edits
"""

from ._bound import BoundModel
from ._calls import CallSelector, as_calls, call, every_call, prefill, token
from ._edit_hooks import EditHooks
from ._edit_report import EditReport
from ._edit_spec import EditSpec, load_spec, when
from ._rules import EditContext, Rule

__all__ = ["BoundModel", "CallSelector", "EditContext", "EditHooks", "EditReport", "EditSpec",
           "Rule", "as_calls", "call", "every_call", "load_spec", "prefill", "token", "when"]
