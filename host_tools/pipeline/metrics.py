"""Probe, counter and per-node activity figures, as Spark DataFrame plans.

Every function here returns a plan over the `telemetry/` table (or the
`probes/` table) whose result is small: one row per node, per table, per
time bucket or per histogram bin, never one per record.
"""
from pyspark.sql import Window
from pyspark.sql import functions as F

# Cumulative counters (since the node booted; a restart resets them all).
CUMULATIVE_MAPS = ("rx", "tx", "drops", "evictions", "tx_bytes", "tx_link", "tx_bytes_link")
CUMULATIVE_SCALARS = ("verify_done", "verify_skipped", "verify_cached")
# `capacity` {table: [used, capacity, refused]}: refused is cumulative.
REFUSED = "capacity_refused"
CONTROL_EXCLUDE = ("traffic",)     # "control traffic" = every frame type but traffic


def bucket_of(t_start, bucket):
    return F.floor((F.col("t") - F.lit(t_start)) / F.lit(bucket)).cast("long")


def day_col(tcol="t"):
    """UTC date of a run-clock time (seconds since the epoch; the simulator's
    clock starts at 0, so its days are 1970-01-01). Times outside years
    1..9999 have no day."""
    t = F.col(tcol)
    ok = t.isNotNull() & (F.abs(t) < F.lit(2.5e11))
    return F.when(ok, F.date_format(F.timestamp_seconds(t), "yyyy-MM-dd"))


# -- probes -----------------------------------------------------------------------

def probes(records, epoch, dist_df):
    """One row per probe with the shortest path length on the topology in
    force at its time and its stretch (hops / shortest). Probes that failed,
    have no hop count, or whose endpoints are unknown to the topology (or
    src == dst) have a null stretch."""
    pr = records.select("day", "t", "node", "seq", "probe", "id", "src", "dst", "ok", "rtt_ms", "hops",
                        epoch.alias("epoch"))
    if dist_df is not None:
        pr = pr.join(F.broadcast(dist_df), ["epoch", "src", "dst"], "left")
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

def node_activity(valid):
    """valid: every valid record but `topology` ones."""
    ev = F.col("event")
    key = F.struct("t", "seq")
    return valid.groupBy("node").agg(
        F.count("*").alias("records"),
        F.min("t").alias("first_t"),
        F.max("t").alias("last_t"),
        F.sum(F.when(F.col("kind") == "state", 1).otherwise(0)).alias("state_records"),
        F.sum(F.when(ev == "sanity_fail", 1).otherwise(0)).alias("sanity_fail"),
        F.max_by("port", F.when(F.col("port").isNotNull(), key)).alias("port"),
        F.max_by("peer_list", F.when(F.col("kind") == "peers", key)).alias("peer_list"))


# -- counters ------------------------------------------------------------------------

