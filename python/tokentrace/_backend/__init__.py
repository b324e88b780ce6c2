"""The Python side of the native code: the recorder (recorder.py: the shim, through the
extension tokentrace._native) and the torch ops library (torch_library.py: the patch table's
operators and their ABI, the op observer, the tensor metadata reader). Imports _common and
_errors.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from . import torch_library
    from .recorder import NativeBackend, check_kernel_mode, get_backend

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
