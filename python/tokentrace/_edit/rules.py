"""Rules of edits: where (a site selector), when (a call selector), what (an op or a callable).

make_rule checks what tt.when and the JSON reader (json_spec.py) are given; EditSpec
(spec.py) holds the rules of a spec.
"""

from .._common import Selector, as_selector
from .._errors import fail
from .calls import as_calls
from .operations import Op


class EditContext:
    """What a callable action is told: the site, its call number k, and the token."""

    __slots__ = ("site", "call", "token")

    def __init__(self, site: str, call: int, token: int) -> None:
        self.site, self.call, self.token = site, call, token

    def __repr__(self):
        return f"EditContext(site={self.site!r}, call={self.call}, token={self.token})"


class Rule:
    def __init__(self, selector, action, calls, input=None):
        self.selector = selector
        self.action = action
        self.calls = calls
        self.input = input  # a path into the call's inputs, or None: the output

    def describe(self):
        act = self.action.describe() if isinstance(self.action, Op) else getattr(
            self.action, "__name__", "callable")
        where = f" input {self.input!r}" if self.input is not None else ""
        return f"{self.selector!r}{where} -> {act} on {self.calls!r}"



def make_rule(selector, action, calls=None, input=None):
    """A checked Rule (the arguments of tt.when; see there)."""
    selector = as_selector(selector, "tt.when selector")
    if selector.names_ops:
        fail(f"op-level edits are not supported yet ({selector!r} selects ops); edit a "
             f"module's output with tt.module(...)")
    if not isinstance(selector, Selector):  # tt.module(...) & / ~ ...: no JSON form, no plan
        fail(f"tt.when takes tt.module(...) selectors, joined with | ({selector!r} uses & or ~, "
             f"which select for reading: trace.find_sites(...), sites=, save=)")
    if not (isinstance(action, Op) or callable(action)):
        fail(f"tt.when action must be an edit op (tt.zero(), tt.scale(f), ...) or a callable "
             f"fn(values, *, ctx); got {type(action).__name__}")
    if input is not None and (not isinstance(input, str) or not input):
        fail(f"tt.when input= takes a path into the call's inputs, such as 'hidden_states' or "
             f"'past_key_values.layers[0].values'; got {input!r}")
    return Rule(selector, action, as_calls(calls), input)
