"""Probe, counter and per-node activity figures, as Spark DataFrame plans.

Every function here returns a plan over the `telemetry/` table (or the
`probes/` table) whose result is small: one row per node, per table, per
time bucket or per histogram bin, never one per record.
"""
from pyspark.sql import Window
from pyspark.sql import functions as F

# Cumulative counters (since the node booted; a restart resets them all).
CUMULATIVE_MAPS = ("rx", "tx", "drops", "evictions", "tx_bytes", "tx_link", "tx_bytes_link", "defence")
CUMULATIVE_SCALARS = ("verify_done", "verify_skipped", "verify_cached")
# `capacity` {table: [used, capacity, refused]}: refused is cumulative.
REFUSED = "capacity_refused"
CONTROL_EXCLUDE = ("traffic",)     # "control traffic" = every frame type but traffic


def bucket_of(t_start, bucket):
    return F.floor((F.col("t") - F.lit(t_start)) / F.lit(bucket)).cast("long")


def day_sql(tcol="t"):
    """UTC date of a run-clock time (seconds since the epoch; the simulator's
    clock starts at 0, so its days are 1970-01-01), as SQL text. Times
    outside years 1..9999 have no day."""
    return ("CASE WHEN `{t}` IS NOT NULL AND abs(`{t}`) < 2.5E11D"
            " THEN date_format(timestamp_seconds(`{t}`), 'yyyy-MM-dd') END".format(t=tcol))


def day_col(tcol="t"):
    return F.expr(day_sql(tcol))


# -- probes -----------------------------------------------------------------------

def probes(records, epoch, dist_df, topo_of=(), broadcast=True):
    """One row per probe with the shortest path length on the topology in
    force at its time and its stretch (hops / shortest). Probes that failed,
    have no hop count, or whose endpoints are unknown to the topology (or
    src == dst) have a null stretch. dist_df: (topo, src, dst, shortest),
    topo_of[epoch] = the `topo` of that epoch's edge set."""
    pr = records.select("day", "t", "node", "seq", "probe", "id", "src", "dst", "ok", "rtt_ms", "hops",
                        epoch.alias("epoch"))
    if dist_df is not None:
        # one SQL expression: a Column per literal is a py4j round trip each
        topo = F.expr("element_at(array(%s), epoch + 1)" % ", ".join(str(int(x)) for x in topo_of))
        pr = pr.withColumn("topo", topo)
        pr = pr.join(F.broadcast(dist_df) if broadcast else dist_df, ["topo", "src", "dst"], "left").drop("topo")
    else:
        pr = pr.withColumn("shortest", F.lit(None).cast("int"))
    return pr.withColumn(
        "stretch",
        F.when(F.col("ok") & F.col("hops").isNotNull() & (F.col("shortest") > 0),
               F.col("hops") / F.col("shortest")))


def probe_stats(pr):
    ping = F.col("probe") == "ping"
    ping_ok = ping & F.col("ok")
    rtt = F.when(ping_ok, F.col("rtt_ms"))
    st = F.col("stretch")
    dgram = F.col("probe") == "datagram"
    ack = F.when(dgram & F.col("ok"), F.col("rtt_ms"))
    return pr.agg(
        F.count("*").alias("probes"),
        F.sum(F.when(ping, 1).otherwise(0)).alias("pings"),
        F.sum(F.when(ping_ok, 1).otherwise(0)).alias("pings_ok"),
        F.sum(F.when(F.col("probe") == "trace", 1).otherwise(0)).alias("traces"),
        F.sum(F.when((F.col("probe") == "trace") & F.col("ok"), 1).otherwise(0)).alias("traces_ok"),
        F.count(rtt).alias("rtt_n"),
        F.avg(rtt).alias("rtt_ms_mean"),
        F.percentile(rtt, F.lit(0.5)).alias("rtt_ms_p50"),
        F.percentile(rtt, F.lit(0.95)).alias("rtt_ms_p95"),
        F.max(rtt).alias("rtt_ms_max"),
        F.count(st).alias("stretch_probes"),
        F.avg(st).alias("stretch_mean"),
        F.percentile(st, F.lit(0.5)).alias("stretch_p50"),
        F.percentile(st, F.lit(0.95)).alias("stretch_p95"),
        F.max(st).alias("stretch_max"),
        F.sum(F.when(F.col("ok") & F.col("hops").isNotNull() & F.col("stretch").isNull(), 1)
              .otherwise(0)).alias("stretch_unknown"),
        # application datagrams (probe "datagram": ok = delivered, rtt_ms =
        # the end-to-end ack's round trip)
        F.sum(F.when(dgram, 1).otherwise(0)).alias("datagrams"),
        F.sum(F.when(dgram & F.col("ok"), 1).otherwise(0)).alias("datagrams_delivered"),
        F.percentile(ack, F.lit(0.5)).alias("ack_ms_p50"),
        F.percentile(ack, F.lit(0.95)).alias("ack_ms_p95"),
    )


