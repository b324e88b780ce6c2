"""The run-time join of compiled kernels with the modules they came from (see kernel_map.py).

    join_kernels(q) -> (kernels, unattributed) from a trace file's rows; q(sql, args) runs a
                       query (the texts are the file room's: _file/queries.py's QUERIES)
    module_totals(kernels, gpu, token)  the per-module rows behind Trace.compiled_modules
    compiled_rows(path)  the meta and losses a recording adds to its file at the end

A kernel is CompiledKernel(call_id, token, name, modules, fused, cpu_ns, gpu_ns); modules
are site names ("model.layers.0.mlp"), joined to the site of the compiled module's call. What
is read here (a compiled call's runs, a CUDA graph's replays) is matched by the rules of
match.py.
"""

import collections
import json

from .._common import OP_KIND, ROOT
from .._file import TraceFile, queries
from . import kernel_map, match
from .kernel_map import LOSS_KIND, META_KEY, REGIONS_KEY

# gpu_ns: a GPU kernel record's own time; None for an op call (its kernels: the reader's GPU
# totals, _read/state.py).
CompiledKernel = collections.namedtuple("CompiledKernel",
                                        "call_id token name modules fused cpu_ns gpu_ns",
                                        defaults=(None,))
ModuleTotal = collections.namedtuple("ModuleTotal", "module kernels fused cpu_ms gpu_ms")
REGION = "Torch-Compiled Region"  # TorchDynamo's range around a compiled frame's run
QUERIES = queries.QUERIES  # the join's texts, run through the q it is handed


def _site(parent_site, path):
    if not path:
        return parent_site
    return path if parent_site == ROOT else f"{parent_site}.{path}"


def _kernel(call_id, token, name, compiled_site, paths, cpu_ns, gpu_ns):
    """The CompiledKernel of a match: its paths (relative to the compiled module's site) as
    sites; more than one is a fused kernel."""
    modules = [_site(compiled_site, p) for p in paths]
    return CompiledKernel(call_id, token, name, modules, len(modules) > 1, cpu_ns, gpu_ns)


def _is_marker(name):
    """TorchDynamo's and Inductor's own RecordFunction ranges ("Torch-Compiled Region: 0/0",
    "TorchDynamo Cache Lookup"): not ops (an op is "namespace::name"), not kernels."""
    return "::" not in name and not name.startswith("graph_")


def _meta_json(q, key):
    row = q(QUERIES["meta_value"], (key,))
    return json.loads(row[0][0]) if row else {}


def _gpu_records(q, markers):
    """({marker call: [(order, token, name, gpu_ns, replayed)]} of the GPU kernels launched
    in compiled regions outside any op (Triton's), {call: first launch order} of the kernels
    that ran where they were launched, and the rows of kernels replayed from a CUDA graph,
    [(call, token, name, gpu_begin_ns, gpu_ns, replay)]. The order is CUPTI's correlation id
    (launch order), or the GPU start when a file has none. A replayed kernel's call is the
    call its graph node was captured in (the shim's joiner), its token the replay's; replay
    tells one graph launch from another (all its kernels have the launch's correlation id)."""
    rows = q(QUERIES["kernel_records"])
    by_corr = all(r[5] for r in rows)
    in_marker, first, replays = collections.defaultdict(list), {}, []
    for call, token, name, b, e, corr, graph in rows:
        order = corr if by_corr else b
        if graph:
            replays.append((call, token, name or "?", b, e - b, (graph, corr)))
        else:
            first[call] = min(first.get(call, order), order)
        if call in markers:
            in_marker[call].append((order, token, name or "?", e - b, bool(graph)))
    return in_marker, first, replays


def _replay_runs(replays, owner, top, info):
    """The kernels of each CUDA-graph replay of compiled code, as the run it was captured
    from: [[(runtime name, region, module call, [(call, token, name, gpu_ns)])]] per replay,
    in the replay's GPU order (a graph captured on one stream runs its nodes in capture
    order). A kernel captured in a region outside any op (Triton's) is its own entry under
    its name; the kernels captured in one op (an aten::mm's gemm and its reduction) are one
    entry under the op's name, as the op is in the run it was captured from. Replays of
    graphs captured outside compiled code are not here (the joiner's node attribution is
    theirs)."""
    by_replay = collections.defaultdict(list)
    for call, token, name, b, gpu_ns, replay in replays:
        if call in owner:
            up, region, _ = owner[call]
            unit, as_name = None, name
        elif call in top:
            unit = top[call]
            up, region, as_name = info[unit]
        else:
            continue
        by_replay[(token, replay)].append((b, unit, as_name, region, up, (call, token, name,
                                                                            gpu_ns)))
    runs = []
    for recs in by_replay.values():
        recs.sort(key=lambda r: r[0])
        run, last_unit = [], None
        for _, unit, as_name, region, up, rec in recs:
            if unit is not None and unit == last_unit:
                run[-1][3].append(rec)
            else:
                run.append((as_name, region, up, [rec]))
            last_unit = unit
        runs.append(run)
    return runs


