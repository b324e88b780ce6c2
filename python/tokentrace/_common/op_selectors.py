"""Selectors over ATen ops (tt.func, tt.in_module, tt.label, tt.contains, tt.where) and the
`&`, `|`, `~` algebra over them and tt.module(...), as TorchLens spells them.

A trace has two kinds of sites: module sites (a module address; `self` is the root) and op
sites (an outermost ATen op inside a root call, seen through its view, _read/op_sites.py's
OpSite: layer_type, func_name, layer_label, label, label_short, modules). A leaf addresses one
kind: tt.module(...) module sites, every other leaf op sites, and a leaf never matches a site
of the other kind. `a & b` and `a | b` address what their parts address; `~a` is the
complement within the kinds `a` addresses, so ~tt.func("relu") is every other op, not every
module as well. `a - b` is `a & ~b`.

An op's type (what tt.func matches, and the first part of its label) follows TorchLens's rule,
the function name lower-cased with its underscores removed, applied to the ATen name without
namespace and overload: aten::relu -> relu, aten::layer_norm -> layernorm, aten::add_ -> add,
aten::add.Tensor -> add. The Python calls TorchLens names otherwise (x / y truediv, x[i]
getitem) are ops of their own by that name (op_groups.py); others reach ATen under other
names (2 / x runs aten::reciprocal and aten::mul): FUNCTION_ATEN lists the ATen ops such
functions run, and tt.func matches the one whose output is the function's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from .._errors import fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .selectors import Selector

MODULE, OP = "module", "op"

# A Python function's type (TorchLens's) -> the types of the ATen ops it runs, in order, where
# that is not its own type alone: 2 / x is aten::reciprocal then aten::mul, x // y
# aten::floor_divide. The last is the op whose output is the function's. The one table of
# this fact: tt.func matches a function's output op by it, the op saver intercepts the
# functions that may run a selected op by it (op_mode.py), and op edits number the ops a
# function runs by it (_edit/op_labels.py; tests/python/test_op_sites.py checks it against
# what torch runs). The Python calls that op records keep as ops of their own and op modes
# know by name (x[i], torch.tensor, x.float(), x / y, x += y: op_groups.py) are their own
# type.
FUNCTION_ATEN = {
    "rtruediv": ("reciprocal", "mul"), "rdiv": ("reciprocal", "mul"),
    "floordiv": ("floordivide",), "ifloordiv": ("floordivide",), "rfloordiv": ("floordivide",),
    "imod": ("remainder",), "radd": ("add",), "rmul": ("mul",), "rmatmul": ("matmul",),
    "crossentropy": ("crossentropyloss",),
}


def _output_types(kind: str) -> tuple[str, ...]:
    """The types of the op whose output is a function of type `kind`'s (besides its own)."""
    aten = FUNCTION_ATEN.get(kind)
    return (aten[-1],) if aten else ()


# ATen ops that return a list of tensors: the reader (_read/op_sites.py) gives each piece a
# label, counting the ops that cut them. Ops that return a tuple of this many tensors: op
# records keep each output tensor, so these counts only serve files written before they did.
LIST_OPS = frozenset(f"aten::{n}" for n in (
    "split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "chunk",
    "unsafe_chunk", "tensor_split", "unbind", "hsplit", "vsplit", "dsplit"))
TUPLE_OPS = {f"aten::{n}": count for n, count in (
    ("topk", 2), ("sort", 2), ("kthvalue", 2), ("mode", 2), ("var_mean", 2), ("std_mean", 2),
    ("aminmax", 2), ("frexp", 2))}

_ACCEPTED = ("tt.module(...), tt.func(...), tt.in_module(...), tt.label(...), tt.contains(...), "
             "tt.where(...)")


_PYTHON_NAMES = {"numpy_T": "T"}


@functools.lru_cache(maxsize=4096)  # per op of a run: the names are the model's few functions
def op_type(name: str) -> str:
    """TorchLens's layer type of an op named `name` ("aten::layer_norm" -> "layernorm")."""
    base = name.rpartition("::")[2].partition(".")[0]  # no namespace, no overload
    # TorchLens names a function by its attribute: torch.linalg.vector_norm (ATen's
    # linalg_vector_norm) is vectornorm, x.T (ATen's numpy_T) is t.
    base = _PYTHON_NAMES.get(base, base.removeprefix("linalg_"))
    return base.lower().replace("_", "")


