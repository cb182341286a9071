"""`snakemesh report DIR`: one self-contained HTML page with PNG plots, made
from the small tables `analyze` wrote (no Spark needed).

DIR/report/index.html references the PNGs next to it by relative path, so the
folder can be copied and opened offline.
"""
import html
import json
import os

from host_tools.errors import InputError
from host_tools.pipeline.output import AtomicDir

PLOTS = ("convergence.png", "stretch.png", "delivery_rtt.png", "occupancy.png", "topology.png")
TABLES = ("nodes.parquet", "convergence.parquet", "epochs.parquet", "anomalies.parquet",
          "topology.parquet", "histograms.parquet", "series.parquet", "counter_totals.parquet")


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
    tables = {}
    for name in TABLES:
        p = os.path.join(d, name)
        if not os.path.isfile(p):
            raise InputError("%s: missing %s (re-run `snakemesh analyze`)" % (d, name))
        try:
            tables[name.split(".")[0]] = pd.read_parquet(p)
        except Exception as e:  # pyarrow raises several types for a damaged file
            raise InputError("%s: unreadable %s (%s)" % (d, name, e))
    return summary, tables


def render(out_dir):
    """Write OUT/report/index.html + PNGs; returns the HTML path."""
    out_dir = os.path.abspath(out_dir)
    summary, t = _load(out_dir)
    import matplotlib
    matplotlib.use("Agg")
    rep = AtomicDir(os.path.join(out_dir, "report"), replace_if=lambda p: True, what="report folder")
    try:
        _plot_convergence(rep.path("convergence.png"), summary, t)
        _plot_stretch(rep.path("stretch.png"), summary, t)
        _plot_delivery(rep.path("delivery_rtt.png"), summary, t)
        _plot_occupancy(rep.path("occupancy.png"), summary, t)
        _plot_topology(rep.path("topology.png"), summary, t)
        with open(rep.path("index.html"), "w") as f:
            f.write(_html(summary, t))
        final = rep.commit()
    except BaseException:
        rep.abort()
        raise
    return os.path.join(final, "index.html")


# -- plots -------------------------------------------------------------------------

def _fig(*a, **kw):
    import matplotlib.pyplot as plt
    return plt.subplots(*a, **kw)


