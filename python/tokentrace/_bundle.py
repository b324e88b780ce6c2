"""TorchLens's tl.bundle / tl.Bundle: several traces by name, compared at a site.

    bundle = tt.bundle({"clean": clean, "patched": patched}, baseline="clean")
    bundle.compare_at("relu_1_2")   # cosine distances between the members' outputs there

A site is what indexes a trace (an op label "relu_1_2", "relu_1_2:2", a module call "site:k",
a module called once "site") or a selector that chooses one site in each member
(tt.func("relu"), tt.module("1")); its output must have been saved (save=) in every member.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from ._common import OP_EDIT_SITE, OP_SAVE_SITE
from ._errors import fail
from ._read import Trace


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).to(torch.float64).cpu()


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 - cos(a, b) of the flattened tensors (0 for two zero tensors, 1 for one)."""
    fa, fb = _flat(a), _flat(b)
    denom = fa.norm() * fb.norm()
    if denom == 0:
        return torch.tensor(0.0 if fa.norm() == fb.norm() else 1.0, dtype=torch.float64)
    return 1.0 - (fa @ fb) / denom


def relative_l2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| / |a| of the flattened tensors (|a - b| where a is zero)."""
    fa, fb = _flat(a), _flat(b)
    diff = (fa - fb).norm()
    denom = fa.norm()
    return diff if denom == 0 else diff / denom


METRICS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cosine": cosine_distance, "relative_l2": relative_l2,
}


def _metric(metric: Any) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    if callable(metric):
        return metric
    if isinstance(metric, str) and metric in METRICS:
        return METRICS[metric]
    fail(f"metric= takes {', '.join(repr(m) for m in METRICS)} or a function (a, b) -> "
         f"distance, got {metric!r}")


class Bundle:
    """Traces by name (TorchLens's Bundle): bundle["clean"], bundle.names, bundle.baseline,
    bundle.compare_at(site), bundle.node(site) (each member's output there), bundle.metric(fn),
    bundle.most_changed()."""

    def __init__(self, members: Any, *, names: Any = None, baseline: Any = None) -> None:
        self._members = self._parse(members, names)
        if not self._members:
            fail("tt.bundle() needs at least one trace: tt.bundle({'clean': a, 'patched': b})")
        self.baseline = self._baseline(baseline)

    @staticmethod
    def _parse(members: Any, names: Any) -> dict[str, Trace]:
        if isinstance(members, Mapping):
            pairs = list(members.items())
        elif isinstance(members, (list, tuple)):
            if names is not None:
                names = list(names)
                if len(names) != len(members):
                    fail(f"tt.bundle(names=) has {len(names)} names for {len(members)} traces")
                pairs = list(zip(names, members))
            elif all(isinstance(m, tuple) and len(m) == 2 for m in members):
                pairs = list(members)
            else:
                pairs = [(f"run_{i}", m) for i, m in enumerate(members)]
        else:
            fail(f"tt.bundle() takes a dict of name -> trace (or a list of traces), got "
                 f"{type(members).__name__}")
        out: dict[str, Trace] = {}
        for name, trace in pairs:
            if not isinstance(name, str):
                fail(f"tt.bundle() names members by str, got {name!r}")
            if not isinstance(trace, Trace):
                fail(f"tt.bundle() member {name!r} is a {type(trace).__name__}, not a trace "
                     f"(from tt.trace, tt.record or tt.load)")
            if name in out:
                fail(f"tt.bundle() got the member name {name!r} twice")
            out[name] = trace
        return out

    def _baseline(self, baseline: Any) -> str | None:
        if baseline is None:
            return None
        if isinstance(baseline, Trace):
            for name, trace in self._members.items():
                if trace is baseline:
                    return name
            fail("tt.bundle(baseline=) is a trace that is not one of the members; pass its name")
        if baseline not in self._members:
            fail(f"tt.bundle(baseline={baseline!r}) names no member; the members are "
                 f"{self.names}")
        return str(baseline)

    @property
    def names(self) -> list[str]:
        return list(self._members)

    @property
    def members(self) -> dict[str, Trace]:
        return dict(self._members)

    def __getitem__(self, name: str) -> Trace:
        if name not in self._members:
            fail(f"no member {name!r} in this bundle; its members are {self.names}")
        return self._members[name]

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def _out(self, name: str, trace: Trace, site: Any) -> torch.Tensor:
        if isinstance(site, str):
            found = trace[site]
        else:
            table = trace.find_sites(site)
            if len(table) != 1:
                fail(f"{site!r} chooses {len(table)} sites in member {name!r}; compare_at takes "
                     f"one site: an op label such as 'relu_1_2' or 'site:k'")
            found = table.first()
        out = found.out
        if not isinstance(out, torch.Tensor):
            fail(f"{site!r} in member {name!r} has no saved output tensor; trace it with "
                 f"save= selecting it (save='all' or save=tt.func(...) / tt.label(...))")
        return out

    def node(self, site: Any) -> dict[str, torch.Tensor]:
        """{member: its saved output at `site`}."""
        return {name: self._out(name, trace, site) for name, trace in self._members.items()}

    def compare_at(self, site: Any, metric: Any = "cosine") -> torch.Tensor:
        """The members' pairwise distances at `site` (a square matrix in member order; the
        default metric 1 - cosine similarity, as TorchLens's)."""
        fn = _metric(metric)
        outs = list(self.node(site).values())
        matrix = torch.zeros(len(outs), len(outs))
        for i, left in enumerate(outs):
            for j, right in enumerate(outs):
                if i != j:
                    if left.shape != right.shape:
                        fail(f"{site!r} has shapes {list(left.shape)} and {list(right.shape)} "
                             f"in members {self.names[i]!r} and {self.names[j]!r}; compare a "
                             f"site of one shape")
                    matrix[i, j] = float(fn(left, right))
        return matrix

    def metric(self, fn: Callable[[Trace], Any]) -> dict[str, Any]:
        """{member: fn(its trace)}."""
        if not callable(fn):
            fail(f"bundle.metric() takes a function trace -> value, got {type(fn).__name__}")
        return {name: fn(trace) for name, trace in self._members.items()}

    def most_changed(self, baseline: Any = None, *, top_k: int = 10,
                     metric: Any = "cosine") -> list[tuple[str, float]]:
        """[(site, distance)] of the sites saved in every member, by the mean distance of the
        other members' outputs from the baseline's there, largest first (top_k of them)."""
        fn = _metric(metric)
        base = self._baseline(baseline) if baseline is not None else self.baseline
        if base is None:
            base = self.names[0]
        others = [n for n in self.names if n != base]
        if not others:
            fail("bundle.most_changed() compares members with a baseline: give two or more")
        scores = []
        for site in _saved_keys(self._members[base]):
            try:
                ref = self._out(base, self._members[base], site)
                outs = [self._out(n, self._members[n], site) for n in others]
            except Exception:  # not saved (or not there) in some member: not compared
                continue
            if any(o.shape != ref.shape for o in outs):
                continue
            scores.append((site, sum(float(fn(ref, o)) for o in outs) / len(outs)))
        scores.sort(key=lambda row: -row[1])
        return scores[:top_k]

    def __repr__(self) -> str:
        return f"<tokentrace.Bundle {self.names} baseline={self.baseline!r}>"


def _saved_keys(trace: Trace) -> list[str]:
    """The keys of the sites with a saved output: each op label, each module call."""
    keys = []
    ops = any(kind == "op" for _, kind, _ in trace.state.sites.values())
    if ops:
        from ._common import where
        keys += [op.key for op in trace.find_sites(where(lambda op: True))
                 if isinstance(op.out, torch.Tensor)]
    for name in trace.sites:
        if trace.state.sites[name][1] == "op" or name in (OP_SAVE_SITE, OP_EDIT_SITE):
            continue
        for call in trace[name].calls:
            if isinstance(call.out, torch.Tensor):
                keys.append(call.name)
    return keys


def bundle(members: Any, *, names: Any = None, baseline: Any = None) -> Bundle:
    """TorchLens's tl.bundle({name: trace, ...}, baseline=name): a Bundle."""
    return Bundle(members, names=names, baseline=baseline)
