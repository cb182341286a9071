"""`snakemesh report DIR`: the operator's dashboard, one HTML page made from
what `analyze` wrote (no Spark needed).

Top to bottom: the verdict (healthy / degraded / broken, with the reasons;
rules in health.py), key figures, the nodes worst first, the spanning tree
and the snake (inline SVG, also written beside the page), then the plots
(PNG), the tables that bound the mesh, the caches that are meant to run full
(apart), drops by reason, anomalies and rejected lines.

DIR/report/index.html references its images by relative path and loads
nothing from the network, so the folder can be copied and opened offline.
"""
import html
import json
import math
import os

from host_tools.errors import InputError
from host_tools.pipeline import health, topo_svg
from host_tools.pipeline.output import AtomicDir
from host_tools.render import link_label

PLOTS = ("convergence.png", "delivery.png", "stretch.png", "control.png", "bounding.png")
SVGS = ("tree.svg", "snake.svg")
TABLES = ("nodes.parquet", "convergence.parquet", "epochs.parquet", "anomalies.parquet",
          "topology.parquet", "histograms.parquet", "series.parquet", "counter_totals.parquet")
ROWS_OPEN = 30     # node rows shown (worst first) before the rest are folded away
ROWS_HEALTHY = 10  # healthy rows shown after the ones that need attention


def _load(d):
    if not os.path.isdir(d):
        raise InputError("%s: no such folder" % d)
    sp = os.path.join(d, "summary.json")
    if not os.path.isfile(sp):
        raise InputError("%s: not a `snakemesh analyze` output (no summary.json)" % d)
    try:
        with open(sp) as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError("%s: unreadable summary.json (%s)" % (d, e))
    if not isinstance(summary, dict) or not summary.get("complete"):
        raise InputError("%s: summary.json is not a complete analysis" % d)
    import pandas as pd
    tables, missing = {}, []
    for name in TABLES:
        p = os.path.join(d, name)
        key = name.split(".")[0]
        try:
            tables[key] = pd.read_parquet(p)
        except Exception:  # absent or damaged: the page says so instead of failing
            tables[key] = pd.DataFrame()
            missing.append(name)
    return summary, tables, missing


def render(out_dir, with_verdict=False):
    """Write OUT/report/index.html + images; returns the HTML path (and the
    verdict level and reasons with with_verdict=True)."""
    out_dir = os.path.abspath(out_dir)
    summary, t, missing = _load(out_dir)
    rows = health.load_nodes(out_dir, summary)
    health.judge_nodes(rows, summary)
    level, reasons = health.verdict(summary, rows)
    probes = health._read(out_dir, "probes", ("probe", "ok", "shortest", "stretch", "rtt_ms"))
    import matplotlib
    matplotlib.use("Agg")
    rep = AtomicDir(os.path.join(out_dir, "report"), replace_if=lambda p: True, what="report folder")
    try:
        notes, drew = {}, {}
        for name, fn, args in (("convergence", _plot_convergence, (summary, t)),
                               ("delivery", _plot_delivery, (summary, t, probes)),
                               ("stretch", _plot_stretch, (summary, t, probes)),
                               ("control", _plot_control, (summary, t)),
                               ("bounding", _plot_bounding, (summary, t))):
            path = rep.path(name + ".png")
            notes[name] = fn(path, *args)
            drew[name] = os.path.isfile(path)
        edges = _last_edges(t.get("topology"))
        svgs = {"tree": topo_svg.tree_svg(rows, edges), "snake": topo_svg.snake_svg(rows)}
        for name, text in svgs.items():
            with open(rep.path(name + ".svg"), "w") as f:
                f.write(text)
        with open(rep.path("index.html"), "w") as f:
            f.write(_html(summary, t, rows, level, reasons, svgs, notes, drew, missing))
        final = rep.commit()
    except BaseException:
        rep.abort()
        raise
    path = os.path.join(final, "index.html")
    return (path, level, reasons) if with_verdict else path


def verdict_line(level, reasons):
    """One line for the terminal: the verdict and its worst reason."""
    worst = [x for x in reasons if x["level"] == level and level != health.HEALTHY]
    more = len([x for x in reasons if x["level"] in (health.DEGRADED, health.BROKEN)]) - 1
    return "verdict: %s%s%s" % (level, (" - " + worst[0]["text"]) if worst else "",
                                (" (+%d more problems)" % more) if worst and more > 0 else "")


def _last_edges(topo):
    """[(a, b, link)] of the last topology epoch (link None when unknown)."""
    if topo is None or not len(topo):
        return []
    last = topo[topo["epoch"] == topo["epoch"].max()]
    link = last["link"] if "link" in last else [None] * len(last)
    return [(a, b, health.clean(k)) for a, b, k in zip(last["a"], last["b"], link)]


# -- plots -------------------------------------------------------------------------

def _fig(*a, **kw):
    import matplotlib.pyplot as plt
    return plt.subplots(*a, **kw)


def _save(fig, path):
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _discard(fig):
    import matplotlib.pyplot as plt
    plt.close(fig)


