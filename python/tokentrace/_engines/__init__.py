"""Serving engines traced as they serve: registry.py (the interface attach and the preload
call: worker_adapter, install_watchers), and one folder per engine (vllm/: its worker's steps,
its engine core's and its front end's requests). Imports _common and _errors only; _record and
the top level import it, through this face.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers see: the same names, imported for real
    from .registry import install_watchers, worker_adapter
    from .vllm.core import VllmCore
    from .vllm.front import VllmFront
    from .vllm.steps import VllmSteps

_EXPORTS = {
    "worker_adapter": "registry", "install_watchers": "registry",
    # the vLLM adapters themselves, for their tests (tests/python/test_serving.py)
    "VllmSteps": "vllm.steps", "VllmCore": "vllm.core", "VllmFront": "vllm.front",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
