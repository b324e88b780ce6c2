"""Call selectors of edits: tt.prefill, tt.call(k), tt.token(k), tt.request_token(k), their
unions (`|`).

A call selector says *when* a rule acts: at the site's k-th call (1-based; call 1 is the
prefill) or during token k (the root's k-th call; in a serving engine, engine step k). In a
serving engine, tt.prefill and tt.request_token(k) are each request's own: its prefill rows
(chunked prefills included), and the row that makes its k-th token (token 1: its prefill);
the serving rows decide them (_edit/requests.py), and elsewhere request_token is refused.
table_selectors() turns one into the patch table's selectors (the library's "every", "call",
"calls", "token", "tokens").
"""

from __future__ import annotations

from collections.abc import Iterable

from .._common import loader
from .._errors import fail


class CallSelector:
    def __init__(self, by, values, text):
        self.by = by          # "every" | "call" | "token" | "request_token" | "any" (a union)
        self.values = values  # frozenset/range of ints, or a tuple of selectors for "any"
        self.text = text

    def matches(self, k: int, token: int) -> bool:
        if self.by == "every":
            return True
        if self.by == "any":
            return any(s.matches(k, token) for s in self.values)
        if self.by == "request_token":
            return False  # a served request's own token: only the serving rows say
        return (k if self.by == "call" else token) in self.values

    def parts(self):
        """The selectors this one is the union of (itself when it is no union)."""
        if self.by != "any":
            return [self]
        return [p for s in self.values for p in s.parts()]

    @property
    def per_request(self) -> bool:
        """Whether it names a request's own tokens (tt.request_token), which only a serving
        engine's rows can decide."""
        return any(p.by == "request_token" for p in self.parts())

    def __or__(self, other: CallSelector | int | range) -> CallSelector:
        other = as_calls(other)
        return CallSelector("any", (self, other), f"{self.text} | {other.text}")

    def table_selectors(self):
        """The patch table's selectors for this one: a list of "every", ("call", k),
        ("calls", a, b), ("token", k), ("tokens", a, b); their union is this selector. Sets
        are merged into disjoint runs, so within one kind no call is selected twice."""
        if self.by == "every":
            return ["every"]
        parts = {"call": [], "token": []}
        stack = [self]
        while stack:
            sel = stack.pop()
            if sel.by == "every":
                return ["every"]
            if sel.by == "any":
                stack.extend(sel.values)
            elif sel.by == "request_token":
                fail(f"{self.text}: tt.request_token(k) is a served request's own k-th token, "
                     f"which only a serving engine's rows decide")
            else:
                parts[sel.by].append(sel.values)
        out = []
        for kind in ("call", "token"):
            for a, b in _runs(parts[kind]):
                out.append((kind, a) if a == b else (kind + "s", a, b))
        return out

    def __repr__(self):
        return self.text


def _runs(value_sets):
    """Disjoint inclusive runs [(a, b)] covering the union of ranges and int sets."""
    spans = []
    for values in value_sets:
        if isinstance(values, range) and values.step == 1:
            if len(values):
                spans.append((values.start, values[-1]))
        else:
            spans.extend((v, v) for v in values)
    spans.sort()
    merged = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _max_number():
    """The largest call or token number (32 bits in the recorder and the patch table):
    include/tokentrace/tokentrace.h, through the extension."""
    native = loader.load()
    return native.MAX_CALL_NUMBER if native is not None else 2**32 - 1


def _ints(by, value):
    if isinstance(value, range):
        if value.step <= 0 or value.start < 1:
            fail(f"tt.{by}(range) takes increasing 1-based ranges, got {value!r}")
        if len(value) and value[-1] > _max_number():
            fail(f"tt.{by}(range): {value[-1]} is past the largest {by} number, "
                 f"{_max_number()}")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            fail(f"tt.{by}(k): k is 1-based, got {value}")
        if value > _max_number():
            fail(f"tt.{by}(k): k={value} is past the largest {by} number, {_max_number()}")
        return frozenset([value])
    if isinstance(value, (list, tuple, set, frozenset)) and value:
        return frozenset(_one for v in value for _one in _ints(by, v))
    fail(f"tt.{by}() takes an int k (1-based), a range, or a list of ints; got {value!r}")


def call(k: int | range | Iterable[int]) -> CallSelector:
    """The k-th call of the site (1-based); a range or list selects several."""
    return CallSelector("call", _ints("call", k), f"tt.call({k!r})")


def token(k: int | range | Iterable[int]) -> CallSelector:
    """Calls during token k (1-based; token 1 is the prefill); a range or list selects several."""
    return CallSelector("token", _ints("token", k), f"tt.token({k!r})")


def request_token(k: int | range | Iterable[int]) -> CallSelector:
    """In a serving engine, the row that makes each selected request's own k-th token (1-based;
    token 1 is the request's prefill, every chunk of it); a range or list selects several."""
    return CallSelector("request_token", _ints("request_token", k), f"tt.request_token({k!r})")


prefill = CallSelector("call", frozenset([1]), "tt.prefill")
every_call = CallSelector("every", None, "every call")


def as_calls(value: CallSelector | int | range | None) -> CallSelector:
    if value is None:
        return every_call
    if isinstance(value, CallSelector):
        return value
    if isinstance(value, (int, range)) and not isinstance(value, bool):
        return call(value)
    fail(f"calls= takes tt.prefill, tt.call(k), tt.token(k), tt.request_token(k), a range of "
         f"calls, or None (every call); got {value!r}")