def _empty(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _plot_convergence(path, s, t):
    """Each step is the state at the end of its bucket, drawn from the
    bucket's start; a converged time T lies in the bucket where its curve
    steps up for good, which is shaded, with T itself dashed."""
    c = t["convergence"]
    b = float(s.get("bucket_s") or 1.0)
    marks = [(k, col, lab) for k, col, lab in (("tree_converged_s", "C0", "tree agreed"),
                                                ("snake_converged_s", "C1", "snake correct"))
             if health.finite(s.get(k))]
    end = s.get("duration_s") or 0.0
    # zoom on the start when everything happens in the first fifth of the run
    last_event = max([s[k] for k, _c, _l in marks] + [e.get("start_s") or 0 for e in s.get("epochs", [])] + [0])
    zoom = len(c) and marks and (last_event + 3 * b) * 4 < end
    fig, axes = _fig(1, 2 if zoom else 1, figsize=(11, 3.8), squeeze=False,
                     gridspec_kw={"width_ratios": [2, 1]} if zoom else None)
    if not len(c) or ("reported" in c and not c["reported"].max()):
        _discard(fig)
        return "unknown: no node sent a state record"
    note = None
    for i, ax in enumerate(axes[0]):
        x = list(c["t_s"] - b) + [float(c["t_s"].iloc[-1])]
        for col, colour, lab in (("tree_agree_ratio", "C0", "nodes on the most common root"),
                                 ("snake_correct_ratio", "C1", "nodes with the right descending key")):
            y = list(c[col]) + [float(c[col].iloc[-1])]
            ax.step(x, y, where="post", color=colour, lw=1.6, label=lab if i == 0 else None)
        for k, colour, lab in marks:
            tt = s[k]
            k0 = math.floor(tt / b + 1e-9) * b
            ax.axvspan(k0, k0 + b, color=colour, alpha=0.12, lw=0)
            ax.axvline(tt, color=colour, ls="--", lw=1, label=("%s at %.2f s" % (lab, tt)) if i == 0 else None)
        last_label = None
        span = (last_event + 3 * b) if i else max(end, b)
        for ep in s.get("epochs", [])[1:]:
            ax.axvline(ep["start_s"], color="#777", ls=":", lw=1)
            if last_label is None or ep["start_s"] - last_label > 0.12 * span:
                ax.text(ep["start_s"], 1.03, " topology change", color="#555", fontsize=8)
                last_label = ep["start_s"]
        ax.set_ylim(-0.02, 1.1)
        ax.yaxis.set_major_formatter(_pct_formatter())
        ax.set_xlabel("time since start of data (s)")
        ax.grid(alpha=0.3)
        if i == 0:
            ax.set_ylabel("share of %d nodes" % s["nodes"])
            ax.set_title("Convergence over the whole run (bucket %.3g s)" % b)
            for k, colour, lab in (("tree_converged_s", "C0", "tree"), ("snake_converged_s", "C1", "snake")):
                if not health.finite(s.get(k)):   # say so in the legend rather than draw nothing
                    ax.plot([], [], color=colour, ls=":", label="%s: not converged and held at the end" % lab)
            ax.legend(loc="lower right", fontsize=8)
            ax.set_xlim(0, max(end, b))
        else:
            ax.set_xlim(0, last_event + 3 * b)
            ax.set_title("First %.0f s" % (last_event + 3 * b))
    if not marks and len(c):
        note = "the tree or the snake did not converge and hold until the end of the data"
    _save(fig, path)
    return note


def _pct_formatter():
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda v, _p: "%d%%" % round(v * 100))


