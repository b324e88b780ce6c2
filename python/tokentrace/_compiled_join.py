"""The run-time join of compiled kernels with the modules they came from (see _compiled_map).

    join(q)   -> (kernels, unattributed) from a trace file's rows; q(sql, args) runs a query
    module_totals(kernels, gpu, token)  the per-module rows behind Trace.compiled_modules

A kernel is CompiledKernel(call_id, token, name, modules, fused, cpu_ns); modules are site
names ("model.layers.0.mlp"), joined to the site of the compiled module's call.
"""

import collections
import json

from . import _compiled_map
from ._compiled_map import LOSS_KIND, META_KEY

OP_KIND = "op"  # as _ops.OP_KIND (not imported: _ops imports torch)

CompiledKernel = collections.namedtuple("CompiledKernel",
                                        "call_id token name modules fused cpu_ns")
ModuleTotal = collections.namedtuple("ModuleTotal", "module kernels fused cpu_ms gpu_ms")


def _site(parent_site, path):
    if not path:
        return parent_site
    return path if parent_site == "self" else f"{parent_site}.{path}"


class _Map:
    def __init__(self, graphs):
        self.graphs = graphs  # {graph: [[runtime name, [paths]], ...]}
        self.generated = {}   # runtime name -> (graph, index); generated kernels have one name
        for graph, entries in graphs.items():
            for i, (name, _) in enumerate(entries):
                if "::" not in name:  # library calls are ops, "namespace::name"
                    self.generated.setdefault(name, (graph, i))

    def is_generated(self, name):
        return name in self.generated

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


def _match_call(m, names):
    """Paths (a list) or None for each of one compiled call's op children `names`."""
    out = [None] * len(names)
    anchors = [(i, m.generated[n]) for i, n in enumerate(names) if m.is_generated(n)]
    if not anchors:
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


REGION = "Torch-Compiled Region"  # TorchDynamo's range around a compiled frame's run


def _is_marker(name):
    """TorchDynamo's and Inductor's own RecordFunction ranges ("Torch-Compiled Region: 0/0",
    "TorchDynamo Cache Lookup"): not ops (an op is "namespace::name"), not kernels."""
    return "::" not in name and not name.startswith("graph_")


def join(q):
    """(kernels, unattributed): unattributed is [(call_id, token, name)] of the ops of compiled
    calls that no kernel of the map matched. ([], []) without a map.

    A compiled call's kernels are the ops inside TorchDynamo's compiled regions among its op
    children (an op's own inner ops belong to it). Ops outside a region are not compiled
    code: the compile itself (fake-tensor ops in the first call), code between graphs."""
    row = q("SELECT value FROM meta WHERE key = ?", (META_KEY,))
    if not row:
        return [], []
    m = _Map(json.loads(row[0][0]))
    sites = {sid: (name, kind) for sid, name, kind in q("SELECT id, name, kind FROM sites")}
    owner = {}  # marker call -> the module call whose compiled region it is in
    children = collections.defaultdict(list)  # module call -> its compiled ops, in order
    module_site = {}
    for cid, sid, token, parent, b, e in q("SELECT id, site_id, token, parent_id, "
                                           "cpu_begin_ns, cpu_end_ns FROM calls ORDER BY id"):
        name, kind = sites.get(sid, ("?", ""))
        if kind != OP_KIND:
            module_site[cid] = name
            continue
        # Parents come before their children (ids are handed out at push).
        up = owner.get(parent)
        if up is None and parent in module_site and name.startswith(REGION):
            up = parent
        if up is not None and _is_marker(name):
            owner[cid] = up  # the ops in it are the module call's compiled code
        elif up is not None:
            children[up].append((cid, name, token, (e or b) - b))
    kernels, lost = [], []
    for parent, ops in children.items():
        matched = _match_call(m, [name for _, name, _, _ in ops])
        for (cid, name, token, dur), paths in zip(ops, matched):
            if paths is None:
                lost.append((cid, token, name))
                continue
            modules = [_site(module_site[parent], p) for p in paths]
            kernels.append(CompiledKernel(cid, token, name, modules, len(modules) > 1, dur))
    return kernels, lost


def module_totals(kernels, gpu, token=None):
    """[ModuleTotal] per module over the run or one token, by GPU then CPU time. A fused
    kernel counts fully towards each of its modules (its `fused` count says how many were)."""
    acc = {}
    for k in kernels:
        if token is not None and k.token != token:
            continue
        n, busy = gpu.get(k.call_id, (0, 0)) if gpu is not None else (0, 0)
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


def write(path):
    """After the session: the map into the file's meta, and the op children of compiled calls
    that it does not explain counted as LOSS_KIND."""
    from . import _store
    noted = _compiled_map.meta()
    if not noted:
        return
    _store.write_python_rows(path, meta=noted)
    con = _store.connect(path)
    try:
        _, lost = join(lambda sql, args=(): con.execute(sql, args).fetchall())
    finally:
        con.close()
    _store.write_python_rows(path, losses={LOSS_KIND: len(lost)})
