"""torch.compile'd models, traced: where a compiled module is entered (entry.py), the compiled
calls a job makes of the traced model (call.py), and which modules each compiled kernel came
from: noted at compile time (kernel_map.py), matched (match.py) and joined to the trace's
calls (join.py). Imports _common and _errors.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
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

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