def _wilson(k, n, z=1.96):
    if not n:
        return None
    p = k / float(n)
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def _plot_delivery(path, s, t, probes):
    """Delivery as a number with its 95% interval on a 0-100% axis and the
    verdict thresholds, delivery by path length, and the RTT distribution."""
    pings, ok = s.get("pings") or 0, s.get("pings_ok") or 0
    if not pings:
        return "no pings in the telemetry: delivery and round-trip times unknown"
    fig, (a1, a2, a3) = _fig(1, 3, figsize=(13, 3.8), gridspec_kw={"width_ratios": [1.1, 1.3, 1.3]})
    th = health.THRESHOLDS
    if pings:
        ratio = ok / float(pings)
        lo, hi = _wilson(ok, pings)
        # a gauge: the verdict's zones as background, the figure and its 95% interval on top
        zones = ((0, th["delivery_broken"], "#fed7d7"), (th["delivery_broken"], th["delivery_degraded"], "#feebc8"),
                 (th["delivery_degraded"], 1.0, "#c6f6d5"))
        for z0, z1, col in zones:
            a1.axvspan(z0, z1, ymin=0.35, ymax=0.65, color=col, lw=0)
        a1.errorbar([ratio], [0], xerr=[[max(0.0, ratio - lo)], [max(0.0, hi - ratio)]], fmt="D", color="#1a202c", ms=9, capsize=7, lw=2)
        a1.text(0.5, 0.85, "%.1f%% delivered" % (100 * ratio), ha="center", fontsize=17, weight="bold",
                transform=a1.transAxes)
        a1.text(0.5, 0.12, "%d of %d pings, 95%% interval %.1f-%.1f%%\nzones: broken < %d%% < degraded < %d%%"
                % (ok, pings, 100 * lo, 100 * hi, round(100 * th["delivery_broken"]),
                   round(100 * th["delivery_degraded"])), ha="center", fontsize=8, color="#444",
                transform=a1.transAxes)
        a1.set_ylim(-1, 1)
        a1.set_xlim(0, 1.0)
        a1.set_yticks([])
        a1.xaxis.set_major_formatter(_pct_formatter())
        for sp in ("left", "right", "top"):
            a1.spines[sp].set_visible(False)
    else:
        _empty(a1, "no pings in the telemetry")
    a1.set_title("Ping delivery")
    # by shortest path length
    pr = probes[probes["probe"] == "ping"] if probes is not None and len(probes) else None
    if pr is not None and len(pr) and pr["shortest"].notna().any():
        known = pr[pr["shortest"].notna()]
        g = known.groupby(known["shortest"].astype(int))["ok"].agg(["sum", "count"])
        bars = [(str(x), int(k), int(n)) for x, k, n in zip(g.index, g["sum"], g["count"])]
        unk = pr[pr["shortest"].isna()]
        if len(unk):
            bars.append(("?", int(unk["ok"].sum()), len(unk)))
        xs = list(range(len(bars)))
        a2.bar(xs, [k / float(n) for _x, k, n in bars],
               color=["#a0aec0" if x == "?" else "#3182ce" for x, _k, _n in bars])
        for x, (_lab, k, n) in zip(xs, bars):
            a2.text(x, k / float(n) + 0.02, "%d/%d" % (k, n), ha="center", va="bottom", fontsize=7,
                    rotation=90 if len(bars) > 12 else 0)
        a2.set_ylim(0, 1.25)
        a2.yaxis.set_major_formatter(_pct_formatter())
        a2.set_xlabel("shortest path between the ends (hops; ? = not known)")
        a2.set_ylabel("delivered")
        step = max(1, len(xs) // 15)
        a2.set_xticks(xs[::step])
        a2.set_xticklabels([b[0] for b in bars][::step])
    else:
        _empty(a2, "no ping with a known shortest path\n(no topology, or no pings)")
    a2.set_title("Delivery by path length")
    h = t["histograms"]
    h = h[h["metric"] == "rtt_ms"].sort_values("bin_start") if len(h) else h
    rtt = pr[pr["ok"] & pr["rtt_ms"].notna()]["rtt_ms"] if pr is not None and len(pr) else None
    if rtt is not None and len(rtt) and rtt.min() == rtt.max():
        _empty(a3, "all %d round trips took %.1f ms" % (len(rtt), rtt.iloc[0]))
    elif rtt is not None and len(rtt):
        import numpy as np
        v = np.sort(rtt.to_numpy())
        a3.step(v, np.arange(1, len(v) + 1) / float(len(v)), where="post", color="#805ad5")
        for q, ls in ((s.get("rtt_ms_p50"), "--"), (s.get("rtt_ms_p95"), ":")):
            if health.finite(q):
                a3.axvline(q, color="k", ls=ls, lw=1)
        a3.set_ylim(0, 1.02)
        a3.yaxis.set_major_formatter(_pct_formatter())
        a3.set_xlabel("round-trip time (ms)")
        a3.set_ylabel("pings at or below")
        a3.set_title("RTT (p50 %s ms, p95 %s ms)" % (_v(s.get("rtt_ms_p50"), 3), _v(s.get("rtt_ms_p95"), 3)))
        a3.grid(alpha=0.3)
    elif len(h):
        a3.bar(h["bin_start"], h["count"], width=h["bin_width"], align="edge", color="#805ad5", edgecolor="white")
        a3.set_xlabel("round-trip time (ms)")
        a3.set_title("RTT")
    else:
        _empty(a3, "no round-trip times")
    if not a3.get_title():
        a3.set_title("Round-trip time")
    _save(fig, path)
    return None


def _plot_stretch(path, s, t, probes):
    """Stretch as a cumulative distribution (exact values, not bins), with
    the value stated when every probe has the same stretch."""
    import numpy as np
    fig, ax = _fig(figsize=(8, 3.6))
    vals = None
    if probes is not None and len(probes) and "stretch" in probes:
        v = probes["stretch"].dropna()
        if len(v):
            vals = np.sort(v.to_numpy())
    note = None
    if vals is not None and vals[0] == vals[-1]:
        _discard(fig)
        return "all %d probes have stretch %.2f%s" % (len(vals), vals[0], ": every path was a shortest path"
                                                      if vals[0] == 1 else "")
    elif vals is not None:
        ax.step(vals, np.arange(1, len(vals) + 1) / float(len(vals)), where="post", color="#2f855a", lw=1.6)
        share1 = float((vals <= 1.0 + 1e-9).mean())
        ax.axhline(share1, color="#999", ls=":", lw=1)
        ax.text(vals[-1], share1, "%.0f%% on a shortest path " % (100 * share1), ha="right", va="bottom",
                fontsize=8, color="#555")
        for q, ls, lab in ((s.get("stretch_p50"), "--", "p50"), (s.get("stretch_p95"), ":", "p95")):
            if health.finite(q):
                ax.axvline(q, color="k", ls=ls, lw=1, label="%s %.2f" % (lab, q))
        ax.legend(fontsize=8, loc="lower right")
        ax.set_xlim(min(1.0, vals[0]) - 0.02, vals[-1] + 0.05 * (vals[-1] - vals[0] or 1))
        ax.set_ylim(0, 1.02)
        ax.yaxis.set_major_formatter(_pct_formatter())
        ax.set_ylabel("probes at or below")
        ax.grid(alpha=0.3)
        ax.set_xlabel("stretch (hops / shortest path)")
    else:
        h = t["histograms"]
        h = h[h["metric"] == "stretch"] if len(h) else h
        if len(h):
            ax.bar(h["bin_start"], h["count"], width=h["bin_width"], align="edge", color="#2f855a")
            ax.set_xlabel("stretch (hops / shortest path), bins of %.2g" % h["bin_width"].iloc[0])
        else:
            _discard(fig)
            return "unknown: no successful probe with a hop count on a known topology"
    ax.set_title("Path stretch over %d probes (mean %s)" % (s.get("stretch_probes") or 0,
                                                            _v(s.get("stretch_mean"), 3)))
    _save(fig, path)
    return note


def _plot_control(path, s, t):
    """Control traffic (every frame type but traffic) sent per node and
    second, stacked by frame type, from `analyze`'s `bytes_per_node_s`
    series (the counters' `tx_bytes`, contract 1)."""
    ser = t["series"]
    b = float(s.get("bucket_s") or 1.0)
    sub = ser[(ser["series"] == "bytes_per_node_s") & (ser["key"] != "traffic")] if len(ser) else ser
    if not len(sub):
        return ("unknown: this analysis has no control traffic over time (it needs `tx_bytes` in the "
                "counters records and a current `snakemesh analyze`)")
    fig, ax = _fig(figsize=(11, 3.6))
    p = sub.pivot_table(index="t_s", columns="key", values="value", aggfunc="sum").fillna(0).sort_index()
    x = list(p.index - b) + [float(p.index[-1])]
    ys = [list(p[k]) + [float(p[k].iloc[-1])] for k in p.columns]
    ax.stackplot(x, *ys, labels=list(p.columns), step="post", alpha=0.85)
    ax.set_ylabel("bytes/s per node")
    ax.legend(fontsize=8, loc="upper right", ncol=len(p.columns))
    ax.grid(alpha=0.3)
    ax.set_xlabel("time since start of data (s)")
    ax.set_xlim(0, max(s.get("duration_s") or 0, x[-1]))
    mean = float(p.sum(axis=1).mean())
    ax.set_title("Control traffic sent (all frame types but traffic): %.0f bytes/s per node on average" % mean)
    _save(fig, path)
    return None


def _plot_bounding(path, s, t):
    """Occupancy over time of the tables that bound the mesh (routes, peers,
    depth): the largest used/capacity over the nodes in each bucket."""
    ser = t["series"]
    fig, ax = _fig(figsize=(11, 2.6))
    occ = ser[(ser["series"] == "capacity_max_ratio") & ser["key"].isin(health.BOUNDING_TABLES)] if len(ser) else ser
    if not len(occ) and len(ser):   # telemetry before `capacity`: the bounding tables' occupancy
        occ = ser[(ser["series"] == "occupancy_max_ratio") & ser["key"].isin(health.BOUNDING_TABLES)]
    b = float(s.get("bucket_s") or 1.0)
    if len(occ):
        for i, (key, g) in enumerate(sorted(occ.groupby("key"), key=lambda kv: kv[0])):
            g = g.sort_values("bucket")
            ax.step(g["t_s"] - b, g["value"], where="post", label=key, lw=1.5)
        ax.axhline(1.0, color="#e53e3e", ls=":", lw=1)
        ax.set_ylim(-0.02, 1.1)
        ax.yaxis.set_major_formatter(_pct_formatter())
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
        ax.set_xlabel("time since start of data (s)")
        ax.set_ylabel("fullest node")
    else:
        _discard(fig)
        return "no occupancy of routes/peers/depth over time in the telemetry"
    ax.set_title("Tables that bound the mesh: the fullest node's used / capacity")
    _save(fig, path)
    return None


# -- HTML -------------------------------------------------------------------------

def _v(x, digits=4):
    x = health.clean(x)
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if math.isinf(x):
            return "n/a"
        return ("%." + str(digits) + "g") % x
    return html.escape(str(x))


def _cap(text):
    return text[:1].upper() + text[1:]


def _e(x):
    return html.escape(str(x), quote=True)


def _unknown(why):
    return "<span class='unk' title='%s'>unknown</span>" % _e(why)


def _table(headers, rows, cls=""):
    out = ["<table%s><tr>%s</tr>" % (" class='%s'" % cls if cls else "",
                                     "".join("<th>%s</th>" % html.escape(h) for h in headers))]
    for r in rows:
        out.append("<tr>%s</tr>" % "".join("<td>%s</td>" % _v(c) for c in r))
    out.append("</table>")
    return "\n".join(out)


CSS = """
body{font-family:"DejaVu Sans",Arial,sans-serif;max-width:1180px;margin:1.2em auto;padding:0 12px;color:#1a202c}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #e2e8f0;padding-bottom:4px}
.sub{color:#4a5568;font-size:13px;margin:0 0 12px}
.verdict{border-radius:8px;padding:12px 18px;margin:10px 0 14px;border:2px solid}
.verdict .word{font-size:30px;font-weight:bold;letter-spacing:1px;text-transform:uppercase}
.verdict.healthy{background:#f0fff4;border-color:#38a169}.verdict.healthy .word{color:#276749}
.verdict.degraded{background:#fffaf0;border-color:#dd6b20}.verdict.degraded .word{color:#c05621}
.verdict.broken{background:#fff5f5;border-color:#e53e3e}.verdict.broken .word{color:#c53030}
.verdict ul{margin:6px 0 0;padding-left:0;list-style:none}.verdict li{margin:3px 0;font-size:14px}
.lv{display:inline-block;min-width:74px;font-size:11px;font-weight:bold;text-transform:uppercase;
 border-radius:3px;padding:1px 5px;margin-right:6px;text-align:center;color:white}
.lv.healthy{background:#38a169}.lv.degraded{background:#dd6b20}.lv.broken{background:#e53e3e}
.lv.note,.lv.unknown{background:#a0aec0}
.tiles{display:flex;flex-wrap:wrap;gap:8px;margin:8px 0}
.tile{border:1px solid #e2e8f0;border-left:5px solid #a0aec0;border-radius:5px;padding:6px 10px;min-width:150px;flex:1}
.tile .k{font-size:12px;color:#4a5568}.tile .v{font-size:20px;font-weight:bold}.tile .d{font-size:11px;color:#718096}
.tile.healthy{border-left-color:#38a169}.tile.degraded{border-left-color:#dd6b20}.tile.broken{border-left-color:#e53e3e}
table{border-collapse:collapse;margin:6px 0 14px}td,th{border:1px solid #e2e8f0;padding:3px 7px;font-size:13px;
 text-align:left;vertical-align:top}th{background:#f7fafc}
table.nodes td.num{text-align:right}table.nodes tr.broken{background:#fff5f5}table.nodes tr.degraded{background:#fffaf0}
table.nodes tr.unknown{background:#f7fafc}table.nodes tr.broken td:first-child{border-left:5px solid #e53e3e}
table.nodes tr.degraded td:first-child{border-left:5px solid #dd6b20}table.nodes tr.unknown td:first-child{border-left:5px solid #a0aec0}
table.nodes tr.healthy td:first-child{border-left:5px solid #38a169}
.key{font-family:monospace;color:#718096;font-size:11px}.long{word-break:break-all}.nw{white-space:nowrap}.bad{color:#c53030;font-weight:bold}.good{color:#276749}
.unk{color:#718096;font-style:italic;border-bottom:1px dotted #a0aec0;cursor:help}
.issues{font-size:12px;color:#4a5568;max-width:360px}
.muted{color:#718096}.muted table td,.muted table th{color:#718096}
.caches{border:1px dashed #cbd5e0;border-radius:6px;padding:4px 14px;background:#fcfcfd}
.meter{display:inline-block;width:80px;height:8px;background:#edf2f7;border-radius:4px;vertical-align:middle;margin-right:6px}
.meter i{display:block;height:8px;border-radius:4px;background:#3182ce}.meter.full i{background:#e53e3e}
.caches .meter i{background:#a0aec0}
img{max-width:100%;border:1px solid #edf2f7;margin:4px 0}
.draw{border:1px solid #e2e8f0;border-radius:6px;overflow:hidden}
.lg{display:inline-block;margin-right:14px;font-size:13px;white-space:nowrap}.lg svg{vertical-align:middle}
.note{font-size:13px;color:#4a5568}.stat{font-size:16px;font-weight:bold;margin:6px 0}
.draw svg{display:block;margin:0 auto}details summary{cursor:pointer;color:#2b6cb0;font-size:14px;margin:6px 0}
"""


def _source_name(s):
    return {"telemetry": "topology records", "file": "--topology file", "peers": "peers records (links seen)",
            "none": "none (no topology)"}.get(s.get("topology_source"), s.get("topology_source"))


def _html(s, t, rows, level, reasons, svgs, notes, drew, missing):
    rows_sorted = health.sort_worst_first(rows)
    by = dict((r["node"], r) for r in rows)
    p = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
         "<meta name='viewport' content='width=device-width, initial-scale=1'>",
         "<title>snakemesh: %s (%d nodes)</title><style>%s</style></head><body>" % (level, s["nodes"], CSS),
         "<h1>snakemesh mesh report</h1>",
         "<p class='sub'>%d nodes &middot; %s s of telemetry &middot; %d records (%d rejected) &middot; "
         "topology from %s</p>" % (s["nodes"], _v(s.get("duration_s"), 4), s.get("records") or 0,
                                    s.get("rejected_records") or 0, _e(_source_name(s)))]
    # verdict
    p.append("<section id='verdict' class='verdict %s' data-verdict='%s'>" % (level, level))
    bad = [r for r in rows if r.get("status") in (health.BROKEN, health.DEGRADED)]
    p.append("<div class='word'>%s</div>" % level)
    p.append("<div>%s</div>" % {
        health.HEALTHY: "Every rule below passed%s." % (
            " (grey notes: no data to judge by)" if any(x["level"] == health.NOTE for x in reasons) else ""),
        health.DEGRADED: "The mesh works, but %d node%s need%s attention." % (
            len(bad), "" if len(bad) == 1 else "s", "s" if len(bad) == 1 else ""),
        health.BROKEN: "The mesh does not work as it should: see the red reasons.",
    }[level])
    p.append("<ul>")
    for x in reasons:
        p.append("<li><span class='lv %s'>%s</span>%s</li>" % (x["level"], "ok" if x["level"] == health.HEALTHY
                                                               else x["level"], _e(x["text"])))
    p.append("</ul><div class='note'>Rules and thresholds: docs/guides/PIPELINE.md, &ldquo;Health verdict&rdquo;."
             "</div></section>")
    p.append(_tiles(s, rows, reasons))

    # what the mesh delivered, right under the verdict
    p.append("<h2>Delivery and latency</h2>" + _img("delivery", drew, "delivery and RTT"))
    if notes.get("delivery"):
        p.append("<p class='note'>%s.</p>" % _cap(_e(notes["delivery"])))
    p.append("<h2>Path stretch</h2>" + _img("stretch", drew, "stretch distribution"))
    if notes.get("stretch"):
        p.append("<p class='%s' id='stretch-note'>Stretch: %s.</p>" % ("stat" if not drew["stretch"] else "note",
                                                                      _e(notes["stretch"])))

    # nodes
    n_bad = sum(1 for r in rows if r.get("status") != health.HEALTHY)
    p.append("<h2 id='nodes-title'>Nodes, worst first (%d of %d need attention)</h2>" % (n_bad, len(rows)))
    cols = _node_columns(rows)
    absent = [why for c, why in OPTIONAL_COLUMNS if c not in cols]
    if absent:
        p.append("<p class='note'>Not in this telemetry, for any node: %s.</p>" % _e("; ".join(absent)))
    # every node that needs attention (up to ROWS_OPEN), then a few healthy ones
    n_open = min(ROWS_OPEN, n_bad + ROWS_HEALTHY)
    p.append(_node_table(rows_sorted[:n_open], cols, by, "nodes"))
    rest = rows_sorted[n_open:]
    if rest:
        more_bad = sum(1 for r in rest if r.get("status") != health.HEALTHY)
        p.append("<details><summary>show the other %d nodes (%s)</summary>" % (
            len(rest), "%d of them need attention" % more_bad if more_bad else "all healthy"))
        p.append(_node_table(rest, cols, by, "nodes-more"))
        p.append("</details>")

    # how it got there
    p.append("<h2>Convergence</h2>")
    p.append(_img("convergence", drew, "convergence over time"))
    if not drew.get("convergence"):
        p.append("<p class='note'>Convergence: %s.</p>" % _e(notes.get("convergence") or "unknown"))
    else:
        p.append("<p class='note'>Each step is the state at the end of its %s s bucket; the shaded band is the "
                 "bucket in which the tree (blue) or the snake (orange) converged for good, the dashed line the exact "
                 "time.%s</p>" % (_v(s.get("bucket_s"), 3), (" " + _cap(_e(notes["convergence"])) + ".")
                                  if notes.get("convergence") else ""))
    ep = s.get("epochs", [])
    if len(ep) > 1:
        p.append("<p class='note'>%d topology changes. Changes that follow each other before the mesh could "
                 "converge are one row; &ldquo;not in this epoch&rdquo; means the next change came first.</p>"
                 % (len(ep) - 1))
        p.append(_table(["epochs", "start (s)", "end (s)", "components", "links", "nodes down",
                         "tree converged after (s)", "snake converged after (s)"], _epoch_rows(ep)))
    # drawings
    p.append("<h2>Spanning tree and links</h2>")
    p.append("<p class='note'>The tree as the nodes reported it at the end: root in the middle (ringed), "
             "depth as rings, thick lines are parent links, thin ones the other links of the last topology "
             "epoch. Hover a node for its key and issues; <a href='tree.svg'>tree.svg</a> opens full size.</p>")
    p.append("<div>%s</div><div class='draw' id='tree'>%s</div>" % (topo_svg.legend_html(), svgs["tree"]))
    p.append("<h2>Snake</h2>")
    p.append("<p class='note'>Nodes in key order around the ring (lowest key at the top, rising clockwise); "
             "each arrow goes from a node to its descending neighbour (the next lower key it reported). "
             "Right: a short green arrow to the next node anticlockwise (or over nodes of another component). "
             "Wrong: a red chord; the grey dashed arrow is where it should point. "
             "<a href='snake.svg'>snake.svg</a> opens full size.</p>")
    p.append("<div class='draw' id='snake'>%s</div>" % svgs["snake"])

    p.append("<h2>Control traffic</h2>" + _img("control", drew, "control traffic over time"))
    if notes.get("control"):
        p.append("<p class='note'>Control traffic: %s.</p>" % _e(notes["control"]))

    # tables that matter, caches apart
    p.append("<h2>Tables that bound the mesh</h2>")
    p.append(_img("bounding", drew, "occupancy of routes, peers, depth"))
    p.append(_bounding_table(s, rows))
    p.append(_caches(s))
    p.append(_drops(s))

    an = t["anomalies"]
    p.append("<h2>Anomalies (%d)</h2>" % len(an))
    if len(an):
        p.append(_table(["node", "anomaly", "detail"],
                        [(_name_of(by, r.node), r.anomaly, r.detail) for r in an.head(300).itertuples()]))
    else:
        p.append("<p class='note'>None.</p>")
    p.append("<h2>Rejected lines (%d)</h2>" % (s.get("rejected_records") or 0))
    if s.get("rejected_by_reason"):
        p.append(_table(["reason", "lines"], sorted(s["rejected_by_reason"].items())))
        p.append("<p class='note'>The lines are in <code>rejects/</code> in the analysis folder.</p>")
    if missing:
        p.append("<p class='note bad'>Missing or unreadable in the analysis folder: %s (re-run "
                 "<code>snakemesh analyze</code>); the parts of this page that need them say unknown.</p>"
                 % _e(", ".join(missing)))
    p.append("<details><summary>all figures from summary.json</summary>")
    p.append(_table(["figure", "value"], [(label, s.get(k)) for k, label in HEADLINE]))
    p.append("</details>")
    p.append("<p class='muted' style='font-size:12px'>analysis wall time %s s on %s</p></body></html>"
             % (_v(s.get("wall_time_s")), _e(s.get("master"))))
    return "\n".join(p)


