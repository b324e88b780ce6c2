"""A serving engine's steps as the trace holds them (step_requests, written by
_record/vllm_steps.py): each step's requests, and each request's steps.

    trace.step_requests        [StepRequest(token, request, prefill_tokens, decode_tokens,
                                            position)], in step order
    trace.requests             {request id: Request}, in the order they were first scheduled
    trace.requests["0-ab12"].first_token_step   the step whose end gave its first token
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .trace import Trace

StepRequest = namedtuple("StepRequest",
                         "token request prefill_tokens decode_tokens position")


@dataclass
class Request:
    """One request's steps: how many tokens each computed for it, prefill and decode."""
    request: str
    steps: list[StepRequest] = field(default_factory=list)

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


def step_requests(trace: Trace) -> list[StepRequest]:
    if "step_requests" not in trace._tables:  # files written before the table existed
        return []
    return [StepRequest(*r) for r in trace._q(
        "SELECT token, request, prefill_tokens, decode_tokens, position FROM step_requests "
        "ORDER BY token, rowid")]


def requests(trace: Trace) -> dict[str, Request]:
    out: dict[str, Request] = {}
    for row in step_requests(trace):
        out.setdefault(row.request, Request(row.request)).steps.append(row)
    return out
