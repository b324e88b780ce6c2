"""python -m tokentrace.plot FILE -o out.png  (also `tokentrace plot FILE -o out.png`).

Two panels:
  * per-token latency (CPU wall time of each root call), stacked by the self time of the
    costliest sites (self time does not double count nested calls), rest as "other";
    the prefill (token 1) is marked;
  * GPU time per layer (sum of the GPU busy time of the sites under `<...>.<N>.`), or CPU self
    time per layer when kernels were not recorded (the panel title says which).

  * when no site name has a layer index, the top-level sites instead (the calls directly
    inside a token call, as one token shows them), each with the sites below it.

Long runs cost about what `tokentrace report` costs: past MAX_BARS tokens each bar is the
mean of a bin of consecutive tokens (the prefill keeps its own bar), so neither Python nor
matplotlib ever holds one object per call or per token. A file with the writer's summaries
(trace.has_summaries) is drawn from them: per-token rows, per-site totals and per-site self
time per block of `token_block` tokens, so no call is read when the run is long;
a file without them is summed from its calls in SQL.
"""

import argparse
import itertools
import os
import re
import sys
import warnings
from collections import defaultdict

from ._errors import TokentraceError, fail
from ._file import queries

_LAYER = re.compile(r"^(.*?\.)(\d+)(\.|$)")
MAX_BARS = 200  # bars in the first panel: beyond this, tokens are binned
# Token 1 (the prefill) is bin 0 on its own; decode tokens 2.. fill bins of `width` tokens.
# The SQL of each question below is the file room's (_file/queries.py).

# Summaries (site_blocks): past this many calls the first panel's bins are made of blocks of
# tokens (each bin a whole number of blocks) instead of summed from the calls.
MAX_SCANNED_CALLS = 2_000_000


