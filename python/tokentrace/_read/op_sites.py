"""Op sites read back: TorchLens's labels for the ATen ops of a trace (trace["relu_1_2"],
trace["relu_1_2:3"], trace["relu_1:3"]) and trace.find_sites(selector).

Which ops are sites: the outermost ops (an op not run by another op) inside a root call
(`self:k`). TorchLens logs each call of a torch function or Tensor method of one forward;
their ATen ops are what op records see (torch.relu is aten::relu, F.linear aten::linear,
x + 1 aten::add), and the calls that run several ATen ops or none (x[i], x[i] = v,
torch.tensor, x.contiguous(), x.float()) are recorded as ops of their own holding their ATen
ops (_common/op_groups.py: "python::__getitem__", type getitem). Ops that run outside the
root's calls (generate's own, between tokens) and inner ops (aten::linear's aten::addmm, the
aten::select of an x[i]) have no label; nor have TorchLens's orphans (ops connected neither to
the model's output nor to a tensor from outside the root call's ops) and ATen ops that return
a parameter itself (op_loops.py).

The numbering is TorchLens's (its postprocess steps "detect loops" and "map raw labels to
final labels"), within each root call. First its loops (op_loops.py): ops that run the same
parameters again in the root call, and the ops in lockstep with them in the data flow, are
passes of one layer. Then, walking that call's ops in the order they started, step_index
counts layers from 1 and type_index each type's layers from 1; layer_label is
f"{type}_{type_index}_{step_index}", label f"{layer_label}:{pass}" and label_short
f"{type}_{type_index}:{pass}". A generation runs the model again at every token: a layer's
pass is root call k (token k for generate) when it runs once a root call, and counts its runs
over the trace when it runs more often (a loop: passes 1..3 in root call 1, 4..6 in root
call 2). Later root calls inherit the first's step_index, as TorchLens's passes do: the n-th
layer of a type in root call k has the layer_label of the n-th layer of that type in the
first root call that ran one, so a token that runs fewer ops (no cache set-up after the
prefill) keeps the labels of the ops it shares. An op with several output tensors takes a label each
(a split's pieces, max with dim='s two tensors: op records keep each); an op with none
(aten::is_nonzero) takes none. The calls of OP_SAVE_SITE (saved op outputs,
_record/op_saver.py) and their ops are not the model's: they give their tensor to the op call
before them (or to the op they are inside) and take no label; the calls of OP_EDIT_SITE (an
op-level edit's own ops, _edit/op_edits.py) and their ops take none either.

    op_sites(state)          every op site, in execution order (made once per trace)
(state: the trace's TraceState, state.py.)
    lookup(state, key)       the OpSite or OpLabel a label names, or None
    find_sites(state, q, calls_of)  SiteTable of the sites selector q chooses
"""

from __future__ import annotations

import re
from typing import Any

from .._common import (
    LIST_OPS,
    OP_EDIT_SITE,
    OP_KIND,
    OP_SAVE_SITE,
    ROOT,
    TUPLE_OPS,
    as_selector,
    is_op_label,
    op_type,
)
from .._errors import fail
from . import op_loops

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .state import TraceState

_LABEL = re.compile(r"^([a-z0-9]+)_(\d+)(?:_(\d+))?(?::(\d+))?$")


