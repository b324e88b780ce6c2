"""TorchLens's graph rules in op labels: loops (ops that run again within one root call are
passes of one layer: a module called 3 times in a forward is linear_1_1:1, :2, :3) and
orphans (ops TorchLens drops).

Op records keep each outermost op's data flow (op_links, cuda/torch/op_observer.cc: the tensors
it read, by identity with a shape hash, a hash of its non-tensor arguments, and the tensors
it returned), the hooks the root call's output tensors (_record/hooks.py), and the trace the
model's parameters by identity (meta op_params, _record/attach.py). An op's key, as TorchLens's
equivalence class: type, output index, module addresses (the module calls it ran in, without
their call numbers), non-tensor arguments and the shapes it read. Per root call:

1. Parameter sharing. Ops of one type, output index, module addresses and arguments that read
   the same parameters are passes of one layer: the same module (or weights) run again.
2. Lockstep expansion. From each such layer in the order it began, its passes' neighbours
   are walked together, forward (the ops that read their outputs) until nothing is new, then
   backward, and again: where two or more passes have a free neighbour of one key, those are
   passes of one layer too (the relu and add of `for _ in range(3): x = relu(lin(x)) + 1`; a
   loop's last pass may lack the op that feeds the next).
3. Loops no parameter anchors. Ops of one key in a module, not yet in a layer, where each
   reads what an earlier one or the ops walked forward from it made: a block's two residual
   adds, an embedding's sum, a scan's steps; they and their bodies are passes, and walk as in 2.
4. Orphans take no label: ops connected (reading or read) neither to the root's output nor to
   a tensor no op made (a model input, a buffer); nor does an ATen op that returns a parameter.

A file without op_links (written before op records kept data flow) has no loops or orphans:
each op is a layer of its own in its root call.

    group(state, sites, tops)  ({node: its layer's first pass}, {node: its pass within its
                               root call}, the nodes that take no label); state: the
                               trace's TraceState (state.py)
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from typing import Any, NamedTuple

from .._common import loader

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .state import TraceState

Node = tuple[int, int]  # (op call id, output index): one labelled tensor
PARENTS = "op_parents"  # state.cache key of Flow.parents, for OpSite.parents and .children


class Flow(NamedTuple):
    """What op_links say of the labelled tensors of a trace."""
    parents: dict[Node, list[Node]]      # the labelled tensors each one's op read
    uses: dict[int, frozenset[int]]      # per outermost op: the parameters it read
    args: dict[int, tuple[int, ...]]     # per outermost op: its non-tensor arguments' hashes
    sources: set[Node]                   # labelled tensors that are a parameter itself
    reads: dict[int, tuple[int, ...]]    # per outermost op: the shape hashes of what it read
    finals: dict[int, set[Node]]         # per root call k: the labelled tensors it returned
    #                                      (absent: its output was not recorded)
    outside: set[int]                    # outermost ops that read a tensor no op made (a
    #                                      model input, a buffer), parameters aside


def _flow(state: TraceState, tops: dict[int, int], root_of: dict[Node, int]) -> Flow:
    """The data flow of the labelled tensors (root_of: each one's root call k). An input is
    joined to the op that last returned the same tensor; an op's own inner ops are the op. A
    root call's output tensors (linked by the hooks, _record/hooks.py) are joined to the last
    op of that root call that returned them."""
    nodes = root_of.keys()
    params = _params(state)
    roots = _root_calls(state)  # root call id -> k
    history: dict[int, list[Node]] = defaultdict(list)  # tensor -> the nodes that returned it
    returned: list[tuple[int, int]] = []  # (root call k, tensor) of each root output
    outside: set[int] = set()
    read_by: dict[int, dict[int, int]] = {}  # per outermost op: tensor -> the call that read it
    sources: set[Node] = set()
    args_slot = loader.load().LINK_ARGS  # the slot of a non-tensor arguments' hash (kinds.h)
    producer: dict[int, Node] = {}
    parents: dict[Node, list[Node]] = defaultdict(list)
    uses: dict[int, set[int]] = defaultdict(set)
    args: dict[int, list[int]] = defaultdict(list)
    reads: dict[int, list[int]] = defaultdict(list)
    for cid, slot, tensor, output, shape in _entries(state):
        top = tops.get(cid)
        if output:
            if cid in roots:  # the model returned it (joined below: the root's id is first)
                returned.append((roots[cid], tensor))
                continue
            if top is None:  # an op outside the model's calls made it: no site's tensor
                producer.pop(tensor, None)
                continue
            node = (top, slot if cid == top else 0)
            if tensor in params:  # p.to(dtype) of a parameter of that dtype returns p
                if cid == top and node in nodes:
                    sources.add(node)
                continue
            producer[tensor] = node if node in nodes else (top, 0)
            if producer[tensor] in nodes:
                history[tensor].append(producer[tensor])
            continue
        if top is None:
            continue
        if slot == args_slot:
            args[top].append(tensor)
            continue
        if tensor in params:
            uses[top].add(tensor)
            continue
        # what it read, once per tensor and call: a Python call's own link of x and its
        # aten::to's read of the same x are one read (x * x, in one op, reads x twice)
        if read_by.setdefault(top, {}).setdefault(tensor, cid) == cid:
            reads[top].append(shape)
        source = producer.get(tensor)
        if source is None:
            outside.add(top)
            continue
        if source[0] == top or source not in nodes:
            continue
        for index in range(_MAX_OUTPUTS):  # every output of the op read it
            node = (top, index)
            if node not in nodes:
                break
            if source not in parents[node]:
                parents[node].append(source)
    finals: dict[int, set[Node]] = defaultdict(set)
    for k, tensor in returned:
        made = [n for n in history.get(tensor, ()) if root_of[n] == k]
        finals[k].update(made[-1:])  # none: a model input or a parameter returned as is
    return Flow(parents, {cid: frozenset(ids) for cid, ids in uses.items()},
                {cid: tuple(hashes) for cid, hashes in args.items()}, sources,
                {cid: tuple(shapes) for cid, shapes in reads.items()}, dict(finals), outside)


def _root_calls(state: TraceState) -> dict[int, int]:
    """{call id: k} of the root's calls (the tokens)."""
    from .._common import ROOT
    site = state.sites.get(ROOT)
    if site is None:
        return {}
    return dict(state.file.ask("calls_of_site", (site[0],)))


_MAX_OUTPUTS = 64  # output tensors op records keep per op (op_observer.cc path_ids)


def _entries(state: TraceState) -> list[tuple[int, int, int, bool, int]]:
    """(call id, slot, identity, is an output, shape hash or 0) of every op_links entry, in
    the order they happened: by call (ids are handed out as calls open), an op's inputs
    before its outputs, a call's rows in the order written."""
    rows: dict[int, tuple[list[str], list[str]]] = {}
    for cid, inputs, outputs in state.file.ask("op_links"):
        ins, outs = rows.setdefault(cid, ([], []))
        ins += (inputs or "").split()
        outs += (outputs or "").split()
    out = []
    for cid in sorted(rows):
        for entries, is_output in zip(rows[cid], (False, True)):
            for entry in entries:
                fields = entry.split(":")
                try:
                    out.append((cid, int(fields[0]), int(fields[1]), is_output,
                                int(fields[2]) if len(fields) > 2 else 0))
                except (ValueError, IndexError):  # a malformed entry (a hand-made file)
                    continue
    return out


def _params(state: TraceState) -> set[int]:
    text = state.meta.get("op_params")
    if not text:
        return set()
    try:
        return {int(address) for address in json.loads(text)}
    except (ValueError, TypeError):
        return set()


def group(state: TraceState, sites: list[Any], tops: dict[int, int]
          ) -> tuple[dict[Node, Node], dict[Node, int], set[Node]]:
    """({node: the first pass of its layer} for nodes in a layer of several passes,
    {node: its pass within its root call}, the nodes that are no op: an ATen op that returned
    a parameter, which TorchLens logs none of) for the OpSites `sites` (of every root call);
    tops maps each op call inside a root call to its outermost op."""
    if "op_links" not in state.file.tables or not sites:
        return {}, {}, set()
    parents, uses, args, sources, reads, finals, outside = _flow(
        state, tops, {(s.call_id, s.output_index): s.root for s in sites})
    state.cache[PARENTS] = parents  # what each labelled tensor's op read (OpSite.parents)
    if not parents and not uses and not args and not sources and not reads:
        _say_no_flow(state)
    dropped = sources | _orphans(sites, parents, finals, outside)
    sites = [s for s in sites if (s.call_id, s.output_index) not in dropped]
    children: dict[Node, list[Node]] = defaultdict(list)
    for node in sorted(parents):
        for source in parents[node]:
            children[source].append(node)
    leader: dict[Node, Node] = {}
    position: dict[Node, int] = {}
    by_root: dict[int, list[Any]] = defaultdict(list)
    for s in sites:
        by_root[s.root].append(s)
    for root_sites in by_root.values():
        _group_root(root_sites, parents, children, uses, args, reads, leader, position)
    return leader, position, dropped


def _orphans(sites: list[Any], parents: dict[Node, list[Node]], finals: dict[int, set[Node]],
             outside: set[int]) -> set[Node]:
    """The labelled tensors of root calls whose output was recorded that are not connected,
    reading or read, to the model's output or to a tensor from outside the root call's ops (a
    model input, a buffer): a mask made from torch.ones only to be read on the host. TorchLens
    drops them (keep_orphans=False, its default). An op any of whose outputs is connected is
    kept whole. A root call none of whose output an op made (a compiled or replayed forward,
    whose ops op records do not see) drops none."""
    linked: dict[Node, list[Node]] = defaultdict(list)
    for node, sources in parents.items():
        for source in sources:
            linked[node].append(source)
            linked[source].append(node)
    walk = [n for k in finals for n in finals[k]]
    walk += [(s.call_id, s.output_index) for s in sites if s.call_id in outside]
    reached: set[Node] = set()
    while walk:
        node = walk.pop()
        if node in reached:
            continue
        reached.add(node)
        walk.extend(linked.get(node, ()))
    kept = {cid for cid, _ in reached}
    return {(s.call_id, s.output_index) for s in sites
            if finals.get(s.root) and s.call_id not in kept}


def _say_no_flow(state: TraceState) -> None:
    """Op records without data flow: the torch ops library that wrote them is older than the
    schema that has it (built before it; scripts/setup.sh rebuilds it)."""
    import warnings
    warnings.warn(f"tokentrace: {state.path} has op records but no data flow of them (its torch "
                  f"ops library predates it: rebuild with scripts/setup.sh); its op labels are "
                  f"numbered without TorchLens's loops", RuntimeWarning, stacklevel=4)


def _group_root(sites: list[Any], parents: dict[Node, list[Node]],
                children: dict[Node, list[Node]], uses: dict[int, frozenset[int]],
                args: dict[int, tuple[int, ...]], reads: dict[int, tuple[int, ...]],
                leader: dict[Node, Node], position: dict[Node, int]) -> None:
    site_of = {(s.call_id, s.output_index): s for s in sites}
    order = {node: i for i, node in enumerate(site_of)}

    def key(node: Node) -> tuple[Any, ...]:
        """What two ops must share to be passes of one layer, as TorchLens's equivalence
        class: type, output index, module addresses, non-tensor arguments, and the shapes
        (not dtypes) of the tensors they read, parameters aside."""
        s = site_of[node]
        return (s.layer_type, s.output_index, _addresses(s), args.get(s.call_id),
                reads.get(s.call_id))

    shared: dict[tuple[Any, ...], list[Node]] = defaultdict(list)
    for node, s in site_of.items():
        params = uses.get(s.call_id)
        if params:
            shared[(s.layer_type, s.output_index, _addresses(s), args.get(s.call_id),
                    params)].append(node)

    def assign(members: list[Node]) -> None:
        members.sort(key=order.__getitem__)
        for i, member in enumerate(members, 1):
            leader[member], position[member] = members[0], i

    # Every layer that parameters anchor first. Then, from each in the order of its first
    # pass, walks that grow it to the end before the next one's: forward (to the ops that read
    # its passes' outputs) until no pass has a new neighbour, then backward (to the ops whose
    # outputs they read), and again while a walk finds a layer. A walk never takes an op that
    # runs the same parameters as others: those are their own layer's.
    seeds = sorted((m for m in shared.values() if len(m) > 1), key=lambda m: order[m[0]])
    for members in seeds:
        assign(members)

    def grow(members: list[Node]) -> None:
        layers = [members]
        grown = True
        while grown:
            grown = False
            for edges in (children, parents):
                walk = deque(layers)
                while walk:
                    for picked in _lockstep(walk.popleft(), edges, site_of, leader, key):
                        assign(picked)
                        layers.append(picked)
                        walk.append(picked)
                        grown = True

    for members in seeds:
        grow(members)
    # Then what no parameter anchors: loops of ops in a module (a block's two residual adds,
    # a scan's steps), and the ops in lockstep with them (the module calls that feed the adds)
    loops = _recurrences(site_of, parents, children, uses, leader, key)
    for members in loops:
        assign(members)
    for members in loops:
        grow(members)


def _recurrences(site_of: dict[Node, Any], parents: dict[Node, list[Node]],
                 children: dict[Node, list[Node]], uses: dict[int, frozenset[int]],
                 leader: dict[Node, Node], key: Any) -> list[list[Node]]:
    """Loops that no parameter anchors, inside a module: ops of one key, not yet in a layer,
    that read no parameter, where each reads what the one before it or the ops after it
    made (a block's two residual adds, an embedding's sum of three, the steps of a scan
    `for i in ...: h = a[i] * h + b[i]`). TorchLens takes them and the ops after them, walked
    in lockstep, for passes of one layer each. The layers found, in order."""
    def free(node: Node) -> bool:
        s = site_of.get(node)
        return (s is not None and node not in leader and len(s.modules) > 1
                and not uses.get(s.call_id))

    classes: dict[tuple[Any, ...], list[Node]] = defaultdict(list)
    for node in site_of:
        if free(node):
            classes[key(node)].append(node)

    def loops_of(members: list[Node], taken: set[Node]
                 ) -> list[tuple[list[int], list[dict[int, Node]], dict[Node, int]]]:
        """The loops among `members`: (the members that are its passes, by index; the steps
        of their bodies, {member index: op}; each walked op's member index)."""
        # Each member's body: the ops after it, walked forward in lockstep with the others'
        owner = {m: j for j, m in enumerate(members)}
        steps: list[dict[int, Node]] = []
        walk = deque([dict(enumerate(members))])
        while walk:
            picked_by_key: dict[tuple[Any, ...], dict[int, Node]] = {}
            seen: set[Node] = set()  # an op that reads several passes goes to the first
            for j, member in walk.popleft().items():
                for n in children.get(member, ()):
                    if n not in site_of or n in owner or n in taken or n in leader or n in seen:
                        continue
                    picked = picked_by_key.setdefault(key(n), {})
                    if j not in picked:
                        picked[j] = n
                        seen.add(n)
            for picked in picked_by_key.values():
                if len(picked) > 1:
                    owner.update({n: j for j, n in picked.items()})
                    steps.append(picked)
                    walk.append(picked)
        # A member that reads what an earlier one or its body made is its next pass; the
        # members so joined (two chains may interleave: a[0], b[0], a[1], b[1]) are a loop
        head = list(range(len(members)))

        def find(i: int) -> int:
            while head[i] != i:
                i = head[i]
            return i

        for j, member in enumerate(members):
            for p in parents.get(member, ()):
                i = owner.get(p)
                if i is not None and i < j and find(i) != find(j):
                    head[find(j)] = find(i)
        joined: dict[int, list[int]] = defaultdict(list)
        for j in range(len(members)):
            joined[find(j)].append(j)
        return [(passes, steps, owner) for passes in joined.values() if len(passes) > 1]

    # A loop's passes begin at the first op of its body: classes are taken in the order their
    # loops begin (a scan's `a[i] * h` before the `h.to(dtype)` after it, whose class may
    # have an earlier member outside the loop)
    def begins(members: list[Node]) -> int:
        starts = [order[members[passes[0]]] for passes, _, _ in loops_of(members, set())]
        return min(starts, default=len(order))

    order = {node: i for i, node in enumerate(site_of)}
    candidates = [m for m in classes.values() if len(m) > 1]
    found: list[list[Node]] = []
    taken: set[Node] = set()
    for members in sorted(candidates, key=begins):
        members = [m for m in members if m not in taken]
        if len(members) < 2:
            continue
        for passes, steps, owner in loops_of(members, taken):
            found.append([members[i] for i in passes])
            for picked in steps:
                layer = [picked[i] for i in passes if i in picked]
                if len(layer) > 1:
                    found.append(layer)
            taken.update(n for n, i in owner.items() if i in passes)
    return found


def _lockstep(passes: list[Node], edges: dict[Node, list[Node]], site_of: dict[Node, Any],
              leader: dict[Node, Node], key: Any) -> list[list[Node]]:
    """The new layers next to a layer's passes along `edges`: per key, the first free
    neighbour of each pass that has one; two or more make a layer (a loop's last pass may
    lack the op that feeds the next, its first the op before it)."""
    found: dict[tuple[Any, ...], list[Node]] = {}
    for member in passes:
        taken: set[tuple[Any, ...]] = set()
        for n in edges.get(member, ()):
            if n not in site_of or n in leader:
                continue
            k = key(n)
            if k in taken or n in found.get(k, ()):
                continue
            taken.add(k)
            found.setdefault(k, []).append(n)
    return [picked for picked in found.values() if len(picked) > 1]


def _addresses(site: Any) -> tuple[str, ...]:
    """The module addresses of an op's module calls, without their call numbers."""
    return tuple(call.rsplit(":", 1)[0] for call in site.modules)