def stretch_histogram(pr, stretch_bin):
    return (pr.filter(F.col("stretch").isNotNull())
            .groupBy((F.floor(F.col("stretch") / stretch_bin) * stretch_bin).alias("bin_start"))
            .count())


def rtt_values(pr):
    """RTTs of successful pings grouped to 0.1 ms (few distinct values): the
    driver bins them once it knows the range."""
    return (pr.filter((F.col("probe") == "ping") & F.col("ok") & F.col("rtt_ms").isNotNull())
            .groupBy(F.round(F.col("rtt_ms"), 1).alias("rtt")).count())


def probe_series(pr, t_start, bucket):
    return (pr.filter(F.col("probe") == "ping").groupBy(bucket_of(t_start, bucket).alias("bucket"))
            .agg(F.count("*").alias("pings"),
                 F.sum(F.when(F.col("ok"), 1).otherwise(0)).alias("pings_ok"),
                 F.avg(F.when(F.col("ok"), F.col("rtt_ms"))).alias("rtt_ms_mean")))


# -- per-node activity -------------------------------------------------------------
# Aggregates here keep numeric buffers only, so Spark runs them as hash
# aggregates; "the latest X of a node" is found by grouping on X and taking
# its latest time (driver picks), never by a struct-ordered max_by (that
# forces a sort of every record).

def node_activity(valid):
    """valid: every valid record but `topology` ones."""
    ev = F.col("event")
    return valid.groupBy("node").agg(
        F.count("*").alias("records"),
        F.min("t").alias("first_t"),
        F.max("t").alias("last_t"),
        F.sum(F.when(F.col("kind") == "state", 1).otherwise(0)).alias("state_records"),
        F.sum(F.when(ev == "sanity_fail", 1).otherwise(0)).alias("sanity_fail"),
        F.max(F.when(F.col("kind") == "peers", F.col("t"))).alias("peers_t"))


def node_ports(valid):
    """(node, port, t): when each node last came through each console port."""
    return (valid.where(F.col("port").isNotNull()).groupBy("node", "port")
            .agg(F.max("t").alias("t")))


def last_links(peers, last):
    """Link types in each node's last `peers` record: (node, link, n).
    last: (node, peers_t) from node_activity (small)."""
    x = peers.join(F.broadcast(last), (peers["node"] == last["n"]) & (peers["t"] == last["peers_t"]))
    return (x.select("node", F.explode("peer_list").alias("p"))
            .groupBy("node", F.col("p.link").alias("link")).count())


# -- counters ------------------------------------------------------------------------

