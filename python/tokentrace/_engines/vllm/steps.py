"""vLLM's worker traced as it serves: each engine step is one token, and what it computed for
which request is a row of step_requests.

vLLM's engine core schedules a step and hands its SchedulerOutput to the worker's model runner:
execute_model(scheduler_output) prepares the inputs and runs the forward, sample_tokens(...)
samples (it returns the step's output; execute_model returns it itself when there is nothing to
sample). Both run on the worker's one thread, in that order. The adapter wraps the two methods
of the model runner's class: the step's range (the token site, kind root) opens in
execute_model and closes when sample_tokens returns (or when execute_model returns an output,
or raises). A call with no token scheduled (vLLM makes one to free finished requests) is no
step. The model's own calls are then plain calls inside the step, and the model runs
that vLLM makes outside any step (its profiling and warm-up dummy runs) come before token 1:
the report's "before token 1" (token 0), never a step.

A step's composition is read from the SchedulerOutput before the step runs: for each request
scheduled, num_scheduled_tokens of its tokens from position num_computed_tokens; those below
its prompt's length are prefill (a chunked prefill takes several steps), the rest decode. The
prompt's length comes with the request's first scheduling (NewRequestData) and is kept until
vLLM says the request finished. A step's rows go to the trace file's writer as the step opens
(_common/store.py RowsToWriter), which commits them with the step: a worker that vLLM kills at
shutdown keeps the rows of every step its file keeps.

Edits of served requests (_edit/requests.py) need each step's rows in the order the model sees
them: the adapter wraps the runner's _prepare_inputs(scheduler_output, num_scheduled_tokens),
which lays the batch out as input_batch.req_ids[:num_reqs] with num_scheduled_tokens[i] rows
each, from position input_batch.num_computed_tokens_cpu[i]; when it returns (the inputs are
ready and the model has not run) `on_rows` is told them, with each request's prompt length
and its tags (SamplingParams.extra_args["tokentrace"]). When vLLM says the requests finished
and the engine is idle, `request_rows` gives the worker's request_events rows (which rules
edited each request), handed to the writer with the meta.

Nothing here imports vLLM: it is only reached when the job has imported vLLM's model runner.
"""

from __future__ import annotations

import sys
from typing import Any

from ..._common import RowsToWriter
from ..rows import StepRow, request_tags

TOKEN_SITE = "vllm.step"  # the token site's name (not a module path: it has no such module)
_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"  # the CPU runner subclasses its class
# vLLM's Model Runner V2 (its CPU and XPU runners subclass its class), vLLM's default where
# Triton runs (GPUs) in 0.32, unless VLLM_USE_V2_MODEL_RUNNER=0: not followed (below).
_RUNNER_V2_MODULE = "vllm.v1.worker.gpu.model_runner"
RUNNER_V2_MESSAGE = (
    "vLLM's Model Runner V2 serves this model (vLLM's default where Triton runs, as on GPUs), "
    "and tokentrace follows the V1 runner's steps only: here each model call is a token (the "
    "engine's warm-up runs too), not each engine step, and edit rules cannot name requests; "
    "run the job with VLLM_USE_V2_MODEL_RUNNER=0 for engine steps as tokens")
_ROLES: list[str] = []  # the roles of this process in its engine (one process may hold two)


def role_meta(role):
    """{"role": ...} for the trace's meta: this process's roles in its engine so far
    (engine_core, worker; both when the worker runs in the engine core's process)."""
    if role not in _ROLES:
        _ROLES.append(role)
    return {"role": ",".join(_ROLES)}


def runner_class():
    """vLLM's model runner class when the job imported it (the worker has, before any model
    call), else None."""
    module = sys.modules.get(_RUNNER_MODULE)
    return getattr(module, "GPUModelRunner", None) if module is not None else None


