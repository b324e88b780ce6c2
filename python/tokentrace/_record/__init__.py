"""Recording: what goes on a model while it is traced, and the rows it adds to the trace file.

Files: attach.py (Attachment, the one recording set-up of tt.trace, tt.record and the preloaded
job), root.py (FirstRoot, RootChoice: which module is the root), hooks.py (HookSet: the
recording wrappers and hooks on the modules), inputs.py (InputRecorder: a call's inputs, by
path), sink.py (saved tensors, to safetensors shards), escapes.py (host reads of device
values), collectives.py (torch.distributed calls as calls), op_records.py (ATen ops as calls:
on and off), op_saver.py (the outputs of the ops that save= selects), prompt.py (text prompts,
tokenized), token_text.py (each token's generated ids and text). A serving engine's adapters
are _engines/'s.
Their rows go to the trace file's one writer (_common/store.py: add_rows, RowsToWriter).
Imports _compiled, _backend, _common and _errors; never _edit or _read.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from . import op_records
    from .attach import Attachment, selection, warn_if_doubtful
    from .escapes import EscapeCounter, warn_once
    from .hooks import HookSet
    from .inputs import InputRecorder, tensor_meta
    from .prompt import find_tokenizer, is_text, tokenize
    from .root import ASSISTANT, FirstRoot, RootChoice, sites_of
    from .sink import TensorSink

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