def _epoch_rows(ep):
    """The epoch table collapsed to what matters: a run of consecutive
    epochs in which neither the tree nor the snake converged (a burst of
    link changes, e.g. a simulator start) is one row, with the range of
    links and the most nodes down; an epoch with a convergence figure is a
    row of its own."""
    rows, run = [], []

    def flush():
        if not run:
            return
        a, b = run[0], run[-1]
        links = [e.get("links") for e in run if e.get("links") is not None]
        down = [e.get("nodes_down") for e in run if e.get("nodes_down") is not None]
        comps = [e.get("components") for e in run if e.get("components") is not None]
        rows.append(("%s" % a["epoch"] if a is b else "%s-%s (%d)" % (a["epoch"], b["epoch"], len(run)),
                     a.get("start_s"), b.get("end_s"),
                     _span(comps), _span(links), max(down) if down else None,
                     "not in this epoch", "not in this epoch"))
        del run[:]
    for i, e in enumerate(ep):
        last = i == len(ep) - 1
        if e.get("tree_converged_s") is None and e.get("snake_converged_s") is None and not last:
            run.append(e)
            continue
        flush()
        rows.append(("%s" % e["epoch"], e.get("start_s"), e.get("end_s"), e.get("components"), e.get("links"),
                     e.get("nodes_down"), e.get("tree_converged_s"), e.get("snake_converged_s")))
    flush()
    return rows


