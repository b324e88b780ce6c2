"""Op records read back: the ATen ops a call ran (CallView.ops) and the ops' totals
(Trace.top_ops). Recording them is _record/op_records.py's.

    ops_of(state, call)         the OpCall list behind CallView.ops
    top_ops(state, token, n)    the OpTotal list behind Trace.top_ops
(state: the trace's TraceState, state.py.)
"""

import collections

from .._common import OP_KIND
from .._file import queries


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


def ops_of(state, call):
    """The ops run inside `call` and the module calls under it, outermost ops only (an op's
    own inner ops are in .inner), in the order they started."""
    kinds = state.site_kinds()
    rows = state.file.q(*queries.token_calls_from(state.file.has_summaries, call.token,
                                                   call.id))
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
        op = OpCall(name, k, call.token, state.output(cid), inside[parent],
                    ((e or b) - b) / 1e6, [])
        by_id[cid] = op
        ops.append(op)
    return ops


OpTotal = collections.namedtuple("OpTotal", "name calls cpu_ms gpu_ms kernels")


def top_ops(state, token=None, n=10):
    """[OpTotal(name, calls, cpu_ms, gpu_ms, kernels)] of the outermost ops (an op's inner ops
    count towards it), over the run or one token, by GPU time then CPU time; gpu_ms and
    kernels are None when kernels were not recorded."""
    kinds = state.site_kinds()
    op_sites = [sid for sid, (_, kind) in kinds.items() if kind == OP_KIND]
    if not op_sites:
        return []
    if token is not None:
        token = int(token)
    rows = state.file.q(*queries.outermost_op_calls(op_sites, state.file.has_summaries, token))
    gpu = state.gpu_totals()
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