@functools.lru_cache(maxsize=4096)
def op_types_of(name: str) -> frozenset[str]:
    """The types of the ops whose output may be a function named `name`'s: its own, and for a
    Python operator its ATen op's ("__truediv__" -> truediv, div; "__rtruediv__" -> rtruediv,
    mul)."""
    kind = op_type(name)
    return frozenset((kind,) + _output_types(kind))


class SiteQuery:
    """A selector that is not a plain union of tt.module patterns: op leaves and composites.

    kinds: the kinds of sites it addresses. matches_module(name) / matches_op(op): whether it
    chooses that site. needs(names): the module sites that must be recorded for it to be
    decided (tt.in_module's module and the modules inside it)."""

    kinds: frozenset[str] = frozenset({OP})

    @property
    def names_ops(self) -> bool:
        return OP in self.kinds

    def matches_module(self, name: str) -> bool:
        return False

    def matches_op(self, op: Any) -> bool:
        return False

    def needs(self, names: list[str], what: str = "selector") -> set[str]:
        return set()

    def module_leaves(self) -> list[Selector]:
        return []

    def may_save(self, types: frozenset[str]) -> bool:
        """Whether an op of one of these types may be chosen: what saving decides before the
        op's label exists (True unless this selector rules the types out)."""
        return True

    def live_problem(self) -> str | None:
        """Why this selector cannot choose an op while it runs (an op-level edit), or None
        when it can."""
        return None

    def needs_history(self) -> bool:
        """Whether deciding it while the model runs needs each op's parents, the recent ops
        whose output it read (tt.preceded_by): the edits then keep a window of recent ops."""
        return False

    def needs_labels(self) -> bool:
        """Whether deciding it while the model runs needs the ops' TorchLens labels (tt.label,
        tt.contains, tt.regex, and tt.where, whose predicate may read them): an op-level edit
        numbers the ops only then (_edit/op_labels.py)."""
        return False

    def names_labels(self) -> bool:
        """Whether it chooses ops by label text (tt.label, tt.contains, tt.regex): a label the
        run never numbers chooses nothing, which the edits then say (_edit/hooks.py)."""
        return False

    def json_form(self) -> dict[str, Any] | None:
        """Its form in a JSON edit spec's "ops" object (_edit/json_spec.py), or None where it
        has none (tt.where, ~, a function's output=)."""
        return None

    def matches_live(self, op: Any) -> bool:
        """Whether it chooses the op running now (op: _edit/op_edits.py's LiveOp); only for
        a selector whose live_problem() is None."""
        return self.matches_op(op)

    def resolve(self, sites: Any, what: str = "selector") -> list[str]:
        """The module sites this selector chooses, in `sites` order; a tt.module pattern in it
        that names no site is the error tt.module gives."""
        sites = list(sites)
        for leaf in self.module_leaves():
            leaf.resolve(sites, what)
        return [s for s in sites if self.matches_module(s)]

    def __and__(self, other: Any) -> SiteQuery:
        return _combine("and", self, other)

    def __rand__(self, other: Any) -> SiteQuery:
        return _combine("and", other, self)

    def __or__(self, other: Any) -> SiteQuery:
        return _combine("or", self, other)

    def __ror__(self, other: Any) -> SiteQuery:
        return _combine("or", other, self)

    def __sub__(self, other: Any) -> SiteQuery:
        return _combine("and", self, ~as_query(other, "the right side of -"))

    def __invert__(self) -> SiteQuery:
        return NotQuery(self)


def as_query(value: Any, what: str) -> Any:
    """A selector for the algebra: a SiteQuery or a tt.module Selector (a string is
    tt.module(string), as everywhere)."""
    from .selectors import Selector, module
    if isinstance(value, (SiteQuery, Selector)):
        return value
    if isinstance(value, str):
        return module(value)
    fail(f"{what} must be a selector ({_ACCEPTED}) or a module address; got "
         f"{type(value).__name__}")


def _combine(op: str, left: Any, right: Any) -> SiteQuery:
    parts: list[Any] = []
    for side in (as_query(left, f"the left side of {_SYMBOL[op]}"),
                 as_query(right, f"the right side of {_SYMBOL[op]}")):
        # Chains of one operator are one n-ary selector (as TorchLens flattens them).
        parts.extend(side.parts if isinstance(side, AllQuery) and side.op == op else [side])
    return AllQuery(op, tuple(parts))


_SYMBOL = {"and": "&", "or": "|"}


