"""The op labels of a model's last trace, for edits that select ops by label in a later run.

TorchLens's labels follow loops and orphans, which take a whole root call to know
(_read/op_loops.py); an edit decides each op as it runs. So, as a TorchLens user labels a
trace and then intervenes by those labels, an edit by label numbers the ops of a run as the
last trace of the same model with op records numbered them: op n of root call k has the
labels the trace gave op n of its root call k (an orphan there has none).

The memory is the editing side's: a trace is handed the callback `for_model(model)` by
whoever made it knowing the model (_api: tt.trace, tt.record), and calls it with its op sites
when it first numbers them (_read/op_sites.py); the edits of that model recall them (hooks.py).
The reader knows nothing of edits, and nothing goes through a module both sides import.

    for_model(model)   a callback(sites, path) that remembers a trace's OpSites for `model`
                       (weakly: the memory never keeps a model alive)
    recall(model)      LabelMap or None
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, NamedTuple


class LabelMap(NamedTuple):
    """{(root call k, its n-th op, orphans included): (type, (type_index, step_index,
    pass))}, and the root calls it covers."""
    labels: dict[tuple[int, int], tuple[str, tuple[int, int, int]]]
    roots: frozenset[int]
    path: str  # the trace's file, to name it


_REMEMBERED: weakref.WeakKeyDictionary[Any, LabelMap] = weakref.WeakKeyDictionary()


def for_model(model: Any) -> Callable[[list[Any], str], None] | None:
    """The callback a trace of `model` calls with its op sites; None for a model that cannot
    be weakly referenced (nothing is remembered for it)."""
    try:
        ref = weakref.ref(model)
    except TypeError:
        return None

    def remember(sites: list[Any], path: str) -> None:
        alive = ref()
        if alive is not None and sites:
            _REMEMBERED[alive] = LabelMap(
                {(s.root, s.raw_step): (s.layer_type, (s.type_index, s.step_index, s.pass_index))
                 for s in sites}, frozenset(s.root for s in sites), path)
    return remember


def recall(model: Any) -> LabelMap | None:
    try:
        return _REMEMBERED.get(model)
    except TypeError:
        return None