def _span(values):
    if not values:
        return None
    lo, hi = min(values), max(values)
    return lo if lo == hi else "%s-%s" % (lo, hi)


def _img(name, drew, alt):
    return "<img src='%s.png' alt='%s'>" % (name, _e(alt)) if drew.get(name) else ""


def _name_of(by, node):
    r = by.get(node)
    return health.label(r) if r else (node or "?")[:8]


def _tile(title, value, detail, level=None):
    return ("<div class='tile %s'><div class='k'>%s</div><div class='v'>%s</div><div class='d'>%s</div></div>"
            % (level or "", _e(title), value, detail))


def _tiles(s, rows, reasons):
    """Key figures; each tile takes the level of the verdict rule behind it
    (grey when the rule had no data), so tiles and reasons always agree."""
    lv = dict((x["code"], x["level"]) for x in reasons)
    colour = lambda code: lv.get(code) if lv.get(code) in health.LEVELS else None  # noqa: E731
    n = len(rows)
    lost = [r for r in rows if r.get("down_at_end") or "silent" in (r.get("anomalies") or [])]
    judged = [r for r in rows if r.get("snake_ok") is not None]
    right = sum(1 for r in judged if r["snake_ok"])
    reported = sum(1 for r in rows if health.has_state(r) and not r.get("down_at_end"))
    t = []
    t.append(_tile("nodes up at the end", "%d / %d" % (n - len(lost), n),
                   "%d down or silent" % len(lost) if lost else "none lost", colour("lost") or health.HEALTHY))
    off = [r for r in rows if r.get("root_ok") is False]
    tree_t = (s.get("epochs") or [{}])[-1].get("tree_converged_s") if s.get("epochs") else s.get("tree_converged_s")
    if not reported:
        value, detail = _unknown("no state records"), "no node reported its root"
    elif off:
        value, detail = "%d off root" % len(off), "nodes not on their component's root"
    elif health.already_converged(s, "tree"):
        value, detail = "agreed", "already when recording began"
    elif tree_t is not None:
        value, detail = "agreed", "after %.2f s" % tree_t
    elif lv.get("tree") == health.NOTE:
        value, detail = "agreed", "among the %d nodes that reported a state" % reported
    else:
        value, detail = "not agreed", "at the end of the data"
    t.append(_tile("spanning tree", value, detail, colour("tree")))
    t.append(_tile("snake correct", "%d / %d" % (right, len(judged)) if judged else _unknown("no state records"),
                   "descending neighbours right at the end", colour("snake")))
    pings = s.get("pings") or 0
    if pings:
        t.append(_tile("ping delivery", "%.1f%%" % (100 * s["ping_delivery_ratio"]),
                       "%d of %d pings" % (s.get("pings_ok") or 0, pings), colour("delivery")))
    else:
        t.append(_tile("ping delivery", _unknown("no pings in the telemetry"), "no pings"))
    t.append(_tile("round trip p50 / p95", "%s / %s ms" % (_v(s.get("rtt_ms_p50"), 3), _v(s.get("rtt_ms_p95"), 3))
                   if s.get("rtt_ms_p50") is not None else _unknown("no successful pings"),
                   "successful pings"))
    if s.get("datagrams"):
        t.append(_tile("application datagrams", "%.1f%%" % (100 * s["app_delivery_ratio"]),
                       "%d of %d acked datagrams delivered; ack p50 / p95 %s / %s ms"
                       % (s.get("datagrams_delivered") or 0, s["datagrams"], _v(s.get("ack_latency_ms_p50"), 3),
                          _v(s.get("ack_latency_ms_p95"), 3))))
    t.append(_tile("path stretch p50 / p95", "%s / %s" % (_v(s.get("stretch_p50"), 3), _v(s.get("stretch_p95"), 3))
                   if s.get("stretch_p50") is not None else _unknown("no probe with hops on a known topology"),
                   "hops / shortest path, %d probes" % (s.get("stretch_probes") or 0)))
    problem = dict((k, v) for k, v in (s.get("drops_by_reason") or {}).items() if v and health.is_problem_drop(k))
    routine = sum(v for k, v in (s.get("drops_by_reason") or {}).items() if not health.is_problem_drop(k))
    t.append(_tile("problem drops", "%d" % sum(problem.values()), "%d routine drops not counted" % routine,
                   colour("drops")))
    heaps = [r["mem_free_min"] for r in rows if r.get("mem_free_min") is not None]
    if heaps:
        t.append(_tile("lowest free heap", health._bytes(min(heaps)), "smallest mem_free of any node",
                       colour("heap")))
    else:
        t.append(_tile("lowest free heap", _unknown("no node reported mem_free (e.g. the simulator)"), "no figures"))
    return "<div class='tiles' id='tiles'>%s</div>" % "".join(t)


