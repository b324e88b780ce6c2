"""python -m tokentrace.plot FILE -o out.png  (also `tokentrace plot FILE -o out.png`).

Two panels:
  * per-token latency (CPU wall time of each root call), stacked by the self time of the
    costliest sites (self time does not double count nested calls), rest as "other";
    the prefill (token 1) is marked;
  * GPU time per layer (sum of the GPU busy time of the sites under `<...>.<N>.`), or CPU self
    time per layer when kernels were not recorded (the panel title says which).
"""

import argparse
import re
import sys
from collections import defaultdict

_LAYER = re.compile(r"^(.*?\.)(\d+)(\.|$)")


def _token_self_times(trace):
    """{token: {site: self ns}} and {token: root ns}."""
    rows = trace._q("SELECT c.id, c.parent_id, s.name, c.token, c.cpu_begin_ns, "
                    "COALESCE(c.cpu_end_ns, c.cpu_begin_ns), s.is_token FROM calls c "
                    "JOIN sites s ON s.id = c.site_id")
    dur = {r[0]: r[5] - r[4] for r in rows}
    child = defaultdict(int)
    for r in rows:
        if r[1]:
            child[r[1]] += dur[r[0]]
    per_token = defaultdict(lambda: defaultdict(int))
    for cid, _, name, tok, _, _, is_token in rows:
        if tok and not is_token:
            per_token[tok][name] += dur[cid] - child[cid]
    return per_token


def _layer_of(name):
    m = _LAYER.match(name)
    return int(m.group(2)) if m else None


def _why_no_gpu_time(trace):
    """A few words for the second panel's title: the meta's `kernels_off` category (the full
    detail is `tokentrace info`'s), or for older files a hint at where the detail is."""
    if trace.kernel_mode == "off":
        return "kernel mode off"
    return trace.meta.get("kernels_off") or "see `tokentrace info`"


def plot(path, out, top=6):
    try:
        import matplotlib
    except ImportError:
        from ._errors import fail
        fail("plotting needs matplotlib, which is not installed here (pip install matplotlib); "
             "the trace itself is complete, and `tokentrace report` needs nothing more")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ._api import load

    fig = _figure(load(path), top, plt)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _figure(trace, top, plt):
    tokens = trace.tokens
    if not tokens:
        raise SystemExit(f"tokentrace: {trace.path} has no tokens (no root call was recorded); "
                         f"nothing to plot")
    per_token = _token_self_times(trace)
    totals = defaultdict(int)
    for sites in per_token.values():
        for name, ns in sites.items():
            totals[name] += ns
    leaders = [n for n, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:top]]
    xs = [t.token for t in tokens]

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 8))
    bottom = [0.0] * len(xs)
    for name in leaders:
        ys = [per_token[t].get(name, 0) / 1e6 for t in xs]
        ax1.bar(xs, ys, bottom=bottom, label=name)
        bottom = [b + y for b, y in zip(bottom, ys)]
    other = [max(t.cpu_ms - b, 0.0) for t, b in zip(tokens, bottom)]
    ax1.bar(xs, other, bottom=bottom, label="other", color="lightgray")
    ax1.axvline(1, color="red", linestyle="--", linewidth=1)
    ax1.annotate("prefill", (1, max(t.cpu_ms for t in tokens)), color="red",
                 textcoords="offset points", xytext=(4, -10))
    ax1.set_xlabel("token")
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
    keys = sorted(layers)
    ax2.bar([str(k) for k in keys], [layers[k] for k in keys])
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
    from ._errors import TokentraceError
    try:
        out = plot(args.file, args.out or args.file + ".png", args.top)
    except TokentraceError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