def counters_long(c, t_start, bucket):
    """Counters records (wide) -> one row per (record, metric, key) with
    `inc` (the increase since the node's previous report; a restart counts
    from zero) and the gauge fields. A report in which any cumulative counter
    is lower than in the node's previous report starts a new generation
    (the node restarted): every counter in it counts in full."""
    c = c.select("node", "t", "seq", *CUMULATIVE_MAPS, *CUMULATIVE_SCALARS, "occupancy", "mem_free",
                 "capacity",
                 F.transform_values("capacity", lambda k, v: v[2]).alias(REFUSED))
    maps = CUMULATIVE_MAPS + (REFUSED,)
    w = Window.partitionBy("node").orderBy("t", "seq")
    for m in maps + CUMULATIVE_SCALARS:
        c = c.withColumn("p_" + m, F.lag(m).over(w))
    def lower_than_before(cur, prev):
        return lambda k: F.coalesce(cur[k] < prev[k], F.lit(False))

    def entry(m, cur):
        return lambda e: F.struct(F.lit(m).alias("metric"), e["key"].alias("key"), e["value"].alias("inc"),
                                  cur[e["key"]].alias("value"), F.lit(None).cast("long").alias("cap"))

    downs = []
    for m in maps:
        cur, prev = F.col(m), F.col("p_" + m)
        downs.append(F.exists(F.map_keys(cur), lower_than_before(cur, prev)))
    for s in CUMULATIVE_SCALARS:
        downs.append(F.col(s) < F.col("p_" + s))
    reset = F.lit(False)
    for d in downs:
        reset = reset | F.coalesce(d, F.lit(False))
    c = c.withColumn("reset", reset)
    c = c.withColumn("gen", F.sum(F.col("reset").cast("int")).over(
        w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
    nul = F.lit(None).cast("long")
    entries = []
    for m in maps:
        cur, prev = F.col(m), F.col("p_" + m)
        inc = F.when(F.col("reset") | prev.isNull(), cur).otherwise(
            F.map_filter(F.map_zip_with(cur, prev, lambda k, a, b: a - F.coalesce(b, F.lit(0))),
                         lambda k, v: v.isNotNull()))
        entries.append(F.coalesce(F.transform(F.map_entries(inc), entry(m, cur)), F.array()))
    for s in CUMULATIVE_SCALARS:
        cur, prev = F.col(s), F.col("p_" + s)
        inc = F.when(F.col("reset") | prev.isNull(), cur).otherwise(cur - prev)
        entries.append(F.when(cur.isNotNull(), F.array(F.struct(
            F.lit(s).alias("metric"), F.lit("").alias("key"), inc.alias("inc"), cur.alias("value"),
            nul.alias("cap")))).otherwise(F.array()))
    entries.append(F.coalesce(F.transform(F.map_entries("occupancy"), lambda e: F.struct(
        F.lit("occupancy").alias("metric"), e["key"].alias("key"), nul.alias("inc"),
        e["value"][0].alias("value"), e["value"][1].alias("cap"))), F.array()))
    entries.append(F.coalesce(F.transform(F.map_entries("capacity"), lambda e: F.struct(
        F.lit("capacity").alias("metric"), e["key"].alias("key"), nul.alias("inc"),
        e["value"][0].alias("value"), e["value"][1].alias("cap"))), F.array()))
    entries.append(F.when(F.col("mem_free").isNotNull(), F.array(F.struct(
        F.lit("mem_free").alias("metric"), F.lit("").alias("key"), nul.alias("inc"),
        F.col("mem_free").alias("value"), nul.alias("cap")))).otherwise(F.array()))
    return c.select("node", "t", "seq", "gen", bucket_of(t_start, bucket).alias("bucket"),
                    F.explode(F.concat(*entries)).alias("e")).select(
        "node", "t", "seq", "gen", "bucket", "e.*").filter(F.col("value").isNotNull())


def counters_per_node(cl):
    """One row per (node, metric, key): total increase, min/max/last value,
    capacity, generations seen."""
    key = F.struct("t", "seq")
    ratio = F.when(F.col("cap") > 0, F.col("value") / F.col("cap"))
    return cl.groupBy("node", "metric", "key").agg(
        F.sum("inc").alias("total"),
        F.max("value").alias("max"),
        F.min("value").alias("min"),
        F.max_by("value", key).alias("last"),
        F.max("cap").alias("capacity"),
        F.max_by("cap", key).alias("last_capacity"),
        F.max(ratio).alias("max_ratio"),
        F.max("gen").alias("gens"))


def counters_series(cl):
    """Per (bucket, metric, key): the sum of increases (drops, evictions,
    bytes sent) and the largest used/capacity (occupancy, capacity)."""
    ratio = F.when(F.col("cap") > 0, F.col("value") / F.col("cap"))
    return (cl.filter(F.col("metric").isin("drops", "evictions", "tx_bytes", "occupancy", "capacity"))
            .groupBy("bucket", "metric", "key")
            .agg(F.sum("inc").alias("inc"), F.max(ratio).alias("max_ratio")))


def steady_bytes(cl, window_start):
    """Bytes sent per node and frame type over the steady-state window: from
    the node's first `counters` report at or after `window_start` (t_a) to
    its last one (t_b), the increases of `tx_bytes` reported after t_a.
    Returns (node, key, bytes, t_a, t_b)."""
    x = cl.filter((F.col("metric") == "tx_bytes") & (F.col("t") >= F.lit(window_start)))
    per = Window.partitionBy("node")
    x = x.withColumn("t_a", F.min("t").over(per)).withColumn("t_b", F.max("t").over(per))
    return x.groupBy("node", "key").agg(
        F.sum(F.when(F.col("t") > F.col("t_a"), F.col("inc")).otherwise(0)).alias("bytes"),
        F.first("t_a").alias("t_a"), F.first("t_b").alias("t_b"))