class AllQuery(SiteQuery):
    """`a & b & ...` or `a | b | ...` (op "and" / "or"); decided part by part, left to right,
    stopping at the first part that settles it (a tt.where predicate is only asked then)."""

    def __init__(self, op: str, parts: tuple[Any, ...]) -> None:
        self.op, self.parts = op, parts
        self.kinds = frozenset().union(*(_kinds(p) for p in parts))

    def matches_module(self, name: str) -> bool:
        test = (p.matches_module(name) for p in self.parts)
        return all(test) if self.op == "and" else any(test)

    def matches_op(self, op: Any) -> bool:
        test = (p.matches_op(op) for p in self.parts)
        return all(test) if self.op == "and" else any(test)

    def needs(self, names: list[str], what: str = "selector") -> set[str]:
        return set().union(*(_needs(p, names, what) for p in self.parts))

    def may_save(self, types: frozenset[str]) -> bool:
        test = (p.may_save(types) for p in self.parts)
        return all(test) if self.op == "and" else any(test)

    def live_problem(self) -> str | None:
        return next((why for why in map(_live_problem, self.parts) if why), None)

    def needs_labels(self) -> bool:
        return any(isinstance(p, SiteQuery) and p.needs_labels() for p in self.parts)

    def needs_history(self) -> bool:
        return any(isinstance(p, SiteQuery) and p.needs_history() for p in self.parts)

    def names_labels(self) -> bool:
        return any(isinstance(p, SiteQuery) and p.names_labels() for p in self.parts)

    def json_form(self) -> dict[str, Any] | None:
        maybe = [p.json_form() if isinstance(p, SiteQuery) else None for p in self.parts]
        forms = [f for f in maybe if f is not None]
        if len(forms) < len(maybe):
            return None
        if self.op == "or":  # tt.func(a) | tt.func(b): "func": [a, b]
            if not all(set(f) == {"func"} for f in forms):
                return None
            names = [n for f in forms for n in (f["func"] if isinstance(f["func"], list)
                                                 else [f["func"]])]
            return {"func": names}
        merged: dict[str, Any] = {}
        for f in forms:
            if set(f) & set(merged):  # two of one key (tt.func(a) & tt.func(b)): no form
                return None
            merged.update(f)
        return merged

    def matches_live(self, op: Any) -> bool:
        test = (p.matches_live(op) for p in self.parts)
        return all(test) if self.op == "and" else any(test)

    def module_leaves(self) -> list[Selector]:
        return [leaf for p in self.parts for leaf in _leaves(p)]

    def __repr__(self) -> str:
        return "(" + f" {_SYMBOL[self.op]} ".join(repr(p) for p in self.parts) + ")"


