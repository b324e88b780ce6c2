"""Edits of site outputs and inputs during real runs (tt.when); tokentrace/edits.py is the
public face and says what each file here does. Imports _backend, _common and _errors; never
_record or _read.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from .bound import BoundModel
    from .calls import CallSelector, as_calls, call, every_call, prefill, request_token, token
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
    from .label_memory import for_model as remember_labels
    from .operations import Op, add, clamp, fill, replace, scale, zero
    from .report import EditReport
    from .requests import ServedRules, SpecSalt
    from .rules import EditContext, Rule
    from .spec import EditSpec, check_edits, load_spec, when

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