NODE_COLUMNS = ("status", "node", "profile", "peers", "depth", "root", "snake", "problem drops", "free heap",
                "last seen", "issues")
OPTIONAL_COLUMNS = (("profile", "board profile (the state records carry no `profile`)"),
                    ("free heap", "free heap (the counters carry no `mem_free`; the simulator reports none)"))


def _node_columns(rows):
    cols = list(NODE_COLUMNS)
    if not any(r.get("profile") for r in rows):
        cols.remove("profile")
    if not any(r.get("mem_free_min") is not None for r in rows):
        cols.remove("free heap")
    return cols


def _node_table(rows, cols, by, table_id):
    out = ["<table class='nodes' id='%s'><tr>%s</tr>" % (table_id, "".join("<th>%s</th>" % h for h in cols))]
    for r in rows:
        st = r.get("status") or health.UNKNOWN
        has_state = health.has_state(r)
        why_state = ("down at the end" if r.get("down_at_end") else
                     "no telemetry from this node" if not r.get("records") else "no state record from this node")
        cells = []
        cells.append("<span class='lv %s'>%s</span>" % (st, st))
        name = r.get("name")
        long_ = " long" if len(r["short"]) > 16 else ""
        if name:
            cells.append("<b>%s</b><br><span class='key%s' title='%s'>%s</span>" % (
                _e(name), long_, _e(r["node"]), _e(r["short"])))
        else:
            cells.append("<b class='key%s' title='%s'>%s</b>" % (long_, _e(r["node"]), _e(r["short"])))
        cells.append(_e(r["profile"]) if r.get("profile") else _unknown("state records carry no board profile"))
        if r.get("peers") is not None or r.get("links"):
            links = {}
            for k, v in (r.get("links") or {}).items():
                links[link_label(k)] = links.get(link_label(k), 0) + (v or 0)
            detail = ", ".join("%s %d" % (k, v) for k, v in sorted(links.items()))
            cells.append("<span class='nw'>%s%s</span>" % ("?" if r.get("peers") is None else r["peers"],
                                                          " <span class='key'>%s</span>" % _e(detail) if detail else ""))
        else:
            cells.append(_unknown(why_state))
        cells.append(_v(r.get("depth")) if has_state and r.get("depth") is not None else _unknown(why_state))
        if not has_state or r.get("down_at_end"):
            cells.append(_unknown(why_state))
        elif r.get("root_ok") is False:
            cells.append("<span class='bad'>&#10007; other root</span><br><span class='key'>%s</span>"
                         % _e((r.get("root") or "")[:8]))
        elif r.get("root_ok") is True:
            cells.append("<span class='good'>&#10003;</span>%s" % (" <b>root</b>" if r.get("root") == r["node"] else ""))
        else:
            cells.append(_unknown("root agreement not computed"))
        if r.get("snake_ok") is None:
            cells.append(_unknown(why_state if not has_state or r.get("down_at_end") else "not judged"))
        elif r["snake_ok"]:
            cells.append("<span class='good'>&#10003;</span>")
        else:
            cells.append("<span class='bad'>&#10007;</span> <span class='nw'>&rarr; %s</span> "
                         "<span class='key nw'>want %s</span>" % (
                _e(_name_of(by, r.get("desc")) if r.get("desc") else "none"),
                _e(_name_of(by, r.get("expected_desc")) if r.get("expected_desc") else "none")))
        pdrops = health.problem_drops(r)
        alld = r.get("drops") or {}
        title = ", ".join("%s %d" % kv for kv in sorted(alld.items())) or "no drops"
        if r.get("rx_total") is None and not alld:
            cells.append(_unknown("no counters records from this node"))
        else:
            txt = "%d" % sum(pdrops.values())
            if pdrops:
                txt += " <span class='key'>(%s)</span>" % _e(health._top(pdrops, 2))
            cells.append("<span title='%s'>%s</span>" % (_e("all drops: " + title), txt))
        if r.get("mem_free_min") is not None:
            cells.append("%s<br><span class='key'>last %s</span>" % (health._bytes(r["mem_free_min"]),
                                                                    health._bytes(r.get("mem_free"))))
        else:
            cells.append(_unknown("no mem_free in this node's counters (the simulator reports none)"))
        ls = r.get("silent_s")
        if ls is None:
            cells.append(_unknown("no record from this node"))
        else:
            cells.append("at the end" if ls < 1.0 else "%.0f s before the end" % ls)
        cells.append("<div class='issues'>%s</div>" % "<br>".join(_e(i["text"]) for i in r.get("issues") or []))
        cells = dict(zip(NODE_COLUMNS, cells))
        out.append("<tr class='%s' data-node='%s'>%s</tr>" % (st, _e(r["node"]), "".join(
            "<td%s>%s</td>" % (" class='num'" if c == "depth" else "", cells[c]) for c in cols)))
    out.append("</table>")
    return "\n".join(out)