class NotQuery(SiteQuery):
    """`~a`: the sites of a's kinds that `a` does not choose."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.kinds = _kinds(inner)

    def matches_module(self, name: str) -> bool:
        return MODULE in self.kinds and not self.inner.matches_module(name)

    def matches_op(self, op: Any) -> bool:
        return OP in self.kinds and not self.inner.matches_op(op)

    def needs(self, names: list[str], what: str = "selector") -> set[str]:
        return _needs(self.inner, names, what)

    def live_problem(self) -> str | None:
        return _live_problem(self.inner)

    def needs_labels(self) -> bool:
        return isinstance(self.inner, SiteQuery) and self.inner.needs_labels()

    def needs_history(self) -> bool:
        return isinstance(self.inner, SiteQuery) and self.inner.needs_history()

    def names_labels(self) -> bool:
        return isinstance(self.inner, SiteQuery) and self.inner.names_labels()

    def matches_live(self, op: Any) -> bool:
        return not self.inner.matches_live(op)

    def module_leaves(self) -> list[Selector]:
        return _leaves(self.inner)

    def __invert__(self) -> Any:
        return self.inner

    def __repr__(self) -> str:
        return f"(~{self.inner!r})"


def _kinds(sel: Any) -> frozenset[str]:
    return sel.kinds if isinstance(sel, SiteQuery) else frozenset({MODULE})


def _needs(sel: Any, names: list[str], what: str) -> set[str]:
    return sel.needs(names, what) if isinstance(sel, SiteQuery) else set()


def _live_problem(sel: Any) -> str | None:
    if not isinstance(sel, SiteQuery):
        return (f"{sel!r} selects modules; an op-level edit's selector selects ops only (edit "
                f"a module's output with a rule of its own)")
    return sel.live_problem()


def _leaves(sel: Any) -> list[Selector]:
    return sel.module_leaves() if isinstance(sel, SiteQuery) else [sel]


class FuncQuery(SiteQuery):
    """tt.func(name): ops of that type, or of that ATen name ("aten::addmm")."""

    def __init__(self, given: str, types: frozenset[str], text: str,
                 output: int | None = None) -> None:
        self.given, self.types, self.text, self.output = given, types, text, output

    def matches_op(self, op: Any) -> bool:
        if self.output is not None and op.output_index != self.output:
            return False
        return op.layer_type in self.types or op.func_name == self.given

    def may_save(self, types: frozenset[str]) -> bool:
        return not self.types.isdisjoint(types)

    def live_problem(self) -> str | None:
        if self.output:
            return (f"{self!r} selects an op's output {self.output}; an op-level edit edits "
                    f"an op's first output tensor (output=0, or no output=)")
        return None

    def matches_live(self, op: Any) -> bool:
        # The function running now may reach ATen under other names (x / y is aten::div):
        # any type it may run as counts, as may_save decides.
        return not self.types.isdisjoint(op.types) or op.func_name == self.given

    def json_form(self) -> dict[str, Any] | None:
        return {"func": self.given} if self.output is None else None

    def __repr__(self) -> str:
        return f"tt.func({self.text})"


class InModuleQuery(SiteQuery):
    """tt.in_module(address): ops run inside a call of that module or of a module inside it;
    "address:k" only inside its k-th call."""

    def __init__(self, address: str) -> None:
        self.address = address
        site, sep, k = address.rpartition(":")
        self.site = site if sep and k.isdigit() else address
        self.k: int | None = int(k) if sep and k.isdigit() else None

    def json_form(self) -> dict[str, Any] | None:
        return {"in_module": self.address}

    def matches_op(self, op: Any) -> bool:
        prefix = self.site + "."
        for frame in op.modules:
            site, _, k = frame.rpartition(":")
            if self.k is not None:
                if site == self.site and int(k) == self.k:
                    return True
            elif site == self.site or site.startswith(prefix):
                return True
        return False

    def needs(self, names: list[str], what: str = "selector") -> set[str]:
        from .selectors import Selector
        Selector([self.site]).resolve(names, f"{what} {self!r}")  # an unknown module: its error
        prefix = self.site + "."
        return {n for n in names if n == self.site or n.startswith(prefix)}

    def __repr__(self) -> str:
        return f"tt.in_module({self.address!r})"


class LabelTextQuery(SiteQuery):
    """A selector over op label text (tt.label, tt.regex, tt.contains): deciding it while the
    model runs needs the labels numbered, and a label the run never numbers chooses nothing.
    key: its name, as tt.<key>(...) and as the key of a JSON spec's "ops" object."""

    key = ""

    def __init__(self, text: str) -> None:
        self.text = text

    def needs_labels(self) -> bool:
        return True

    def names_labels(self) -> bool:
        return True

    def json_form(self) -> dict[str, Any] | None:
        return {self.key: self.text}

    def __repr__(self) -> str:
        return f"tt.{self.key}({self.text!r})"


class LabelQuery(LabelTextQuery):
    """tt.label(text): the op whose layer_label, pass-qualified label or short label is text."""

    key = "label"

    def matches_op(self, op: Any) -> bool:
        return self.text in (op.layer_label, op.label, op.label_short)

    def may_save(self, types: frozenset[str]) -> bool:
        return self.text.partition("_")[0] in types


class RegexQuery(LabelTextQuery):
    """tt.regex(pattern): ops with a label re.search finds the pattern in (case-sensitive)."""

    key = "regex"

    def __init__(self, pattern: str, compiled: re.Pattern[str]) -> None:
        super().__init__(pattern)
        self.pattern, self._re = pattern, compiled

    def matches_op(self, op: Any) -> bool:
        search = self._re.search
        return any(search(text) for text in (op.layer_label, op.label, op.label_short))


class ContainsQuery(LabelTextQuery):
    """tt.contains(text): ops whose layer_label contains text, ignoring case."""

    key = "contains"

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._low = text.lower()

    def matches_op(self, op: Any) -> bool:
        return self._low in op.layer_label.lower()


