"""The serving engines tokentrace knows, behind one interface that the recording (attach) and
the preloaded job call without naming an engine.

    worker_adapter(model, backend, path, say)   the adapter of the engine whose worker serves
                                                `model` in this process, or None (said when
                                                an engine serves it in a way not followed)
    install_watchers(backend_if_recording, say, after_import, edit_salt)
                                                each engine's recordings of the processes that
                                                call no module (an engine core, a front end),
                                                put on when the engine's modules load, and the
                                                prefix cache's salts of the edits' requests

A worker adapter makes each engine step one token: `token_site` (the root site's name),
`token_how` (how the root was chosen, in words), install() / remove() / close(), meta() (its
meta rows), its rows handed to the writer as the steps run, `on_step` (called with each step's
number as it begins, before its model call: the edits' tokens are the steps), `on_rows` (told
each step's rows, requests in the batch's order, before its model runs: the row masks of rules
for served requests), `idle_meta` (meta rows read only while the engine is idle: the edits'
fires) and `request_rows` (the worker's request_events rows: which rules edited each request).
serving(model) and max_rows(model) tell the edits whether rules may name requests, and how
many rows a step may have; not_served_why(model), why not where an engine serves it. vLLM is
the one engine built (vllm/); SGLang would be a second entry here (docs/serving.md).
"""

from .vllm import core as _vllm_core
from .vllm import salt as _vllm_salt
from .vllm import steps as _vllm_steps


def worker_adapter(model, backend, path, say=None):
    if _vllm_steps.serves(model):
        return _vllm_steps.VllmSteps(backend, path, say)
    if say is not None and _vllm_steps.runner_v2_serves(model):
        say(_vllm_steps.RUNNER_V2_MESSAGE)  # an engine whose steps are not followed: said
    return None


def not_served_why(model):
    """Why an engine's worker serving `model` is not one whose steps are followed (its
    requests cannot be named), or None."""
    return _vllm_steps.RUNNER_V2_MESSAGE if _vllm_steps.runner_v2_serves(model) else None


def serving(model):
    """Whether `model` is served by an engine's worker in this process (its steps are the
    tokens, and rules may name its requests)."""
    return _vllm_steps.serves(model)


def max_rows(model):
    """The most rows (tokens) one step of the engine serving `model` computes, or None when
    it does not say."""
    return _vllm_steps.max_rows() if _vllm_steps.serves(model) else None


def install_watchers(backend_if_recording, say, after_import, edit_salt=None):
    """`edit_salt`: None, or a callable giving the job's edits' cache salts (TOKENTRACE_EDITS;
    _edit/requests.py SpecSalt), which the engine's prefix cache must keep apart
    (vllm/salt.py)."""
    _vllm_core.install_when_loaded(backend_if_recording, say, after_import)
    _vllm_salt.install_when_loaded(edit_salt, say, after_import)