NOT_STORED = "(kernel rows not stored)"  # the name of a kernel counted but not recorded


def _not_stored(q, owner, records, children):
    """[(marker, token, NOT_STORED)] for each kernel launched in a region outside any op whose
    row the file does not hold (kernels="summary", the tokens sample:N skips): the call's GPU
    totals count it, the join cannot name it, so it is counted."""
    if not owner:
        return []
    total = {c: n for c, n, _ in q(QUERIES["call_gpu"])}
    out = []
    for marker, token in owner.items():
        own = total.get(marker, 0) - sum(total.get(c, 0) for c in children.get(marker, ()))
        out += [(marker, token[2], NOT_STORED)] * max(0, own - len(records.get(marker, ())))
    return out


def join_kernels(q, noted=None):
    """(kernels, unattributed): unattributed is [(call_id, token, name)] of the ops of compiled
    calls (and GPU kernels launched in their regions) that no kernel of the map matched.
    ([], []) when no compiled region ran. noted: the map's meta rows when they are not in the
    file yet.

    A compiled call's kernels are the ops inside TorchDynamo's compiled regions among its op
    children (an op's own inner ops belong to it), and the GPU kernels launched in a region
    outside any op (Triton's), merged in launch order. Ops outside a region are not compiled
    code: the compile itself (fake-tensor ops in the first call), code between graphs.
    Generated kernel names repeat across graphs (each numbers its kernels from 0): a kernel's
    graph is the one compiled under its region's compile id (match.Map.graph_of);
    when that leaves more than one, the kernel is counted, not attributed. Kernels the
    region's GPU totals count without a row (kernels="summary") are counted too.

    Kernels replayed from a CUDA graph (mode="reduce-overhead") are matched by graph node:
    the shim attributes each to the call its node was captured in, so one replay's kernels
    are the captured run's entries (_replay_runs), matched as a run is, in the graph of the
    capturing region's compile id. Each is a kernel of the replay's token, under the region
    call of that token (else the capturing call). Nothing ran at capture: the captured ops'
    GPU time is their replays', so a captured op is listed with gpu_ns 0."""
    def noted_json(key):  # the file's meta, or `noted` (its rows, not written yet)
        return _meta_json(q, key) if noted is None else json.loads(noted.get(key, "{}"))

    # Without a map (every graph compiled before the trace) nothing is attributed: each op and
    # kernel of a region is counted.
    m = match.Map(noted_json(META_KEY), noted_json(REGIONS_KEY))
    sites = {sid: (name, kind) for sid, name, kind in q(QUERIES["site_kinds"])}
    if not any(name.startswith(REGION) for name, _ in sites.values()):
        return [], []  # no compiled code ran in this trace (the map may be from earlier ones)
    owner = {}  # marker call -> (module call whose region it is in, compile id, token)
    marker_children = collections.defaultdict(list)  # marker call -> its child calls
    top = {}  # op call inside a region -> its outermost op (the one the wrapper called)
    items = collections.defaultdict(list)  # module call -> [[order, seq, call, token, name,
    module_site = {}                       #   cpu_ns, gpu_ns, compile id]]
    info = {}  # outermost op in a region -> (module call, compile id, name)
    region_at = {}  # (token, compile id) -> that token's (first) region call
    for cid, sid, token, parent, b, e in q(QUERIES["calls_with_times"]):
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
            if name.startswith(REGION):
                region_at.setdefault((token, region), cid)
            owner[cid] = (up, region, token)  # the ops in it are the module call's compiled code
        elif up is not None:
            top[cid] = cid
            info[cid] = (up, region, name)
            items[up].append([None, cid, cid, token, name, (e or b) - b, None, region])
        elif parent in top:
            top[cid] = top[parent]
    records, first, replays = _gpu_records(q, owner)
    op_first = {}
    for call, order in first.items():
        if call in top:
            op_first[top[call]] = min(op_first.get(top[call], order), order)
    for ops in items.values():  # an op's order: its first kernel's, else the op before's
        order = 0
        for op in ops:
            op[0] = order = op_first.get(op[2], order)
    for marker, recs in records.items():
        up, region, _ = owner[marker]
        items[up] += [[order, 0, marker, token, name, 0, gpu_ns, region]
                      for order, token, name, gpu_ns, graph in recs if not graph]
    memo = {}  # decode tokens run (or replay) the same kernels: one match for all of them

    def matched_paths(names, regions):
        key = (tuple(names), tuple(regions))
        if key not in memo:
            memo[key] = match.match_call(m, names, m.graph_of(names, regions), regions)
        return memo[key]
    kernels, replayed = [], []
    lost = _not_stored(q, owner, records, marker_children)
    captured = {}  # an op captured into a CUDA graph -> its paths, from its replays' match
    for run in _replay_runs(replays, owner, top, info):
        matched = matched_paths([name for name, *_ in run], [r[1] for r in run])
        for (_, region, up, recs), paths in zip(run, matched):
            unit = top.get(recs[0][0])
            if unit is not None and captured.get(unit) is None:
                captured[unit] = paths
            for call, token, name, gpu_ns in recs:
                cid = region_at.get((token, region), call)
                if paths is None:
                    lost.append((cid, token, name))
                    continue
                replayed.append(_kernel(cid, token, name, module_site[up], paths, 0, gpu_ns))
    for parent, rows in items.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        matched = matched_paths([r[4] for r in rows], [r[7] for r in rows])
        for (_, _, cid, token, name, cpu_ns, gpu_ns, _), paths in zip(rows, matched):
            if cid in captured:  # its run launched nothing; the replays' match is its
                paths, gpu_ns = captured[cid], 0
            if paths is None:
                lost.append((cid, token, name))
                continue
            kernels.append(_kernel(cid, token, name, module_site[parent], paths, cpu_ns,
                                   gpu_ns))
    kernels += replayed
    kernels.sort(key=lambda k: k.token)  # stable: launch order within a token, replays last
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