class WhereQuery(SiteQuery):
    """tt.where(predicate): ops for which predicate(op) is true (op: an OpSite)."""

    def __init__(self, predicate: Callable[[Any], Any], name_hint: str | None) -> None:
        self.predicate, self.name_hint = predicate, name_hint

    def matches_op(self, op: Any) -> bool:
        return bool(self.predicate(op))

    def needs_labels(self) -> bool:
        return True  # its predicate may read op.layer_label

    def __repr__(self) -> str:
        return f"tt.where({self.name_hint or getattr(self.predicate, '__name__', '<predicate>')})"


def func(name: str | Callable[..., Any], *, output: int | str | None = None) -> FuncQuery:
    """Selects ops by function name or type: tt.func("relu"), tt.func("aten::addmm"),
    tt.func(torch.relu) (a function: its __name__; TorchLens takes strings only). output=i:
    only the op's i-th output tensor (a split's pieces)."""
    if output is not None and (not isinstance(output, int) or isinstance(output, bool)
                               or output < 0):
        fail(f"tt.func(..., output=) takes the index of one output tensor (0 for the first; "
             f"a split's pieces are 0, 1, ...), got {output!r}; output roles are not supported")
    if not isinstance(name, str):
        if not (callable(name) and isinstance(getattr(name, "__name__", None), str)):
            fail(f"tt.func() takes a function name such as 'relu' or 'aten::addmm', or a torch "
                 f"function such as torch.relu; got {type(name).__name__}")
        name = name.__name__
    if not name.strip():
        fail("tt.func() got an empty name; pass a function name such as 'relu'")
    given = name.strip()
    base = given if "::" in given else given.rpartition(".")[2]  # torch.relu -> relu
    text = repr(given) + ("" if output is None else f", output={output}")
    return FuncQuery(given, op_types_of(base), text, output)


def in_module(address_or_op: Any, address: str | None = None) -> Any:
    """Selects the ops run inside module `address` and the modules inside it:
    tt.in_module("transformer.h.0"); "address:k" for its k-th call only. With two arguments,
    in_module(op, address) is whether that op ran there (TorchLens's older form)."""
    if address is not None:
        return in_module(address).matches_op(address_or_op)
    if not isinstance(address_or_op, str) or not address_or_op:
        fail(f"tt.in_module() takes a module address such as 'transformer.h.0' (or "
             f"'transformer.h.0:2' for its 2nd call); got {address_or_op!r}")
    return InModuleQuery(address_or_op)


def label(text: str) -> LabelQuery:
    """Selects the op with that TorchLens label: 'relu_1_2', 'relu_1_2:3' or 'relu_1:3'."""
    if not isinstance(text, str) or not text:
        fail(f"tt.label() takes an op label such as 'relu_1_2' or 'linear_1:2'; got {text!r}")
    return LabelQuery(text)


def regex(pattern: str) -> RegexQuery:
    """Selects the ops whose label the pattern matches (re.search, case-sensitive):
    tt.regex("^relu_"); a bad pattern is an error here, not at the search."""
    if not isinstance(pattern, str) or not pattern:
        fail(f"tt.regex() takes a regular expression over op labels such as r'^relu_'; got "
             f"{pattern!r}")
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        fail(f"tt.regex({pattern!r}) is not a regular expression: {exc}")
    return RegexQuery(pattern, compiled)


# What an op label looks like: relu_1_2, relu_1_2:3, relu_1:3 (_read/op_sites.py numbers them).
_OP_LABEL = re.compile(r"^[a-z0-9]+_\d+(?:_\d+(?::\d+)?|:\d+)$")


def is_op_label(text: str) -> bool:
    """Whether `text` has the form of an op label (a module may still be named so)."""
    return _OP_LABEL.match(text) is not None


def contains(text: str) -> ContainsQuery:
    """Selects the ops whose label contains `text`, ignoring case: tt.contains('relu')."""
    if not isinstance(text, str) or not text:
        fail(f"tt.contains() takes a part of an op label such as 'relu'; got {text!r}")
    return ContainsQuery(text)


def where(predicate: Callable[[Any], Any], *, name_hint: str | None = None) -> WhereQuery:
    """Selects the ops for which predicate(op) is true; op is an OpSite (layer_type,
    func_name, layer_label, label, modules, shape, out, ...)."""
    if not callable(predicate):
        fail(f"tt.where() takes a function op -> bool, e.g. tt.where(lambda op: "
             f"op.shape[-1] == 32); got {type(predicate).__name__}")
    if name_hint is not None and not isinstance(name_hint, str):
        fail(f"tt.where(name_hint=) takes a string; got {type(name_hint).__name__}")
    return WhereQuery(predicate, name_hint)


