"""vLLM's engine core traced as it schedules: each engine step that has requests to run is one
token of the engine core's file, with the scheduler's time in it, and each request's life
(arrival, queue, first scheduled, first token, finish and why) is a row of request_events.

The engine core (vllm.v1.engine.core.EngineCore; its own process, EngineCoreProc, unless the
job runs it in-process) calls no module, so this does not wait for a module call: the preload
installs it as soon as vLLM's module is loaded (install_when_loaded), and it takes each
EngineCore as vLLM makes it. Its step is the function vLLM calls through `engine.step_fn`
(EngineCore.step, or step_with_batch_queue with a batch queue), run by the busy loop. Per
engine:

- `vllm.core_step` (the token site, kind root) spans a call of step_fn when the scheduler has an
  unfinished request (a call that only frees finished ones is no step); inside it,
  `vllm.schedule` spans scheduler.schedule() and `vllm.update` spans
  scheduler.update_from_output(); the rest of the step is the wait for the worker (its own
  process: its file has the step as `vllm.step`, with the same requests). A step whose
  schedule() scheduled nothing is counted (meta engine_core_empty_steps).
- Each request's row: scheduler.add_request (arrival: the request's arrival_time, the front
  end's time.time(); queued: now), the first schedule() that took it (the step's start), the
  first update_from_output whose output gave it tokens (its end: the first token), and the one
  that gave it a finish reason, or scheduler.finish_requests (an abort). Times are
  time.monotonic_ns(): CLOCK_MONOTONIC, the file's clock. Finished requests' rows go to the file
  at most once a second and when no request is left; the rest at exit (finish columns NULL).

When the worker runs in the engine core's process (vLLM's uniprocess executor: one GPU), its
`vllm.step` opens inside `vllm.core_step`, which is then the token; the file holds both.

Nothing here imports vLLM: install() takes the module vLLM loaded.
"""

from __future__ import annotations

import atexit
import time
from typing import Any

from ..._common import RowsToWriter
from .steps import role_meta

CORE_MODULE = "vllm.v1.engine.core"
CORE_SITE = "vllm.core_step"  # the engine core's token site
SCHEDULE_SITE = "vllm.schedule"
UPDATE_SITE = "vllm.update"


class _Request:
    """One request's row of request_events, filled in as one process (role) sees it."""

    __slots__ = ("role", "request", "arrival_unix_ns", "queued_ns", "scheduled_ns",
                 "first_token_ns", "finished_ns", "first_step", "first_token_step",
                 "finished_step", "finish_reason", "prompt_tokens", "output_tokens")

    def __init__(self, role, request, queued_ns):
        self.role = role
        self.request = str(request.request_id)
        arrival = getattr(request, "arrival_time", None)
        self.arrival_unix_ns = int(arrival * 1e9) if isinstance(arrival, (int, float)) else None
        self.queued_ns = queued_ns
        self.scheduled_ns = self.first_token_ns = self.finished_ns = None
        self.first_step = self.first_token_step = self.finished_step = None
        self.finish_reason = None
        prompt = getattr(request, "num_prompt_tokens", None)  # the engine core's Request
        if prompt is None:  # the front end's EngineCoreRequest
            ids = getattr(request, "prompt_token_ids", None)
            prompt = len(ids) if ids is not None else None
        self.prompt_tokens = int(prompt) if isinstance(prompt, int) else None
        self.output_tokens = 0

    def row(self):
        return {name: getattr(self, name) for name in self.__slots__}


def _finish_reason(reason):
    """vLLM's word for why a request finished ("stop", "length", "abort", ...): str() of its
    FinishReason; a RequestStatus (an abort's) is first turned into its FinishReason."""
    to_reason = getattr(type(reason), "get_finished_reason", None)
    if callable(to_reason):  # RequestStatus.get_finished_reason(status) -> FinishReason
        try:
            reason = to_reason(reason) or reason
        except Exception:
            pass
    text = str(reason)
    if "." in text or text.isdigit():  # an enum without vLLM's __str__: its name
        return str(getattr(reason, "name", text)).lower().removeprefix("finished_")
    return text


