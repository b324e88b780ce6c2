"""Installs and removes the recording hooks on one model; shared by trace, record and preload.

Per hooked site: a forward pre-hook (prepended, so the call opens before any user pre-hook)
and a forward hook registered with always_call=True, so a call that raises still closes and
the NVTX stack stays balanced. The post-hook closes only the call its own pre-hook opened; if
an earlier pre-hook raised before ours ran, it does nothing.
"""

import threading
import warnings

from ._naming import ROOT, site_names
from ._outputs import first_tensor
from ._backend import KIND_MODULE, KIND_ROOT


class HookSet:
    def __init__(self, backend, model, hooked, saved=(), sink=None):
        self.backend = backend
        self.model = model
        self.hooked = list(hooked)
        self.saved = set(saved)
        self.sink = sink
        self.handles = []
        self.site_ids = {}
        self.save_errors = 0
        self._warned = False
        self._lock = threading.Lock()

    def install(self, running_root_args=None):
        """Registers the hooks. running_root_args: the root is being called right now
        (preload installs from inside the first root call): open that call by hand."""
        names = site_names(self.model)
        root_pre = None
        try:
            for name in self.hooked:
                mod = names[name]
                kind = KIND_ROOT if name == ROOT else KIND_MODULE
                sid = self.backend.site(name, kind)
                self.site_ids[name] = sid
                pre = self.backend.pre_hook(sid, name, kind)
                post = self.backend.post_hook(sid, True)
                if name in self.saved and self.sink is not None:
                    post = self._saving(post)
                self.handles.append(mod.register_forward_pre_hook(pre, prepend=True))
                self.handles.append(mod.register_forward_hook(post, always_call=True))
                if name == ROOT:
                    root_pre = pre
        except BaseException:
            self.remove()
            raise
        if running_root_args is not None and root_pre is not None:
            root_pre(self.model, running_root_args)

    def _saving(self, post):
        current = self.backend.current
        sink = self.sink

        def saving_post(module, args, output):
            try:
                tensor, _ = first_tensor(output)
                if tensor is not None:
                    call_id = current()[0]
                    if call_id:
                        sink.save(call_id, tensor)
            except Exception as exc:  # never crash the traced job
                self._save_failed(exc)
            return post(module, args, output)
        return saving_post

    def _save_failed(self, exc):
        with self._lock:
            self.save_errors += 1
            if self._warned:
                return
            self._warned = True
        warnings.warn(f"tokentrace: could not save an output ({exc}); saving continues, "
                      f"failures are counted in the trace's losses", RuntimeWarning)

    def remove(self):
        for handle in self.handles:
            try:
                handle.remove()
            except Exception:
                pass
        self.handles = []
