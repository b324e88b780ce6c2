"""The matching rules of the compiled-kernel join (see kernel_map.py, join.py): which
entry of which Inductor graph a kernel the compiled code ran is.

    Map(graphs, regions)       the map noted at compile time, indexed for lookups
    match_call(m, names, graphs)  the module paths of each of one run's kernels, or None

`names` are the runtime names of one compiled call's kernels in launch order (op names,
generated kernels' names), the same for a replay of a CUDA graph captured from that code.
"""

import collections
import itertools
import json


class Map:
    def __init__(self, graphs, regions):
        self.graphs = graphs  # {graph: [[runtime name, [paths]], ...]}
        self.by_region = collections.defaultdict(set)  # compile id -> its graphs
        for graph, compile_id in regions.items():
            self.by_region[compile_id].add(graph)
        self.names = {graph: {n for n, _ in entries} for graph, entries in graphs.items()}
        self.homes = collections.defaultdict(set)  # generated kernel name -> graphs with it
        for graph, entries in graphs.items():
            for name, _ in entries:
                if "::" not in name:  # library calls are ops, "namespace::name"
                    self.homes[name].add(graph)

    def is_generated(self, name):
        return name in self.homes

    def graph_of(self, names, regions):
        """The graph each of one call's kernels `names` ran in (None: a library call, or not
        known). A name in one graph says it. Else the graph compiled under the kernel's
        region's compile id ("Torch-Compiled Region: 0/1"; TorchDynamo names the range after
        the compile); without one noted, the graphs that have every such name the region ran.
        More than one left: None (the kernel is counted, never given to one of them)."""
        ran = collections.defaultdict(set)
        for n, region in zip(names, regions):
            if n in self.homes:
                ran[region].add(n)
        cand = {region: self.by_region.get(region) or {
            g for g, has in self.names.items() if seen <= has} for region, seen in ran.items()}
        out = []
        for n, region in zip(names, regions):
            homes = self.homes.get(n, set())
            if len(homes) > 1:
                homes = homes & cand[region]
            out.append(next(iter(homes)) if len(homes) == 1 else None)
        return out

    def whole_graph(self, names, region=None):
        """Paths lists for a run of library calls only: a graph whose calls are exactly
        `names`, among the graphs compiled under `region` (its compile id) when one is noted,
        else among all; if all such graphs agree."""
        graphs = self.by_region.get(region) or self.graphs.keys()
        found = {json.dumps([p for _, p in self.graphs[g]]) for g in graphs
                 if [n for n, _ in self.graphs[g]] == names}
        return json.loads(found.pop()) if len(found) == 1 else None

    def whole_graphs(self, names, regions):
        """whole_graph of each region's run of `names` (a graph break between two graphs of
        library calls only); a run that no graph explains is None for each of its calls."""
        out, i = [], 0
        while i < len(names):
            j = i
            while j < len(names) and regions[j] == regions[i]:
                j += 1
            paths = self.whole_graph(names[i:j], regions[i])
            out += paths if paths is not None else [None] * (j - i)
            i = j
        return out


def _library_entry(m, entries, j, step, name):
    """The index of the first library call named `name` from entries[j] on (step 1) or back
    (step -1), not crossing a generated kernel; None if there is none."""
    while 0 <= j < len(entries) and not m.is_generated(entries[j][0]):
        if entries[j][0] == name:
            return j
        j += step
    return None


def _entry(entries, name, start):
    """The first index >= start of a kernel named `name`, else the first at all (the graph
    ran again in the same call), else None."""
    for j in itertools.chain(range(start, len(entries)), range(start)):
        if entries[j][0] == name:
            return j
    return None


def _anchors(m, names, graphs):
    """[(i, (graph, index))] for the generated kernels among `names`: the graph is graphs[i]
    (None: not known, the kernel stays unmatched); within it the k-th run of a name is the
    next entry of that name in wrapper order (Inductor reuses one kernel for identical code,
    e.g. each layer's norm). A run of launches of one kernel longer than the graph's run of
    that entry (autotuning benchmarks it before its first real launch) maps its last ones."""
    gen = [i for i, n in enumerate(names) if m.is_generated(n) and graphs[i] is not None]
    cursor, out, r = {}, [], 0
    while r < len(gen):
        i, graph = gen[r], graphs[gen[r]]
        run = r
        while run < len(gen) and names[gen[run]] == names[i] and graphs[gen[run]] == graph:
            run += 1
        entries = m.graphs[graph]
        j = _entry(entries, names[i], cursor.get(graph, 0))
        if j is not None:
            same = 1
            while j + same < len(entries) and entries[j + same][0] == names[i]:
                same += 1
            take = min(same, run - r)
            out += [(gen[run - take + k], (graph, j + k)) for k in range(take)]
            cursor[graph] = j + take
        r = run
    return sorted(out)


def match_call(m, names, graphs, regions=None):
    """Paths (a list) or None for each of one compiled call's kernels `names` (op children
    and GPU kernel records, in launch order); graphs[i]: the graph a generated one ran in;
    regions[i]: the compile id of the region it ran in (None: not known)."""
    out = [None] * len(names)
    anchors = _anchors(m, names, graphs)
    if not any(m.is_generated(n) for n in names):
        paths = m.whole_graph(names)
        if paths is not None:
            return paths
        # A graph break between graphs of library calls only (a graph compiled before the
        # trace, whose C++ kernels ran unrecorded): each region's run is its own graph.
        return m.whole_graphs(names, regions) if regions is not None else out
    for i, (graph, index) in anchors:
        out[i] = m.graphs[graph][index][1]
    # Each gap between generated kernels: library calls forward from the one before (through
    # its graph), then the rest backward from the one after (a graph break between them).
    gaps = zip([(-1, None)] + anchors, anchors + [(len(names), None)])
    for (start, before), (stop, after) in gaps:
        last = start
        if before is not None:
            entries, pos = m.graphs[before[0]], before[1] + 1
            for i in range(start + 1, stop):
                j = _library_entry(m, entries, pos, 1, names[i])
                if j is not None:
                    out[i], pos, last = entries[j][1], j + 1, i
        if after is not None:
            entries, pos = m.graphs[after[0]], after[1] - 1
            for i in range(stop - 1, last, -1):
                j = _library_entry(m, entries, pos, -1, names[i])
                if j is not None:
                    out[i], pos = entries[j][1], j - 1
    return out
