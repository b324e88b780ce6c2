"""python -m tokentrace.plot FILE -o out.png  (also `tokentrace plot FILE -o out.png`).

Two panels:
  * per-token latency (CPU wall time of each root call), stacked by the self time of the
    costliest sites (self time does not double count nested calls), rest as "other";
    the prefill (token 1) is marked;
  * GPU time per layer (sum of the GPU busy time of the sites under `<...>.<N>.`), or CPU self
    time per layer when kernels were not recorded (the panel title says which).

Long runs cost about what `tokentrace report` costs: the sums are made in SQL, and past
MAX_BARS tokens each bar is the mean of a bin of consecutive tokens (the prefill keeps its
own bar), so neither Python nor matplotlib ever holds one object per call or per token.
"""

import argparse
import itertools
import os
import re
import sys
from collections import defaultdict

from ._errors import TokentraceError, fail

_LAYER = re.compile(r"^(.*?\.)(\d+)(\.|$)")
MAX_BARS = 200  # bars in the first panel: beyond this, tokens are binned

# Token 1 (the prefill) is bin 0 on its own; decode tokens 2.. fill bins of `width` tokens.
_BIN = "(CASE WHEN {t} <= 1 THEN 0 ELSE 1 + ({t} - 2) / :width END)"


def _token_bins(trace, width):
    """{bin: (first token, tokens, root ns)}: the tokens of each bin and their summed CPU wall
    time (0 for a token without a finished root call, as in trace.tokens)."""
    if "tokens" in trace._tables:
        src = "SELECT token, cpu_end_ns - cpu_begin_ns AS ns FROM tokens WHERE token > 0"
    else:  # schema 1 files written without the view
        src = ("SELECT c.token AS token, MAX(c.cpu_end_ns) - MIN(c.cpu_begin_ns) AS ns "
               "FROM calls c JOIN sites s ON s.id = c.site_id "
               "WHERE s.kind = 'root' AND c.token > 0 GROUP BY c.token")
    rows = trace._q(f"SELECT {_BIN.format(t='token')} AS bin, MIN(token), COUNT(*), "
                    f"SUM(COALESCE(ns, 0)) FROM ({src}) GROUP BY bin ORDER BY bin",
                    {"width": width})
    return {b: (first, n, ns) for b, first, n, ns in rows}


def _self_time_sql(trace, select, where="", group="s.name"):
    """SQL over the self time (own time less its child calls') `d.ns` of each call of a
    non-token site, joined to its site `s`."""
    cols = [r[1] for r in trace._q("PRAGMA table_info(sites)")]
    is_token = "s.is_token" if "is_token" in cols else "s.kind = 'root'"
    return ("WITH d AS (SELECT id, parent_id, site_id, token, "
            "           COALESCE(cpu_end_ns, cpu_begin_ns) - cpu_begin_ns AS ns FROM calls), "
            "kids AS (SELECT parent_id AS id, SUM(ns) AS ns FROM d "
            "         WHERE parent_id IS NOT NULL GROUP BY parent_id) "
            f"SELECT {select} FROM d JOIN sites s ON s.id = d.site_id "
            "LEFT JOIN kids ON kids.id = d.id "
            f"WHERE d.token > 0 AND NOT ({is_token}) {where} GROUP BY {group}")


def _site_totals(trace):
    """{site name: self ns over all tokens}, costliest first. One row per site: a file of a
    million sites costs one pass, never a row per site and bin."""
    rows = trace._q(_self_time_sql(trace, "s.name, SUM(d.ns - COALESCE(kids.ns, 0)) AS ns") +
                    " ORDER BY ns DESC")
    return dict(rows)


def _site_self_times(trace, width, names):
    """{bin: {site: self ns}} for the sites `names` only, summed per bin of tokens in SQL."""
    if not names:
        return defaultdict(dict)
    marks = ",".join("?" * len(names))
    rows = trace._q(
        _self_time_sql(trace, f"{_BIN.format(t='d.token')} AS bin, s.name, "
                              "SUM(d.ns - COALESCE(kids.ns, 0))",
                       where=f"AND s.name IN ({marks})",
                       group="bin, s.name").replace(":width", str(int(width))),
        names)
    per_bin = defaultdict(dict)
    for b, name, ns in rows:
        per_bin[b][name] = ns
    return per_bin


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
    src = ["SELECT MAX(token) FROM calls"]
    if "token_stats" in trace._tables:
        src.append("SELECT MAX(token) FROM token_stats")
    return max((r[0] or 0) for r in trace._q(" UNION ALL ".join(src)))


def figure(trace, top, plt):
    """The two panels of `trace` (a loaded Trace) as a matplotlib Figure, drawn with `plt`
    (matplotlib.pyplot, its backend chosen by the caller); plot() saves it."""
    decode = max(_num_tokens(trace) - 1, 0)
    width = max(1, -(-decode // (MAX_BARS - 1)))  # decode tokens per bar, ceil
    bins = _token_bins(trace, width)
    if not bins:
        fail(f"{trace.path} has no tokens (no root call was recorded); nothing to plot")
    totals = _site_totals(trace)
    leaders = list(itertools.islice(totals, top))
    per_bin = _site_self_times(trace, width, leaders)
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
    ax1.set_ylabel("latency (ms, CPU wall)")
    ax1.set_title("per-token latency, stacked by site self time")
    ax1.legend(fontsize="small", loc="upper right")

    layers = defaultdict(float)
    if trace.kernels_recorded:
        for name, busy in trace._q("SELECT s.name, SUM(g.gpu_busy_ns) FROM call_gpu g "
                                   "JOIN calls c ON c.id = g.call_id "
                                   "JOIN sites s ON s.id = c.site_id GROUP BY s.name"):
            layer = _layer_of(name)
            if layer is not None:
                layers[layer] += (busy or 0) / 1e6
        ax2.set_title("GPU time per layer")
        ax2.set_ylabel("GPU busy (ms, all tokens)")
    else:
        for name, ns in totals.items():
            layer = _layer_of(name)
            if layer is not None:
                layers[layer] += ns / 1e6
        ax2.set_title(f"CPU self time per layer (GPU time not recorded: "
                      f"{_why_no_gpu_time(trace)})")
        ax2.set_ylabel("CPU self (ms, all tokens)")
    layer_keys = sorted(layers)
    ax2.bar([str(k) for k in layer_keys], [layers[k] for k in layer_keys])
    ax2.set_xlabel("layer")
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tokentrace plot",
                                     description="Plot per-token latency and per-layer time.")
    parser.add_argument("file", help="a tokentrace .sqlite file")
    parser.add_argument("-o", "--out", default=None, help="output image (default FILE.png)")
    parser.add_argument("--top", type=int, default=6, help="sites stacked in the first panel")
    args = parser.parse_args(argv)
    try:
        out = plot(args.file, args.out or args.file + ".png", args.top)
    except TokentraceError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
