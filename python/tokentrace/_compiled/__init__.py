"""torch.compile'd models, traced: where a compiled module is entered (entry.py), the compiled
calls a job makes of the traced model (call.py), and which modules each compiled kernel came
from: noted at compile time (kernel_map.py), matched (match.py) and joined to the trace's
calls (join.py). Imports _common and _errors.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see: the same names, imported for real
    from . import kernel_map, precompiled
    from .call import CompiledCalls, attached_calls, watch_compile
    from .entry import compiled_entry, compiled_layout
    from .join import (
        NOT_STORED,
        REGION,
        CompiledKernel,
        ModuleTotal,
        compiled_rows,
        join_kernels,
        module_totals,
    )

_EXPORTS = {
    "compiled_entry": "entry", "compiled_layout": "entry",
    "CompiledCalls": "call", "attached_calls": "call", "watch_compile": "call",
    "kernel_map": "kernel_map", "precompiled": "precompiled",
    "CompiledKernel": "join", "ModuleTotal": "join", "NOT_STORED": "join", "REGION": "join",
    "compiled_rows": "join", "join_kernels": "join", "module_totals": "join",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
