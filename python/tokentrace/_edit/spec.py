"""Edit specs: tt.when(...) makes one, `+` combines them, .bind(model) installs them.

The JSON form is json_spec.py (load_spec reads it, EditSpec.to_json writes it); it works on
rules (rules.py), so it and this module do not import each other both ways.
"""

from __future__ import annotations

import os
import warnings

from .._errors import fail
from . import json_spec
from .bound import BoundModel
from .hooks import EditHooks
from .rules import make_rule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    import torch

    from .._common import SiteSelector
    from .calls import CallSelector
    from .hooks import EditHooks
    from .operations import Op
    from .rules import Rule


class EditSpec:
    """One or more rules; combine with `+`; install with .bind(model)."""

    def __init__(self, rules: Iterable[Rule]) -> None:
        self.rules = list(rules)

    def __add__(self, other: EditSpec) -> EditSpec:
        if not isinstance(other, EditSpec):
            fail(f"edit specs combine with other specs from tt.when(...), got "
                 f"{type(other).__name__}")
        return EditSpec(self.rules + other.rules)

    def bind(self, model: torch.nn.Module) -> BoundModel:
        """A bound model: calls run the real forward (and .generate the real generate) with
        these edits installed; nothing is recorded."""
        return BoundModel(model, self)

    def hooks_for(self, model: torch.nn.Module,
                  sites: dict[str, torch.nn.Module] | None = None) -> EditHooks:
        """The hooks of this spec on `model`. sites: {site name: module} the rules may name
        (default: the model's own; a recording adds an assisted generation's assistant under
        "assistant_model")."""
        return EditHooks(model, self, sites)

    def to_json(self, path: str | os.PathLike[str] | None = None, *,
                operand_dir: str | os.PathLike[str] | None = None) -> str:
        """The JSON form of this spec (what tt.load_spec reads), as text; also written to
        `path` when given. Tensor operands loaded from a file refer to that file; in-memory
        ones are saved as .safetensors under `operand_dir` (required for them). Rules with a
        Python callable have no JSON form (an error)."""
        return json_spec.to_json(self.rules, path, operand_dir)

    def __repr__(self):
        return "EditSpec(" + "; ".join(r.describe() for r in self.rules) + ")"


def when(selector: SiteSelector, action: Op | Callable[..., torch.Tensor | None],
         calls: CallSelector | int | range | None = None, *,
         input: str | None = None, output: str | tuple | None = None,
         requests: str | list[str] | None = None) -> EditSpec:
    """A rule: at the sites `selector` selects, on the calls `calls` selects, run `action`.

    action: tt.zero/fill/add/scale/clamp/replace(...), or fn(values, *, ctx) returning the new
    values (or None after editing them in place). input: edit the call's input at this path
    (as trace["site:k"].inputs names it: "hidden_states", "past_key_values.layers[0].values")
    before forward runs, instead of its output. output: edit the call's output leaf at this
    path ("logits", "[1]", "past_key_values.layers[0].keys", or TorchLens's tuple form
    ("past_key_values", 0, 1)) instead of its first tensor. tt.output_at(path) /
    tt.input_at(path) as the selector: the model's own (the root site's) output or input.
    requests: in a serving engine (vLLM under `tokentrace run --edits`), edit only the rows of
    the requests carrying this tag (or one of these) in SamplingParams(extra_args=
    {"tokentrace": tag or [tags]}); docs/serving.md.
    """
    return EditSpec([make_rule(selector, action, calls, input, output, requests)])


def load_spec(path: str | os.PathLike[str],
              device: torch.device | str | None = None) -> EditSpec:
    """Reads an edit spec from a JSON file (a list of rules; the format is in docs/edits.md
    and _edit/json_spec.py). device: where tensor operands go (default the CPU); the output they
    edit must be on the same device."""
    return EditSpec(json_spec.read_rules(path, device))


def check_edits(edits, intervene=None):
    """The edit spec given to trace()/record() as edits= (or intervene=, its deprecated old
    name: still taken, with a DeprecationWarning), or None."""
    if intervene is not None:
        warnings.warn("tokentrace: intervene= is deprecated; use edits= (the same edit spec)",
                      DeprecationWarning, stacklevel=3)
        if edits is not None:
            fail("pass the edit spec as edits= only (intervene= is its deprecated old name)")
        edits = intervene
    if edits is not None and not isinstance(edits, EditSpec):
        fail(f"edits= takes an edit spec from tt.when(...), got {type(edits).__name__}")
    return edits