class _TemporalQuery(SiteQuery):
    """TorchLens's temporal selectors: an op chosen by the ops next to it in the data flow
    (op records keep which op's output each op read: OpSite.parents, .children). Decided
    when the trace is read (find_sites, save=, trace[...]); an edit decides each op as it
    runs, before the ops that read its output exist."""

    symbol = ""
    relation = ""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def _neighbours(self, op: Any) -> list[Any]:
        return list(getattr(op, self.relation, ()))

    def matches_op(self, op: Any) -> bool:
        return any(self.inner.matches_op(n) for n in self._neighbours(op))

    def needs(self, names: list[str], what: str = "selector") -> set[str]:
        return _needs(self.inner, names, what)

    def live_problem(self) -> str | None:
        return (f"tt.{self.symbol}(...) chooses an op by the ops next to it in the data flow, "
                f"known when the trace is read; use it in save=, sites= or find_sites, and "
                f"edit with tt.func(...) / tt.in_module(...) / tt.label(...)")

    def module_leaves(self) -> list[Selector]:
        return _leaves(self.inner)

    def __repr__(self) -> str:
        return f"tt.{self.symbol}({self.inner!r})"


class FollowedByQuery(_TemporalQuery):
    """tt.followed_by(sel): ops whose output a later op that `sel` chooses reads."""

    symbol, relation = "followed_by", "children"


class PrecededByQuery(_TemporalQuery):
    """tt.preceded_by(sel): ops that read the output of an earlier op that `sel` chooses.
    Also in an op-level edit (tt.when): the edits keep the recent ops' outputs and ask `sel`
    of the ones the op reads (RecentOps, _edit/op_edits.py)."""

    symbol, relation = "preceded_by", "parents"

    def live_problem(self) -> str | None:
        return _live_problem(self.inner)

    def needs_history(self) -> bool:
        return True

    def needs_labels(self) -> bool:
        return isinstance(self.inner, SiteQuery) and self.inner.needs_labels()

    def matches_live(self, op: Any) -> bool:
        return any(self.inner.matches_live(p) for p in getattr(op, "parents", ()))


def _temporal(cls: Any, inner: Any) -> Any:
    query = as_query(inner, f"tt.{cls.symbol}()")
    if OP not in _kinds(query):
        fail(f"tt.{cls.symbol}() takes an op selector (tt.func('relu'), tt.label(...), "
             f"tt.in_module(...), ...), got {query!r}, which selects modules")
    return cls(query)


def followed_by(inner: Any) -> FollowedByQuery:
    """Selects the ops whose output a later op matching `inner` reads, as TorchLens's
    tl.followed_by: tt.func("conv2d") & tt.followed_by(tt.func("relu")) is each conv2d that
    feeds a relu."""
    return _temporal(FollowedByQuery, inner)


def preceded_by(inner: Any) -> PrecededByQuery:
    """Selects the ops that read the output of an earlier op matching `inner`, as TorchLens's
    tl.preceded_by: tt.func("relu") & tt.preceded_by(tt.func("conv2d")) is each relu fed by a
    conv2d."""
    return _temporal(PrecededByQuery, inner)


class AtStepQuery(SiteQuery):
    """tt.at_step(*steps): the ops of those episode steps (0-based: step 0 is the first root
    call, the prefill; step k the root call k + 1), as TorchLens's at_step."""

    def __init__(self, steps: tuple[int, ...]) -> None:
        self.steps = frozenset(steps)
        self._text = ", ".join(str(s) for s in steps)

    def matches_op(self, op: Any) -> bool:
        return getattr(op, "root", op.token) - 1 in self.steps

    def matches_live(self, op: Any) -> bool:
        return op.token - 1 in self.steps

    def __repr__(self) -> str:
        return f"tt.at_step({self._text})"


def at_step(*steps: int) -> AtStepQuery:
    """Selects the ops of the given 0-based episode steps (TorchLens's at_step): each root
    call (token) is a step, step 0 the prefill; compose it with any op selector:
    tt.when(tt.func("softmax") & tt.at_step(2), tt.zero_ablate())."""
    if not steps or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                            for s in steps):
        fail(f"tt.at_step() takes one or more step indexes >= 0 (0 is the prefill), got "
             f"{steps!r}")
    return AtStepQuery(tuple(steps))
