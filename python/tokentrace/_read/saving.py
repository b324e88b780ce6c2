"""tt.save(trace, path): a trace file and the safetensors shards it refers to, copied to a new
place as one consistent copy (trace.py's save checks its arguments and hands over the trace's
state); and trace.summary(): one row per site.

The copy is made with SQLite's online backup (a reader's snapshot: a file still being written,
or one whose writer was killed with rows in its -wal, is copied as a reader sees it), so the
new file needs no -wal. Shards are named relative to the trace file (saved_outputs.file,
call_inputs.file), so they are copied to the same relative place beside the new file.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from .._errors import fail
from .._file import queries, save_copy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .state import TraceState


def _shard_files(state: TraceState) -> list[str]:
    files: set[str] = set()
    for table in queries.SHARD_TABLES:
        if table in state.file.tables:
            files.update(r[0] for r in state.file.q(*queries.shard_files(table)))
    return sorted(files)


def save_trace(state: TraceState, path: str | os.PathLike[str], overwrite: bool) -> str:
    """Copies the opened trace `trace` and its saved tensors to `path` (a .sqlite file; its
    shards go beside it); returns the new path, which tt.load opens."""
    if not isinstance(path, (str, os.PathLike)):
        fail(f"tt.save(trace, path): path is a file path, got {type(path).__name__}")
    dest = os.path.abspath(os.fspath(path))
    if dest == state.path:
        fail(f"tt.save: {dest} is the trace's own file")
    if os.path.isdir(dest):
        fail(f"tt.save: {dest} is a directory; give the path of the .sqlite file to write")
    if os.path.exists(dest) and not overwrite:
        fail(f"tt.save: {dest} exists; pass overwrite=True to replace it")
    parent = os.path.dirname(dest)
    if not os.path.isdir(parent):
        fail(f"tt.save: the directory {parent} does not exist")
    src_dir, dest_dir = os.path.dirname(state.path), parent
    shards = _shard_files(state)
    for rel in shards:
        if os.path.isabs(rel) or ".." in rel.split(os.sep):
            fail(f"tt.save: the trace names a shard outside its directory ({rel!r}); "
                 f"copy it by hand")
        if not os.path.isfile(os.path.join(src_dir, rel)):
            fail(f"tt.save: the shard {rel} of {state.path} is missing; its saved tensors "
                 f"cannot be copied")
    tmp = dest + ".tmp-save"
    for leftover in (tmp, tmp + "-journal"):
        if os.path.exists(leftover):
            os.unlink(leftover)
    try:
        save_copy(state.file, tmp)  # one self-contained file (a failure: one line)
        if src_dir != dest_dir:
            for rel in shards:
                target = os.path.join(dest_dir, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(os.path.join(src_dir, rel), target)
        for stale in (dest + "-wal", dest + "-shm"):  # of an overwritten file
            if os.path.exists(stale):
                os.unlink(stale)
        os.replace(tmp, dest)
    except OSError as exc:
        fail(f"tt.save: could not write {dest}: {exc.strerror or exc}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def summary(path: str, num_tokens: int, gpu: bool, sites: list[Any]) -> str:
    """One row per called site (`sites`: the trace's SiteViews, in order): kind, calls, CPU ms,
    GPU ms (when kernels were recorded, `gpu`) and the first call's output shape."""
    rows = []
    for site in sites:
        name = site.name
        calls = site.calls
        first = calls[0].out if calls else None
        shape = "-" if first is None else str(list(first.shape))
        gpu_ms = site.gpu_ms if gpu else None
        rows.append((name, site.kind, str(len(calls)), f"{site.cpu_ms:.3f}",
                     "-" if gpu_ms is None else f"{gpu_ms:.3f}", shape))
    head = ("site", "kind", "calls", "cpu ms", "gpu ms", "first output")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [f"{os.path.basename(path)}: {num_tokens} tokens, {len(sites)} sites"]
    for r in [head, *rows]:
        lines.append("  ".join(c.ljust(w) if i in (0, 1, 5) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    return "\n".join(lines)
