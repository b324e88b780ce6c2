"""Rules of edits: where (a site selector), when (a call selector), what (an op or a callable).

make_rule checks what tt.when and the JSON reader (json_spec.py) are given; EditSpec
(spec.py) holds the rules of a spec.
"""

import inspect
import types
from collections.abc import Mapping
from typing import Any

from .._common import ROOT, PathAt, Selector, as_selector, module, path_text
from .._errors import fail
from .calls import as_calls
from .calls import prefill as _PREFILL
from .operations import Op


class EditContext:
    """What a callable action is told: the site, its call number k, the token, and the call's
    arguments (args, kwargs; empty for an edit of an input). TorchLens's hook context names
    are read too: name (the site), pass_index (k), layer_log (a read-only mapping of those),
    direction ("forward") and timing ("post")."""

    __slots__ = ("site", "call", "token", "args", "_kwargs")
    direction = "forward"
    timing = "post"

    def __init__(self, site: str, call: int, token: int, args: tuple[Any, ...] = (),
                 kwargs: Mapping[str, Any] | None = None) -> None:
        self.site, self.call, self.token = site, call, token
        self.args = args
        self._kwargs = kwargs

    @property
    def kwargs(self) -> Mapping[str, Any]:
        return types.MappingProxyType(self._kwargs if self._kwargs is not None else {})

    @property
    def name(self) -> str:
        return self.site

    @property
    def pass_index(self) -> int:
        return self.call

    @property
    def layer_log(self) -> Mapping[str, Any]:
        return types.MappingProxyType({"layer_label": f"{self.site}:{self.call}",
                                       "module_address": self.site, "pass_num": self.call,
                                       "pass_index": self.call, "token": self.token})

    def __repr__(self):
        return f"EditContext(site={self.site!r}, call={self.call}, token={self.token})"


class Rule:
    def __init__(self, selector, action, calls, input=None, output=None, requests=None):
        self.selector = selector
        self.action = action
        self.calls = calls
        # the tags of the served requests it edits (a tuple of str), or None: every request
        self.requests = requests
        self.input = input  # a path into the call's inputs, or None: the output
        self.output = output  # a path into the call's output, or None: its first tensor
        # A callable action as the hooks call it, fn(values, ctx): the keyword it takes its
        # context by (ctx, or TorchLens's hook) is read from its signature once, here.
        self.fn = None if isinstance(action, Op) else _by_context(action)

    def describe(self):
        act = self.action.describe() if isinstance(self.action, Op) else getattr(
            self.action, "__name__", "callable")
        where = (f" input {self.input!r}" if self.input is not None else
                 f" output {self.output!r}" if self.output is not None else "")
        whom = "" if self.requests is None else f" of requests {', '.join(self.requests)}"
        return f"{self.selector!r}{where} -> {act} on {self.calls!r}{whom}"

    @property
    def per_request(self) -> bool:
        """Whether only a serving engine's rows decide where it acts: it names requests, or a
        request's own tokens (tt.request_token)."""
        return self.requests is not None or self.calls.per_request


def _context_keyword(action):
    """'ctx' or 'hook': how `action` takes the edit context; None when it takes neither."""
    try:
        params = inspect.signature(action).parameters
    except (TypeError, ValueError):  # a builtin with no signature: the old way, ctx=
        return "ctx"
    for name in ("ctx", "hook"):
        p = params.get(name)
        if p is not None and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            return name
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return "ctx"
    return None


def _by_context(action):
    keyword = _context_keyword(action)
    if keyword is None:
        fail(f"tt.when action {getattr(action, '__name__', type(action).__name__)} takes "
             f"neither ctx nor hook: an edit callable is fn(values, *, ctx) (or TorchLens's "
             f"fn(values, *, hook)), given the values and returning the new values")
    if keyword == "ctx":
        return lambda values, ctx: action(values, ctx=ctx)
    return lambda values, ctx: action(values, hook=ctx)


_LIVE = ("tt.func(...), tt.in_module(...), tt.label(...), tt.contains(...), tt.regex(...) "
         "(labels numbered as the trace's reader numbers them), tt.where(pred) (pred sees the "
         "op's function, modules, shape, token and labels) and &, |, ~ of those")


