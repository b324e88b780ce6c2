"""vLLM's front end traced (the process of `LLM` or of `vllm serve`'s API server): each batch
of outputs it takes from the engine core and processes (detokenizing, making RequestOutputs)
is one token, `vllm.front_step`, and each request's life as the front end sees it is a row of
request_events with role front_end.

The front end calls no module either; the preload installs this when vLLM's output processor
module (vllm.v1.engine.output_processor) is loaded, and wraps OutputProcessor's methods on
the class (every LLMEngine and AsyncLLM makes one and calls them through it):

- add_request(request, ...): the request is registered, after its prompt was processed and
  just before it goes to the engine core: queued = now (time.monotonic_ns(), the file's clock),
  arrival = request.arrival_time (time.time() when the request came in);
- process_outputs(engine_core_outputs, ...) with outputs: one step; its end is the first token
  of a request that got its first tokens in it, and the finish of one with a finish reason
  (what the user's generate() or the HTTP response gets next);
- abort_requests(ids, ...): the requests it aborted are finished, reason "abort".

Its row has no scheduling (scheduled_ns NULL): the engine core's row has that, under the same
request id. When the engine core runs in the front end's process (VLLM_ENABLE_V1_
MULTIPROCESSING=0), its steps are the tokens and the front end's steps are plain calls.
"""

from __future__ import annotations

import time
from typing import Any

from .core import RequestLives, core_here
from .steps import role_meta

FRONT_MODULE = "vllm.v1.engine.output_processor"
FRONT_SITE = "vllm.front_step"


class VllmFront(RequestLives):
    """The front end's recording in one process (OutputProcessor's methods, on the class)."""

    role = "front_end"
    step_name = FRONT_SITE

    def __init__(self, backend, path, say=None):
        super().__init__(backend, path, say)
        self._patched = None  # (OutputProcessor, its three methods) as they were

    def install(self, module):
        cls = getattr(module, "OutputProcessor", None)
        if cls is None or self._patched is not None:
            return False
        add, process, abort = cls.add_request, cls.process_outputs, cls.abort_requests
        front = self

        def add_request(processor, request, *args, **kwargs):
            queued = time.monotonic_ns()
            out = add(processor, request, *args, **kwargs)
            front._added(request, queued)
            return out

        def process_outputs(processor, engine_core_outputs, *args, **kwargs):
            if not engine_core_outputs:
                return process(processor, engine_core_outputs, *args, **kwargs)
            front.nested = front.nested or core_here()
            front._begin()
            try:
                return process(processor, engine_core_outputs, *args, **kwargs)
            finally:
                front._processed(engine_core_outputs, time.monotonic_ns())

        def abort_requests(processor, request_ids, *args, **kwargs):
            out = abort(processor, request_ids, *args, **kwargs)
            aborted = out if isinstance(out, list) else request_ids
            front._aborted(aborted, "abort", time.monotonic_ns())
            front._idle()
            return out

        for name, fn, original in (("add_request", add_request, add),
                                   ("process_outputs", process_outputs, process),
                                   ("abort_requests", abort_requests, abort)):
            fn.__wrapped__ = original  # type: ignore[attr-defined]
            setattr(cls, name, fn)
        self._patched = (cls, add, process, abort)
        return True

    def remove(self):
        if self._patched is not None:
            cls, add, process, abort = self._patched
            cls.add_request, cls.process_outputs, cls.abort_requests = add, process, abort
            self._patched = None

    def _processed(self, outputs, end_ns):
        try:
            for o in outputs:
                self._output(o, end_ns)
        finally:
            self._end()
            self._idle()

    def meta(self) -> dict[str, Any]:
        return {"engine": "vllm", "engine_front_steps": self.steps,
                "engine_front_requests_unfinished": len(self.requests),
                **role_meta("front_end")}
