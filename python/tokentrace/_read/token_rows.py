"""trace.tokens as a compact read-only sequence: one TokenRow per token, built when asked for.

A million-token trace held as a list of TokenRow namedtuples takes ~160 MB (a tuple, a float
and an int object per row); the columns here take ~40 bytes a token, and the rows are streamed
from SQLite into them, never fetched all at once.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from .trace import TokenRow


class TokenRows(Sequence):
    """A Sequence of TokenRow (indexing, slicing, iteration, len, == with a list)."""

    __slots__ = ("_make", "_token", "_cpu_ms", "_gpu_ms", "_kernels", "_escapes", "_finished",
                 "_gpu_on")

    def __init__(self, make: type[TokenRow], rows: Iterable[tuple], gpu_on: bool) -> None:
        """rows: (token, cpu_ms, gpu_ms, kernels, escapes, finished) with plain numbers."""
        self._make = make
        self._gpu_on = gpu_on
        self._token, self._kernels, self._escapes = array("q"), array("q"), array("q")
        self._cpu_ms, self._gpu_ms = array("d"), array("d")
        self._finished = bytearray()
        for token, cpu_ms, gpu_ms, kernels, escapes, finished in rows:
            self._token.append(token)
            self._cpu_ms.append(cpu_ms)
            self._gpu_ms.append(gpu_ms)
            self._kernels.append(kernels)
            self._escapes.append(escapes)
            self._finished.append(finished)

    def __len__(self) -> int:
        return len(self._token)

    def _row(self, i: int) -> TokenRow:
        gpu = self._gpu_on
        token = self._token[i]
        return self._make(token, self._cpu_ms[i], self._gpu_ms[i] if gpu else None,
                          self._kernels[i] if gpu else None, self._escapes[i], token == 1,
                          bool(self._finished[i]))

    def __getitem__(self, index):  # int -> TokenRow, slice -> list[TokenRow]
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("token row index out of range")
        return self._row(i)

    def __iter__(self) -> Iterator[TokenRow]:
        return (self._row(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (TokenRows, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, like a list: unhashable

    def __repr__(self) -> str:
        if len(self) <= 20:
            return repr(list(self))
        return f"<{len(self)} TokenRows: {self[0]!r} ... {self[-1]!r}>"
