"""What the edits of one run did: EditReport, read from the patch table's counters and the
Python counters of callable rules."""

from __future__ import annotations

import os
import sys
import warnings

from .._common import PACKAGE_DIR
from .._errors import EditSkipWarning, TokentraceError


class EditReport:
    """What the edits of one run did. num_fires (total; fire_count is TorchLens's name),
    per_rule [(rule, fires)] (rule_fire_counts: the same as a dict), num_skips,
    per_rule_skips, skip_reasons {rule: last reason}, last_skip_reason. The native table's
    counters are read the first time one of these is asked for (a device sync on CUDA), never
    while the model runs."""

    def __init__(self, hooks, run, python_fires):
        self._hooks, self._run = hooks, run
        self._python_fires = list(python_fires)
        self._data = None

    def _read(self):
        if self._data is None:
            self._data = self._hooks._snapshot(self._run, self._python_fires)
        return self._data

    @property
    def num_fires(self) -> int:
        return sum(n for _, n in self._read()["fires"])

    @property
    def per_rule(self) -> list[tuple[str, int]]:
        return list(self._read()["fires"])

    @property
    def fire_count(self) -> int:
        """TorchLens's name for num_fires."""
        return self.num_fires

    @property
    def rule_fire_counts(self) -> dict[str, int]:
        """TorchLens's per-rule fire counts: {rule text: fires} (per_rule as a dict; rules
        with the same text add up)."""
        counts: dict[str, int] = {}
        for rule, n in self._read()["fires"]:
            counts[rule] = counts.get(rule, 0) + n
        return counts

    @property
    def num_skips(self) -> int:
        return sum(n for _, n in self._read()["skips"])

    @property
    def per_rule_skips(self) -> list[tuple[str, int]]:
        return list(self._read()["skips"])

    @property
    def skip_reasons(self) -> dict[str, str]:
        return dict(self._read()["reasons"])

    @property
    def last_skip_reason(self) -> str | None:
        reasons = list(self._read()["reasons"].values())
        return reasons[-1] if reasons else None

    def __repr__(self):
        try:
            text = f"num_fires={self.num_fires}, per_rule={self.per_rule}"
            if self.num_skips:
                text += f", num_skips={self.num_skips}, last_skip_reason={self.last_skip_reason!r}"
        except TokentraceError as exc:
            text = str(exc)
        return f"EditReport({text})"


def _user_stacklevel():
    """The warnings stacklevel of the first frame outside tokentrace and contextlib."""
    frame, level = sys._getframe(1), 2
    while frame is not None:
        name = frame.f_code.co_filename
        if not (os.path.abspath(name).startswith(PACKAGE_DIR) or name.endswith("contextlib.py")):
            return level
        frame, level = frame.f_back, level + 1
    return 1



def counters(rules, table, entry_rule, python_fires):
    """{"fires": [(rule text, n)], "skips": [(rule text, n)], "reasons": {rule text: why}}:
    `python_fires` (per rule, callables) plus the fires and skips of the table's entries
    (entry e belongs to rule entry_rule[e]); reads a device table's counters (a sync)."""
    fires = list(python_fires)
    skips = [0] * len(rules)
    reasons = {}
    if table is not None:
        read = table.counters()
        for e, i in enumerate(entry_rule):
            fires[i] += read["fires"][e]
            skips[i] += read["skips"][e]
        if any(read["skips"]):
            errors = table.errors()
            for e, i in enumerate(entry_rule):
                if read["skips"][e] and errors[e]:
                    reasons[rules[i].describe()] = errors[e].removeprefix("tokentrace: ")
    return {"fires": [(r.describe(), n) for r, n in zip(rules, fires)],
            "skips": [(r.describe(), n) for r, n in zip(rules, skips)],
            "reasons": reasons}


def warn_skips(data):
    """The one EditSkipWarning of a bound model: how many edits were skipped, and one why."""
    skipped = sum(n for _, n in data["skips"])
    rule, why = next(iter(data["reasons"].items())) if data["reasons"] else ("?", "?")
    warnings.warn(f"tokentrace: {skipped} edit(s) matched a call but did not fit the "
                  f"output and were skipped ({rule}: {why}); see "
                  f"last_report.skip_reasons", EditSkipWarning,
                  stacklevel=_user_stacklevel())


def warn_unfired(rules, stacklevel=None):
    """The one EditSkipWarning of op rules selecting by label that chose no op in a run."""
    shown = "; ".join(rules[:3]) + (f"; and {len(rules) - 3} more" if len(rules) > 3 else "")
    warnings.warn(f"tokentrace: {len(rules)} edit rule(s) selecting ops by label chose no op "
                  f"in this run ({shown}): no op the model ran had such a label. Labels are "
                  f"numbered while the model runs as the trace numbers them, except after a "
                  f"Python call that runs several ATen ops (F.normalize; docs/ops.md, "
                  f"'Labels in edits'); compare trace.find_sites(...) with "
                  f"last_report.rule_fire_counts", EditSkipWarning,
                  stacklevel=stacklevel or _user_stacklevel())
