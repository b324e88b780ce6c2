"""The run-time join of compiled kernels with the modules they came from (see _compiled_map).

    join(q)   -> (kernels, unattributed) from a trace file's rows; q(sql, args) runs a query
    module_totals(kernels, gpu, token)  the per-module rows behind Trace.compiled_modules

A kernel is CompiledKernel(call_id, token, name, modules, fused, cpu_ns); modules are site
names ("model.layers.0.mlp"), joined to the site of the compiled module's call.
"""

import collections
import itertools
import json

from . import _compiled_map
from ._compiled_map import LOSS_KIND, META_KEY, REGIONS_KEY
from ._naming import OP_KIND, ROOT

# gpu_ns: a GPU kernel record's own time; None for an op call (its kernels: Trace._gpu_totals).
CompiledKernel = collections.namedtuple("CompiledKernel",
                                        "call_id token name modules fused cpu_ns gpu_ns",
                                        defaults=(None,))
ModuleTotal = collections.namedtuple("ModuleTotal", "module kernels fused cpu_ms gpu_ms")
REGION = "Torch-Compiled Region"  # TorchDynamo's range around a compiled frame's run


def _site(parent_site, path):
    if not path:
        return parent_site
    return path if parent_site == ROOT else f"{parent_site}.{path}"


class _Map:
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

    def whole_graph(self, names):
        """Paths lists for a call with no generated kernel: a graph whose calls are exactly
        `names` (library calls only), if all such graphs agree."""
        found = {json.dumps([p for _, p in e]) for e in self.graphs.values()
                 if [n for n, _ in e] == names}
        return json.loads(found.pop()) if len(found) == 1 else None


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


def _match_call(m, names, graphs):
    """Paths (a list) or None for each of one compiled call's kernels `names` (op children
    and GPU kernel records, in launch order); graphs[i]: the graph a generated one ran in."""
    out = [None] * len(names)
    anchors = _anchors(m, names, graphs)
    if not any(m.is_generated(n) for n in names):
        paths = m.whole_graph(names)
        return paths if paths is not None else out
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


def _is_marker(name):
    """TorchDynamo's and Inductor's own RecordFunction ranges ("Torch-Compiled Region: 0/0",
    "TorchDynamo Cache Lookup"): not ops (an op is "namespace::name"), not kernels."""
    return "::" not in name and not name.startswith("graph_")


def _meta_json(q, key):
    row = q("SELECT value FROM meta WHERE key = ?", (key,))
    return json.loads(row[0][0]) if row else {}


def _gpu_records(q, markers):
    """{marker call: [(order, token, name, gpu_ns, replayed)]} of the GPU kernels launched in
    compiled regions outside any op (Triton's), and {op call: first launch order}. The order
    is CUPTI's correlation id (launch order), or the GPU start when a file has none."""
    rows = q("SELECT k.call_id, k.token, s.text, k.gpu_begin_ns, k.gpu_end_ns, "
             "k.correlation_id, k.graph_id FROM kernels k LEFT JOIN strings s "
             "ON s.id = k.name_id")
    by_corr = all(r[5] for r in rows)
    in_marker, first = collections.defaultdict(list), {}
    for call, token, name, b, e, corr, graph in rows:
        order = corr if by_corr else b
        first[call] = min(first.get(call, order), order)
        if call in markers:
            in_marker[call].append((order, token, name or "?", e - b, bool(graph)))
    return in_marker, first


NOT_STORED = "(kernel rows not stored)"  # the name of a kernel counted but not recorded


def _not_stored(q, owner, records, children):
    """[(marker, token, NOT_STORED)] for each kernel launched in a region outside any op whose
    row the file does not hold (kernels="summary", the tokens sample:N skips): the call's GPU
    totals count it, the join cannot name it, so it is counted."""
    if not owner:
        return []
    total = {c: n for c, n in q("SELECT call_id, kernels FROM call_gpu")}
    out = []
    for marker, token in owner.items():
        own = total.get(marker, 0) - sum(total.get(c, 0) for c in children.get(marker, ()))
        out += [(marker, token[2], NOT_STORED)] * max(0, own - len(records.get(marker, ())))
    return out


