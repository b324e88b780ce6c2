"""trace["site:k"].inputs: what a call was given, read back from call_inputs by path."""

import ast
import difflib
import json
from collections.abc import Mapping

from ._errors import fail
from ._inputs import InputEntry
from ._outputs import parse_dtype
from ._paths import CACHE_NAMES, cache_alias, ends


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

    def __init__(self, call_name, rows, load_tensor):
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
    def cache_name(self):
        """The name the call gave its cache argument ("past_key_values" or "cache"), or None
        when it was given no cache. Lookups take either name."""
        for name in CACHE_NAMES:
            if any(ends(p, name) for p in self._rows):
                return name
        return None

    def __contains__(self, path):
        return self._row(path) is not None

    def __getitem__(self, path):
        row = self._row(path)
        if row is None:
            self._unknown(path)
        file, key = row[7], row[8]
        if file is not None:
            return self._load(file, key)
        return entry_from_row(*row[:7])

    def __iter__(self):
        return iter(self._rows)

    def __len__(self):
        return len(self._rows)

    def entry(self, path):
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
