"""Serving engines traced as they serve: registry.py (the interface attach and the preload
call: worker_adapter, install_watchers), and one folder per engine (vllm/: its worker's steps,
its engine core's and its front end's requests, the prefix cache's salts of edited requests).
Imports _common and _errors; _record, _edit (a step's rows for rules of served requests: rows.py)
and the top level import it, through this face.
"""

from .._common import lazy_face

TYPE_CHECKING = False
if TYPE_CHECKING:  # the face's names: type checkers import them, lazy_face reads them
    from .registry import install_watchers, max_rows, not_served_why, serving, worker_adapter
    from .rows import StepRow, request_tags

    # the vLLM adapters themselves, for their tests (tests/python/test_serving.py)
    from .vllm.core import VllmCore
    from .vllm.front import VllmFront
    from .vllm.steps import VllmSteps

__getattr__, __dir__ = lazy_face(__name__)  # and __all__, the names above
