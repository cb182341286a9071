"""`snakemesh analyze`: telemetry JSON lines -> Parquet tables + summary.json.

All per-record work is Spark DataFrame operations. The driver only collects
small aggregates: counts per input file and reason, the node list, the
topology records, one row per node (and topology epoch), one row per time
bucket, and a handful of histogram bins and totals.
"""
import contextlib
import os
import time

from host_tools.errors import CliError, InputError, UsageError
from host_tools.pipeline import convergence, inputs, metrics, output, topology
from host_tools.pipeline.session import get_session, spark_log_path

SUMMARY_VERSION = 1
PARTITIONED = ("states", "peer_links", "probes", "routes", "counters", "events")
DEFAULTS = {
    "bucket": 1.0,            # seconds per time-series bucket
    "max_buckets": 5000,      # the bucket grows if a run would need more
    "flap_threshold": 5,      # parent changes at or above this mark a node as flapping
    "silent_after": 30.0,     # a node silent this long before the end of the data is flagged
    "stretch_bin": 0.1,
}


class Options(object):
    def __init__(self, **kw):
        for k, v in DEFAULTS.items():
            val = kw.pop(k, None)
            setattr(self, k, v if val is None else val)
        if kw:
            raise TypeError("unknown options: %s" % ", ".join(sorted(kw)))


def _nice_bin(span, bins=40):
    if not span or span <= 0:
        return 1.0
    raw = span / float(bins)
    scale = 1.0
    while scale * 10 < raw:
        scale *= 10
    while scale > raw:
        scale /= 10
    for m in (1, 2, 5, 10):
        if scale * m >= raw:
            return scale * m
    return scale * 10


def _source_path(src):
    return src[len("file:"):] if src.startswith("file:") else src


@contextlib.contextmanager
def spark_errors():
    """Turn Spark/JVM failures into one-line CliErrors."""
    try:
        yield
    except CliError:
        raise
    except Exception as e:  # pyspark / py4j errors have no common base worth importing
        mod = type(e).__module__ or ""
        if not (mod.startswith("pyspark") or mod.startswith("py4j")):
            raise
        msg = str(e).strip().splitlines()
        first = ""
        for line in msg:
            line = line.strip()
            if line and not line.startswith("JVM stacktrace"):
                first = line
                break
        if "FileNotFoundException" in str(e) or "PATH_NOT_FOUND" in str(e):
            raise InputError("input vanished while reading: %s" % first[:300])
        raise CliError("Spark failed: %s (%s; Spark log: %s)" % (first[:300], type(e).__name__, spark_log_path()))


SMALL_INPUT = 64 << 20


