"""TraceState: what one opened trace holds, for the readers of _read (the ops, their labels and
loops, serving, tt.save): the file, its site table, the calls' outputs and GPU totals, and the
caches kept per trace. Trace (trace.py) holds one as trace.state and hands it to them, so no
reader reaches into Trace nor imports trace.py; trace.py imports them.

Read lazily: sites on open, outputs and GPU totals once, when first asked for. No torch here:
an output's shape (OutputMeta) and a saved tensor import it when asked for.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from .._errors import TokentraceError, fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from .._file import TraceFile


class OutputMeta:
    """Shape and dtype of a call's output (its first tensor), when the tensor was not saved."""

    saved = False

    def __init__(self, shape: list[int | None], dtype: torch.dtype | str | None,
                 path: str) -> None:
        # A shape the record could not hold whole ends in None (the trace's losses count it
        # as output_dims_truncated): then a plain tuple, since torch.Size takes only ints.
        import torch  # here, not at the top: tt.load and reading a trace need no torch
        dims = [d for d in shape if d is not None]
        self.shape = torch.Size(dims) if len(dims) == len(shape) else tuple(shape)
        self.dtype = dtype
        self.path = path  # where the tensor sits in the output: "", "[0]", "logits", ...

    def __repr__(self) -> str:
        where = f" at {self.path!r}" if self.path else ""
        return f"OutputMeta(shape={list(self.shape)}, dtype={self.dtype}{where})"


@contextlib.contextmanager
def numbers_in(path: str, table: str) -> Any:
    """Arithmetic on rows of `table` of the file at `path`: a value of the wrong type there
    (text where the schema has a number: a damaged or crafted file) is one TokentraceError
    naming the file, not a TypeError from inside tokentrace. Costs nothing while the values
    are numbers."""
    try:
        yield
    except TokentraceError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        fail(f"{path}: its {table} table holds a value of the wrong type where a number "
             f"belongs (a damaged or crafted file; {exc})")


class TraceState:
    """One opened trace file and what its readers share (not a public API).

    file: the TraceFile (_file/reading.py: the tables, the queries); path, meta: its own.
    sites: {name: (site id, kind, is_token)} of every site the file lists; site_order: the
    names of those called in this file, in the order first seen. cache: {key: value} that
    the readers keep per trace (op_sites.py: the numbered op sites). on_labels: None, or a
    callback(op sites, path) called once when the op sites are first numbered (tt.trace and
    tt.record with ops hand it: edits of the same model by label number ops as this trace
    did; _edit/label_memory.py)."""

    def __init__(self, file: TraceFile, kernels_recorded: bool) -> None:
        self.file = file
        self.path = file.path
        self.meta = file.meta
        self.kernels_recorded = kernels_recorded
        self.sites: dict[str, tuple[int, str, bool]] = {}
        self.site_order: list[str] = []
        # The shim's site registry is process-wide, so a file can list sites interned for an
        # earlier session; trace.sites shows the ones called in this file.
        called = {r[0] for r in file.ask("called_sites_summarized" if file.has_summaries
                                         else "called_sites")}
        for sid, name, kind, tok in file.ask("sites"):
            self.sites[name] = (sid, kind, bool(tok))
            if sid in called:
                self.site_order.append(name)
        self.cache: dict[str, Any] = {}
        self.on_labels: Callable[[list[Any], str], None] | None = None
        self._outputs: dict[int, tuple[str, str, str]] | None = None
        self._more_outputs: dict[int, list[tuple[str, str, str]]] = {}
        self._saved: dict[int, tuple[str, str]] = {}
        self._gpu: Any = False
        self._shards: dict[str, Any] = {}

    def site_kinds(self) -> dict[int, tuple[str, str]]:
        """{site id: (name, kind)} of every site the file lists."""
        return {sid: (name, kind) for name, (sid, kind, _) in self.sites.items()}

    # --- GPU totals -----------------------------------------------------------------------
    def gpu_totals(self) -> dict[int, tuple[int, int]] | None:
        """{call_id: (kernels, gpu_busy_ns)} inclusive of child calls, or None if not recorded.
        Read once."""
        if self._gpu is False:
            if not self.kernels_recorded or "call_gpu" not in self.file.tables:
                self._gpu = None
            else:
                totals = {cid: [n, ns] for cid, n, ns in self.file.ask("call_gpu")}
                # Children have larger ids than their parents (ids are handed out at push),
                # so one descending pass adds every subtree into its root.
                with numbers_in(self.path, "call_gpu"):
                    for cid, parent in self.file.ask("children_last_first"):
                        own = totals.get(cid)
                        if own and parent:
                            acc = totals.setdefault(parent, [0, 0])
                            acc[0] += own[0]
                            acc[1] += own[1]
                self._gpu = {k: tuple(v) for k, v in totals.items()}
        return self._gpu

    # --- outputs --------------------------------------------------------------------------
    def _load_outputs(self) -> dict[int, tuple[str, str, str]]:
        if self._outputs is None:
            outputs: dict[int, tuple[str, str, str]] = {}
            # The first row is the call's output; an op returning several tensors (max with
            # dim=) has a row for each, the others kept here in order.
            self._more_outputs = {}
            if "call_outputs" in self.file.tables:
                for row in self.file.ask("call_outputs"):
                    if row[0] in outputs:
                        self._more_outputs.setdefault(row[0], []).append(row[1:])
                    else:
                        outputs[row[0]] = row[1:]
            self._saved = {}
            if "saved_outputs" in self.file.tables:
                for cid, file, key in self.file.ask("saved_outputs"):
                    self._saved[cid] = (file, key)
            self._outputs = outputs
        return self._outputs

    def saved_ids(self) -> set[int]:
        """The ids of the calls whose output tensor was saved (save=)."""
        self._load_outputs()
        return set(self._saved)

    def output_rows(self, call_id: int) -> int:
        """How many output tensors the file describes for the call (0: none)."""
        outputs = self._load_outputs()
        return 1 + len(self._more_outputs.get(call_id, ())) if call_id in outputs else 0

    def output(self, call_id: int, index: int = 0) -> Any:
        """The call's output (index 0): its saved tensor, else its OutputMeta; the OutputMeta
        of its index-th output tensor; None where the file has none."""
        outputs = self._load_outputs()
        saved = self._saved.get(call_id) if index == 0 else None
        if saved is not None:
            return self.tensor(*saved)
        rows = [outputs[call_id]] if call_id in outputs else []
        rows += self._more_outputs.get(call_id, [])
        if index >= len(rows):
            return None
        path, shape, dtype = rows[index]
        from .._common import parse_dtype  # imports torch
        return OutputMeta(json.loads(shape), parse_dtype(dtype), path)

    def tensor(self, file: str, key: str) -> Any:
        """A saved tensor: `key` in the safetensors shard `file` (relative to the trace file's
        directory; each shard opened once)."""
        from safetensors import safe_open
        handle = self._shards.get(file)
        if handle is None:
            full = os.path.join(os.path.dirname(self.path), file)
            if not os.path.exists(full):
                fail(f"the saved tensors of this trace are missing: {full} (keep the "
                     f".tensors directory next to the .sqlite file)")
            handle = self._shards[file] = safe_open(full, framework="pt")
        return handle.get_tensor(key)
