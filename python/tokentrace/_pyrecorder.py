"""The pure-Python recorder: the shim's call/token bookkeeping, for when the extension is absent.

It numbers calls exactly as the shim does (k is 1-based per site, assigned at push, so
recursive and re-entrant calls are numbered in the order they start; a root call that opens
while no root call is open on its thread starts a new token) and writes the same SQLite
schema v1 at stop. It records no kernels; escapes come from the Python intercept only.
"""

import os
import threading
import time

from . import _store
from ._errors import fail
from ._outputs import dtype_name, first_tensor

KIND_ROOT, KIND_MODULE, KIND_RANGE = 0, 1, 2
_KIND_TEXT = {KIND_ROOT: "root", KIND_MODULE: "module", KIND_RANGE: "range"}


class PyRecorder:
    name = "python"

    def __init__(self, reason=""):
        self.kernels_status = "kernels are not recorded: " + (reason or "pure-Python recorder")
        self._active = False
        self._path = ""
        self._lock = threading.Lock()
        self._local = threading.local()
        self._reset()

    def _reset(self):
        self._sites = []          # (id, name, kind)
        self._site_ids = {}
        self._counts = {}         # site_id -> calls so far
        self._calls = []          # [id, site_id, k, token, parent, thread, begin, end]
        self._outputs = []
        self._escapes = []
        self._token = 0

    # --- session -------------------------------------------------------------------------
    def start(self, out_path, kernels="summary"):
        if self._active:
            fail("a trace is already recording in this process; finish it first")
        self._reset()
        self._path = os.path.abspath(out_path)
        self._kernels = kernels
        self._active = True
        return self._path

    def active(self):
        return self._active

    def out_path(self):
        return self._path

    def stop(self):
        if not self._active:
            return
        self._active = False
        self._write()

    def flush(self):
        pass

    # --- producer API --------------------------------------------------------------------
    def site(self, name, kind):
        with self._lock:
            sid = self._site_ids.get(name)
            if sid is None:
                sid = len(self._sites) + 1
                self._site_ids[name] = sid
                self._sites.append((sid, name, kind))
            return sid

    def _stack(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def push(self, site_id):
        if not self._active:
            return
        stack = self._stack()
        with self._lock:
            kind = self._sites[site_id - 1][2]
            if kind == KIND_ROOT and not any(self._sites[c[1] - 1][2] == KIND_ROOT for c in stack):
                self._token += 1
            k = self._counts.get(site_id, 0) + 1
            self._counts[site_id] = k
            call = [len(self._calls) + 1, site_id, k, self._token,
                    stack[-1][0] if stack else None, threading.get_native_id(),
                    time.perf_counter_ns(), None]
            self._calls.append(call)
        stack.append(call)

    def pop(self):
        stack = self._stack()
        if stack:
            stack.pop()[7] = time.perf_counter_ns()

    def current(self):
        stack = self._stack()
        if not stack:
            return (0, 0, self._token)
        call = stack[-1]
        return (call[0], call[2], call[3])

    def current_site(self):
        stack = self._stack()
        return stack[-1][1] if stack else 0

    def escape(self, kind=4):
        if not self._active:
            return
        call_id, _, token = self.current()
        self._escapes.append((call_id or None, token, threading.get_native_id(),
                              time.perf_counter_ns(), "python"))

    # --- hooks (the native extension has the same two in C++) ----------------------------
    def pre_hook(self, site_id):
        push = self.push
        stack = self._stack

        def pre(module, args):
            push(site_id)
        return pre

    def post_hook(self, site_id, record=True):
        outputs = self._outputs
        stack_of = self._stack

        def post(module, args, output):
            stack = stack_of()
            if not stack or stack[-1][1] != site_id:
                return None  # our pre-hook did not run for this call (an earlier hook raised)
            call = stack[-1]
            if record:
                t, path = first_tensor(output)
                if t is not None:
                    outputs.append((call[0], path, tuple(t.shape), dtype_name(t.dtype)))
            self.pop()
            return None
        return post

    def take_outputs(self):
        out, self._outputs[:] = list(self._outputs), []
        return out

    # --- file ----------------------------------------------------------------------------
    def _write(self):
        for suffix in ("", "-wal", "-shm"):
            try:
                os.remove(self._path + suffix)
            except FileNotFoundError:
                pass
        con = _store.connect(self._path)
        try:
            with con:
                _store.write_schema(con)
                meta = {"schema_version": _store.SCHEMA_VERSION, "kernel_mode": "off",
                        "kernels_status": self.kernels_status, "pid": os.getpid(),
                        "recorder": "python", "clock": "perf_counter_ns"}
                con.executemany("INSERT OR REPLACE INTO meta VALUES (?,?)",
                                [(k, str(v)) for k, v in meta.items()])
                con.executemany("INSERT INTO sites VALUES (?,?,?,?)",
                                [(i, n, _KIND_TEXT[k], int(k == KIND_ROOT))
                                 for i, n, k in self._sites])
                now = time.perf_counter_ns()
                con.executemany("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?)",
                                [tuple(c[:7]) + (c[7] if c[7] is not None else now,)
                                 for c in self._calls])
                con.executemany("INSERT INTO escapes VALUES (?,?,?,?,?)", self._escapes)
                per_token = {}
                for e in self._escapes:
                    per_token[e[1]] = per_token.get(e[1], 0) + 1
                con.executemany("INSERT INTO token_stats VALUES (?,?,?,?)",
                                [(t, 0, 0, n) for t, n in per_token.items()])
        finally:
            con.close()