def tune(spark, files, remote, conf):
    """Runtime SQL settings sized to the input: few shuffle partitions and no
    whole-stage code generation for small inputs (compiling generated code
    costs more than it saves there), Spark's defaults-like for big ones.
    Explicit --conf settings win."""
    conf = conf or {}
    size = sum(os.path.getsize(f) for f in files)
    if remote:
        size = max(size, 1 << 40)
    small = size < SMALL_INPUT
    settings = {
        "spark.sql.shuffle.partitions": "2" if small else str(max(8, min(200, size // (32 << 20)))),
        "spark.sql.codegen.wholeStage": "false" if small else "true",
        # adaptive execution runs every shuffle stage as a job of its own:
        # pure overhead on small inputs
        "spark.sql.adaptive.enabled": "false" if small else "true",
    }
    for k, v in settings.items():
        if k not in conf:
            spark.conf.set(k, v)


def analyze(input_paths, out_dir, master=None, topology_file=None, conf=None, spark=None,
            progress=None, **options):
    """Run the pipeline; returns the summary dict (also written to
    OUT/summary.json). Raises CliError subclasses for expected failures."""
    opts = Options(**options)
    if opts.bucket <= 0:
        raise UsageError("--bucket must be > 0")
    say = progress or (lambda msg: None)
    t0 = time.time()
    files, remote = inputs.resolve(list(input_paths))
    if topology_file:
        topology.read_topology_file(topology_file)  # fail early on a bad file
    out = output.AtomicDir(out_dir)
    try:
        with spark_errors():
            if spark is None:
                say("starting Spark (%s)" % (master or "local[2]"))
                small = not remote and sum(os.path.getsize(f) for f in files) < SMALL_INPUT
                spark = get_session(master, conf, small_input=small)
            say("reading %d file(s)%s" % (len(files), (" + %d URI(s)" % len(remote)) if remote else ""))
            tune(spark, files, remote, conf)
            summary = _run(spark, files + remote, out, topology_file, opts, say)
        summary["wall_time_s"] = round(time.time() - t0, 3)
        summary["master"] = spark.sparkContext.master
        output.write_json(out.path("summary.json"), summary)
        summary["out"] = out.commit()
        return summary
    except BaseException:
        out.abort()
        raise


def _run(spark, paths, out, topology_file, opts, say):
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from host_tools.pipeline import ingest

    timings = {}
    t_stage = [time.time()]

    def lap(name):
        now = time.time()
        timings[name] = round(now - t_stage[0], 3)
        t_stage[0] = now

    console = [p for p in paths if not inputs.is_uri(p) and inputs.is_console_capture(p)]
    parsed = ingest.parse(spark, paths, console).persist(StorageLevel.MEMORY_AND_DISK)
    cached = [parsed]
    try:
        # -- 1. counts per file / reason / kind ---------------------------------
        # one job: counts, time range, node keys, probe sources, topology records
        ok = F.col("reason").isNull()
        stats = (parsed.groupBy("source", "reason", "kind")
                 .agg(F.count("*").alias("n"), F.min("t").alias("t0"), F.max("t").alias("t1"),
                      F.collect_set(F.when(ok & (F.col("kind") != "topology"), F.col("node"))).alias("nodes"),
                      F.collect_set(F.when(ok & (F.col("kind") == "probe") & F.col("ok"),
                                           F.col("src"))).alias("srcs"),
                      F.collect_list(F.when(ok & (F.col("kind") == "topology"),
                                            F.struct("t", "edges", "names"))).alias("topo"))
                 .collect())
        per_file = {}
        by_reason = {}
        ignored = {}
        by_kind = {}
        t_start = t_end = None
        for r in stats:
            f = per_file.setdefault(r["source"], {"lines": 0, "valid": 0, "reason": None})
            if r["reason"] is not None and r["reason"].startswith(ingest.IGNORED):
                key = r["reason"][len(ingest.IGNORED):]
                ignored[key] = ignored.get(key, 0) + r["n"]
                continue
            f["lines"] += r["n"]
            if r["reason"] is None:
                f["valid"] += r["n"]
                by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["n"]
                t_start = r["t0"] if t_start is None else min(t_start, r["t0"])
                t_end = r["t1"] if t_end is None else max(t_end, r["t1"])
            else:
                by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + r["n"]
                f["reason"] = f["reason"] or r["reason"]
        for src in sorted(per_file):
            f = per_file[src]
            if f["lines"] and not f["valid"]:
                raise InputError("%s: no valid telemetry records in %d line(s) (e.g. %s): truncated or not telemetry"
                                 % (_source_path(src), f["lines"], f["reason"]))
        records = sum(by_kind.values())
        rejected = sum(by_reason.values())
        if not records:
            raise InputError("no telemetry records in the input (files empty%s)"
                             % (" or console output without telemetry" if ignored else ""))
        lap("read_validate")
        say("%d records, %d rejected, %.1f s of telemetry" % (records, rejected, t_end - t_start))

        valid = parsed.filter(F.col("reason").isNull())

        # -- 2. node set, probe sources, topology -------------------------------
        record_nodes, probe_sources, topo_rows = set(), set(), []
        for r in stats:
            if r["reason"] is None:
                record_nodes.update(r["nodes"])
                probe_sources.update(r["srcs"])
                topo_rows.extend(r["topo"])
        epochs, names = topology.epochs_from_records(
            [(r["t"], r["edges"], r["names"]) for r in topo_rows])
        topo_nodes = set()
        if topology_file:
            ep, topo_nodes = topology.epoch_from_file(topology_file, names)
            if not (topo_nodes & record_nodes):
                raise InputError("%s: none of its %d node names matches a node in the telemetry%s"
                                 % (topology_file, len(topo_nodes),
                                    "" if names else " (no `topology` record names to map them)"))
            epochs = [ep]
            topo_source = "file"
        elif epochs:
            topo_source = "telemetry"
        else:
            pairs = (valid.filter(F.col("kind") == "peers")
                     .select("node", F.explode("peer_list").alias("p"))
                     .select("node", F.lower(F.col("p.key")).alias("peer"))
                     .filter(F.col("peer").isNotNull()).distinct().collect())
            if pairs:
                epochs = [topology.epoch_from_peer_links([(r["node"], r["peer"]) for r in pairs])]
                topo_source = "peers"
            else:
                epochs = [topology.Epoch(0, None, set())]
                topo_source = "none"
        for ep in epochs:
            for a, b in ep.edges:
                topo_nodes.add(a)
                topo_nodes.add(b)
        nodes = sorted(record_nodes | topo_nodes)
        comps = []
        expected_rows = []
        for ep in epochs:
            if topo_source == "none":
                comp = dict((n, nodes[0]) for n in nodes)
            else:
                comp = topology.components(nodes, ep.edges)
            comps.append(comp)
            exp = topology.expected_desc(comp)
            for n in nodes:
                expected_rows.append((ep.index, n, comp[n], exp[n]))
        boundaries = [ep.start for ep in epochs[1:]]
        expected_df = spark.createDataFrame(
            expected_rows, "epoch int, node string, comp string, expected_desc string")
        dist_df = None
        if topo_source != "none":
            dist_rows = {"epoch": [], "src": [], "dst": [], "shortest": []}
            for ep in epochs:
                adj = topology.adjacency(nodes, ep.edges)
                for s in sorted(probe_sources):
                    if s not in adj:
                        continue
                    for d, k in topology.bfs_lengths(adj, s).items():
                        if k > 0:
                            dist_rows["epoch"].append(ep.index)
                            dist_rows["src"].append(s)
                            dist_rows["dst"].append(d)
                            dist_rows["shortest"].append(k)
            if dist_rows["src"]:
                import warnings
                import pandas as pd
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", FutureWarning)  # pyspark vs pandas 3 notice
                    dist_df = spark.createDataFrame(pd.DataFrame(dist_rows),
                                                    "epoch int, src string, dst string, shortest int")
        lap("topology")
        say("%d nodes, topology from %s (%d epoch%s)"
            % (len(nodes), topo_source, len(epochs), "" if len(epochs) == 1 else "s"))

        # -- 3. Parquet tables ---------------------------------------------------
        epoch = convergence.epoch_col(boundaries)
        rm = metrics.run_minute(t_start)
        tables = {}
        tables["states"] = (valid.filter(F.col("kind") == "state")
                            .select("node", "t", rm, "root", "root_seq", "parent", "coords", "depth",
                                    "desc", F.col("peers_n").alias("peers"), "routes",
                                    epoch.alias("epoch")))
        tables["peer_links"] = (valid.filter(F.col("kind") == "peers")
                                .select("node", "t", rm, F.explode("peer_list").alias("p"))
                                .select("node", "t", "run_minute", F.col("p.port").alias("port"),
                                        F.lower(F.col("p.key")).alias("peer"), F.col("p.link").alias("link"),
                                        F.lower(F.col("p.root")).alias("peer_root"),
                                        F.col("p.root_seq").alias("peer_root_seq")))
        pr = metrics.probes(valid, epoch, dist_df, t_start).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(pr)
        tables["probes"] = pr.drop("seq")
        tables["routes"] = (pr.filter(F.col("path").isNotNull())
                            .select("t", "run_minute", F.col("id").alias("probe_id"), "probe", "src", "dst",
                                    F.posexplode("path").alias("hop", "hop_node")))
        cl = metrics.counters_long(valid, t_start).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(cl)
        tables["counters"] = cl.drop("seq")
        tables["events"] = (valid.filter(F.col("kind") == "event")
                            .select("node", "t", rm, "event", "detail"))
        for name in PARTITIONED:
            say("writing %s" % name)
            tables[name].write.mode("overwrite").partitionBy("run_minute").parquet(out.path(name))
        if rejected:
            (parsed.filter(F.col("reason").isNotNull() & ~F.col("reason").startswith(ingest.IGNORED))
             .select(F.col("source"), "reason", F.col("raw").alias("line"))
             .write.mode("overwrite").json(out.path("rejects")))
        else:
            os.makedirs(out.path("rejects"))
        lap("write_tables")

        # -- 4. convergence --------------------------------------------------------
        say("computing convergence")
        S = convergence.state_stream(spark, valid, boundaries, expected_df).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(S)
        node_rows = [r.asDict(recursive=True) for r in convergence.node_level(S).collect()]
        run, per_epoch, per_node, down = convergence.rollup(node_rows, nodes, epochs, comps, t_start, t_end,
                                                            has_topology=topo_source != "none")
        bucket = float(opts.bucket)
        nb = int((t_end - t_start) // bucket) + 1
        if nb > opts.max_buckets:
            bucket = (t_end - t_start) / float(opts.max_buckets - 1)
            nb = int((t_end - t_start) // bucket) + 1
        nodes_df = spark.createDataFrame([(n,) for n in nodes], "node string")
        n_nodes = len(nodes)
        conv_rows = []
        for r in sorted(convergence.bucket_series(spark, S, nodes_df, t_start, bucket, nb).collect(),
                        key=lambda r: r["bucket"]):
            conv_rows.append({
                "bucket": r["bucket"], "t_s": (r["bucket"] + 1) * bucket, "t": t_start + (r["bucket"] + 1) * bucket,
                "reported": r["reported"], "tree_agree_ratio": r["max_agree"] / float(n_nodes),
                "tree_agreed": r["max_agree"] == n_nodes, "snake_correct": r["correct"],
                "snake_correct_ratio": r["correct"] / float(n_nodes),
                "snake_all_correct": r["correct"] == n_nodes,
            })
        lap("convergence")

        # -- 5. probes, counters, activity -----------------------------------------
        say("computing probe and counter figures")
        ps = metrics.probe_stats(pr).collect()[0].asDict()
        rtt_bin = _nice_bin(ps["rtt_ms_max"])
        hist = [r.asDict() for r in metrics.histograms(pr, opts.stretch_bin, rtt_bin).collect()]
        ser = [r.asDict() for r in metrics.series(pr, cl, t_start, bucket).collect()]
        for r in ser:
            r["t_s"] = (r["bucket"] + 1) * bucket
        totals = [r.asDict() for r in metrics.counter_totals(cl).collect()]
        act = dict((r["node"], r.asDict())
                   for r in metrics.node_activity(valid.filter(F.col("kind") != "topology")).collect())
        lap("probes_counters")
    finally:
        for df in cached:
            try:
                df.unpersist()
            except Exception:
                pass

    # -- 6. driver-side assembly of small tables ------------------------------------
    def tot(metric, key=None):
        return sum((r["total"] or 0) for r in totals
                   if r["metric"] == metric and (key is None or r["key"] == key))

    drops = dict((r["key"], r["total"] or 0) for r in totals if r["metric"] == "drops")
    evictions = dict((r["key"], r["total"] or 0) for r in totals if r["metric"] == "evictions")
    occ = {}
    for r in totals:
        if r["metric"] == "occupancy":
            occ[r["key"]] = {"max": r["max"], "capacity": r["capacity"], "max_ratio": r["max_ratio"]}
    ratios = [v["max_ratio"] for v in occ.values() if v["max_ratio"] is not None]
    mem = [r["min"] for r in totals if r["metric"] == "mem_free" and r["min"] is not None]

    rank = dict((n, i + 1) for i, n in enumerate(nodes))
    epoch_rows = {}
    for r in node_rows:
        if r["scope"] >= 0:
            epoch_rows.setdefault(r["node"], []).append(r)
    last_comp = comps[-1]
    node_table = []
    anomalies = []
    for n in nodes:
        r = per_node.get(n)
        a = act.get(n, {})
        fin = r["final"] if r else {}
        row = {
            "node": n, "name": names.get(n), "rank": rank[n], "component": last_comp.get(n),
            "records": a.get("records", 0), "state_records": a.get("state_records", 0),
            "first_t": a.get("first_t"), "last_t": a.get("last_t"),
            "root": fin.get("root"), "root_seq": fin.get("root_seq"), "parent": fin.get("parent"),
            "depth": fin.get("depth"), "desc": fin.get("desc"), "expected_desc": fin.get("expected_desc"),
            "correct_final": bool(fin.get("correct")) if r else False,
            "tree_since_s": (r["tree_since"] - t_start) if r and r["tree_since"] is not None else None,
            "snake_since_s": (r["snake_since"] - t_start) if r and r["snake_since"] is not None else None,
            "parent_changes": r["parent_changes"] if r else 0,
            "parent_changes_epoch_max": max([x["parent_changes"] for x in epoch_rows.get(n, [])] or [0]),
            "root_changes_epoch_max": max([x["root_changes"] for x in epoch_rows.get(n, [])] or [0]),
            "root_changes": r["root_changes"] if r else 0,
            "desc_changes": r["desc_changes"] if r else 0,
            "sanity_fail": a.get("sanity_fail", 0),
            "down_at_end": n in down[-1],
        }
        found = []
        if n in down[-1]:
            found.append(("down_at_end", 0, "no links and no state records in the last topology epoch"))
        elif not a:
            found.append(("no_telemetry", 0, "in the topology but sent no records"))
        elif not r:
            found.append(("no_state", 0, "sent no state records"))
        else:
            if not fin.get("correct"):
                found.append(("snake_not_converged", 0, "final desc %s, expected %s"
                              % (_short(fin.get("desc")), _short(fin.get("expected_desc")))))
            # flapping: many changes within one topology epoch (a topology
            # change legitimately makes nodes re-parent)
            if row["parent_changes_epoch_max"] >= opts.flap_threshold:
                found.append(("flapping_parent", row["parent_changes_epoch_max"],
                              "%d parent changes in one topology epoch" % row["parent_changes_epoch_max"]))
            if row["root_changes_epoch_max"] >= opts.flap_threshold:
                found.append(("flapping_root", row["root_changes_epoch_max"],
                              "%d root changes in one topology epoch" % row["root_changes_epoch_max"]))
        if row["sanity_fail"]:
            found.append(("sanity_fail", row["sanity_fail"], "%d sanity_fail events" % row["sanity_fail"]))
        if a and a.get("last_t") is not None and t_end - a["last_t"] > opts.silent_after:
            found.append(("silent", t_end - a["last_t"], "no record in the last %.1f s" % (t_end - a["last_t"])))
        row["anomalies"] = ",".join(x[0] for x in found)
        node_table.append(row)
        for kind, value, detail in found:
            anomalies.append({"node": n, "name": names.get(n), "anomaly": kind, "value": float(value),
                              "detail": detail})
    # tree disagreement at the end: nodes not on the majority root
    if run["tree_converged_s"] is None:
        counts = {}
        alive = [n for n in nodes if per_node.get(n) and n not in down[-1]]
        for n in alive:
            v = per_node[n]["final"]["value"]
            counts[v] = counts.get(v, 0) + 1
        if counts:
            major = max(sorted(counts), key=lambda v: counts[v])
            for n in alive:
                if per_node[n]["final"]["value"] != major:
                    anomalies.append({"node": n, "name": names.get(n), "anomaly": "tree_not_converged",
                                      "value": 0.0, "detail": "final root %s, most nodes on %s"
                                      % (per_node[n]["final"]["value"][:12], major[:12])})
    anomalies.sort(key=lambda x: (x["anomaly"], x["node"]))

    topo_rows_out = []
    for ep in epochs:
        for a, b in sorted(ep.edges):
            topo_rows_out.append({"epoch": ep.index, "start_s": 0.0 if ep.start is None else ep.start - t_start,
                                  "a": a, "b": b, "a_name": names.get(a), "b_name": names.get(b),
                                  "link": ep.links.get((a, b))})

    w = out.path
    output.write_table(w("nodes.parquet"), node_table, [
        ("node", "str"), ("name", "str"), ("rank", "int"), ("component", "str"), ("records", "int"),
        ("state_records", "int"), ("first_t", "float"), ("last_t", "float"), ("root", "str"),
        ("root_seq", "int"), ("parent", "str"), ("depth", "int"), ("desc", "str"),
        ("expected_desc", "str"), ("correct_final", "bool"), ("tree_since_s", "float"),
        ("snake_since_s", "float"), ("parent_changes", "int"), ("parent_changes_epoch_max", "int"),
        ("root_changes", "int"), ("root_changes_epoch_max", "int"),
        ("desc_changes", "int"), ("sanity_fail", "int"), ("down_at_end", "bool"), ("anomalies", "str")])
    output.write_table(w("convergence.parquet"), conv_rows, [
        ("bucket", "int"), ("t_s", "float"), ("t", "float"), ("reported", "int"),
        ("tree_agree_ratio", "float"), ("tree_agreed", "bool"), ("snake_correct", "int"),
        ("snake_correct_ratio", "float"), ("snake_all_correct", "bool")])
    output.write_table(w("epochs.parquet"), per_epoch, [
        ("epoch", "int"), ("start_s", "float"), ("end_s", "float"), ("components", "int"),
        ("links", "int"), ("nodes_down", "int"), ("tree_converged_s", "float"),
        ("snake_converged_s", "float")])
    output.write_table(w("anomalies.parquet"), anomalies, [
        ("node", "str"), ("name", "str"), ("anomaly", "str"), ("value", "float"), ("detail", "str")])
    output.write_table(w("topology.parquet"), topo_rows_out, [
        ("epoch", "int"), ("start_s", "float"), ("a", "str"), ("b", "str"), ("a_name", "str"),
        ("b_name", "str"), ("link", "str")])
    output.write_table(w("histograms.parquet"), hist, [
        ("metric", "str"), ("bin_start", "float"), ("bin_width", "float"), ("count", "int")])
    output.write_table(w("series.parquet"), ser, [
        ("series", "str"), ("key", "str"), ("bucket", "int"), ("t_s", "float"), ("value", "float")])
    output.write_table(w("counter_totals.parquet"), totals, [
        ("metric", "str"), ("key", "str"), ("total", "int"), ("max", "int"), ("min", "int"),
        ("capacity", "int"), ("max_ratio", "float"), ("nodes", "int")])

    an_counts = {}
    for x in anomalies:
        an_counts[x["anomaly"]] = an_counts.get(x["anomaly"], 0) + 1
    pings = ps["pings"] or 0
    summary = {
        "summary_version": SUMMARY_VERSION,
        "complete": True,
        "nodes": len(nodes),
        "records": records,
        "rejected_records": rejected,
        "rejected_by_reason": by_reason,
        "records_by_kind": by_kind,
        "input_files": len(per_file),
        "console_files": len(console),
        "ignored_console_lines": ignored,
        "t_start": t_start,
        "t_end": t_end,
        "duration_s": t_end - t_start,
        "bucket_s": bucket,
        "topology_source": topo_source,
        "topology_links": len(epochs[-1].edges),
        "epochs": per_epoch,
        "tree_converged_s": run["tree_converged_s"],
        "snake_converged_s": run["snake_converged_s"],
        "snake_correct_final": run["snake_correct_final"],
        "snake_correct_ratio_final": run["snake_correct_ratio_final"],
        "nodes_down_at_end": run["nodes_down_at_end"],
        "pings": pings,
        "pings_ok": ps["pings_ok"] or 0,
        "ping_delivery_ratio": (float(ps["pings_ok"]) / pings) if pings else None,
        "traces": ps["traces"] or 0,
        "traces_ok": ps["traces_ok"] or 0,
        "rtt_ms_mean": ps["rtt_ms_mean"], "rtt_ms_p50": ps["rtt_ms_p50"],
        "rtt_ms_p95": ps["rtt_ms_p95"], "rtt_ms_max": ps["rtt_ms_max"],
        "stretch_probes": ps["stretch_probes"] or 0,
        "stretch_unknown": ps["stretch_unknown"] or 0,
        "stretch_mean": ps["stretch_mean"], "stretch_p50": ps["stretch_p50"],
        "stretch_p95": ps["stretch_p95"], "stretch_max": ps["stretch_max"],
        "drops_by_reason": drops,
        "drops_total": sum(drops.values()),
        "verify_done": tot("verify_done"),
        "verify_skipped": tot("verify_skipped"),
        "verify_cached": tot("verify_cached"),
        "occupancy_by_table": occ,
        "table_occupancy_max": max(ratios) if ratios else None,
        "evictions_by_table": evictions,
        "evictions": sum(evictions.values()),
        "mem_free_min": min(mem) if mem else None,
        "anomalies": len(anomalies),
        "anomalies_by_kind": an_counts,
        "tables": list(PARTITIONED) + ["rejects", "nodes.parquet", "convergence.parquet", "epochs.parquet",
                                       "anomalies.parquet", "topology.parquet", "histograms.parquet",
                                       "series.parquet", "counter_totals.parquet"],
        "timings_s": timings,
    }
    return summary


def _short(k):
    return "null" if k is None else k[:12]
