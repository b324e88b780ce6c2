"""The truth `tokentrace import` must reproduce, computed from a recorded GPU trace on its own.

"A GPU record belongs to the launch with its correlation id (in the same process), and the
launch to the innermost range open on the launching thread when the launch began."

This module shares no code with tokentrace (it imports nothing of it): it reads the trace with
json / gzip / sqlite3 and joins by the definitions alone, so the import's tests compare two
independent readings of the same file.

- torch.profiler (Kineto) JSON, plain or gzip: times are microseconds, made integer ns as
  round(ts * 1000) (a float product, as a reader of JSON numbers as doubles gets). Ranges:
  `X` events of cat python_function named "nn.Module: NAME" (range NAME, a module) and `X`
  events of cat user_annotation (range `name`), by (pid, tid). Launches: cuda_runtime / cuda_driver
  events with args.correlation. GPU records: kernel / gpu_memcpy / gpu_memset events. A
  record's process is its launch's; the file holds one CPU process, which gets the records
  without a launch too.
- Nsight Systems SQLite export: integer ns; globalTid / globalPid hold pid = (v >> 24) &
  0xFFFFFF and tid = v & 0xFFFFFF. Ranges: NVTX_EVENTS push/pop (eventType 59) that ended,
  named by `text` or StringIds[textId]. Launches: CUPTI_ACTIVITY_KIND_RUNTIME. GPU records:
  CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET, in the process of their globalPid;
  correlation ids are per process.

The innermost range open at a launch at t on thread T: among T's ranges with begin <= t <= end,
the one with the largest begin, on equal begins the one with the smallest end.

truth(path) -> {pid: ProcessTruth}; records are keyed (correlation, begin_ns, stream, device)
and kept as a Counter of (key, range) pairs: a CUDA-graph launch fans out to many records under
one correlation id, and nothing promises two of them never share a key.
"""

import collections
import dataclasses
import functools
import gzip
import heapq
import json
import re
import sqlite3
from bisect import bisect_left, bisect_right
from typing import Optional

# The range of a record whose correlation id no launch of the trace has.
NO_LAUNCH = "<no launch>"
MODULE_PREFIX = "nn.Module: "
KINETO_RANGE_CATS = ("python_function", "user_annotation")
KINETO_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
KINETO_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
NVTX_PUSH_POP = 59
NSYS_GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                   "CUPTI_ACTIVITY_KIND_MEMSET")


@dataclasses.dataclass(frozen=True)
class Range:
    name: str
    begin: int
    end: int
    module: bool  # a Kineto nn.Module range (its site kind is 'module'; others 'range')


@dataclasses.dataclass
class ProcessTruth:
    pid: int
    # Counter of ((correlation, begin_ns, stream, device), range name | None | NO_LAUNCH)
    records: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    kinds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    no_launch: int = 0          # GPU records whose correlation id no launch of the trace has
    no_launch_kinds: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)  # of them, by kind (kernel, memcpy, memset)
    outside_ranges: int = 0     # GPU records whose launch no range held
    launches_outside_ranges: int = 0  # launches with GPU records and no range
    launches: int = 0           # launch API events of the process (with or without records)
    launch_cats: collections.Counter = dataclasses.field(
        default_factory=collections.Counter)  # of them, by source (cuda_runtime, cuda_driver)
    launches_with_records: int = 0
    ranges: int = 0             # ranges on the process's threads
    badly_nested: int = 0       # of them, ranges partially overlapping another of their thread
    range_names: dict = dataclasses.field(default_factory=dict)  # name -> is a module range
    root: Optional[str] = None  # the outermost module range that began first (Kineto)
    # launches with more than one GPU record (CUDA-graph launches): (API name, thread, records)
    fan_out: list = dataclasses.field(default_factory=list)

    @property
    def total(self):
        return sum(self.records.values())

    def by_range(self):
        """{range name | None | NO_LAUNCH: records}."""
        out = collections.Counter()
        for (_, name), n in self.records.items():
            out[name] += n
        return out


def _ns(us):
    return round(float(us) * 1000)


