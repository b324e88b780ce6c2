"""The op labels of a model's last trace, for edits that select ops by label in a later run.

TorchLens's labels follow loops and orphans, which take a whole root call to know
(_read/op_loops.py); an edit decides each op as it runs. So, as a TorchLens user labels a
trace and then intervenes by those labels, an edit by label numbers the ops of a run as the
last trace of the same model with op records numbered them: op n of root call k has the
labels the trace gave op n of its root call k (an orphan there has none). The trace's labels
are remembered when they are first read (op_sites), for the model the trace recorded.

    remember(model, sites)   the OpSites of a trace of `model` (weakly keyed by the model)
    recall(model)            LabelMap or None
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple


class LabelMap(NamedTuple):
    """{(root call k, its n-th op, orphans included): (type, (type_index, step_index,
    pass))}, and the root calls it covers."""
    labels: dict[tuple[int, int], tuple[str, tuple[int, int, int]]]
    roots: frozenset[int]
    path: str  # the trace's file, to name it


_REMEMBERED: weakref.WeakKeyDictionary[Any, LabelMap] = weakref.WeakKeyDictionary()


def remember(model: Any, sites: list[Any], path: str) -> None:
    try:
        _REMEMBERED[model] = LabelMap(
            {(s.root, s.raw_step): (s.layer_type, (s.type_index, s.step_index, s.pass_index))
             for s in sites}, frozenset(s.root for s in sites), path)
    except TypeError:  # a model that cannot be weakly referenced: nothing remembered
        pass


def recall(model: Any) -> LabelMap | None:
    try:
        return _REMEMBERED.get(model)
    except TypeError:
        return None