def compiled_rows(path):
    """(meta, losses) to add to the file at `path` after the session: the map noted while it
    ran (and UNMAPPED_KEY: the regions that ran without one), and the op children of compiled
    calls that the map does not explain, counted as LOSS_KIND. ({}, {}) when nothing compiled
    or ran compiled. Reads the file once; writes nothing."""
    noted = kernel_map.meta()
    file = TraceFile(path)
    try:
        q = file.q
        _, lost = join_kernels(q, noted)
        unmapped = unmapped_regions(q, noted)
        ran = _ran_regions(q)
    finally:
        file.close()
    if not noted and not lost and not unmapped:
        return {}, {}
    meta = dict(noted)
    if unmapped:
        meta[UNMAPPED_KEY] = ", ".join(unmapped)
    # Graphs recovered from compiled code whose C++ kernels run without records: those of the
    # regions that ran here (the map holds every graph of the process).
    unrecorded = {cid: names for cid, names in json.loads(
        noted.get(kernel_map.UNRECORDED_KEY, "{}")).items() if cid in ran}
    meta.pop(kernel_map.UNRECORDED_KEY, None)
    if unrecorded:
        meta[kernel_map.UNRECORDED_KEY] = json.dumps(unrecorded)
        meta[UNRECORDED_REGIONS_KEY] = ", ".join(
            f"{cid} ({len(names)} kernel{'s' if len(names) > 1 else ''})"
            for cid, names in sorted(unrecorded.items()))
    return meta, {LOSS_KIND: len(lost)}


UNMAPPED_KEY = "compiled_unmapped"  # meta: the compile ids of regions that ran with no map
# meta: "0/0 (2 kernels), ...": the regions that ran here of graphs compiled before the trace
# whose generated C++ kernels run unrecorded (kernel_map.UNRECORDED_KEY has their names)
UNRECORDED_REGIONS_KEY = "compiled_unrecorded_regions"


def _ran_regions(q):
    return {name[len(REGION):].lstrip(": ") for (name,) in q(QUERIES["site_names_like"],
                                                             (REGION + "%",))}


def unmapped_regions(q, noted=None):
    """The compile ids ("0/0") of the compiled regions that ran in the trace without a kernel
    map: graphs compiled before it started (or whose compile was not noted). Their ops and
    kernels are all counted as LOSS_KIND."""
    regions = _meta_json(q, REGIONS_KEY) if noted is None else json.loads(
        noted.get(REGIONS_KEY, "{}"))
    mapped = set(regions.values())
    return sorted(r for r in _ran_regions(q) if r and r not in mapped)

