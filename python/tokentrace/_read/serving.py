"""A serving engine's steps and requests as its files hold them: a worker's step_requests
(_engines/vllm/steps.py: each step's requests, each request's steps) and the engine core's and
front end's request_events (_engines/vllm/core.py, front.py: each request's arrival,
queue, first token, finish, as each process saw it).

    trace.step_requests        [StepRequest(token, request, prefill_tokens, decode_tokens,
                                            position)], in step order (a worker's file)
    trace.requests             {request id: Request}, in the order they were first scheduled
    trace.requests["0-ab12"].first_token_step   the step whose end gave its first token
    trace.requests["0-ab12"].queue_ms           an engine core's file: queued -> scheduled
    trace.requests["0-ab12"].events["front_end"]   a front end's row of the request
    trace.requests["0-ab12"].edits              a worker's file: {rule index: (steps, rows)}
                                                of the edit rules that changed its rows
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field
from typing import Optional

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .state import TraceState

StepRequest = namedtuple("StepRequest",
                         "token request prefill_tokens decode_tokens position")


@dataclass
class Request:
    """One request: in a worker's file its steps (how many tokens each computed for it,
    prefill and decode); in an engine core's or front end's file its life there (`events`:
    {role: its request_events row as {column: value}}; times in the file's CLOCK_MONOTONIC ns,
    arrival_unix_ns on the wall clock). The properties below read the engine core's row when
    the file has one, else the front end's (None where the row has no such event)."""
    request: str
    steps: list[StepRequest] = field(default_factory=list)
    events: dict = field(default_factory=dict)

    @property
    def _row(self) -> dict:
        return self.events.get("engine_core") or self.events.get("front_end") or {}

    def _ms(self, begin, end) -> Optional[float]:
        b, e = self._row.get(begin), self._row.get(end)
        return None if b is None or e is None else (e - b) / 1e6

    @property
    def queue_ms(self) -> Optional[float]:
        """Queued in the scheduler until first scheduled (the engine core's row)."""
        return self._ms("queued_ns", "scheduled_ns")

    @property
    def first_token_ms(self) -> Optional[float]:
        """Queued until its first output token: back in the scheduler (engine core), or
        processed for the user (front end: from its hand-over to the engine)."""
        return self._ms("queued_ns", "first_token_ns")

    @property
    def finish_reason(self) -> Optional[str]:
        """vLLM's word for why it finished (stop, length, abort, ...); None while running."""
        return self._row.get("finish_reason")

    @property
    def output_tokens(self) -> Optional[int]:
        return self._row.get("output_tokens")

    @property
    def edits(self) -> dict[int, tuple[int, int]]:
        """{rule index: (steps, rows)}: the edit rules served per request that changed this
        request's rows, in how many steps and rows (the worker's row; {} without one)."""
        import json
        text = self.events.get("worker", {}).get("edits")
        try:
            return {int(k): tuple(v) for k, v in json.loads(text).items()} if text else {}
        except (ValueError, TypeError, AttributeError):  # a file written by hand
            return {}

    @property
    def prefill_tokens(self) -> int:
        return sum(s.prefill_tokens for s in self.steps)

    @property
    def decode_tokens(self) -> int:
        return sum(s.decode_tokens for s in self.steps)

    @property
    def first_step(self) -> int:
        return self.steps[0].token

    @property
    def last_step(self) -> int:
        return self.steps[-1].token

    @property
    def first_token_step(self) -> int:
        """The step that computed the last of its prompt: its end sampled the first output
        token (a chunked prefill takes several steps before it)."""
        total, done = self.prefill_tokens, 0
        for s in self.steps:
            done += s.prefill_tokens
            if done >= total:
                return s.token
        return self.steps[-1].token  # not reached: done ends at total


def step_requests(state: TraceState) -> list[StepRequest]:
    if "step_requests" not in state.file.tables:  # files written before the table existed
        return []
    return [StepRequest(*r) for r in state.file.ask("step_requests")]


def request_events(state: TraceState) -> list[dict]:
    """request_events rows as {column: value}, in the order requests were queued."""
    if "request_events" not in state.file.tables:  # not an engine core's file, or older
        return []
    return state.file.ask_named("request_events")


def requests(state: TraceState) -> dict[str, Request]:
    out: dict[str, Request] = {}
    for row in step_requests(state):
        out.setdefault(row.request, Request(row.request)).steps.append(row)
    for events in request_events(state):
        role = events.get("role") or "engine_core"
        out.setdefault(events["request"], Request(events["request"])).events[role] = events
    return out
