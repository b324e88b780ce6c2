"""Op records (`ops=True` in trace/record, TOKENTRACE_OPS=1 or `tokentrace run --ops`).

The observer lives in the torch ops library (cuda/torch/op_observer.cc): a RecordFunction
callback, added to torch only while op records are on, that makes each ATen op a call (site
kind "op", named like "aten::addmm") nested in the call open on its thread, with the op's first
output tensor as the call's output. Off, nothing is registered and torch runs its ops without
RecordFunction at all.

    start(backend, host_reads)  turns the observer on (host_reads: report escape ops as host
                                reads, for models on the CPU where CUPTI sees none)
    stop()                      turns it off
    ops_of(trace, call)         the OpCall list behind CallView.ops
    top_ops(trace, token, n)    the OpTotal list behind Trace.top_ops
"""

import collections
import contextlib
import ctypes
import os

import torch

from . import _compiled_map
from ._errors import TokentraceError, fail
from ._naming import OP_KIND

ESCAPE_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::is_nonzero")


def check(ops, where="ops="):
    if not isinstance(ops, bool):
        fail(f"{where} takes True or False (record every ATen op as a call), got {ops!r}")
    return ops


def start(backend, host_reads):
    from . import _torch_ops
    try:
        _torch_ops.load_library()
    except TokentraceError as exc:
        fail(f"ops=True records ATen ops through the torch ops library, which did not load: "
             f"{str(exc).removeprefix('tokentrace: ')}")
    try:
        torch.ops.tokentrace.op_records_start(list(backend.c_api()), bool(host_reads))
    except RuntimeError as exc:
        fail(" ".join(str(exc).split()).removeprefix("tokentrace: "))
    # Compiled kernels become ops too, mapped to their modules (_compiled_map).
    _compiled_map.start()


_lib = {}


def stop():
    """Turns the observer off; True if it was on. Through ctypes, not an op: an op would be
    recorded as a call of its own."""
    from . import _torch_ops
    _compiled_map.stop()
    path = _torch_ops.load_library()
    if path not in _lib:
        _lib[path] = ctypes.CDLL(path)
    return bool(_lib[path].tokentrace_op_records_stop())


@contextlib.contextmanager
def ring_for_ops(backend, ops):
    """With ops on and TOKENTRACE_BUFFER_EVENTS unset, the session's per-thread ring is the
    larger one op records need (TOKENTRACE_OPS_BUFFER_EVENTS in include/tokentrace/tokentrace.h;
    `tokentrace run --ops` does the same). The variable is read when the session starts."""
    if not ops or os.environ.get("TOKENTRACE_BUFFER_EVENTS"):
        yield
        return
    os.environ["TOKENTRACE_BUFFER_EVENTS"] = str(backend.ops_buffer_events)
    try:
        yield
    finally:
        os.environ.pop("TOKENTRACE_BUFFER_EVENTS", None)


class OpCall:
    """One op call inside a module call: trace['site:k'].ops lists these."""

    def __init__(self, name, k, token, out, module, cpu_ms, inner):
        self.name = name      # "aten::addmm"
        self.k = k            # its call number: trace[f"{name}:{k}"] is the same call
        self.token = token
        self.out = out        # OutputMeta of its first output tensor, or None
        self.module = module  # "site:k" of the module call it ran in (innermost)
        self.cpu_ms = cpu_ms
        self.inner = inner    # names of the ops it called itself (aten::linear -> aten::addmm)

    @property
    def shape(self):
        return None if self.out is None else list(self.out.shape)

    def __repr__(self):
        return f"<op {self.name}:{self.k} out={self.shape} in {self.module}>"


def ops_of(trace, call):
    """The ops run inside `call` and the module calls under it, outermost ops only (an op's
    own inner ops are in .inner), in the order they started."""
    kinds = {sid: (name, kind) for name, (sid, kind, _) in trace._sites.items()}
    rows = trace._q("SELECT id, site_id, k, parent_id, cpu_begin_ns, cpu_end_ns FROM calls "
                    "WHERE token = ? AND id >= ? ORDER BY id", (call.token, call.id))
    # Children have larger ids than their parents (ids are handed out at push): one pass in
    # id order collects the subtree.
    inside = {call.id: f"{call.site}:{call.k}"}
    ops, by_id = [], {}
    for cid, sid, k, parent, b, e in rows:
        if cid == call.id or parent not in inside:
            continue
        name, kind = kinds.get(sid, ("?", ""))
        inside[cid] = f"{name}:{k}"
        if kind != OP_KIND:
            continue
        outer = by_id.get(parent)
        if outer is not None:  # an op inside an op
            outer.inner.append(name)
            by_id[cid] = outer
            continue
        op = OpCall(name, k, call.token, trace._output(cid), inside[parent],
                    ((e or b) - b) / 1e6, [])
        by_id[cid] = op
        ops.append(op)
    return ops


OpTotal = collections.namedtuple("OpTotal", "name calls cpu_ms gpu_ms kernels")


def top_ops(trace, token=None, n=10):
    """[OpTotal(name, calls, cpu_ms, gpu_ms, kernels)] of the outermost ops (an op's inner ops
    count towards it), over the run or one token, by GPU time then CPU time; gpu_ms and
    kernels are None when kernels were not recorded."""
    kinds = {sid: (name, kind) for name, (sid, kind, _) in trace._sites.items()}
    op_sites = [sid for sid, (_, kind) in kinds.items() if kind == OP_KIND]
    if not op_sites:
        return []
    marks = ",".join("?" * len(op_sites))
    where = "c.token = ? AND " if token is not None else ""
    args = ([token] if token is not None else []) + op_sites + op_sites
    rows = trace._q(
        f"SELECT c.id, c.site_id, c.cpu_begin_ns, c.cpu_end_ns FROM calls c "
        f"LEFT JOIN calls p ON p.id = c.parent_id WHERE {where}c.site_id IN ({marks}) "
        f"AND (p.site_id IS NULL OR p.site_id NOT IN ({marks}))", args)
    gpu = trace._gpu_totals()
    totals = {}
    for cid, sid, b, e in rows:
        acc = totals.setdefault(kinds[sid][0], [0, 0, 0, 0])
        kernels, busy = gpu.get(cid, (0, 0)) if gpu is not None else (0, 0)
        acc[0] += 1
        acc[1] += (e or b) - b
        acc[2] += busy
        acc[3] += kernels
    out = [OpTotal(name, c, cpu / 1e6, None if gpu is None else g / 1e6,
                   None if gpu is None else k) for name, (c, cpu, g, k) in totals.items()]
    out.sort(key=lambda t: (-(t.gpu_ms or 0), -t.cpu_ms, t.name))
    return out[:n]
