"""Readers of a file with the writer's summaries (schema 4): trace.tokens and the plot read
them, and read the same as the scan a file without them gets."""

import sqlite3
import warnings

import pytest
import torch

import tokentrace as tt
from tokentrace._common import schema


class _Net(torch.nn.Module):
    """Sites without a layer index: embed, body (with body.inner), head."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.body = torch.nn.Sequential()
        self.body.add_module("inner", torch.nn.Linear(8, 8))
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.body(self.embed(x)))


def _record(tmp_path, tokens=6):
    net = _Net()

    def run(x):
        for _ in range(tokens):
            net(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tt.trace(run, torch.ones(1, 4), model=net, kernels="off", ops=False,
                        out=tmp_path / "net.sqlite")


def _without_summaries(path):
    """The same file as a writer before schema 4 left it."""
    con = sqlite3.connect(path)
    con.executescript("DROP TABLE site_stats; DROP TABLE site_blocks; "
                      "DELETE FROM meta WHERE key IN ('summaries', 'token_block'); "
                      "UPDATE meta SET value = '3' WHERE key = 'schema_version';")
    con.close()


def test_tokens_from_summaries_equal_the_scan(tmp_path):
    path = str(_record(tmp_path).path)
    trace = tt.load(path)
    assert trace.has_summaries and trace.schema_version == schema().SCHEMA_VERSION
    fast = trace.tokens
    assert len(fast) == 6 and [t.token for t in fast] == list(range(1, 7))
    assert fast[0].prefill and not fast[1].prefill and all(t.finished for t in fast)
    assert fast[-1] == fast[5] and fast[1:3] == [fast[1], fast[2]]
    # in the order of their ids in the shim's registry, which is the process's: a name an
    # earlier test of this process interned keeps its older id, so only the set is this file's
    assert sorted(trace.sites) == sorted(["self", "embed", "body", "body.inner", "head"])
    trace.close()
    _without_summaries(path)
    with pytest.warns(RuntimeWarning, match="older tokentrace .schema 3, without summaries"):
        old = tt.load(path)
    assert not old.has_summaries
    assert old.tokens == fast and list(old.tokens) == list(fast)
    assert old.sites == trace.sites  # the same order, read the slow way


def test_token_rows_behave_as_a_read_only_list(tmp_path):
    rows = tt.load(_record(tmp_path, tokens=3).path).tokens
    assert len(rows) == 3 and rows[-1].token == 3 and rows[-3] is not None
    with pytest.raises(IndexError):
        rows[3]
    assert rows == list(rows) and rows != list(rows)[:2]
    assert [t.token for t in reversed(rows)] == [3, 2, 1]
    assert "TokenRow(token=1" in repr(rows)


def test_the_plot_falls_back_to_top_level_sites(tmp_path):
    """Site names without a layer index (`embed`, `body`): the lower panel drew nothing."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tokentrace.plot import figure
    trace = tt.load(_record(tmp_path).path)
    fig = figure(trace, 6, plt)
    try:
        ax2 = fig.axes[1]
        labels = [t.get_text() for t in ax2.get_xticklabels()]
        assert labels == ["embed", "body", "head"], labels
        heights = [p.get_height() for p in ax2.patches]
        assert len(heights) == 3 and all(h > 0 for h in heights)
        assert "top-level site" in ax2.get_title()
        # body's bar holds body.inner's self time too
        con = sqlite3.connect(trace.path)
        body = con.execute("SELECT SUM(t.cpu_self_ns) FROM site_stats t JOIN sites s "
                           "ON s.id = t.site_id WHERE s.name IN ('body', 'body.inner') "
                           "AND t.phase > 0").fetchone()[0]
        con.close()
        assert heights[1] == pytest.approx(body / 1e6)
    finally:
        plt.close(fig)


def test_long_runs_tokens_are_read_in_pages(tmp_path, monkeypatch):
    """Past PAGED_TOKENS, trace.tokens reads its length from the token totals and its rows a
    page at a time, and reads as the whole list does: here 7 tokens in pages of 2."""
    from tokentrace._read import token_rows
    path = _record(tmp_path, tokens=7).path
    whole = list(tt.load(path).tokens)
    monkeypatch.setattr(token_rows, "PAGED_TOKENS", 4)
    monkeypatch.setattr(token_rows, "PAGE", 2)
    monkeypatch.setattr(token_rows, "MAX_PAGES", 2)
    paged = tt.load(path).tokens
    assert isinstance(paged, token_rows.PagedTokenRows) and len(paged) == 7
    assert paged == whole and list(paged) == whole
    assert [paged[i] for i in (6, 0, 3, -1, -7, 5)] == [whole[i] for i in (6, 0, 3, -1, -7, 5)]
    assert paged[2:6] == whole[2:6] and list(reversed(paged)) == whole[::-1]
    assert len(paged._pages) <= 2  # pages held, however many were read
    # The least recently used page goes: reversed() read page 0 last; paged[6] reads page 3,
    # paged[0] uses page 0 again, paged[2] reads page 1 and page 3 (used least recently) goes.
    reads = []
    fetch = paged._fetch
    paged._fetch = lambda *a: reads.append(a) or fetch(*a)
    paged[6], paged[0], paged[2]
    assert sorted(paged._pages) == [0, 1] and len(reads) == 2  # page 1 read, page 3 dropped
    paged[1]
    assert len(reads) == 2  # page 0 was kept
    with pytest.raises(IndexError):
        paged[7]
    # A file whose rows fall short of its totals (damaged) reads what it holds, and says
    # IndexError past them rather than a wrong row.
    con = sqlite3.connect(path)
    con.execute("DELETE FROM token_stats WHERE token = 7")
    con.commit()
    con.close()
    short = tt.load(path).tokens
    assert list(short) == whole[:6]
    with pytest.raises(IndexError):
        short[6]
