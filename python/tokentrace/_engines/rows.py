"""A serving engine's step as its adapter hands it to the edits: each request's rows in the
batch's order (StepRow), and the tags a request carries for edit rules that name requests
(request_tags: SamplingParams.extra_args["tokentrace"]). Plain data, read by _edit/requests.py
through this package's face.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StepRow:
    """One request's rows in one step: n rows from position `computed`, in the batch's order."""

    request: str
    n: int
    computed: int
    prompt: int  # the prompt's length (tokens)
    tags: frozenset  # the request's tags (SamplingParams.extra_args["tokentrace"])


def request_tags(extra_args) -> frozenset:
    """The tags a request carries: extra_args["tokentrace"], a string or a list of strings
    (anything else carries none)."""
    value = extra_args.get("tokentrace") if isinstance(extra_args, dict) else None
    if isinstance(value, str):
        return frozenset([value])
    if isinstance(value, (list, tuple)):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()
