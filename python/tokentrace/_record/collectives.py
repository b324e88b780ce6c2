"""Host-side collectives as calls of their own (preload mode, tt.trace and tt.record).

Each torch.distributed collective the job calls (all_reduce, all_gather, ...) runs inside a
call of the range site "c10d::<name>", nested in the module call it came from. The cross-rank
report (`tokentrace report DIR`) counts time in such calls as wait: a rank blocked in
all_reduce for a slow peer shows as waiting, not as working (src/multi/rank_compare.h).

With async_op=True the collective returns a Work at once and the rank waits later, in
Work.wait(): that wait is a call of the site "c10d::wait", so it is wait too. A blocking
collective waits on its own Work inside its call; that inner wait is not recorded again.

The recording set-up (attach.py's Attachment) installs them when it attaches and removes them at
the end of a trace (remove() puts the originals back). Functions bound before install() (e.g.
`from torch.distributed import all_reduce` at the top of the job) keep the original, and so
does waiting through work.get_future().
"""

import functools
import threading

NAMES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
         "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "broadcast", "barrier",
         "reduce", "gather", "scatter")
WAIT_SITE = "c10d::wait"


class Collectives:
    """The wrappers one install() put on torch.distributed; remove() takes them off."""

    def __init__(self, backend):
        self.backend = backend
        self.wrapped = []  # (owner, attribute name, original, wrapper)
        self._inside = threading.local()  # depth of our collective calls on this thread

    def install(self):
        import torch.distributed as dist
        if not dist.is_available():
            return self
        range_kind = self.backend.site_kind("range")
        for name in NAMES:
            fn = getattr(dist, name, None)
            if fn is None or hasattr(fn, "_tokentrace_site"):
                continue
            site = self.backend.site("c10d::" + name, range_kind)
            self._set(dist, name, fn, self._collective(site, fn))
        work = getattr(dist, "Work", None)
        wait = getattr(work, "wait", None)
        if wait is not None and not hasattr(wait, "_tokentrace_site"):
            site = self.backend.site(WAIT_SITE, range_kind)
            self._set(work, "wait", wait, self._wait(site, wait))
        return self

    def remove(self):
        for owner, name, original, wrapper in reversed(self.wrapped):
            if getattr(owner, name, None) is wrapper:  # else someone wrapped over ours: keep it
                setattr(owner, name, original)
        self.wrapped = []

    def _set(self, owner, name, original, wrapper):
        setattr(owner, name, wrapper)
        self.wrapped.append((owner, name, original, wrapper))

    def _collective(self, site, fn):
        backend, inside = self.backend, self._inside

        @functools.wraps(fn)
        def collective(*args, **kwargs):
            backend.push(site)
            inside.depth = getattr(inside, "depth", 0) + 1
            try:
                return fn(*args, **kwargs)
            finally:
                inside.depth -= 1
                backend.pop()

        collective._tokentrace_site = site
        return collective

    def _wait(self, site, wait):
        backend, inside = self.backend, self._inside

        @functools.wraps(wait)
        def wait_call(work, *args, **kwargs):
            if getattr(inside, "depth", 0):  # a blocking collective's own wait: in its call
                return wait(work, *args, **kwargs)
            backend.push(site)
            try:
                return wait(work, *args, **kwargs)
            finally:
                backend.pop()

        wait_call._tokentrace_site = site
        return wait_call


def install(backend):
    """Wraps the collectives of torch.distributed and Work.wait; returns the Collectives."""
    return Collectives(backend).install()