def max_rows():
    """The most tokens one step computes (the model runner's max_num_tokens: vLLM's
    max_num_batched_tokens) of the runner whose call is on this thread's stack, or None."""
    runner = _runner_on_stack(runner_class())
    n = getattr(runner, "max_num_tokens", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def _runner_on_stack(cls):
    """The instance of runner class `cls` whose method is on this thread's stack (`self` of
    one of its frames), or None (also when `cls` is None)."""
    frame = sys._getframe(1)
    while cls is not None and frame is not None:
        runner = frame.f_locals.get("self")
        if isinstance(runner, cls):
            return runner
        frame = frame.f_back
    return None


def step_rows(runner, num_scheduled_tokens):
    """[StepRow] of the step whose inputs `runner` just prepared, in the batch's order."""
    batch = runner.input_batch
    n = int(batch.num_reqs)
    computed = batch.num_computed_tokens_cpu
    rows = []
    for i, request in enumerate(batch.req_ids[:n]):
        state = runner.requests[request]
        params = getattr(state, "sampling_params", None)
        rows.append(StepRow(str(request), int(num_scheduled_tokens[i]), int(computed[i]),
                            int(state.num_prompt_tokens),
                            request_tags(getattr(params, "extra_args", None))))
    return rows


def serves(model):
    """True when `model` is a vLLM model and vLLM's (V1) model runner is loaded and not
    Model Runner V2 runs it: the job is a vLLM worker, whose tokens are engine steps."""
    return (type(model).__module__.startswith("vllm.") and runner_class() is not None
            and not runner_v2_serves(model))


def runner_v2_serves(model):
    """True when `model` is a vLLM model whose call is made by Model Runner V2 (an instance
    of its class is `self` of a frame on this thread's stack), which the adapter does not
    follow: its steps are execute_model calls with dummy_run= and warm-up requests, and its
    batch order is its own (sorted: decodes first)."""
    if not type(model).__module__.startswith("vllm."):
        return False
    module = sys.modules.get(_RUNNER_V2_MODULE)
    return _runner_on_stack(getattr(module, "GPUModelRunner", None)) is not None


def composition(output, prompt_lengths):
    """[(request id, prefill tokens, decode tokens, position)] of one SchedulerOutput, in
    vLLM's order (new requests, then the cached ones); updates prompt_lengths."""
    scheduled = output.num_scheduled_tokens
    rows = []

    def row(request, computed):
        n = int(scheduled.get(request, 0))
        length = prompt_lengths.get(request)
        prefill = 0 if length is None else max(0, min(computed + n, length) - computed)
        rows.append((str(request), prefill, n - prefill, int(computed)))

    for new in output.scheduled_new_reqs:
        ids = getattr(new, "prompt_token_ids", None)
        embeds = getattr(new, "prompt_embeds", None)
        if ids is not None:
            prompt_lengths[new.req_id] = len(ids)
        elif embeds is not None:
            prompt_lengths[new.req_id] = int(embeds.shape[0])
        row(new.req_id, new.num_computed_tokens)
    cached = output.scheduled_cached_reqs
    for i, request in enumerate(cached.req_ids):
        row(request, cached.num_computed_tokens[i])
    for request in output.finished_req_ids:
        prompt_lengths.pop(request, None)
    return rows


def _running_step(execute):
    """The frame of a call of `execute` (the model runner's execute_model) on this thread's
    stack, or None."""
    codes = set()
    fn, seen = execute, 0
    while fn is not None and seen < 8:  # through its decorators (torch.inference_mode, ...)
        code = getattr(fn, "__code__", None)
        if code is not None:
            codes.add(code)
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in codes and "scheduler_output" in frame.f_locals:
            return frame
        frame = frame.f_back
    return None


class VllmSteps:
    """The step wrappers on vLLM's model runner class, for one recording (a worker adapter of
    _engines/registry.py)."""

    token_site = TOKEN_SITE
    token_how = "vLLM engine steps"

    def __init__(self, backend, path, say=None):
        self.backend = backend
        self.site_id = backend.site(TOKEN_SITE, backend.site_kind("root"))
        self.steps = 0  # steps opened
        # (token, request, prefill, decode, position) rows, handed to the writer at each step
        self.rows = RowsToWriter("step_requests", "the steps' requests", say, self.meta)
        self.prompt_lengths = {}
        self._open = False
        self._patched = None  # (class, execute_model, sample_tokens) as they were
        self.failed = 0  # steps whose composition could not be read
        # Told each step's number as it begins, before its model call: the edits' counters
        # (EditHooks.engine_step), whose tokens are then the engine's steps.
        self.on_step = None
        # Meta rows that cost a read of the device (the edits' fires): taken only when the
        # engine is idle, and handed with the others from then on.
        self.idle_meta = None
        self._idle_rows: dict[str, Any] = {}
        # Told each step's rows ([StepRow], the batch's order) before its model runs: the
        # edits of served requests (EditHooks.serving_rows). rows_unread: steps whose rows
        # could not be read or taken (their served rules edited nothing).
        self.on_rows = None
        self.rows_unread = 0
        # The worker's request_events rows of the requests seen so far (then forgotten),
        # taken when the engine is idle and at the end.
        self.request_rows = None
        self.requests = RowsToWriter("request_events", "the worker's requests", say)

    def install(self):
        cls = runner_class()
        if cls is None or self._patched is not None:
            return False
        execute, sample = cls.execute_model, cls.sample_tokens
        prepare = getattr(cls, "_prepare_inputs", None)
        steps = self

        def execute_model(runner, scheduler_output, *args, **kwargs):
            if not getattr(scheduler_output, "total_num_scheduled_tokens", 1):
                # nothing scheduled (vLLM still calls in, e.g. to free finished requests): no
                # step, no token
                steps._idle(scheduler_output)
                return execute(runner, scheduler_output, *args, **kwargs)
            steps._begin(scheduler_output)
            try:
                out = execute(runner, scheduler_output, *args, **kwargs)
            except BaseException:
                steps._end()
                raise
            if out is not None:  # nothing to sample: the step ends here
                steps._end()
            return out

        def sample_tokens(runner, *args, **kwargs):
            try:
                return sample(runner, *args, **kwargs)
            finally:
                steps._end()

        def _prepare_inputs(runner, scheduler_output, num_scheduled_tokens, *args, **kwargs):
            out = prepare(runner, scheduler_output, num_scheduled_tokens, *args, **kwargs)
            if steps.on_rows is not None and steps._open:
                steps._rows(runner, num_scheduled_tokens)
            return out

        execute_model.__wrapped__ = execute  # type: ignore[attr-defined]
        sample_tokens.__wrapped__ = sample  # type: ignore[attr-defined]
        cls.execute_model, cls.sample_tokens = execute_model, sample_tokens
        if prepare is not None:
            _prepare_inputs.__wrapped__ = prepare  # type: ignore[attr-defined]
            cls._prepare_inputs = _prepare_inputs
        self._patched = (cls, execute, sample, prepare)
        # The recording attaches at the first model call, which in a worker that runs no
        # warm-up is inside the first step's execute_model: that step opens now, before the
        # model's call, from the SchedulerOutput in its frame.
        running = _running_step(execute)
        if running is not None:
            local = running.f_locals
            self._begin(local["scheduler_output"])
            # its inputs are prepared already (the model call is what attached): its rows
            # from execute_model's own locals
            scheduled = local.get("num_scheduled_tokens_np")
            runner = local.get("self")
            if self.on_rows is not None and scheduled is not None and runner is not None:
                self._rows(runner, scheduled)
        return True

    def remove(self):
        if self._patched is not None:
            cls, execute, sample, prepare = self._patched
            cls.execute_model, cls.sample_tokens = execute, sample
            if prepare is not None:
                cls._prepare_inputs = prepare
            self._patched = None
        self._end()

    def _begin(self, scheduler_output):
        self._end()  # a step whose sample_tokens never came: closed before the next opens
        try:
            rows = composition(scheduler_output, self.prompt_lengths)
        except Exception:  # a SchedulerOutput of another shape: the step, without its rows
            rows = []
            self.failed += 1
        self.steps += 1
        self.backend.push(self.site_id)
        self._open = True
        if self.on_step is not None:
            self.on_step(self.steps)
        # The recorder's token: this step's own, or the engine core's step it runs in (the
        # worker in the engine core's process; a token site inside a token is no new token).
        token = self.backend.current()[1]
        self.rows.add((token, *r) for r in rows)

    def _rows(self, runner, num_scheduled_tokens):
        try:
            rows = step_rows(runner, num_scheduled_tokens)
        except Exception:  # a runner of another shape: the step's served rules edit nothing
            self.rows_unread += 1
            return
        self.on_rows(rows)

    def _hand_requests(self):
        if self.request_rows is not None:
            try:
                self.requests.add(self.request_rows())
            except Exception:  # never into the engine; the meta says what was not handed
                pass

    def _idle(self, scheduler_output):
        """A call with nothing scheduled: the requests it says finished are forgotten, and
        when none is left in flight the meta rows go to the writer now. The engine is idle (or
        shutting down: vLLM may SIGKILL its workers then, before any exit-time write)."""
        for request in getattr(scheduler_output, "finished_req_ids", ()):
            self.prompt_lengths.pop(request, None)
        if not self.prompt_lengths:
            if self.idle_meta is not None:
                try:
                    self._idle_rows = self.idle_meta()
                except Exception:  # never into the engine; the exit's rows will say
                    pass
            self._hand_requests()
            self.rows.flush()

    def _end(self):
        if self._open:
            self._open = False
            self.backend.pop()

    def close(self):
        """Closes a step left open at the end of the recording (the process exits between a
        step's execute_model and its sample_tokens)."""
        self._end()
        self._hand_requests()

    def meta(self) -> dict[str, Any]:
        return {"engine": "vllm", "engine_steps": self.steps,
                "engine_step_rows_unread": self.failed,
                **({"engine_step_edit_rows_unread": self.rows_unread} if self.on_rows else {}),
                **role_meta("worker"),
                **self._idle_rows}
