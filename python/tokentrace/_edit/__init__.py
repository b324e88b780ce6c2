"""Edits of site outputs and inputs during real runs (tt.when); tokentrace/edits.py is the
public face and says what each file here does. Imports _backend, _common and _errors; never
_record or _read.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see: the same names, imported for real
    from .bound import BoundModel
    from .calls import CallSelector, as_calls, call, every_call, prefill, token
    from .helpers import (
        mean_ablate,
        noise,
        project_off,
        project_onto,
        splice_module,
        steer,
        swap_with,
        zero_ablate,
    )
    from .hooks import EditHooks
    from .operations import Op, add, clamp, fill, replace, scale, zero
    from .report import EditReport
    from .rules import EditContext, Rule
    from .spec import EditSpec, check_edits, load_spec, when

_EXPORTS = {
    "BoundModel": "bound",
    "CallSelector": "calls", "as_calls": "calls", "call": "calls", "every_call": "calls",
    "prefill": "calls", "token": "calls",
    "EditHooks": "hooks",
    "mean_ablate": "helpers", "noise": "helpers", "project_off": "helpers",
    "project_onto": "helpers", "splice_module": "helpers", "steer": "helpers",
    "swap_with": "helpers", "zero_ablate": "helpers",
    "EditReport": "report",
    "EditSpec": "spec", "check_edits": "spec", "load_spec": "spec", "when": "spec",
    "EditContext": "rules", "Rule": "rules",
    "Op": "operations", "add": "operations", "clamp": "operations", "fill": "operations",
    "replace": "operations", "scale": "operations", "zero": "operations",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