def _meter(ratio, cls=""):
    if ratio is None:
        return ""
    ratio = max(0.0, min(1.0, float(ratio)))
    return "<span class='meter %s'><i style='width:%d%%'></i></span>" % (cls, round(100 * ratio))


def _bounding_table(s, rows):
    occ = s.get("occupancy_by_table") or {}
    cw = health.capacity_warnings(s, rows)
    out = []
    body = []
    for table in health.BOUNDING_TABLES:
        o = occ.get(table)
        hits = [w for w in cw if w[1] == table]
        refused = sum((w[4] or 0) for w in hits)
        caps = [r["capacity"][table] for r in rows if isinstance((r.get("capacity") or {}).get(table), dict)]
        if o is None and not caps:
            continue
        mx = o["max"] if o else max((c.get("max_used") or c.get("used") or 0) for c in caps)
        cap = o["capacity"] if o else max((c.get("capacity") or 0) for c in caps)
        ratio = (mx / float(cap)) if cap else None
        body.append("<tr><td>%s</td><td>%s%s / %s</td><td>%d</td><td>%s</td></tr>" % (
            table, _meter(ratio, "full" if ratio is not None and ratio >= 1 else ""), _v(mx), _v(cap), len(hits),
            _v(refused) if any(w[4] is not None for w in hits) else ("0" if not hits else _unknown(
                "no `capacity` in the counters yet: refused entries are not reported"))))
    if body:
        out.append("<table><tr><th>table</th><th>fullest node (used / capacity)</th><th>nodes full or refusing"
                   "</th><th>refused</th></tr>%s</table>" % "".join(body))
    else:
        out.append("<p class='note'>No routes/peers/depth figures in the telemetry.</p>")
    if cw:
        by = dict((r["node"], r) for r in rows)
        out.append("<p class='note'>Full or refusing: %s.</p>" % _e(", ".join(
            "%s %s %s/%s" % (_name_of(by, w[0]), w[1], w[2], w[3]) for w in cw[:30])
            + (" and %d more" % (len(cw) - 30) if len(cw) > 30 else "")))
    return "\n".join(out)


