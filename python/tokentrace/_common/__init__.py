"""What every layer above shares: site names, selectors, the value paths and kinds, the first
tensor of an output, the trace file, and finding the native extension.

Files: naming.py (site names, the root `self`), selectors.py (tt.module), op_selectors.py
(tt.func, tt.in_module, tt.label, tt.contains, tt.where, & | ~), values.py (the kinds
of values inside a call's arguments and the walk over them), paths.py (the one parser of value
paths such as "[0].logits"), op_groups.py (the Python calls that are ops of their own,
x[i], torch.tensor, x / y), op_mode.py (the TorchFunctionMode of op saves and edits),
outputs.py (the first tensor of an output, dtype names), store.py
(the trace file: schema, and the Python layer's rows handed to its writer), loader.py (finds
and loads the extension tokentrace._native), lazy.py (the faces' lazy import),
torchlens_names.py (TorchLens names tokentrace lacks, for the errors that say so).
Imports only _errors.py.
"""

from .lazy import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from . import loader, op_groups
    from .halt import HALT, Halted
    from .lazy import lazy_face  # imported above for real: the faces call it at import
    from .loader import PACKAGE_DIR
    from .naming import OP_EDIT_SITE, OP_KIND, OP_SAVE_SITE, ROOT, is_glob, site_names
    from .op_mode import OpMode
    from .op_selectors import (
        FUNCTION_ATEN,
        LIST_OPS,
        TUPLE_OPS,
        SiteQuery,
        at_step,
        contains,
        followed_by,
        func,
        in_module,
        is_op_label,
        label,
        op_type,
        op_types_of,
        preceded_by,
        regex,
        where,
    )
    from .outputs import dtype_name, first_tensor, parse_dtype
    from .paths import CACHE_NAMES, cache_alias, descend, ends, put_at, replace_in_output
    from .selectors import (
        PathAt,
        Selector,
        SiteSelector,
        as_selector,
        input_at,
        module,
        names_ops,
        op_selection,
        output_at,
        parse_env_list,
        path_text,
    )
    from .store import (
        ROW_COLUMNS,
        RowsToWriter,
        add_losses,
        add_meta,
        add_rows,
        check_writable,
        schema,
    )
    from .torchlens_names import MODULE_NAMES, TRACE_METHODS, missing
    from .values import (
        KINDS,
        MAX_DEPTH,
        MAX_ITEMS,
        SCALARS,
        children_of,
        kind_of,
        parameter_names,
        register_container,
        walk_call,
    )

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
