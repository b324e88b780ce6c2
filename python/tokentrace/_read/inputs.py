"""trace["site:k"].inputs: what a call was given, read back from call_inputs by path.

A row is (path, kind, type, shape, dtype, device, value), as _record/inputs.py writes it; the
paths are _common/values.py's.
"""

from __future__ import annotations

import ast
import difflib
import json
from collections.abc import Iterator, Mapping

import torch

from .._common import CACHE_NAMES, cache_alias, ends, parse_dtype
from .._errors import fail


class InputEntry:
    """What a call was given at one path: a tensor's shape, dtype and device, or a value."""

    saved = False
    __slots__ = ("path", "kind", "type", "shape", "dtype", "device", "value")

    def __init__(self, path: str, kind: str, type_name: str, shape: list[int] | None = None,
                 dtype: torch.dtype | str | None = None, device: str | None = None,
                 value: object = None) -> None:
        self.path, self.kind, self.type = path, kind, type_name
        self.shape = torch.Size(shape) if shape is not None else None
        self.dtype, self.device, self.value = dtype, device, value

    def __repr__(self):
        if self.kind == "tensor":
            return (f"InputEntry({self.path!r}: shape={list(self.shape)}, dtype={self.dtype}, "
                    f"device={self.device})")
        if self.kind == "value" and self.value is not None:
            return f"InputEntry({self.path!r}: {self.type} {self.value})"
        return f"InputEntry({self.path!r}: {self.kind} {self.type})"


def entry_from_row(path, kind, type_name, shape, dtype, device, value):
    if value is not None and kind == "value":
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):  # a long string, kept as its description
            pass
    return InputEntry(path, kind, type_name, json.loads(shape) if shape else None,
                      parse_dtype(dtype), device, value)


class CallInputs(Mapping):
    """{path: tensor or InputEntry} of one call, in argument order. A path is the forward's
    parameter name followed by the access into its container: "input_ids",
    "past_key_values.layers[0].keys". Saved tensors (sites in save=) come back as tensors;
    everything else as an InputEntry (kind "tensor": shape, dtype, device; "value": type and
    value; "object": a container tokentrace does not look into, by type)."""

    def __init__(self, call_name: str, rows, load_tensor) -> None:
        self._call = call_name
        self._rows = {r[0]: r for r in rows}  # path -> (path, kind, ..., file, key)
        self._load = load_tensor

    def _row(self, path):
        """The row at `path`; the cache by either of its names (past_key_values, cache)."""
        row = self._rows.get(path)
        if row is None and isinstance(path, str):
            alias = cache_alias(path)
            row = self._rows.get(alias) if alias is not None else None
        return row

    @property
    def cache_name(self) -> str | None:
        """The name the call gave its cache argument ("past_key_values" or "cache"), or None
        when it was given no cache. Lookups take either name."""
        for name in CACHE_NAMES:
            if any(ends(p, name) for p in self._rows):
                return name
        return None

    def __contains__(self, path: object) -> bool:
        return self._row(path) is not None

    def __getitem__(self, path: str) -> torch.Tensor | InputEntry:
        row = self._row(path)
        if row is None:
            self._unknown(path)
        file, key = row[7], row[8]
        if file is not None:
            return self._load(file, key)
        return entry_from_row(*row[:7])

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def entry(self, path: str) -> InputEntry:
        """The InputEntry at `path` (metadata), also where the tensor was saved."""
        row = self._row(path)
        if row is None:
            self._unknown(path)
        return entry_from_row(*row[:7])

    def _unknown(self, path):
        paths = list(self._rows)
        if not isinstance(path, str):
            fail(f"inputs are addressed by path strings such as {paths[0]!r}, got {path!r}"
                 if paths else f"{self._call} was given no inputs, so no {path!r}")
        close = difflib.get_close_matches(path, paths, n=3, cutoff=0.4)
        hint = (f"the nearest are {', '.join(repr(c) for c in close)}" if close
                else f"it has {len(paths)}: {', '.join(repr(p) for p in paths[:4])}"
                + (", ..." if len(paths) > 4 else ""))
        fail(f"{self._call} has no input at {path!r}; {hint}")

    def __repr__(self):
        return f"<inputs of {self._call}: {len(self)} paths>"
