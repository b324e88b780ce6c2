"""Site selectors: tt.module("glob"), lists of them, and `|`.

A selector is resolved against the sites of one model. Resolution is strict:
  * an exact address that is not a site is an error naming the closest sites (difflib);
  * a glob that matches no site is an error showing what site names look like.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable
from typing import Union

from .._errors import fail
from .naming import is_glob


class Selector:
    """A union of site patterns (fnmatch globs; `*` also crosses dots)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)

    def __or__(self, other: SiteSelector) -> Selector:
        return Selector(self.patterns + as_selector(other, "selector").patterns)

    def __ror__(self, other: SiteSelector) -> Selector:
        return as_selector(other, "selector") | self

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


# What a sites=/save=/inputs_of= argument or tt.when's selector takes.
SiteSelector = Union[Selector, str, Iterable[Union[Selector, str]]]


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
    """Accepts a Selector, a string (an address or glob), or a list/tuple/set of those."""
    if isinstance(value, Selector):
        return value
    if isinstance(value, str):
        return module(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        patterns = []
        for item in value:
            patterns.extend(as_selector(item, what).patterns)
        if not patterns:
            fail(f"{what} is an empty list; pass tt.module('addr'), a list of them, or None")
        return Selector(patterns)
    fail(f"{what} must be tt.module('addr' or 'glob'), a string, a list of them, or None; "
         f"got {type(value).__name__}")


def parse_env_list(text):
    """TOKENTRACE_SITES / TOKENTRACE_SAVE: comma- or space-separated globs."""
    parts = [p.strip() for p in text.replace(",", " ").split()]
    return [p for p in parts if p]
