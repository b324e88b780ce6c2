"""The serving engines tokentrace knows, behind one interface that the recording (attach) and
the preloaded job call without naming an engine.

    worker_adapter(model, backend, path, say)   the adapter of the engine whose worker serves
                                                `model` in this process, or None
    install_watchers(backend_if_recording, say, after_import)
                                                each engine's recordings of the processes that
                                                call no module (an engine core, a front end),
                                                put on when the engine's modules load

A worker adapter makes each engine step one token: `token_site` (the root site's name),
`token_how` (how the root was chosen, in words), install() / remove() / close(), meta() (its
meta rows), its rows handed to the writer as the steps run, `on_step` (called with each step's
number as it begins, before its model call: the edits' tokens are the steps) and `idle_meta`
(meta rows read only while the engine is idle: the edits' fires). vLLM is the one engine built
(vllm/); SGLang would be a second entry here (docs/serving.md).
"""

from .vllm import core as _vllm_core
from .vllm import steps as _vllm_steps


def worker_adapter(model, backend, path, say=None):
    if _vllm_steps.serves(model):
        return _vllm_steps.VllmSteps(backend, path, say)
    return None


def install_watchers(backend_if_recording, say, after_import):
    _vllm_core.install_when_loaded(backend_if_recording, say, after_import)
