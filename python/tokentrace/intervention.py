"""TorchLens's tl.intervention namespace: tt.when and the edit helpers under their TorchLens
home, and steer_generate (a bound model's generate and its report in one call)."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._common import at_step, followed_by, preceded_by
from ._edit import (
    EditReport,
    EditSpec,
    add,
    clamp,
    fill,
    mean_ablate,
    noise,
    project_off,
    project_onto,
    replace,
    scale,
    splice_module,
    steer,
    swap_with,
    when,
    zero,
    zero_ablate,
)
from ._errors import fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    import torch

__all__ = ["SteerResult", "add", "at_step", "clamp", "fill", "followed_by", "mean_ablate",
           "noise", "preceded_by", "project_off", "project_onto", "replace", "scale",
           "splice_module", "steer", "steer_generate", "swap_with", "when", "zero",
           "zero_ablate"]


class SteerResult(NamedTuple):
    outputs: Any         # what the model's generate returned
    report: EditReport   # the run's fires and skips


def steer_generate(model: torch.nn.Module, inputs: Any, spec: EditSpec, *,
                   on_zero_fire: str = "error", **generate_kwargs: Any) -> SteerResult:
    """spec.bind(model).generate(inputs, **generate_kwargs), with its report. on_zero_fire:
    'error' (TorchLens's default) raises when a rule of the spec never fired in the run;
    'disclose' leaves that to the report."""
    if not isinstance(spec, EditSpec):
        fail(f"steer_generate(model, inputs, spec): spec is an edit spec from tt.when(...), "
             f"got {type(spec).__name__}")
    if on_zero_fire not in ("error", "disclose"):
        fail(f"steer_generate(on_zero_fire={on_zero_fire!r}): accepted are 'error' and "
             f"'disclose'")
    bound = spec.bind(model)
    if isinstance(inputs, dict):
        outputs = bound.generate(**inputs, **generate_kwargs)
    else:
        outputs = bound.generate(inputs, **generate_kwargs)
    report = bound.last_report
    assert report is not None  # set by every run of a bound model
    if on_zero_fire == "error":
        idle = [rule for rule, n in report.per_rule if n == 0]
        if idle:
            fail(f"steer_generate: {len(idle)} rule(s) never fired in this generate "
                 f"({idle[0]}); check the selector and calls=, or pass "
                 f"on_zero_fire='disclose'")
    return SteerResult(outputs, report)
