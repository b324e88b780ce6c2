"""trace.tokens as a compact read-only sequence: one TokenRow per token, built when asked for.

A million-token trace held as a list of TokenRow namedtuples takes ~160 MB (a tuple, a float
and an int object per row); the columns here take ~40 bytes a token, and the rows are streamed
from SQLite into them, never fetched all at once. Past PAGED_TOKENS tokens in a finished file
(10,000,000 tokens would be 400 MB, and reading 1,000,000 of them ~2 s before the first row)
trace.tokens is a PagedTokenRows instead: its length comes from the writer's token totals and
its rows are read PAGE at a time as they are indexed or iterated, at most MAX_PAGES pages held
(the least recently used goes first), so opening it costs one row and memory stays bounded
however long the run.
"""

from __future__ import annotations

from array import array
from collections import namedtuple
from collections.abc import Sequence

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

# finished: False for a token whose root call never closed (the job was killed inside it);
# its cpu_ms is 0. A CUDA-graph replay token (no host call at all) has cpu_ms 0 too. id, text:
# the token generated at that step (its first sequence's; text when a tokenizer was known),
# None where the file has none (an older file, a job whose root reads no token ids).
TokenRow = namedtuple("TokenRow", "token cpu_ms gpu_ms kernels escapes prefill finished id text",
                      defaults=(True, None, None))

PAGE = 1 << 16            # tokens a page of PagedTokenRows reads (~2.6 MB held)
PAGED_TOKENS = 2 * PAGE   # trace.tokens of longer runs: PagedTokenRows
MAX_PAGES = 16            # pages a PagedTokenRows holds: 1,048,576 tokens, ~42 MB


class TokenRows(Sequence):
    """A Sequence of TokenRow (indexing, slicing, iteration, len, == with a list)."""

    __slots__ = ("_make", "_token", "_cpu_ms", "_gpu_ms", "_kernels", "_escapes", "_finished",
                 "_gpu_on", "_id", "_text")

    def __init__(self, make: type[TokenRow], rows: Iterable[tuple], gpu_on: bool) -> None:
        """rows: (token, cpu_ms, gpu_ms, kernels, escapes, finished, id, text) with plain
        numbers; id and text are the generated token's (None: not in the file)."""
        self._make = make
        self._gpu_on = gpu_on
        self._token, self._kernels, self._escapes = array("q"), array("q"), array("q")
        self._cpu_ms, self._gpu_ms = array("d"), array("d")
        self._finished = bytearray()
        self._id = array("q")  # -1: none
        self._text: dict[int, str] = {}  # row index -> text, for the tokens that have one
        for token, cpu_ms, gpu_ms, kernels, escapes, finished, id_, text in rows:
            if text is not None:
                self._text[len(self._token)] = text
            self._token.append(token)
            self._cpu_ms.append(cpu_ms)
            self._gpu_ms.append(gpu_ms)
            self._kernels.append(kernels)
            self._escapes.append(escapes)
            self._finished.append(finished)
            self._id.append(-1 if id_ is None else id_)

    def __len__(self) -> int:
        return len(self._token)

    def _row(self, i: int) -> TokenRow:
        gpu = self._gpu_on
        token = self._token[i]
        id_ = self._id[i]
        return self._make(token, self._cpu_ms[i], self._gpu_ms[i] if gpu else None,
                          self._kernels[i] if gpu else None, self._escapes[i], token == 1,
                          bool(self._finished[i]), None if id_ < 0 else id_,
                          self._text.get(i))

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
        return _equal(self, other)

    __hash__ = None  # type: ignore[assignment]  # compared by value, like a list: unhashable

    def __repr__(self) -> str:
        return _repr(self)

    @property
    def last_token(self) -> int:
        return self._token[-1]


def _equal(rows: Sequence, other: object) -> bool:
    if isinstance(other, (TokenRows, PagedTokenRows, list, tuple)):
        return len(rows) == len(other) and all(a == b for a, b in zip(rows, other))
    return NotImplemented


def _repr(rows: Sequence) -> str:
    if len(rows) <= 20:
        return repr(list(rows))
    return f"<{len(rows)} TokenRows: {rows[0]!r} ... {rows[-1]!r}>"


class PagedTokenRows(Sequence):
    """The same Sequence for a long run: len from the writer's token totals, rows read PAGE at
    a time, at most MAX_PAGES held, least recently used dropped first (iterating 10,000,000
    tokens holds ~42 MB; indexing a run of up to ~1,000,000 tokens in any order reads each
    page once)."""

    __slots__ = ("_make", "_fetch", "_count", "_gpu_on", "_after", "_pages")

    def __init__(self, make: type[TokenRow], fetch: Callable[[int, int, int], Iterable[tuple]],
                 count: int, gpu_on: bool) -> None:
        """fetch(after, offset, limit): the rows of the tokens after token `after`."""
        self._make, self._fetch, self._count, self._gpu_on = make, fetch, count, gpu_on
        self._after: dict[int, int] = {0: 0}   # page -> the token it starts after, where known
        self._pages: dict[int, TokenRows] = {}  # at most MAX_PAGES, least recently used first

    def __len__(self) -> int:
        return self._count

    def _page(self, p: int) -> TokenRows:
        rows = self._pages.pop(p, None)
        if rows is not None:
            self._pages[p] = rows  # now the most recently used
        else:
            after = self._after.get(p)
            # A page whose start is not known yet (indexed out of order) skips to it.
            raw = (self._fetch(after, 0, PAGE) if after is not None
                   else self._fetch(0, p * PAGE, PAGE))
            rows = TokenRows(self._make, raw, self._gpu_on)
            while len(self._pages) >= MAX_PAGES:
                del self._pages[next(iter(self._pages))]
            self._pages[p] = rows
            if len(rows):
                self._after[p + 1] = rows.last_token
        return rows

    def __getitem__(self, index):  # int -> TokenRow, slice -> list[TokenRow]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("token row index out of range")
        page = self._page(i // PAGE)
        if i % PAGE >= len(page):  # the file holds fewer rows than its totals say (damaged)
            raise IndexError("token row index out of range")
        return page[i % PAGE]

    def __iter__(self) -> Iterator[TokenRow]:
        left = len(self)  # as many as len says, however many rows a damaged file holds
        for p in range((left + PAGE - 1) // PAGE):
            page = self._page(p)
            yield from (page[i] for i in range(min(len(page), left)))
            left -= len(page)
            if left <= 0 or len(page) < PAGE:
                return

    def __eq__(self, other: object) -> bool:
        return _equal(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return _repr(self)
