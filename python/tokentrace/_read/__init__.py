"""Reading a trace file: tt.load, Trace and Recording and their views (trace.py), a call's
inputs (inputs.py), its ATen ops (op_records.py), the ops' TorchLens labels and find_sites
(op_sites.py), the report (report.py, through the `tokentrace` program), tt.save and
trace.summary() (saving.py); what an opened trace holds for those readers (state.py:
TraceState, trace.state). Imports _compiled, _common and _errors; never _record or _edit.
Opening and reading a trace imports no torch (a call's tensors and shapes do, when asked for).
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from . import token_rows  # its PAGED_TOKENS and PAGE (tests page small runs)
    from .inputs import CallInputs, InputEntry
    from .op_records import OpCall, OpTotal
    from .op_sites import OpLabel, OpSite, SiteTable
    from .report import render_report
    from .state import OutputMeta
    from .token_rows import TokenRow
    from .trace import CallView, Recording, SiteView, Trace, load, save

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