def innermost(ranges, launches):
    """For one thread: {launch index: the innermost Range open at its time, or None}.

    ranges: [Range]; launches: [(t, index)]. A sweep in time order: ranges are pushed on a
    heap ordered by (largest begin, smallest end) as they begin, and dropped from its top once
    they ended before the launch (they stay ended for every later launch)."""
    ordered = sorted(ranges, key=lambda r: r.begin)
    heap = []
    out = {}
    i = 0
    for t, index in sorted(launches):
        while i < len(ordered) and ordered[i].begin <= t:
            r = ordered[i]
            heapq.heappush(heap, (-r.begin, r.end, i, r))
            i += 1
        while heap and heap[0][1] < t:
            heapq.heappop(heap)
        out[index] = heap[0][3] if heap else None
    return out


def badly_nested(ranges):
    """How many of one thread's ranges partially overlap another (a.begin < b.begin < a.end <
    b.end): neither holds the other. Ranges that only touch (a.end == b.begin) nest."""
    ordered = sorted(ranges, key=lambda r: r.begin)
    ends = []  # sorted (end, index) of the ranges that began strictly earlier
    bad = set()
    i = 0
    while i < len(ordered):
        j = i
        while j < len(ordered) and ordered[j].begin == ordered[i].begin:
            j += 1
        for k in range(i, j):
            r = ordered[k]
            lo = bisect_right(ends, (r.begin, float("inf")))
            hi = bisect_left(ends, (r.end, -1))
            if lo < hi:
                bad.add(k)
                bad.update(index for _, index in ends[lo:hi])
        for k in range(i, j):
            ends.insert(bisect_left(ends, (ordered[k].end, k)), (ordered[k].end, k))
        i = j
    return len(bad)


def _join(ranges, launches, records, single_pid=None):
    """ranges: {(pid, tid): [Range]}; launches: {(pid, correlation): (t, (pid, tid), API name,
    source)}; records: [(pid or None, correlation, begin, stream, device, kind)] (pid None: the
    launch's process). Returns {pid: ProcessTruth}."""
    by_thread = collections.defaultdict(list)
    for (pid, corr), (t, thread, _, _) in launches.items():
        by_thread[thread].append((t, (pid, corr)))
    held = {}
    for thread, ls in by_thread.items():
        held.update(innermost(ranges.get(thread, []), ls))

    out = {}

    def process(pid):
        if pid not in out:
            out[pid] = ProcessTruth(pid)
        return out[pid]

    launch_pids = {pid for pid, _ in launches}
    records_of = collections.Counter()
    for pid, corr, begin, stream, device, kind in records:
        if pid is None:  # Kineto: the process of the launch, the one process if none
            owners = [p for p in launch_pids if (p, corr) in launches]
            pid = owners[0] if owners else single_pid
        truth = process(pid)
        truth.kinds[kind] += 1
        key = (corr, begin, stream, device)
        if (pid, corr) not in launches:
            truth.no_launch += 1
            truth.no_launch_kinds[kind] += 1
            truth.records[(key, NO_LAUNCH)] += 1
            continue
        records_of[(pid, corr)] += 1
        r = held[(pid, corr)]
        if r is None:
            truth.outside_ranges += 1
        truth.records[(key, r.name if r else None)] += 1

    for (pid, corr), n in records_of.items():
        truth = process(pid)
        truth.launches_with_records += 1
        if n > 1:
            _, thread, name, _ = launches[(pid, corr)]
            truth.fan_out.append((name, thread, n))
        if held[(pid, corr)] is None:
            truth.launches_outside_ranges += 1
    for (pid, _), (_, _, _, cat) in launches.items():
        if pid in out:
            out[pid].launches += 1
            out[pid].launch_cats[cat] += 1
    for (pid, _), rs in ranges.items():
        if pid not in out:
            continue
        truth = out[pid]
        truth.ranges += len(rs)
        truth.badly_nested += badly_nested(rs)
        for r in rs:
            truth.range_names[r.name] = truth.range_names.get(r.name, False) or r.module
    for pid, truth in out.items():
        # the root: the module range that began first (ties: the longer) is held by no other
        modules = [r for (p, _), rs in ranges.items() if p == pid for r in rs if r.module]
        if modules:
            truth.root = min(modules, key=lambda r: (r.begin, -r.end)).name
    return out