def _save(fig, path):
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _empty(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#888")


def _plot_convergence(path, s, t):
    c = t["convergence"]
    fig, ax = _fig(figsize=(9, 4))
    if len(c):
        # each point is the state at the end of its bucket, held until the next
        ax.step(c["t_s"], c["tree_agree_ratio"], where="post", label="nodes on the most common root")
        ax.step(c["t_s"], c["snake_correct_ratio"], where="post", label="nodes with the right descending key")
    else:
        _empty(ax, "no state records")
    for key, colour, label in (("tree_converged_s", "C0", "tree converged"),
                               ("snake_converged_s", "C1", "snake converged")):
        if s.get(key) is not None:
            ax.axvline(s[key], color=colour, ls="--", lw=1, label="%s (%.2f s)" % (label, s[key]))
    for ep in s.get("epochs", [])[1:]:
        ax.axvline(ep["start_s"], color="#999", ls=":", lw=1)
        ax.text(ep["start_s"], 1.02, " topology change", color="#777", fontsize=8)
    ax.set_ylim(-0.02, 1.08)
    ax.set_xlabel("time since start of data (s)")
    ax.set_ylabel("fraction of %d nodes" % s["nodes"])
    ax.set_title("Convergence over time (bucket %.3g s)" % s["bucket_s"])
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    _save(fig, path)


def _plot_stretch(path, s, t):
    h = t["histograms"]
    h = h[h["metric"] == "stretch"].sort_values("bin_start")
    fig, ax = _fig(figsize=(7, 4))
    if len(h):
        ax.bar(h["bin_start"], h["count"], width=h["bin_width"], align="edge", color="C2", edgecolor="white")
        for key, ls in (("stretch_mean", "--"), ("stretch_p95", ":")):
            if s.get(key) is not None:
                ax.axvline(s[key], color="k", ls=ls, lw=1, label="%s %.2f" % (key.split("_")[1], s[key]))
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no successful probes with a hop count on a known topology")
    ax.set_xlabel("stretch (hops / shortest path)")
    ax.set_ylabel("probes")
    ax.set_title("Path stretch (%d probes)" % s.get("stretch_probes", 0))
    ax.grid(alpha=0.3)
    _save(fig, path)


def _plot_delivery(path, s, t):
    ser = t["series"]
    fig, (a1, a2) = _fig(1, 2, figsize=(11, 4))
    p = ser[ser["series"] == "pings"].set_index("bucket")["value"]
    ok = ser[ser["series"] == "pings_ok"].set_index("bucket")["value"]
    if len(p):
        step = max(1, int(len(p) / 60) + 1)
        df = p.to_frame("pings").join(ok.to_frame("ok"), how="left").fillna(0)
        df["group"] = (df.index // step) * step
        g = df.groupby("group").sum()
        a1.plot((g.index + step) * s["bucket_s"], g["ok"] / g["pings"], marker=".", color="C0")
        a1.set_ylim(-0.02, 1.05)
    else:
        _empty(a1, "no pings")
    a1.set_xlabel("time since start of data (s)")
    a1.set_ylabel("delivered / sent")
    ratio = s.get("ping_delivery_ratio")
    a1.set_title("Ping delivery (overall %s)" % ("n/a" if ratio is None else "%.3f" % ratio))
    a1.grid(alpha=0.3)
    h = t["histograms"]
    h = h[h["metric"] == "rtt_ms"].sort_values("bin_start")
    if len(h):
        a2.bar(h["bin_start"], h["count"], width=h["bin_width"], align="edge", color="C4", edgecolor="white")
        if s.get("rtt_ms_p50") is not None:
            a2.axvline(s["rtt_ms_p50"], color="k", ls="--", lw=1, label="p50 %.1f ms" % s["rtt_ms_p50"])
            a2.axvline(s["rtt_ms_p95"], color="k", ls=":", lw=1, label="p95 %.1f ms" % s["rtt_ms_p95"])
            a2.legend(fontsize=8)
    else:
        _empty(a2, "no round-trip times")
    a2.set_xlabel("RTT (ms)")
    a2.set_ylabel("pings")
    a2.set_title("Ping round-trip time")
    a2.grid(alpha=0.3)
    _save(fig, path)


def _plot_occupancy(path, s, t):
    ser = t["series"]
    fig, (a1, a2) = _fig(1, 2, figsize=(11, 4))
    occ = ser[ser["series"] == "occupancy_max_ratio"]
    if len(occ):
        for key, g in occ.groupby("key"):
            g = g.sort_values("bucket")
            a1.plot(g["t_s"], g["value"], label=key, lw=1)
        a1.legend(fontsize=8)
        a1.set_ylim(-0.02, 1.05)
    else:
        _empty(a1, "no occupancy counters")
    a1.set_xlabel("time since start of data (s)")
    a1.set_ylabel("max used / capacity over nodes")
    a1.set_title("Table occupancy (max %s)" % (
        "n/a" if s.get("table_occupancy_max") is None else "%.2f" % s["table_occupancy_max"]))
    a1.grid(alpha=0.3)
    bars = [("evict " + k, v) for k, v in sorted(s.get("evictions_by_table", {}).items())]
    bars += [("drop " + k, v) for k, v in sorted(s.get("drops_by_reason", {}).items())]
    if bars:
        a2.barh([b[0] for b in bars], [b[1] for b in bars],
                color=["C3" if b[0].startswith("evict") else "C7" for b in bars])
    else:
        _empty(a2, "no evictions or drops")
    a2.set_xlabel("count")
    a2.set_title("Evictions by table, drops by reason")
    _save(fig, path)


def _plot_topology(path, s, t):
    import networkx as nx
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch
    nodes = t["nodes"]
    topo = t["topology"]
    g = nx.Graph()
    g.add_nodes_from(nodes["node"])
    if len(topo):
        last = topo[topo["epoch"] == topo["epoch"].max()]
        g.add_edges_from(zip(last["a"], last["b"]))
    n = g.number_of_nodes()
    fig, ax = _fig(figsize=(9, 8))
    if n == 0:
        _empty(ax, "no nodes")
        _save(fig, path)
        return
    if g.number_of_edges():
        pos = nx.spring_layout(g, seed=7, iterations=200 if n <= 300 else 50)
    else:  # no topology: the snake is a ring ordered by key
        pos = nx.circular_layout(sorted(g.nodes()))
    info = nodes.set_index("node")
    depth = [info.at[x, "depth"] if x in info.index else None for x in g.nodes()]
    known = [d for d in depth if d is not None and d == d]
    vmax = max(known) if known else 1
    cmap = plt.get_cmap("viridis")
    colours = [cmap(float(d) / max(vmax, 1)) if d is not None and d == d else (0.8, 0.8, 0.8, 1) for d in depth]
    size = 300 if n <= 60 else (80 if n <= 300 else 15)
    nx.draw_networkx_edges(g, pos, ax=ax, edge_color="#bbbbbb", width=1)
    nx.draw_networkx_nodes(g, pos, ax=ax, node_color=colours, node_size=size, edgecolors="k", linewidths=0.5)
    if n <= 300:
        labels = {}
        for x in g.nodes():
            rank = info.at[x, "rank"] if x in info.index else "?"
            name = info.at[x, "name"] if x in info.index else None
            labels[x] = ("%s\n#%s" % (name, rank)) if (name and n <= 60) else "%s" % rank
        for x, c in zip(g.nodes(), colours):
            light = 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 0.5
            ax.text(pos[x][0], pos[x][1], labels[x], ha="center", va="center",
                    fontsize=7 if n <= 60 else 5, color="k" if light else "w", zorder=5)
    for x in g.nodes():
        if x not in info.index:
            continue
        d = info.at[x, "desc"]
        if d is None or d != d or d not in pos:
            continue
        ok = bool(info.at[x, "correct_final"])
        ax.add_patch(FancyArrowPatch(pos[x], pos[d], arrowstyle="-|>", mutation_scale=8,
                                     connectionstyle="arc3,rad=0.2", lw=0.8,
                                     color="C3" if ok else "k", ls="-" if ok else "--", alpha=0.8))
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(vmin=0, vmax=max(vmax, 1)))
    fig.colorbar(sm, ax=ax, shrink=0.6, label="tree depth")
    ax.set_title("Topology (%s): colour = tree depth, label = snake rank (1 = lowest key),\n"
                 "red arrows = descending links (dashed black = wrong at the end)" % s.get("topology_source"),
                 fontsize=9)
    ax.set_axis_off()
    _save(fig, path)


# -- HTML -------------------------------------------------------------------------

def _v(x, digits=4):
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if x != x:
            return "n/a"
        return ("%." + str(digits) + "g") % x
    return html.escape(str(x))


def _table(headers, rows):
    out = ["<table><tr>%s</tr>" % "".join("<th>%s</th>" % html.escape(h) for h in headers)]
    for r in rows:
        out.append("<tr>%s</tr>" % "".join("<td>%s</td>" % _v(c) for c in r))
    out.append("</table>")
    return "\n".join(out)


HEADLINE = (
    ("nodes", "nodes"), ("records", "valid records"), ("rejected_records", "rejected lines"),
    ("duration_s", "duration (s)"), ("topology_source", "topology from"),
    ("tree_converged_s", "tree converged (s)"), ("snake_converged_s", "snake converged (s)"),
    ("snake_correct_ratio_final", "snake correct at end"), ("ping_delivery_ratio", "ping delivery ratio"),
    ("rtt_ms_p50", "RTT p50 (ms)"), ("rtt_ms_p95", "RTT p95 (ms)"), ("stretch_mean", "stretch mean"),
    ("stretch_p50", "stretch p50"), ("stretch_p95", "stretch p95"), ("stretch_max", "stretch max"),
    ("table_occupancy_max", "table occupancy max"), ("evictions", "evictions"),
    ("drops_total", "drops"), ("verify_done", "signature verifications"),
    ("verify_skipped", "verifications skipped"), ("anomalies", "anomalies"),
)


def _html(s, t):
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>snakemesh analysis</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #ccc;"
             "padding:3px 8px;font-size:13px;text-align:left}th{background:#f3f3f3}"
             "img{max-width:100%;border:1px solid #eee;margin:0.5em 0}</style></head><body>",
             "<h1>snakemesh mesh analysis</h1>",
             "<p>%d nodes, %s s of telemetry, %d records (%d rejected).</p>" % (
                 s["nodes"], _v(s["duration_s"]), s["records"], s["rejected_records"]),
             "<h2>Headline figures</h2>",
             _table(["figure", "value"], [(label, s.get(k)) for k, label in HEADLINE])]
    parts.append("<h2>Convergence</h2><img src='convergence.png' alt='convergence over time'>")
    ep = s.get("epochs", [])
    parts.append(_table(["epoch", "start (s)", "end (s)", "components", "links", "tree converged after (s)",
                         "snake converged after (s)"],
                        [(e["epoch"], e["start_s"], e["end_s"], e["components"], e["links"],
                          e["tree_converged_s"], e["snake_converged_s"]) for e in ep]))
    parts.append("<h2>Path stretch</h2><img src='stretch.png' alt='stretch histogram'>")
    parts.append("<h2>Delivery and latency</h2><img src='delivery_rtt.png' alt='delivery and RTT'>")
    parts.append("<h2>Tables, evictions, drops</h2><img src='occupancy.png' alt='occupancy'>")
    occ = s.get("occupancy_by_table", {})
    parts.append(_table(["table", "max used", "capacity", "max ratio", "evictions"],
                        [(k, v["max"], v["capacity"], v["max_ratio"], s.get("evictions_by_table", {}).get(k, 0))
                         for k, v in sorted(occ.items())]))
    parts.append(_table(["drop reason", "count"], sorted(s.get("drops_by_reason", {}).items())))
    parts.append("<h2>Topology and snake</h2><img src='topology.png' alt='topology drawing'>")
    an = t["anomalies"]
    parts.append("<h2>Anomalies (%d)</h2>" % len(an))
    if len(an):
        parts.append(_table(["node", "name", "anomaly", "detail"],
                            [(r.node[:16], r.name, r.anomaly, r.detail) for r in an.head(200).itertuples()]))
    parts.append("<h2>Rejected lines</h2>")
    parts.append(_table(["reason", "lines"], sorted(s.get("rejected_by_reason", {}).items())) +
                 "<p>The rejected lines are in <code>rejects/</code> next to this report's folder.</p>")
    parts.append("<p style='color:#888;font-size:12px'>analysis wall time %s s on %s</p></body></html>"
                 % (_v(s.get("wall_time_s")), html.escape(str(s.get("master")))))
    return "\n".join(parts)