def _check_live(selector, input, output=None):
    """An op selector an op-level edit can decide while the op runs (op_edits.py)."""
    why = selector.live_problem()
    if why is not None:
        fail(f"tt.when cannot edit {selector!r}: {why}. An op-level edit takes {_LIVE}")
    if output is not None:
        fail(f"tt.when(..., output=) edits a leaf of a module call's output; {selector!r} "
             f"selects ops, whose first output tensor is what an op-level edit changes (drop "
             f"output=, or select the module with tt.module(...))")
    if input is not None:
        fail(f"tt.when(..., input=) edits a module call's input; {selector!r} selects ops, "
             f"whose output is what an op-level edit changes (drop input=, or select the "
             f"module with tt.module(...))")


def request_tags(requests):
    """The tags of requests= ("TAG" or a list of them) as a tuple; None stays None."""
    if requests is None:
        return None
    if isinstance(requests, str):
        requests = [requests]
    if isinstance(requests, (list, tuple, set, frozenset)) and requests and \
            all(isinstance(t, str) and t for t in requests):
        return tuple(sorted(set(requests)))
    fail(f"requests= takes a request tag (a non-empty string) or a list of them, as a request "
         f"carries them in SamplingParams(extra_args={{\"tokentrace\": ...}}); got {requests!r}")


def make_rule(selector, action, calls=None, input=None, output=None, requests=None):
    """A checked Rule (the arguments of tt.when; see there)."""
    requests = request_tags(requests)
    if isinstance(selector, PathAt):  # tt.output_at / tt.input_at: the root's leaf at a path
        if input is not None or output is not None:
            fail(f"tt.when({selector!r}, ...) names its path already; drop input=/output=")
        input, output = ((selector.path, None) if selector.side == "input"
                         else (None, selector.path))
        selector = module(ROOT)
    if input is not None and output is not None:
        fail("tt.when edits a call's input (input=) or its output (output=), not both in one "
             "rule: make two rules and join them with +")
    selector = as_selector(selector, "tt.when selector")
    if selector.names_ops:
        _check_live(selector, input, output)
    elif not isinstance(selector, Selector):  # tt.module(...) & / ~ ...: no JSON form, no plan
        fail(f"tt.when takes tt.module(...) selectors, joined with | ({selector!r} uses & or ~, "
             f"which select for reading: trace.find_sites(...), sites=, save=)")
    if not (isinstance(action, Op) or callable(action)):
        fail(f"tt.when action must be an edit op (tt.zero(), tt.scale(f), ...) or a callable "
             f"fn(values, *, ctx); got {type(action).__name__}")
    if input is not None and (not isinstance(input, str) or not input):
        fail(f"tt.when input= takes a path into the call's inputs, such as 'hidden_states' or "
             f"'past_key_values.layers[0].values'; got {input!r}")
    if output is not None:
        output = path_text(output, "tt.when output=")
    calls = as_calls(calls)
    if requests is not None or calls.per_request:
        _check_served(selector, action, calls, input, output)
    return Rule(selector, action, calls, input, output, requests)


def _check_served(selector, action, calls, input, output):
    """What a rule for served requests takes: declarative ops on module outputs, whose rows
    are the requests' tokens, on the calls a request has (its prefill, its own tokens, engine
    steps, or every call)."""
    what = "a rule for served requests (requests=, tt.request_token)"
    if not isinstance(action, Op):
        fail(f"{what} takes a declarative op (tt.zero(), tt.scale(f), ...): the engine's rows "
             f"are chosen on the device, where a Python callable does not run")
    if selector.names_ops or input is not None or output is not None:
        fail(f"{what} edits module outputs (tt.module(...), no input=/output=): their rows are "
             f"the batch's tokens")
    for part in calls.parts():
        if part.by == "call" and part is not _PREFILL:
            fail(f"{what} takes tt.prefill, tt.request_token(k), tt.token(k) (engine step k) "
                 f"or every call; {part!r} counts a site's calls, which in a serving engine "
                 f"are no request's")