def _open_json(path):
    with open(path, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def kineto_truth(path):
    doc = _open_json(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    ranges = collections.defaultdict(list)
    launches = {}
    records = []
    for e in events:
        cat = e.get("cat")
        if cat in KINETO_RANGE_CATS and e.get("ph") == "X":
            name = e.get("name", "")
            if cat == "python_function":
                if not name.startswith(MODULE_PREFIX):
                    continue
                name, module = name[len(MODULE_PREFIX):], True
            else:
                module = False
            begin = _ns(e["ts"])
            end = _ns(float(e["ts"]) + float(e["dur"]))
            ranges[(e["pid"], e["tid"])].append(Range(name, begin, end, module))
        elif cat in KINETO_LAUNCH_CATS:
            corr = (e.get("args") or {}).get("correlation")
            if corr is None:
                continue
            key = (e["pid"], corr)
            assert key not in launches, ("two launches with one correlation id", key)
            launches[key] = (_ns(e["ts"]), (e["pid"], e["tid"]), e.get("name"), cat)
        elif cat in KINETO_GPU_CATS:
            args = e["args"]
            kind = "kernel" if cat == "kernel" else cat[len("gpu_"):]
            records.append((None, args["correlation"], _ns(e["ts"]), args["stream"],
                            args["device"], kind))
    pids = {pid for pid, _ in launches}
    assert len(pids) <= 1, ("a Kineto trace of several CPU processes", pids)
    return _join(ranges, launches, records, single_pid=next(iter(pids), None))


def nvtx_site(text):
    """The site of an NVTX range: its text less what PyTorch's emit_nvtx appends to an op's
    name (", seq = N", ", op_id = N", ", sizes = [...]"; docs/import.md): one op is one site."""
    text = re.sub(r", (?:seq|op_id) = -?\d+", "", text)
    at = text.find(", sizes = [")
    if at < 0:
        return text
    depth, i = 0, at + len(", sizes = ")
    while i < len(text):  # to the bracket that closes the list (the sizes nest lists)
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        i += 1
        if depth == 0:
            break
    return text[:at] + text[i:]


def _split(global_id):
    return (global_id >> 24) & 0xFFFFFF, global_id & 0xFFFFFF


def nsys_truth(path):
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    try:
        strings = dict(con.execute("SELECT id, value FROM StringIds"))
        ranges = collections.defaultdict(list)
        for start, end, text, text_id, tid in con.execute(
                "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS "
                "WHERE eventType = ? AND end IS NOT NULL", (NVTX_PUSH_POP,)):
            name = text if text is not None else strings.get(text_id)
            ranges[_split(tid)].append(Range(nvtx_site(name), start, end, False))
        launches = {}
        for start, corr, tid, name_id in con.execute(
                "SELECT start, correlationId, globalTid, nameId FROM "
                "CUPTI_ACTIVITY_KIND_RUNTIME"):
            thread = _split(tid)
            key = (thread[0], corr)
            assert key not in launches, ("two launches with one correlation id", key)
            launches[key] = (start, thread, strings.get(name_id), "runtime")
        records = []
        tables = {name for (name,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in NSYS_GPU_TABLES:
            if table not in tables:
                continue
            columns = {row[1] for row in con.execute("PRAGMA table_info(%s)" % table)}
            assert {"start", "correlationId", "streamId", "deviceId", "globalPid"} <= columns, \
                (table, columns)
            kind = table.rsplit("_", 1)[1].lower()
            for start, corr, stream, device, gpid in con.execute(
                    "SELECT start, correlationId, streamId, deviceId, globalPid FROM %s"
                    % table):
                records.append((_split(gpid)[0], corr, start, stream, device, kind))
    finally:
        con.close()
    out = _join(ranges, launches, records)
    for truth in out.values():
        truth.root = None  # an nsys trace has no module ranges: no root unless one is given
    return out


@functools.lru_cache(maxsize=None)
def truth(path):
    """{pid: ProcessTruth} of the trace at `path` (Kineto JSON or Nsight Systems SQLite)."""
    path = str(path)
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        return nsys_truth(path)
    return kineto_truth(path)
