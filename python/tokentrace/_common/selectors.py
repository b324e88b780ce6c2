"""Site selectors: tt.module("glob"), lists of them, and `|`; with op selectors (tt.func, ...,
op_selectors.py) also `&`, `~` and `-`.

A selector is resolved against the sites of one model. Resolution is strict:
  * an exact address that is not a site is an error naming the closest sites (difflib);
  * a glob that matches no site is an error showing what site names look like.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable
from typing import Any, Union

from .._errors import fail
from .naming import is_glob
from .op_selectors import MODULE, NotQuery, SiteQuery, as_query


class Selector:
    """A union of site patterns (fnmatch globs; `*` also crosses dots)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)

    # What op_selectors.py's algebra asks of every selector: the kinds of sites it addresses,
    # whether it chooses a module or an op site.
    kinds = frozenset({MODULE})
    names_ops = False

    def __or__(self, other: Any) -> Any:
        other = as_selector(other, "selector")
        if isinstance(other, SiteQuery):  # with an op selector: a composite
            return SiteQuery.__ror__(other, self)
        return Selector(self.patterns + other.patterns)

    def __ror__(self, other: Any) -> Any:
        return as_selector(other, "selector") | self

    def __and__(self, other: Any) -> SiteQuery:
        return SiteQuery.__rand__(as_query(other, "the right side of &"), self)

    def __rand__(self, other: Any) -> SiteQuery:
        return as_query(other, "the left side of &") & self

    def __sub__(self, other: Any) -> SiteQuery:
        return self & ~as_query(other, "the right side of -")

    def __invert__(self) -> SiteQuery:
        return NotQuery(self)

    def matches_module(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) if is_glob(p) else name == p
                   for p in self.patterns)

    def matches_op(self, op: Any) -> bool:
        return False

    def needs(self, names: list[str], what: str = "selector") -> set[str]:
        return set()

    def may_save(self, types: frozenset[str]) -> bool:
        return False  # an op is never a module site

    def __repr__(self) -> str:
        return " | ".join(f"tt.module({p!r})" for p in self.patterns)

    def resolve(self, sites: Iterable[str], what: str = "selector") -> list[str]:
        """The matching site names, in `sites` order. Raises on an unknown or empty pattern."""
        sites = list(sites)
        site_set = set(sites)
        chosen = set()
        for pattern in self.patterns:
            if is_glob(pattern):
                hits = [s for s in sites if fnmatch.fnmatchcase(s, pattern)]
                if not hits:
                    fail(f"{what} tt.module({pattern!r}) matches no site of this model; "
                         f"sites look like {_sample(sites)}")
            else:
                if pattern not in site_set:
                    close = difflib.get_close_matches(pattern, sites, n=3, cutoff=0.5)
                    hint = (f"did you mean {', '.join(repr(c) for c in close)}?" if close
                            else f"sites look like {_sample(sites)}")
                    fail(f"{what}: no site named {pattern!r} in this model; {hint}")
                hits = [pattern]
            chosen.update(hits)
        return [s for s in sites if s in chosen]


class PathAt:
    """tt.output_at(path) / tt.input_at(path): the model's (the root site's) output or input
    leaf at a path, as TorchLens's selectors of the same names; for tt.when edits, where it
    stands for tt.when(tt.module("self"), ..., output=path) (or input=path)."""

    def __init__(self, side: str, path: Any) -> None:
        self.side = side  # "output" or "input"
        self.path = path_text(path, f"tt.{side}_at")

    def __repr__(self) -> str:
        return f"tt.{self.side}_at({self.path!r})"


def path_text(path: Any, what: str) -> str:
    """A path as our grammar writes it: "logits", "past_key_values.layers[0].keys"; a tuple
    of keys and indices, as TorchLens writes one (("past_key_values", 0, 1)), is joined."""
    if isinstance(path, str) and path:
        return path
    if isinstance(path, tuple) and path and all(
            (isinstance(p, str) and p) or (isinstance(p, int) and not isinstance(p, bool))
            for p in path):
        text = ""
        for p in path:
            text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else p)
        return text
    fail(f"{what} takes a path, such as 'logits', 'past_key_values.layers[0].keys' or a tuple "
         f"('past_key_values', 0, 1); got {path!r}")


def output_at(path: Any) -> PathAt:
    """The model output's leaf at `path` ("logits", ("past_key_values", 0, 1)), for
    tt.when: tt.when(tt.output_at("logits"), fn) edits it at each root call."""
    return PathAt("output", path)


def input_at(path: Any) -> PathAt:
    """The model input at `path` ("input_ids", "attention_mask"), for tt.when:
    tt.when(tt.input_at("attention_mask"), fn) edits it before each root call."""
    return PathAt("input", path)


# What a sites=/save=/inputs_of= argument or tt.when's selector takes.
SiteSelector = Union[Selector, SiteQuery, str, Iterable[Union[Selector, SiteQuery, str]]]


def _sample(sites, n=4):
    picks = sites[:1] + sites[1:][: n - 1]
    return ", ".join(repr(s) for s in picks) + (", ..." if len(sites) > n else "")


def module(*patterns: str) -> Selector:
    """Selects sites by module address; globs allowed: tt.module("model.layers.*.mlp")."""
    if not patterns:
        fail("tt.module() needs at least one address or glob, e.g. tt.module('model.layers.*.mlp')")
    for p in patterns:
        if not isinstance(p, str) or not p:
            fail(f"tt.module() takes module addresses as strings, got {p!r}")
    return Selector(patterns)


def as_selector(value, what):
    """Accepts a Selector, an op selector or composite (SiteQuery), a string (an address or
    glob), or a list/tuple/set of those (their union)."""
    if isinstance(value, (Selector, SiteQuery)):
        return value
    if isinstance(value, str):
        return module(value)
    if isinstance(value, PathAt):
        read = "out (a call's first output tensor)" if value.side == "output" else (
            "inputs (a call's inputs by path)")
        fail(f"{what}: {value!r} selects a leaf of the model's {value.side} for tt.when edits "
             f"(tt.when({value!r}, action)); to read it, use trace['self:k'].{read}")
    if isinstance(value, (list, tuple, set, frozenset)):
        patterns = []
        queries = []
        for item in value:
            one = as_selector(item, what)
            if isinstance(one, SiteQuery):
                queries.append(one)
            else:
                patterns.extend(one.patterns)
        if not patterns and not queries:
            fail(f"{what} is an empty list; pass tt.module('addr'), a list of them, or None")
        union = Selector(patterns) if patterns else None
        for query in queries:
            union = query if union is None else union | query
        return union
    fail(f"{what} must be tt.module('addr' or 'glob'), an op selector (tt.func('relu'), "
         f"tt.in_module(...), tt.label(...), ...), a string, a list of them, or None; "
         f"got {type(value).__name__}")


def names_ops(value, what):
    """Whether a sites=/save= argument (None: no) selects ops, which turns op records on."""
    return value is not None and as_selector(value, what).names_ops


def op_selection(value, what):
    """The op selector a sites=/save= argument holds (None when it names no op)."""
    if value is None:
        return None
    selector = as_selector(value, what)
    return selector if selector.names_ops else None


def parse_env_list(text):
    """TOKENTRACE_SITES / TOKENTRACE_SAVE: comma- or space-separated globs."""
    parts = [p.strip() for p in text.replace(",", " ").split()]
    return [p for p in parts if p]