def _caches(s):
    occ = s.get("occupancy_by_table") or {}
    ev = s.get("evictions_by_table") or {}
    names = sorted(set(k for k in list(occ) + list(ev) if k not in health.BOUNDING_TABLES))
    out = ["<div class='caches muted' id='caches'><h2 style='border:none'>Caches (expected to run full)</h2>",
           "<p class='note'>%s. A full cache evicts its oldest entries; that costs an occasional repeated "
           "signature check or wakeup, not a lost route.</p>" % _e(health.CACHE_TABLES_NOTE.capitalize())]
    if names:
        rows = []
        for k in names:
            o = occ.get(k) or {}
            ratio = o.get("max_ratio")
            rows.append("<tr><td>%s</td><td>%s%s / %s</td><td>%s</td></tr>" % (
                _e(k), _meter(ratio), _v(o.get("max")), _v(o.get("capacity")), _v(ev.get(k, 0))))
        out.append("<table><tr><th>cache</th><th>fullest node</th><th>evictions</th></tr>%s</table>" % "".join(rows))
    else:
        out.append("<p class='note'>No cache figures in the telemetry.</p>")
    out.append("</div>")
    return "\n".join(out)


DROP_HELP = {
    "malformed": "the codec rejected the frame", "oversize": "larger than the profile's frame_max",
    "unknown_port": "frame from a port that is not up", "unknown_type": "frame type not handled",
    "hop_limit": "traffic hop limit exhausted at a relay (also each step of a trace)",
    "loop": "next hop is the port the frame came in on", "watermark": "watermark worse than the frame's",
    "no_route": "traffic reached a dead end", "queue_full": "output queue of the next hop full",
    "bootstrap_root": "bootstrap for another root", "bootstrap_replay": "bootstrap not newer than the route",
    "bootstrap_self": "our own bootstrap came back", "bad_signature": "signature check failed",
    "route_table_full": "route table full, new route less useful than every existing one",
    "wakeup_root": "wakeup for another root", "wakeup_dup": "wakeup repeated or too soon",
    "wakeup_hop_limit": "wakeup not relayed at hop limit 1", "sanity": "announcement failed a sanity check",
    "no_buffer": "no frame buffer free", "too_deep": "announcement deeper than max_hops",
    "no_memory": "MemoryError while handling the frame",
}


def _drops(s):
    d = s.get("drops_by_reason") or {}
    problem = sorted(((k, v) for k, v in d.items() if v and health.is_problem_drop(k)), key=lambda kv: -kv[1])
    routine = sorted(((k, v) for k, v in d.items() if v and not health.is_problem_drop(k)), key=lambda kv: -kv[1])
    out = ["<h2>Drops by reason</h2>"]
    if problem:
        out.append("<table><tr><th>problem drop</th><th>frames</th><th>meaning</th></tr>%s</table>" % "".join(
            "<tr><td>%s</td><td>%d</td><td>%s</td></tr>" % (_e(k), v, _e(DROP_HELP.get(k, ""))) for k, v in problem))
    else:
        out.append("<p class='note'>No problem drops.</p>")
    if routine:
        out.append("<div class='muted'><p class='note'>Routine drops (the protocol suppressing duplicates and stale "
                   "frames; not a problem):</p><table><tr><th>drop</th><th>frames</th><th>meaning</th></tr>%s"
                   "</table></div>" % "".join("<tr><td>%s</td><td>%d</td><td>%s</td></tr>" % (
                       _e(k), v, _e(DROP_HELP.get(k, ""))) for k, v in routine))
    return "\n".join(out)


HEADLINE = (
    ("nodes", "nodes"), ("records", "valid records"), ("rejected_records", "rejected lines"),
    ("duration_s", "duration (s)"), ("topology_source", "topology from"),
    ("tree_converged_s", "tree converged (s)"), ("snake_converged_s", "snake converged (s)"),
    ("snake_correct_ratio_final", "snake correct at end"), ("ping_delivery_ratio", "ping delivery ratio"),
    ("rtt_ms_p50", "RTT p50 (ms)"), ("rtt_ms_p95", "RTT p95 (ms)"), ("stretch_mean", "stretch mean"),
    ("stretch_p50", "stretch p50"), ("stretch_p95", "stretch p95"), ("stretch_max", "stretch max"),
    ("table_occupancy_max", "table occupancy max (caches included)"), ("evictions", "evictions (caches included)"),
    ("drops_total", "drops (routine included)"), ("verify_done", "signature verifications"),
    ("verify_skipped", "verifications skipped"), ("anomalies", "anomalies"),
)