class RequestLives:
    """What the engine core and the front end keep alike: their steps (the token site, kind
    root, or a plain range when another recording in the process owns the tokens), each
    request's row, and the rows' writing."""

    role = ""
    step_name = ""

    def __init__(self, backend, path, say=None):
        self.backend = backend
        self.path = path
        self.step_site = 0  # registered at the first step (its kind: see _begin)
        self.steps = 0
        self.requests: dict[str, _Request] = {}  # not finished yet
        self.finished = RowsToWriter("request_events", f"the {self.role}'s requests", say,
                                     self.meta)
        self.token = 0  # the open step's token, 0 between steps
        self.nested = False  # another recording of this process makes the tokens

    def _say(self, message):
        if self.finished.say is not None:
            self.finished.say(message)

    def _begin(self):
        if not self.step_site:
            kind = "range" if self.nested else "root"
            self.step_site = self.backend.site(self.step_name, self.backend.site_kind(kind))
        self.backend.push(self.step_site)
        self.steps += 1
        self.token = self.backend.current()[1]

    def _end(self):
        self.backend.pop()
        self.token = 0
        if self.finished.due():
            self.finished.flush()

    def _idle(self):
        if not self.requests:
            self.finished.flush()

    def _added(self, request, queued_ns):
        key = str(getattr(request, "request_id", ""))
        if key and key not in self.requests:  # a streaming request's later chunk: the same one
            self.requests[key] = _Request(self.role, request, queued_ns)

    def _output(self, output, end_ns):
        """One EngineCoreOutput: its new tokens (the first: its first token) and finish."""
        r = self.requests.get(str(output.request_id))
        if r is None:
            return
        n = len(output.new_token_ids or ())
        if n and r.first_token_ns is None:
            r.first_token_ns, r.first_token_step = end_ns, self.token
        r.output_tokens += n
        if output.finish_reason is not None:
            self._finished(r, end_ns, _finish_reason(output.finish_reason))

    def _aborted(self, request_ids, reason, now_ns):
        if request_ids is None:
            keys = list(self.requests)
        elif isinstance(request_ids, str):
            keys = [request_ids]
        else:
            keys = [str(k) for k in request_ids]
        for key in keys:
            r = self.requests.get(key)
            if r is not None:
                self._finished(r, now_ns, reason)

    def _finished(self, r, now_ns, reason):
        r.finished_ns, r.finished_step, r.finish_reason = now_ns, self.token, reason
        self.requests.pop(r.request, None)
        self.finished.add([r.row()])

    def rows(self):
        """The rows not handed to the writer yet: those of the requests still running (a
        finished request's row is handed as it finishes)."""
        return [r.row() for r in self.requests.values()]

    def meta(self) -> dict[str, Any]:
        raise NotImplementedError

    def finish(self):
        """The end of the process (an exit hook): the wrappers come off, and the rows of the
        requests still running (with no finish) and the meta go to the writer."""
        self.remove()
        if not self.ran():
            return  # nothing ran here: the shim writes no file for it
        self.finished.add(self.rows())
        self.finished.flush()

    def ran(self):
        """Whether it recorded anything (else the process wrote no file for it)."""
        return bool(self.steps or self.requests or self.finished.handed)