def _token_bins(trace, width):
    """{bin: (first token, tokens, root ns)}: the tokens of each bin and their summed CPU wall
    time (0 for a token without a finished root call, as in trace.tokens)."""
    if trace.has_summaries:
        # One range of token_stats per bin (read in token order): a GROUP BY over every
        # token would sort them all first.
        last = _num_tokens(trace)
        bins = {}
        for b, lo, hi in [(0, 1, 1)] + [(1 + i, 2 + i * width, 1 + (i + 1) * width)
                                        for i in range(-(-max(last - 1, 0) // width))]:
            first, n, ns = trace.file.q(*queries.token_latency_range(trace.file.tokens_sql,
                                                                     lo, hi))[0]
            if n:
                bins[b] = (first, n, ns)
        return bins
    rows = trace.file.q(*queries.token_latency_bins(trace.file.tokens_sql, width))
    return {b: (first, n, ns) for b, first, n, ns in rows}


def _has_is_token(trace):
    """Whether the file's sites have the is_token column (else the root is the token site)."""
    return "is_token" in [r[1] for r in trace.file.ask("site_columns")]


def _site_totals(trace):
    """{site name: self ns over all tokens}, costliest first. One row per site: a file of a
    million sites costs one pass, never a row per site and bin."""
    if trace.has_summaries:
        return dict(trace.file.ask("site_self_totals"))
    return dict(trace.file.q(*queries.site_self_totals_from_calls(_has_is_token(trace))))


def _token_block(trace):
    """Tokens per site_blocks block, when the first panel is drawn from blocks (else None)."""
    if not trace.has_summaries:
        return None
    calls = trace.file.ask("calls_summarized")[0][0]
    block = trace.meta.get("token_block", "")
    return int(block) if calls > MAX_SCANNED_CALLS and block.isdigit() and int(block) > 0 else None


def _site_self_times(trace, width, names, block=None):
    """{bin: {site: self ns}} for the sites `names` only, summed per bin of tokens in SQL:
    from the calls, or with `block` (width a multiple of it) from site_blocks."""
    if not names:
        return defaultdict(dict)
    if block:
        rows = trace.file.q(*queries.site_block_bins(width // block, names))
    else:
        rows = trace.file.q(*queries.site_self_time_bins(_has_is_token(trace), width, names))
    per_bin = defaultdict(dict)
    for b, name, ns in rows:
        per_bin[b][name] = ns
    return per_bin


def _site_sums(trace, column):
    """{site name: the sum of `column` over all its calls}: CPU self ns (`self`) or GPU busy
    ns (`gpu`), from site_stats where the file has it, else one pass over the calls."""
    if trace.has_summaries:
        return dict(trace.file.q(*queries.site_sums(column)))
    if column == "gpu":
        return dict(trace.file.ask("site_gpu_from_calls"))
    return _site_totals(trace)


def _top_level(trace):
    """{top-level site: [sites under it, itself first]} in call order: the calls directly
    inside a token call and their subtrees, as one decode token (or the prefill) shows them;
    read as a window of calls (queries.token_calls_with_sites), that token's calls only. Each
    site is in one group."""
    for token in (2, 1):
        calls = trace.file.q(*queries.token_calls_with_sites(
            trace.has_summaries, _has_is_token(trace), token))
        roots = {cid for cid, _, _, tok in calls if tok}
        top_of, groups, placed = {}, {}, set()
        for cid, parent, name, tok in calls:  # ids grow from parent to child
            if tok:
                continue
            if parent in roots:
                top_of[cid] = name
            elif parent in top_of:
                top_of[cid] = top_of[parent]
            else:
                continue
            if name not in placed:
                placed.add(name)
                groups.setdefault(top_of[cid], []).append(name)
        if groups:
            return groups
    return {}


MAX_LABEL_CHARS = 60  # a legend entry: longer names are cut (a 1 MiB range name took minutes)


def _label(name):
    """A site name as a legend entry: cut to MAX_LABEL_CHARS, and `$` kept literal (matplotlib
    reads text between two as math)."""
    if len(name) > MAX_LABEL_CHARS:
        name = name[:MAX_LABEL_CHARS - 1] + "…"
    return name.replace("$", r"\$")


def _layer_of(name):
    m = _LAYER.match(name)
    return int(m.group(2)) if m else None


def _why_no_gpu_time(trace):
    """A few words for the second panel's title: the meta's `kernels_off` category (the full
    detail is `tokentrace info`'s), or for older files a hint at where the detail is."""
    if trace.kernel_mode == "off":
        return "kernel mode off"
    return trace.meta.get("kernels_off") or "see `tokentrace info`"


def _check_out(out):
    """Refuses an output the figure cannot be written to before any work is done."""
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        fail(f"plot -o {out}: the folder {folder} does not exist; -o takes an image path "
             f"(.png, .svg, .pdf) in an existing folder")
    if os.path.isdir(out):
        fail(f"plot -o {out} is a folder; -o takes an image path (.png, .svg, .pdf)")


MAX_LABELLED = 40  # tokens past which the axis shows numbers only (their texts would overlap)


def _token_labels(trace):
    """{token: its generated text, short and printable}, for the tokens that have one."""
    out = {}
    for row in trace.tokens[:MAX_LABELLED]:
        if row.text is not None:
            text = row.text.encode("unicode_escape").decode("ascii")
            out[row.token] = repr(text if len(text) <= 8 else text[:7] + "~")
    return out


def plot(path: "str | os.PathLike[str]", out: str, top: int = 6) -> str:
    try:
        import matplotlib
    except ImportError:
        fail("plotting needs matplotlib, which is not installed here (pip install matplotlib); "
             "the trace itself is complete, and `tokentrace report` needs nothing more")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ._read import load

    _check_out(out)
    fig = figure(load(path), top, plt)
    try:
        fig.savefig(out, dpi=100)
    except (OSError, ValueError) as exc:  # no room, no permission, a format it cannot write
        fail(f"plot cannot write {out}: {exc}")
    finally:
        plt.close(fig)
    return out


def _num_tokens(trace):
    if trace.has_summaries:  # every call's token counts in token_stats
        return trace.file.ask("last_token_summarized")[0][0]
    return max((r[0] or 0) for r in trace.file.q(
        *queries.last_tokens("token_stats" in trace.file.tables)))


def _second_panel(trace, totals, ax2):
    """GPU (or, without kernels, CPU self) time per layer; when no site has a layer index,
    per top-level site with the sites under it."""
    gpu = trace.kernels_recorded
    sums = _site_sums(trace, "gpu") if gpu else totals
    what = "GPU busy" if gpu else "CPU self"
    layers = defaultdict(float)
    for name, ns in sums.items():
        layer = _layer_of(name)
        if layer is not None:
            layers[layer] += (ns or 0) / 1e6
    if layers:
        keys = sorted(layers)
        labels, values, unit = [str(k) for k in keys], [layers[k] for k in keys], "layer"
    else:
        groups = _top_level(trace)
        labels = [_label(name) for name in groups]
        values = [sum((sums.get(n) or 0) for n in under) / 1e6 for under in groups.values()]
        unit = "top-level site, with the sites under it (no site name has a layer index)"
    ax2.bar(labels, values)
    if len(labels) > 12:
        ax2.tick_params(axis="x", labelrotation=60, labelsize="small")
    per = "layer" if layers else "top-level site"
    if gpu:
        ax2.set_title(f"GPU time per {per}")
    else:
        ax2.set_title(f"CPU self time per {per} (GPU time not recorded: "
                      f"{_why_no_gpu_time(trace)})")
    ax2.set_ylabel(f"{what} (ms, all tokens)")
    ax2.set_xlabel(unit)


def figure(trace, top, plt):
    """The two panels of `trace` (a loaded Trace) as a matplotlib Figure, drawn with `plt`
    (matplotlib.pyplot, its backend chosen by the caller); plot() saves it."""
    decode = max(_num_tokens(trace) - 1, 0)
    width = max(1, -(-decode // (MAX_BARS - 1)))  # decode tokens per bar, ceil
    block = _token_block(trace) if width > 1 else None
    if block:
        width = -(-width // block) * block  # whole blocks per bar
    bins = _token_bins(trace, width)
    if not bins:
        fail(f"{trace.path} has no tokens (no root call was recorded); nothing to plot")
    totals = _site_totals(trace)
    leaders = list(itertools.islice(totals, top))
    per_bin = _site_self_times(trace, width, leaders, block)
    keys = sorted(bins)
    firsts = [bins[b][0] for b in keys]
    counts = [bins[b][1] for b in keys]
    # Each bar spans its tokens; its height is their mean (ms per token).
    xs = [f + (n - 1) / 2 for f, n in zip(firsts, counts)]
    widths = [0.8 * n if n == 1 else n for n in counts]
    latency = [bins[b][2] / n / 1e6 for b, n in zip(keys, counts)]

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 8))
    bottom = [0.0] * len(xs)
    for name in leaders:
        ys = [per_bin[b].get(name, 0) / n / 1e6 for b, n in zip(keys, counts)]
        ax1.bar(xs, ys, width=widths, bottom=bottom, label=_label(name))
        bottom = [lo + y for lo, y in zip(bottom, ys)]
    other = [max(t - lo, 0.0) for t, lo in zip(latency, bottom)]
    ax1.bar(xs, other, width=widths, bottom=bottom, label="other", color="lightgray")
    ax1.axvline(1, color="red", linestyle="--", linewidth=1)
    ax1.annotate("prefill", (1, max(latency)), color="red",
                 textcoords="offset points", xytext=(4, -10))
    ax1.set_xlabel("token" if width == 1 else f"token (each bar: the mean of {width} tokens)")
    labels = _token_labels(trace) if width == 1 and len(xs) <= MAX_LABELLED else {}
    if labels:  # each token's generated text under its bar, where it fits
        ax1.set_xticks(xs)
        ax1.set_xticklabels([f"{int(x)}\n{labels[int(x)]}" if int(x) in labels else str(int(x))
                             for x in xs], fontsize="x-small")
    ax1.set_ylabel("latency (ms, CPU wall)")
    ax1.set_title("per-token latency, stacked by site self time")
    ax1.legend(fontsize="small", loc="upper right")

    _second_panel(trace, totals, ax2)
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tokentrace plot",
                                     description="Plot per-token latency and per-layer time.")
    parser.add_argument("file", help="a tokentrace .sqlite file")
    parser.add_argument("-o", "--out", default=None, help="output image (default FILE.png)")
    parser.add_argument("--top", type=int, default=6, help="sites stacked in the first panel")
    args = parser.parse_args(argv)
    # Our warnings (a file of an older schema, read by scanning) as the one line they are.
    warnings.formatwarning = lambda message, *rest, **kw: f"{message}\n"
    try:
        out = plot(args.file, args.out or args.file + ".png", args.top)
    except TokentraceError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
