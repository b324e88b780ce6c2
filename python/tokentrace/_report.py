"""trace.report(): a plain-text summary of a trace."""


def _self_ms(trace):
    """{site: (calls, total cpu ms, self cpu ms)} from one pass over the calls."""
    rows = trace._q("SELECT c.id, c.parent_id, s.name, c.cpu_begin_ns, "
                    "COALESCE(c.cpu_end_ns, c.cpu_begin_ns) FROM calls c "
                    "JOIN sites s ON s.id = c.site_id")
    dur = {cid: e - b for cid, _, _, b, e in rows}
    child = {}
    for cid, parent, _, _, _ in rows:
        if parent:
            child[parent] = child.get(parent, 0) + dur[cid]
    out = {}
    for cid, _, name, _, _ in rows:
        n, tot, own = out.get(name, (0, 0, 0))
        out[name] = (n + 1, tot + dur[cid], own + dur[cid] - child.get(cid, 0))
    return {k: (n, tot / 1e6, own / 1e6) for k, (n, tot, own) in out.items()}


def render(trace, top=15):
    lines = [f"tokentrace report: {trace.path}"]
    tokens = trace.tokens
    if tokens:
        decode = [t.cpu_ms for t in tokens[1:]]
        line = f"tokens: {len(tokens)}  prefill {tokens[0].cpu_ms:.2f} ms"
        if decode:
            line += f"  decode mean {sum(decode) / len(decode):.2f} ms/token"
        lines.append(line)
    else:
        lines.append("tokens: 0 (no root call was recorded)")
    if trace.kernels_recorded:
        gpu = sum(t.gpu_ms or 0 for t in tokens)
        kern = sum(t.kernels or 0 for t in tokens)
        lines.append(f"kernels: mode {trace.kernel_mode}, {kern} kernels, {gpu:.2f} ms GPU busy")
    else:
        lines.append(f"kernels: not recorded ({trace.kernels_status or 'kernels=off'})")
    stats = _self_ms(trace)
    gpu_by_site = {}
    if trace.kernels_recorded:
        for name, busy in trace._q("SELECT s.name, SUM(g.gpu_busy_ns) FROM call_gpu g "
                                   "JOIN calls c ON c.id = g.call_id "
                                   "JOIN sites s ON s.id = c.site_id GROUP BY s.name"):
            gpu_by_site[name] = (busy or 0) / 1e6
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    lines.append("")
    header = f"{'site':<44} {'calls':>6} {'cpu ms':>9} {'self ms':>9}"
    if gpu_by_site:
        header += f" {'gpu self ms':>11}"
    lines.append(header)
    for name, (n, tot, own) in ranked:
        row = f"{name[-44:]:<44} {n:>6} {tot:>9.2f} {own:>9.2f}"
        if gpu_by_site:
            row += f" {gpu_by_site.get(name, 0.0):>11.3f}"
        lines.append(row)
    esc_total = sum(t.escapes for t in tokens)
    sites = trace.escape_sites
    if esc_total or sites:
        where = ", ".join(f"{loc} ({n}x)" for loc, n in sites[:3])
        lines.append("")
        lines.append(f"escapes: {esc_total} host reads of device values"
                     + (f" at {where}" if where else ""))
    losses = trace.losses
    if losses:
        lines.append("losses: " + ", ".join(f"{k}={n}" for k, n in sorted(losses.items())))
    return "\n".join(lines)