class OpSite:
    """One op of one root call, with its TorchLens labels (the view tt.where predicates get).

    func_name: the ATen name ("aten::relu"); layer_type: its type ("relu"); type_index,
    step_index, pass_index (its layer's pass: the root call k, or for a loop's layer the count
    of its runs); root: the root call k; layer_label "relu_1_2", label "relu_1_2:p",
    label_short "relu_1:p"; name, k: the op call (trace[f"{name}:{k}"] is it); token;
    module: the innermost module call ("site:k"); modules: the module calls it ran in,
    outermost (the root call) first; output_index: which output tensor of the op it is; out,
    shape: that tensor (saved) or its OutputMeta; parents, children: the OpSites whose output
    it read and that read its output (parent_layers, child_layers: their labels)."""

    def __init__(self, state: TraceState, call_id: int, name: str, k: int, token: int,
                 modules: tuple[str, ...], root: int, output_index: int = 0,
                 saved_id: int | None = None) -> None:
        self._state = state
        self._saved_id = saved_id
        self.call_id, self.name, self.k, self.token = call_id, name, k, token
        self.func_name = name
        self.layer_type = op_type(name)
        self.modules = modules
        self.module = modules[-1]
        self.root = root  # the root call k it ran in
        self.output_index = output_index  # which output tensor of the op (split's pieces)
        self.pass_index = root  # set by number(): the layer's pass
        self.raw_step = 0  # its place among its root call's ops, loops and orphans included
        self.num_passes = 1  # set once every root call is numbered
        self.parents: list[OpSite] = []  # the labelled ops whose output it read (_link)
        self.children: list[OpSite] = []  # the labelled ops that read its output

    @property
    def parent_layers(self) -> list[str]:
        """TorchLens's name: the labels of the ops whose output this op read."""
        return [p.key for p in self.parents]

    @property
    def child_layers(self) -> list[str]:
        """TorchLens's name: the labels of the ops that read this op's output."""
        return [c.key for c in self.children]

    def number(self, type_index: int, step_index: int, pass_index: int) -> None:
        """Gives it its labels: its layer (the type_index-th of its type, step_index-th of
        all, in the first root call that ran the layer) and its pass of that layer."""
        self.type_index, self.step_index, self.pass_index = type_index, step_index, pass_index
        self.layer_label = f"{self.layer_type}_{type_index}_{step_index}"
        self.label = f"{self.layer_label}:{pass_index}"
        self.label_short = f"{self.layer_type}_{type_index}:{pass_index}"

    @property
    def key(self) -> str:
        """Its lookup key, as TorchLens's: layer_label when its label has one pass, else the
        pass-qualified label."""
        return self.layer_label if self.num_passes == 1 else self.label

    @property
    def out(self) -> Any:
        """Its output tensor when saved (save= an op selector), else OutputMeta; for a later
        output tensor of its op (max's indices, a split's pieces) its OutputMeta; None for an
        output the op record does not keep (files written before op records kept them)."""
        if self.output_index != 0:
            return self._state.output(self.call_id, self.output_index)
        meta = self._state.output(self.call_id)
        if self._saved_id is not None:
            # The tensor saved after this op: its own, unless the function that ran it
            # returned another tensor (shapes disagree), which is then not this op's value.
            tensor = self._state.output(self._saved_id)
            if meta is None or list(meta.shape) == list(tensor.shape):
                return tensor
        return meta

    @property
    def shape(self) -> list[int | None] | None:
        out = self.out
        return None if out is None else list(out.shape)

    def __repr__(self) -> str:
        return f"<op {self.label} ({self.name}:{self.k}) in {self.module}>"


