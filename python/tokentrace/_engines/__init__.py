"""Serving engines traced as they serve: registry.py (the interface attach and the preload
call: worker_adapter, install_watchers), and one folder per engine (vllm/: its worker's steps,
its engine core's and its front end's requests, the prefix cache's salts of edited requests).
Imports _common, _errors and _edit's served rows (_edit/requests.py); _record and the top level
import it, through this face.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from .registry import install_watchers, worker_adapter

    # the vLLM adapters themselves, for their tests (tests/python/test_serving.py)
    from .vllm.core import VllmCore
    from .vllm.front import VllmFront
    from .vllm.steps import VllmSteps

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
