"""Host-side collectives as calls of their own (preload mode).

Each torch.distributed collective the job calls (all_reduce, all_gather, ...) runs inside a
call of the range site "c10d::<name>", nested in the module call it came from. The cross-rank
report (`tokentrace report DIR`) counts time in such calls as wait: a rank blocked in
all_reduce for a slow peer shows as waiting, not as working (src/multi/rank_compare.h).

Only the blocking part is seen: with async_op=True the call returns at once and the wait
happens later in Work.wait(), outside the site. Functions bound before install() (e.g.
`from torch.distributed import all_reduce` at the top of the job) keep the original.
"""

import functools

NAMES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
         "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "barrier",
         "reduce", "gather", "scatter")


def install(backend):
    """Wraps the collectives of torch.distributed; returns the names wrapped."""
    import torch.distributed as dist
    if not dist.is_available():
        return []
    wrapped = []
    for name in NAMES:
        fn = getattr(dist, name, None)
        if fn is None or hasattr(fn, "_tokentrace_site"):
            continue
        site = backend.site("c10d::" + name, backend.site_kind("range"))
        setattr(dist, name, _wrap(backend, site, fn))
        wrapped.append(name)
    return wrapped


def _wrap(backend, site, fn):
    @functools.wraps(fn)
    def collective(*args, **kwargs):
        backend.push(site)
        try:
            return fn(*args, **kwargs)
        finally:
            backend.pop()

    collective._tokentrace_site = site
    return collective