def join(q, noted=None):
    """(kernels, unattributed): unattributed is [(call_id, token, name)] of the ops of compiled
    calls (and GPU kernels launched in their regions) that no kernel of the map matched.
    ([], []) without a map. noted: the map's meta rows when they are not in the file yet.

    A compiled call's kernels are the ops inside TorchDynamo's compiled regions among its op
    children (an op's own inner ops belong to it), and the GPU kernels launched in a region
    outside any op (Triton's), merged in launch order. Ops outside a region are not compiled
    code: the compile itself (fake-tensor ops in the first call), code between graphs.
    Generated kernel names repeat across graphs (each numbers its kernels from 0): a kernel's
    graph is the one compiled under its region's compile id (see _Map.graph_of); when that
    leaves more than one, the kernel is counted, not attributed. Kernels replayed from a CUDA
    graph (mode="reduce-overhead") are counted: they are not matched to graph nodes, and so
    are kernels the region's GPU totals count without a row (kernels="summary")."""
    def noted_json(key):  # the file's meta, or `noted` (its rows, not written yet)
        return _meta_json(q, key) if noted is None else json.loads(noted.get(key, "{}"))

    graphs = noted_json(META_KEY)
    if not graphs:
        return [], []
    m = _Map(graphs, noted_json(REGIONS_KEY))
    sites = {sid: (name, kind) for sid, name, kind in q("SELECT id, name, kind FROM sites")}
    if not any(name.startswith(REGION) for name, _ in sites.values()):
        return [], []  # no compiled code ran in this trace (the map may be from earlier ones)
    owner = {}  # marker call -> (module call whose region it is in, compile id, token)
    marker_children = collections.defaultdict(list)  # marker call -> its child calls
    top = {}  # op call inside a region -> its outermost op (the one the wrapper called)
    items = collections.defaultdict(list)  # module call -> [[order, seq, call, token, name,
    module_site = {}                       #   cpu_ns, gpu_ns, compile id]]
    for cid, sid, token, parent, b, e in q("SELECT id, site_id, token, parent_id, "
                                           "cpu_begin_ns, cpu_end_ns FROM calls ORDER BY id"):
        name, kind = sites.get(sid, ("?", ""))
        if kind != OP_KIND:
            module_site[cid] = name
            continue
        # Parents come before their children (ids are handed out at push).
        up, region, _ = owner.get(parent, (None, None, None))
        if parent in owner:
            marker_children[parent].append(cid)
        if up is None and parent in module_site and name.startswith(REGION):
            up = parent
        if name.startswith(REGION):
            region = name[len(REGION):].lstrip(": ")
        if up is not None and _is_marker(name):
            owner[cid] = (up, region, token)  # the ops in it are the module call's compiled code
        elif up is not None:
            top[cid] = cid
            items[up].append([None, cid, cid, token, name, (e or b) - b, None, region])
        elif parent in top:
            top[cid] = top[parent]
    records, first = _gpu_records(q, owner)
    op_first = {}
    for call, order in first.items():
        if call in top:
            op_first[top[call]] = min(op_first.get(top[call], order), order)
    for ops in items.values():  # an op's order: its first kernel's, else the op before's
        order = 0
        for op in ops:
            op[0] = order = op_first.get(op[2], order)
    replayed = []
    for marker, recs in records.items():
        up, region, _ = owner[marker]
        for order, token, name, gpu_ns, graph in recs:
            row = [order, 0, marker, token, name, 0, gpu_ns, region]
            (replayed if graph else items[up]).append(row)
    kernels, lost = [], [(r[2], r[3], r[4]) for r in replayed]
    lost += _not_stored(q, owner, records, marker_children)
    for parent, rows in items.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        names = [r[4] for r in rows]
        matched = _match_call(m, names, m.graph_of(names, [r[7] for r in rows]))
        for (_, _, cid, token, name, cpu_ns, gpu_ns, _), paths in zip(rows, matched):
            if paths is None:
                lost.append((cid, token, name))
                continue
            modules = [_site(module_site[parent], p) for p in paths]
            kernels.append(CompiledKernel(cid, token, name, modules, len(modules) > 1,
                                          cpu_ns, gpu_ns))
    return kernels, lost


def module_totals(kernels, gpu, token=None):
    """[ModuleTotal] per module over the run or one token, by GPU then CPU time. A fused
    kernel counts fully towards each of its modules (its `fused` count says how many were)."""
    acc = {}
    for k in kernels:
        if token is not None and k.token != token:
            continue
        n, busy = gpu.get(k.call_id, (0, 0)) if gpu is not None else (0, 0)
        if k.gpu_ns is not None:  # a GPU kernel record: its own time, not its region's
            busy = k.gpu_ns
        for module in k.modules:
            a = acc.setdefault(module, [0, 0, 0, 0])
            a[0] += 1
            a[1] += int(k.fused)
            a[2] += k.cpu_ns
            a[3] += busy
    out = [ModuleTotal(mod, n, f, cpu / 1e6, None if gpu is None else g / 1e6)
           for mod, (n, f, cpu, g) in acc.items()]
    out.sort(key=lambda t: (-(t.gpu_ms or 0), -t.cpu_ms, t.module))
    return out


def rows(path):
    """(meta, losses) to add to the file at `path` after the session: the map noted while it
    ran, and the op children of compiled calls that the map does not explain, counted as
    LOSS_KIND. ({}, {}) when nothing compiled. Reads the file once; writes nothing."""
    from . import _store
    noted = _compiled_map.meta()
    if not noted:
        return {}, {}
    con = _store.connect(path)
    try:
        _, lost = join(lambda sql, args=(): con.execute(sql, args).fetchall(), noted)
    finally:
        con.close()
    return noted, {LOSS_KIND: len(lost)}


def write(path):
    """rows(path), written to the file in one transaction."""
    from . import _store
    noted, losses = rows(path)
    if noted:
        _store.write_python_rows(path, meta=noted, losses=losses)