class OpLabel:
    """Every pass of one layer_label (trace["relu_1_2"]): .passes (OpSites, by pass), [k]
    (pass k), .out (with one pass), .outs."""

    def __init__(self, layer_label: str, passes: list[OpSite]) -> None:
        self.layer_label, self.passes = layer_label, passes

    @property
    def num_passes(self) -> int:
        return len(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __iter__(self) -> Any:
        return iter(self.passes)

    def __getitem__(self, k: int) -> OpSite:
        for site in self.passes:
            if site.pass_index == k:
                return site
        fail(f"{self.layer_label} has no pass {k!r}; its passes are "
             f"{[s.pass_index for s in self.passes]}")

    @property
    def out(self) -> Any:
        if len(self.passes) != 1:
            first, last = self.passes[0].pass_index, self.passes[-1].pass_index
            fail(f"{self.layer_label} ran {len(self.passes)} times (passes {first}..{last}); "
                 f"take one with trace['{self.layer_label}:k'], or all with .outs")
        return self.passes[0].out

    @property
    def outs(self) -> list[Any]:
        return [s.out for s in self.passes]

    def __getattr__(self, name: str) -> Any:
        # A layer of one pass reads as that pass (TorchLens's Layer): its labels, module,
        # shape, parent_layers, child_layers.
        if name.startswith("_") or name == "passes":
            raise AttributeError(name)
        if len(self.passes) == 1 and hasattr(self.passes[0], name):
            return getattr(self.passes[0], name)
        if self.passes and hasattr(self.passes[0], name):
            fail(f"{self.layer_label} ran {len(self.passes)} times: ask one pass for .{name} "
                 f"(trace['{self.layer_label}:k'].{name})")
        raise AttributeError(f"OpLabel has no attribute {name!r}")

    def __repr__(self) -> str:
        return f"<op label {self.layer_label}: {len(self.passes)} passes>"


# TorchLens labels each tensor an op returns, and op records keep each: a label per output
# row. Files written before they did kept none of a list's pieces, and only the first tensor
# of a tuple: there a list op counts the inner ops that cut its pieces (split runs one
# aten::narrow a piece, unbind one aten::select, chunk one split) and TUPLE_OPS gives the
# tuple's count.
_LIST_OPS, _TUPLE_OPS = LIST_OPS, TUPLE_OPS
_PIECES = frozenset(("aten::narrow", "aten::select", "aten::slice"))


def _pieces(cid: int, children: dict[int, list[tuple[int, str]]]) -> int:
    count = 0
    for child, name in children.get(cid, ()):
        if name in _PIECES:
            count += 1
        elif name in _LIST_OPS:
            count += _pieces(child, children)
    return count


def _outermost_ops(state: TraceState, tops: dict[int, int]
                   ) -> list[tuple[int, str, int, int, tuple[str, ...], int, int, int | None]]:
    """(call id, op name, k, token, module calls, root call k, output tensors, the call id its
    output is saved under or None) of each outermost op inside a root call that returned
    tensors, in the order they started. Fills `tops`: each op call inside a root call -> the
    outermost op (or saving or editing call) it runs in."""
    names = state.site_kinds()
    # Per call: (the root call k it runs in or None, the outermost op it runs in or None, the
    # module calls it runs in). Children have larger ids than their parents (ids are handed
    # out at push), so one pass in id order sees every parent first.
    info: dict[int, tuple[int | None, int | None, tuple[str, ...]]] = {}
    found = []
    children: dict[int, list[tuple[int, str]]] = {}
    last_child: dict[int, int] = {}  # parent -> its latest outermost op, while it is latest
    saved_as: dict[int, int] = {}    # op call -> the OP_SAVE_SITE call after it (op_saver.py)
    for cid, sid, k, parent, token in state.file.ask("calls_in_order"):
        name, kind = names.get(sid, ("?", ""))
        root_k, top, chain = info.get(parent, (None, None, ())) if parent else (None, None, ())
        if kind == OP_KIND:
            if top is not None:
                children.setdefault(parent, []).append((cid, name))
            elif root_k is not None:
                found.append((cid, name, k, token, chain, root_k))
            outermost = cid if top is None else top
            info[cid] = (root_k, outermost, chain)
            if root_k is not None:
                tops[cid] = outermost
            if top is None:
                last_child[parent] = cid
            continue
        if name == OP_SAVE_SITE and top is not None and top == parent:
            # Saved inside the op: a Python call's, under a TorchFunctionMode (op_groups.py).
            saved_as[parent] = cid
            info[cid] = (root_k, top, chain)
            continue
        if name == OP_EDIT_SITE and top is None:  # an op edit's own ops (_edit/op_edits.py)
            info[cid] = (root_k, cid, chain)  # the op before it keeps its saved copy
            continue
        before = last_child.pop(parent, None)
        if name == OP_SAVE_SITE and top is None:
            if before is not None:
                saved_as[before] = cid
            info[cid] = (root_k, cid, chain)  # its ops are the copy's, not the model's
            continue
        own_root = k if (name == ROOT and kind == "root") else root_k
        info[cid] = (own_root, top, chain + (f"{name}:{k}",))
    out = []
    for cid, name, k, token, chain, root_k in found:
        rows = state.output_rows(cid)
        if name in _LIST_OPS:  # op records keep each piece; files before counted cut pieces
            tensors = max(rows, _pieces(cid, children)) or 1
        elif not rows:
            continue  # no tensor out (aten::is_nonzero, aten::item): TorchLens logs none
        else:  # files written before op records kept every output tensor: TUPLE_OPS
            tensors = max(rows, _TUPLE_OPS.get(name, 1))
        out.append((cid, name, k, token, chain, root_k, tensors, saved_as.get(cid)))
    return out


def op_sites(state: TraceState) -> list[OpSite]:
    """Every op site of the trace, in execution order, numbered (made once per Trace)."""
    cached = state.cache.get(_CACHE)
    if cached is not None:
        return cached
    sites: list[OpSite] = []
    tops: dict[int, int] = {}
    raw: dict[int, int] = {}  # root call k -> its labelled tensors so far
    for cid, name, k, token, chain, root_k, tensors, saved in _outermost_ops(state, tops):
        for index in range(tensors):  # TorchLens: one label per output tensor
            site = OpSite(state, cid, name, k, token, chain, root_k, index,
                          saved if index == 0 else None)
            raw[root_k] = site.raw_step = raw.get(root_k, 0) + 1
            sites.append(site)
    leader, position, sources = op_loops.group(state, sites, tops)
    if sources:  # an ATen op that returned a parameter (p.to(dtype)): TorchLens logs none
        sites = [s for s in sites if (s.call_id, s.output_index) not in sources]
    _number(sites, leader, position)
    _link(sites, state.cache.get(op_loops.PARENTS, {}))
    state.cache[_CACHE] = sites
    if state.on_labels is not None:  # for edits by label later (_api hands the callback)
        state.on_labels(sites, str(state.path))
    return sites


def _link(sites: list[OpSite], parents: dict[tuple[int, int], list[tuple[int, int]]]) -> None:
    """Each site's parents (the labelled ops whose output it read) and children (the ones
    that read its output), from op records' data flow (none in a file without it)."""
    by_node = {(s.call_id, s.output_index): s for s in sites}
    for site in sites:
        found = parents.get((site.call_id, site.output_index), ())
        site.parents = [by_node[n] for n in found if n in by_node]
        for parent in site.parents:
            parent.children.append(site)


def _number(sites: list[OpSite], leader: dict[tuple[int, int], tuple[int, int]],
            position: dict[tuple[int, int], int]) -> None:
    """TorchLens's numbering. Within a root call, walking its ops in order, step_index counts
    layers from 1 and type_index each type's layers: an op that is a later pass of a layer
    of that root call (op_loops.py) takes its first pass's numbers. A later root call's layer
    takes the step_index of the first root call's layer of the same type and type_index. A
    layer's pass: root call k, for a layer that runs at most once a root call; the count of
    its runs so far, for one that runs more often (a loop)."""
    counters: dict[int, tuple[dict[str, int], list[int]]] = {}
    numbers: dict[tuple[int, int], tuple[int, int]] = {}
    first: dict[tuple[str, int], int] = {}
    for site in sorted(sites, key=lambda s: s.root):  # stable: call order within a root call
        node = (site.call_id, site.output_index)
        lead = leader.get(node, node)
        if lead not in numbers:
            by_type, step = counters.setdefault(site.root, ({}, [0]))
            step[0] += 1
            by_type[site.layer_type] = by_type.get(site.layer_type, 0) + 1
            numbers[lead] = (by_type[site.layer_type], step[0])
        type_index, step_index = numbers[lead]
        site.number(type_index, first.setdefault((site.layer_type, type_index), step_index),
                    site.root)
    runs: dict[str, list[OpSite]] = {}
    for site in sorted(sites, key=lambda s: s.root):
        runs.setdefault(site.layer_label, []).append(site)
    for passes in runs.values():
        looped = any(position.get((s.call_id, s.output_index), 1) > 1 for s in passes)
        for count, site in enumerate(passes, 1):
            if looped:
                site.number(site.type_index, site.step_index, count)
            site.num_passes = len(passes)


_CACHE = "op_sites"  # its key in the trace's state.cache


def looks_like_label(key: str) -> bool:
    """'relu_1_2', 'relu_1_2:3', 'relu_1:3' (not 'relu_1', which may be a module's name)."""
    return is_op_label(key)


def lookup(state: TraceState, key: str) -> OpSite | OpLabel | None:
    """What an op label names: an OpLabel for "relu_1_2" (every pass), the OpSite for
    "relu_1_2:k" and "relu_1:k"; None when `key` is no label of this trace."""
    m = _LABEL.match(key)
    if m is None:
        return None
    sites = op_sites(state)
    second, k = m.group(3), m.group(4)
    if second is not None and k is None:
        passes = [s for s in sites if s.layer_label == key]
        return OpLabel(key, passes) if passes else None
    if k is None:
        return None
    want = int(k)
    for s in sites:
        if s.pass_index == want and (s.label == key or s.label_short == key):
            return s
    return None


_SHORT = re.compile(r"^([a-z0-9]+)_(\d+)$")


def lookup_short(state: TraceState, key: str) -> OpLabel | None:
    """TorchLens's short name "conv2d_3" (the 3rd conv2d layer, its ordinal suffix left
    out): that layer (an OpLabel, every pass), or None when `key` is no such name here."""
    m = _SHORT.match(key)
    if m is None:
        return None
    kind, index = m.group(1), int(m.group(2))
    passes = [s for s in op_sites(state) if s.layer_type == kind and s.type_index == index]
    if not passes or len({s.layer_label for s in passes}) != 1:
        return None
    return OpLabel(passes[0].layer_label, passes)


class BoundaryLayer:
    """TorchLens's input and output layers (input_1, output_1: trace[0], trace[-1]): the
    root's first call's first input tensor and its output (an OpSite-like view: layer_label,
    layer_type, func_name, out, shape)."""

    def __init__(self, kind: str, out: Any, path: str | None = None) -> None:
        self.layer_type = self.func_name = kind
        self.layer_label = self.label_short = f"{kind}_1"
        self.label = f"{kind}_1:1"
        self.out = out
        self._path = path  # where the tensor sat in the model's input or output ("": itself)

    @property
    def container(self) -> None:
        """TorchLens's op.container: None for a plain tensor (as TorchLens's); tokentrace keeps
        no container view of a nested input or output (one error saying what it keeps)."""
        if not self._path:
            return None
        read = ("trace['self:k'].out is that tensor" if self.layer_type == "output"
                else "trace['self:k'].inputs has every input by path")
        fail(f"{self.layer_label} is the tensor at {self._path!r} of the model's "
             f"{self.layer_type}; tokentrace keeps that path, not a container view: {read}, "
             f"and tt.output_at / tt.input_at edit by path")

    @property
    def shape(self) -> list[int | None] | None:
        return None if self.out is None else list(self.out.shape)

    def __repr__(self) -> str:
        return f"<{self.layer_label}: the model's {self.layer_type}>"


def by_step(state: TraceState, step: int, boundary: Any) -> OpLabel | BoundaryLayer:
    """TorchLens's ordinal trace[i] over its layer list [input_1, the ops by step index,
    output_1]: trace[7] the layer of step index 7 (conv2d_3_7), trace[0] the input,
    trace[-1] the output, trace[-2] the last op. boundary(kind): the BoundaryLayer."""
    sites = op_sites(state)
    if not sites:
        fail(f"trace[{step}] is TorchLens's i-th op, and this trace has no op records (traced "
             f"with ops=False, or by tt.record): index it by site name")
    last = max(s.step_index for s in sites)
    if step < 0:
        step = last + 2 + step  # -1: output_1 at last + 1
    if step == 0:
        return boundary("input")
    if step == last + 1:
        return boundary("output")
    passes = [s for s in sites if s.step_index == step]
    if not passes:
        fail(f"trace[{step}]: TorchLens's layer list here runs 0 (input_1) to {last + 1} "
             f"(output_1), -{last + 2} to -1 from its end")
    return OpLabel(passes[0].layer_label, [s for s in passes
                                           if s.layer_label == passes[0].layer_label])


def unknown_label(state: TraceState, key: str) -> str:
    """Why `key`, which looks like an op label, names nothing here (one line)."""
    sites = op_sites(state)
    if not sites:
        return (f"no op labelled {key!r} in this trace: it has no op records (traced with "
                f"ops=False, or by tt.record); tt.trace records them by default, and ops=True "
                f"or an op selector in save= (tt.func('relu'), ...) turns them on")
    import difflib
    keys = list(dict.fromkeys(s.key for s in sites))
    close = difflib.get_close_matches(key, keys, n=3, cutoff=0.5)
    hint = (f"did you mean {', '.join(repr(c) for c in close)}?" if close
            else f"its op labels look like {', '.join(repr(c) for c in keys[:3])}")
    return f"no op labelled {key!r} in this trace; {hint}"


class SiteTable:
    """The sites a selector chose, in execution order (TorchLens's SiteTable): len, iteration,
    [i] (a site), [i:j] (a SiteTable), .first(), .labels(), .where(predicate)."""

    def __init__(self, sites: list[Any], query: Any) -> None:
        self._sites, self.query = list(sites), query

    def __len__(self) -> int:
        return len(self._sites)

    def __iter__(self) -> Any:
        return iter(self._sites)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return SiteTable(self._sites[index], self.query)
        if not isinstance(index, int) or isinstance(index, bool):
            fail(f"a SiteTable is indexed by int position or a slice, got {index!r}")
        if not -len(self._sites) <= index < len(self._sites):
            fail(f"{self.query!r} chose {len(self._sites)} sites; index {index} is out of range")
        return self._sites[index]

    def first(self) -> Any:
        if not self._sites:
            fail(f"{self.query!r} chose no site of this trace")
        return self._sites[0]

    def labels(self) -> tuple[str, ...]:
        """Each site's lookup key: an op's layer_label (its pass-qualified label when it ran
        in several root calls), a module call's 'site:k'."""
        return tuple(_key(s) for s in self._sites)

    def where(self, predicate: Any) -> SiteTable:
        return SiteTable([s for s in self._sites if predicate(s)], self.query)

    def __repr__(self) -> str:
        shown = ", ".join(self.labels()[:8]) + (", ..." if len(self._sites) > 8 else "")
        return f"SiteTable({len(self._sites)} site{'' if len(self._sites) == 1 else 's'}: {shown})"


def _key(site: Any) -> str:
    return site.key if isinstance(site, OpSite) else site.name


def find_sites(state: TraceState, query: Any, calls_of: Callable[[str], list[Any]],
               max_fanout: int | None = None) -> SiteTable:
    """The sites `query` chooses: op sites (OpSite) and calls of module sites (CallView, from
    `calls_of(site name)`), in the order they started; none is an empty table. max_fanout:
    more matches than that is an error (None: no limit; a generation has a site per token)."""
    selector = as_selector(query, "find_sites()")
    if max_fanout is not None and (not isinstance(max_fanout, int) or max_fanout < 1):
        fail(f"find_sites(max_fanout=) takes a positive int or None, got {max_fanout!r}")
    chosen: list[tuple[int, Any]] = []
    if selector.names_ops:
        chosen += [(s.call_id, s) for s in op_sites(state) if selector.matches_op(s)]
    modules = [n for n in state.site_order if state.sites[n][1] != OP_KIND]
    for leaf in (selector.module_leaves() if hasattr(selector, "module_leaves")
                 else [selector]):
        leaf.resolve(modules, "find_sites()")  # an unknown module: tt.module's error
    for name in modules:
        if selector.matches_module(name):
            chosen += [(c.id, c) for c in calls_of(name)]
    chosen.sort(key=lambda pair: pair[0])
    if max_fanout is not None and len(chosen) > max_fanout:
        fail(f"{selector!r} chose {len(chosen)} sites, more than max_fanout={max_fanout}; "
             f"narrow it (tt.label(...), & tt.in_module(...)) or raise max_fanout")
    return SiteTable([site for _, site in chosen], selector)