def counters_long(c, t_start, bucket, window_start=None):
    """Counters records (wide) -> one row per (record, metric, key): `value`,
    `cap` (capacity of the gauges that have one) and `inc`, the increase
    since the node's previous report of that counter (null for gauges).

    Restarts: a report in which some cumulative counter is lower than in the
    node's previous report (`reset`) is a restart, and every counter in it
    counts in full; so does a key the previous report did not have.

    Plan: the wide records are shuffled once, by node, and one window over
    them (ordered by t, seq) puts the previous report's maps beside each
    report; the restart test runs on the maps, then one generator emits a
    row per map entry with its previous value looked up by key. One sort of
    the records (not of their entries); the only per-row lambdas are the
    restart tests on maps of a few keys."""
    w = Window.partitionBy("node").orderBy("t", "seq")
    maps = CUMULATIVE_MAPS
    scal = CUMULATIVE_SCALARS
    c = c.select("node", "t", "seq", *maps, *[F.create_map(F.lit(""), F.col(x)).alias(x) for x in scal],
                 F.create_map(F.lit(""), F.col("mem_free")).alias("mem_free"), "occupancy", "capacity")
    c = c.repartition("node")
    cols = list(maps) + list(scal) + ["capacity"]
    # one projection per step: each withColumn is a round of analysis on the driver
    c = c.select("*", *[F.lag(m).over(w).alias("p_" + m) for m in cols])

    # as SQL text: a Column lambda is several py4j round trips per use
    def lower(m, idx=None):
        item = "" if idx is None else "[%d]" % idx
        return ("coalesce(exists(map_keys(`{m}`), k -> coalesce(`{m}`[k]{i} < `p_{m}`[k]{i}, false)), false)"
                .format(m=m, i=item))

    reset = F.expr(" OR ".join([lower("capacity", 2)] + [lower(m) for m in list(maps) + list(scal)]))
    if window_start is not None:
        t_a = F.min(F.when((F.col("t") >= F.lit(window_start)) & F.col("tx_bytes").isNotNull(),
                           F.col("t"))).over(Window.partitionBy("node"))
    else:
        t_a = F.lit(None).cast("double")
    c = c.select("*", reset.alias("reset"), F.lead("t").over(w).isNull().alias("last_report"), t_a.alias("t_a"))
    lm, am = "map<string,bigint>", "map<string,array<bigint>>"

    def entry(metric, m, pm, a, pa, idx, cum):
        return ("'%s'" % metric, m or "CAST(NULL AS %s)" % lm, pm or "CAST(NULL AS %s)" % lm,
                a or "CAST(NULL AS %s)" % am, pa or "CAST(NULL AS %s)" % am, str(idx), "true" if cum else "false")

    rows = [entry(m, m, "p_" + m, None, None, 0, True) for m in cols if m != "capacity"]
    rows.append(entry("mem_free", "mem_free", None, None, None, 0, False))
    rows.append(entry("occupancy", None, None, "occupancy", None, 1, False))
    rows.append(entry("capacity", None, None, "capacity", None, 1, False))
    rows.append(entry(REFUSED, None, None, "capacity", "p_capacity", 3, True))
    stack = "stack(%d, %s) AS (metric, m, pm, a, pa, idx, cum)" % (len(rows), ", ".join(", ".join(r) for r in rows))
    x = c.select("node", "t", "seq", "reset", "last_report", "t_a", F.expr(stack))
    x = x.select("*", F.explode(F.coalesce(F.map_keys("m"), F.map_keys("a"))).alias("key"))
    key = F.col("key")
    value = F.coalesce(F.element_at("m", key), F.element_at(F.element_at("a", key), F.col("idx")))
    prev = F.coalesce(F.element_at("pm", key), F.element_at(F.element_at("pa", key), F.col("idx")))
    cap = F.when(F.col("a").isNotNull() & (F.col("idx") == 1), F.element_at(F.element_at("a", key), 2))
    x = x.select("node", "t", "seq", "reset", "last_report", "t_a", "metric", "key", "cum",
                 value.alias("value"), prev.alias("prev"), cap.alias("cap"))
    x = x.where(F.col("value").isNotNull())
    inc = (F.when(~F.col("cum"), F.lit(None).cast("long"))
           .when(F.col("reset") | F.col("prev").isNull(), F.col("value"))
           .otherwise(F.col("value") - F.col("prev")))
    return x.select("node", "t", "seq", "reset", "last_report", "t_a",
                    bucket_of(t_start, bucket).alias("bucket"), "metric", "key", "value", "cap", inc.alias("inc"))


SERIES_METRICS = ("drops", "evictions", "tx_bytes", "occupancy", "capacity")


def counters_agg(cl):
    """Everything the summary needs from the counters, as ONE aggregation
    (two grouping sets, so the counters are read and windowed once):

    * per (node, metric, key) (`bucket` null): total increase, min/max
      value, largest capacity and used/capacity, the value and capacity in
      the node's last report, restart reports, and the steady-state bytes:
      the increases after t_a (the node's first report in the window) and
      t_a, t_b (first and last report in the window);
    * per (bucket, metric, key) (`node` null) for SERIES_METRICS: the sum of
      increases and the largest used/capacity."""
    ratio = F.when(F.col("cap") > 0, F.col("value") / F.col("cap"))
    in_window = F.col("t_a").isNotNull() & (F.col("t") >= F.col("t_a"))
    g = cl.groupingSets([["node", "metric", "key"], ["bucket", "metric", "key"]], "node", "bucket", "metric", "key")
    out = g.agg(
        F.sum("inc").alias("total"),
        F.max("value").alias("max"),
        F.min("value").alias("min"),
        F.max("cap").alias("capacity"),
        F.max(ratio).alias("max_ratio"),
        F.max(F.when(F.col("last_report"), F.col("value"))).alias("last"),
        F.max(F.when(F.col("last_report"), F.col("cap"))).alias("last_capacity"),
        F.sum(F.col("reset").cast("int")).alias("restarts"),
        F.sum(F.when(in_window & (F.col("t") > F.col("t_a")), F.col("inc"))).alias("steady"),
        F.min("t_a").alias("t_a"),
        F.max(F.when(in_window, F.col("t"))).alias("t_b"),
        F.grouping_id().alias("gid"))
    return out.where(F.col("node").isNotNull() | F.col("metric").isin(*SERIES_METRICS))
