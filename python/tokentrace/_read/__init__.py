"""Reading a trace file: tt.load, Trace and Recording and their views (trace.py), a call's
inputs (inputs.py), its ATen ops (op_records.py), the ops' TorchLens labels and find_sites
(op_sites.py), the report (report.py, through the `tokentrace` program), tt.save and
trace.summary() (saving.py). Imports _compiled, _common and _errors; never _record or _edit.
Opening and reading a trace imports no torch (a call's tensors and shapes do, when asked for).
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see: the same names, imported for real
    from . import token_rows
    from .inputs import CallInputs, InputEntry
    from .op_records import OpCall, OpTotal
    from .op_sites import OpLabel, OpSite, SiteTable
    from .report import render_report
    from .saving import save
    from .trace import CallView, OutputMeta, Recording, SiteView, TokenRow, Trace, load

_EXPORTS = {
    "CallView": "trace", "OutputMeta": "trace", "Recording": "trace", "SiteView": "trace",
    "TokenRow": "trace", "Trace": "trace", "load": "trace",
    "token_rows": "token_rows",  # its PAGED_TOKENS and PAGE (tests page small runs)
    "CallInputs": "inputs", "InputEntry": "inputs",
    "OpCall": "op_records", "OpTotal": "op_records",
    "OpSite": "op_sites", "OpLabel": "op_sites", "SiteTable": "op_sites",
    "render_report": "report", "save": "saving",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