class VllmCore(RequestLives):
    """The engine core's recording in one process: every EngineCore made there, one file."""

    role = "engine_core"
    step_name = CORE_SITE

    def __init__(self, backend, path, say=None):
        super().__init__(backend, path, say)
        kind = backend.site_kind
        self.schedule_site = backend.site(SCHEDULE_SITE, kind("range"))
        self.update_site = backend.site(UPDATE_SITE, kind("range"))
        self.empty_steps = 0  # steps whose schedule() scheduled no token
        self.engines = 0
        self._patched = None  # (EngineCore, its __init__) as it was

    # --- installing ---------------------------------------------------------------------------
    def install(self, module):
        """Wraps EngineCore.__init__ in `module` (vllm.v1.engine.core): each engine made from
        now on is taken (take()). False when the module has no EngineCore."""
        cls = getattr(module, "EngineCore", None)
        if cls is None or self._patched is not None:
            return False
        init = cls.__init__
        core = self

        def __init__(engine, *args, **kwargs):
            init(engine, *args, **kwargs)
            try:
                core.take(engine)
            except Exception as exc:  # a vLLM of another shape: the engine runs untraced
                core._say(f"tokentrace: vLLM's engine core is not recorded ({exc!r})")

        __init__.__wrapped__ = init  # type: ignore[attr-defined]
        cls.__init__ = __init__
        self._patched = (cls, init)
        return True

    def remove(self):
        if self._patched is not None:
            cls, init = self._patched
            cls.__init__ = init
            self._patched = None

    def take(self, engine):
        """Wraps one engine's step_fn and its scheduler's methods (instance attributes, so the
        scheduler's class, whichever vLLM chose, is left as it is)."""
        scheduler = engine.scheduler
        step_fn = engine.step_fn
        add, schedule = scheduler.add_request, scheduler.schedule
        update, finish = scheduler.update_from_output, scheduler.finish_requests
        core = self

        def step(*args, **kwargs):
            if not core._has_work(engine):  # frees finished requests only: no step
                try:
                    return step_fn(*args, **kwargs)
                finally:
                    core._idle()
            core._begin()
            try:
                return step_fn(*args, **kwargs)
            finally:
                core._end()

        def add_request(request, *args, **kwargs):
            queued = time.monotonic_ns()
            out = add(request, *args, **kwargs)
            core._added(request, queued)
            return out

        def schedule_(*args, **kwargs):
            begin = time.monotonic_ns()
            out = core._within(core.schedule_site, schedule, args, kwargs)
            core._scheduled(out, begin)
            return out

        def update_from_output(*args, **kwargs):
            out = core._within(core.update_site, update, args, kwargs)
            core._updated(out, time.monotonic_ns())
            return out

        def finish_requests(request_ids, finished_status, *args, **kwargs):
            out = finish(request_ids, finished_status, *args, **kwargs)
            core._aborted(request_ids, _finish_reason(finished_status), time.monotonic_ns())
            return out

        for name, fn, original in (("add_request", add_request, add),
                                   ("schedule", schedule_, schedule),
                                   ("update_from_output", update_from_output, update),
                                   ("finish_requests", finish_requests, finish)):
            fn.__wrapped__ = original  # type: ignore[attr-defined]
            setattr(scheduler, name, fn)
        step.__wrapped__ = step_fn  # type: ignore[attr-defined]
        engine.step_fn = step
        self.engines += 1

    # --- the steps ----------------------------------------------------------------------------
    @staticmethod
    def _has_work(engine):
        """An unfinished request in the scheduler, or batches in flight: the step runs some."""
        if getattr(engine, "batch_queue", None):
            return True
        has = getattr(engine.scheduler, "has_unfinished_requests", None)
        return True if has is None else bool(has())

    def _within(self, site, fn, args, kwargs):
        """fn(*args, **kwargs) as a call of `site` inside the open step (outside one, as when
        a step only frees finished requests, a plain call)."""
        if not self.token:
            return fn(*args, **kwargs)
        self.backend.push(site)
        try:
            return fn(*args, **kwargs)
        finally:
            self.backend.pop()

    # --- the requests -------------------------------------------------------------------------
    def _scheduled(self, output, begin_ns):
        if self.token and not getattr(output, "total_num_scheduled_tokens", 1):
            self.empty_steps += 1
        for new in getattr(output, "scheduled_new_reqs", ()):
            r = self.requests.get(str(new.req_id))
            if r is not None and r.scheduled_ns is None:
                r.scheduled_ns, r.first_step = begin_ns, self.token

    def _updated(self, outputs, end_ns):
        for outs in (outputs or {}).values():
            for o in getattr(outs, "outputs", ()):
                self._output(o, end_ns)

    # --- the end ------------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        from .salt import SALTED
        return {"engine": "vllm", "engine_core_steps": self.steps,
                "engine_core_empty_steps": self.empty_steps,
                "engine_core_requests_salted": SALTED["requests"],
                "engine_core_requests_unfinished": len(self.requests), **role_meta("engine_core")}


# The recordings of this process by role (install_when_loaded): the front end's steps are the
# tokens unless an engine core records in its process too.
RECORDINGS: dict[str, RequestLives] = {}


def core_here():
    """Whether an engine core records an engine in this process."""
    core = RECORDINGS.get("engine_core")
    return isinstance(core, VllmCore) and core.engines > 0


def install_when_loaded(backend_if_recording, say, after_import):
    """Preload: records every EngineCore this process makes once vLLM's engine-core module is
    loaded, and its front end's output processing once vLLM's output processor module is
    (front.py): now, or when the job imports them (`after_import(name, callback)`, the
    boot's). backend_if_recording() gives the native backend when the shim records, else None.
    Rows and meta are added to the trace file at exit by each that recorded something (a
    process that only imports vLLM's modules, as the worker does, writes nothing for them)."""
    from .front import FRONT_MODULE, VllmFront

    def loaded(kind, module):
        backend = backend_if_recording()
        if backend is None:
            return
        recording = kind(backend, backend.settled_path, say)
        if recording.install(module):
            RECORDINGS[kind.role] = recording
            atexit.register(_finish, recording, say)

    after_import(CORE_MODULE, lambda module: loaded(VllmCore, module))
    after_import(FRONT_MODULE, lambda module: loaded(VllmFront, module))


def _finish(recording, say):
    del say  # RowsToWriter says what it could not hand over
    recording.finish()
