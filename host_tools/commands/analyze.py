"""`snakemesh analyze` (Spark pipeline) and `snakemesh report` (HTML + PNG)."""
import os
import sys
import time

from host_tools.errors import CliError, UsageError


def register(subparsers):
    p = subparsers.add_parser(
        "analyze", help="telemetry JSONL -> Parquet tables + summary.json (PySpark)",
        description="Read telemetry JSON lines (files, folders, globs) with Spark, write "
                    "partitioned Parquet tables, rejects and summary.json into --out.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="telemetry file, folder or glob")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (replaced atomically)")
    p.add_argument("--master", metavar="URL", help="Spark master (default local[2]; e.g. spark://host:7077)")
    p.add_argument("--topology", metavar="FILE|NAME",
                   help="topology file, or a shipped one by name (e.g. grid4-0049), overriding the telemetry's")
    p.add_argument("--bucket", type=float, metavar="SECONDS", help="time-series bucket (default 1.0)")
    p.add_argument("--flap-threshold", type=int, metavar="N",
                   help="parent/root changes marking a node as flapping (default 5)")
    p.add_argument("--silent-after", type=float, metavar="SECONDS",
                   help="flag nodes silent this long before the end of the data (default 30)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Spark setting (repeatable)")
    p.add_argument("--names", metavar="PATH",
                   help="node names (a mesh/demo/sim output folder, its nodes.json or truth.json, or NAME KEY "
                        "lines; default $SNAKEMESH_NAMES), so the tables and drawings show nodes by name")
    p.add_argument("--report", action="store_true", help="also write the HTML report (DIR/report/)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run_analyze)

    r = subparsers.add_parser(
        "report", help="HTML report with PNG plots from an `analyze` output folder",
        description="Render DIR/report/index.html and PNG plots from the output of `snakemesh analyze`.")
    r.add_argument("dir", metavar="DIR", help="output folder of `snakemesh analyze`")
    r.set_defaults(func=run_report)


def _conf(items):
    conf = {}
    for item in items:
        if "=" not in item:
            raise UsageError("--conf expects KEY=VALUE, got %r" % item)
        k, v = item.split("=", 1)
        conf[k.strip()] = v.strip()
    return conf


def _fmt(v, unit="", digits=3):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return ("%." + str(digits) + "g%s") % (v, unit)
    return "%s%s" % (v, unit)


def _pct(v):
    """A ratio as the report shows it (a percentage), n/a when unknown."""
    return "n/a" if v is None else "%.1f%%" % (100.0 * v)


def run_analyze(args):
    from host_tools.pipeline.analysis import analyze

    t0 = time.time()

    def progress(msg):
        if not args.quiet:
            print("[%6.1fs] %s" % (time.time() - t0, msg), file=sys.stderr, flush=True)

    if args.topology is not None:
        from host_tools import topofiles
        args.topology = topofiles.resolve(args.topology)
    from host_tools import names as names_mod
    names = names_mod.from_args(getattr(args, "names", None))
    s = analyze(args.inputs, args.out, master=args.master, topology_file=args.topology,
                conf=_conf(args.conf), progress=progress, bucket=args.bucket, names=dict(names.by_key),
                flap_threshold=args.flap_threshold, silent_after=args.silent_after)
    lines = [
        "nodes %d, records %d, rejected %d%s" % (
            s["nodes"], s["records"], s["rejected_records"],
            (" (see %s)" % os.path.join(s["out"], "rejects")) if s["rejected_records"] else ""),
        "tree converged at %s, snake converged at %s, snake correct at end %s" % (
            _fmt(s["tree_converged_s"], " s"), _fmt(s["snake_converged_s"], " s"),
            _pct(s["snake_correct_ratio_final"])),
        "ping delivery %s (%d pings), rtt p50/p95 %s/%s ms" % (
            _pct(s["ping_delivery_ratio"]), s["pings"], _fmt(s["rtt_ms_p50"]), _fmt(s["rtt_ms_p95"])),
        "application datagrams: delivered %s (%d acked), ack latency p50/p95 %s/%s ms" % (
            _pct(s.get("app_delivery_ratio")), s.get("datagrams") or 0, _fmt(s.get("ack_latency_ms_p50")),
            _fmt(s.get("ack_latency_ms_p95"))),
        "stretch mean %s, p95 %s over %d probes" % (
            _fmt(s["stretch_mean"]), _fmt(s["stretch_p95"]), s["stretch_probes"]),
        "table occupancy max %s, evictions %d, drops %d, anomalies %d" % (
            _pct(s["table_occupancy_max"]), s["evictions"], s["drops_total"], s["anomalies"]),
        "wrote %s (summary.json, Parquet tables) in %.1f s" % (s["out"], s["wall_time_s"]),
    ]
    lines[2:2] = _links_and_truth(s)
    print("\n".join(lines))
    for line in silent_lines(s["out"]):
        print(line)
    if args.report:
        _report(s["out"])
    return 0


def _links_and_truth(s):
    """Lines on the links judged against (when some did not come up) and on
    the simulator's own truth for the same run (a sim folder), so the two
    verdicts can be read side by side."""
    out = []
    if len(s.get("profiles") or ()) > 1:
        out.append("profiles: %s (each node's in nodes.json and the report)" % ", ".join(
            "%d %s" % (v, k) for k, v in sorted(s["profiles"].items(), key=lambda kv: -kv[1])))
    conf, up = s.get("topology_links_configured"), s.get("topology_links")
    if conf is not None and up is not None and conf > up:
        out.append("judged on the %d links up at the end (%d of the topology's %d did not come up: "
                   "refused for want of ports or down), %s component%s"
                   % (up, conf - up, conf, s.get("components_at_end"),
                      "" if s.get("components_at_end") == 1 else "s"))
    g = s.get("ground_truth") or {}
    if g.get("converged_at_end") is not None:
        conv = ("converged at %s s (held from %s s)" % (_fmt(g.get("first_convergence_s")),
                                                          _fmt(g.get("converged_s")))
                if g.get("converged_at_end") else "not converged at the end")
        out.append("simulator's truth: %s, snake correct at end %s, delivery %s%s"
                   % (conv, _pct(g.get("snake_correct_ratio_final")), _pct(g.get("delivery_ratio")),
                      "; %d links refused" % g["links_refused"] if g.get("links_refused") else ""))
    return out


def silent_lines(out):
    """One line per node not heard from at the end of the data (a gateway
    capture's silent nodes): when it was last seen and for how long not."""
    import json
    from host_tools.pipeline import health
    try:
        rows = health.load_nodes(out)
        with open(os.path.join(out, "nodes.json")) as f:
            t_start = json.load(f).get("t_start")
    except (CliError, OSError, ValueError):
        return []
    silent = [r for r in rows if "silent" in (r.get("anomalies") or []) and not r.get("down_at_end")]
    silent.sort(key=lambda r: -(r.get("silent_s") or 0))
    out_lines = []
    for r in silent:
        seen = r.get("last_seen_s")
        last = t_start + seen if (seen is not None and t_start is not None) else None
        when = (time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(last)) + " UTC") if last else "never"
        who = r["short"] + (" (%s)" % r["name"] if r.get("name") else "")
        out_lines.append("silent: %s last seen %s, not heard from for %.0f s before the end of the data"
                         % (who, when, r.get("silent_s") or 0))
    return out_lines


def _report(out):
    from host_tools.pipeline.report import render, verdict_line
    path, level, reasons = render(out, with_verdict=True)
    print(verdict_line(level, reasons))
    print("report: %s" % path)


def run_report(args):
    _report(args.dir)
    return 0
