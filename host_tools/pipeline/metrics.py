"""Probe, counter and per-node activity figures, as Spark DataFrame plans."""
from pyspark.sql import Window
from pyspark.sql import functions as F

CUMULATIVE = ("rx", "tx", "drops", "evictions", "verify_done", "verify_skipped", "verify_cached")
GAUGES = ("occupancy", "mem_free")


def run_minute(t_start):
    return F.floor((F.col("t") - F.lit(t_start)) / F.lit(60.0)).cast("int").alias("run_minute")


def bucket_of(t_start, bucket):
    return F.floor((F.col("t") - F.lit(t_start)) / F.lit(bucket)).cast("long")


def probes(valid, epoch, dist_df, t_start):
    """One row per probe with the shortest path length on the topology in
    force at its time and its stretch (hops / shortest). Probes that failed,
    have no hop count, or whose endpoints are unknown to the topology (or
    src == dst) have a null stretch."""
    pr = (valid.filter(F.col("kind") == "probe")
          .select("t", run_minute(t_start), "node", "seq", "probe", "id", "src", "dst", "ok",
                  "rtt_ms", "hops", "path", epoch.alias("epoch")))
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


def histograms(pr, stretch_bin, rtt_bin):
    """Long table (metric, bin_start, bin_width, count) for the report."""
    s = (pr.filter(F.col("stretch").isNotNull())
         .select(F.lit("stretch").alias("metric"),
                 (F.floor(F.col("stretch") / stretch_bin) * stretch_bin).alias("bin_start"),
                 F.lit(float(stretch_bin)).alias("bin_width")))
    r = (pr.filter((F.col("probe") == "ping") & F.col("ok") & F.col("rtt_ms").isNotNull())
         .select(F.lit("rtt_ms").alias("metric"),
                 (F.floor(F.col("rtt_ms") / rtt_bin) * rtt_bin).alias("bin_start"),
                 F.lit(float(rtt_bin)).alias("bin_width")))
    return s.unionByName(r).groupBy("metric", "bin_start", "bin_width").count()


def counters_long(valid, t_start):
    """Counters in long form: (node, t, metric, key, value, capacity, inc).
    Cumulative counters (since the node started) get `inc`, the increase
    since the node's previous report; a decrease means the node restarted,
    so the new value is the increase. The first report's value counts whole."""
    c = valid.filter(F.col("kind") == "counters").select("node", "t", "seq", *CUMULATIVE, *GAUGES)
    base = ["node", "t", "seq"]
    parts = []
    for m in ("rx", "tx", "drops", "evictions"):
        parts.append(c.select(*base, F.lit(m).alias("metric"), F.explode(m).alias("key", "value"))
                     .withColumn("capacity", F.lit(None).cast("long")))
    for m in ("verify_done", "verify_skipped", "verify_cached", "mem_free"):
        parts.append(c.filter(F.col(m).isNotNull())
                     .select(*base, F.lit(m).alias("metric"), F.lit("").alias("key"),
                             F.col(m).alias("value"), F.lit(None).cast("long").alias("capacity")))
    parts.append(c.select(*base, F.lit("occupancy").alias("metric"),
                          F.explode("occupancy").alias("key", "arr"))
                 .select(*base, "metric", "key", F.col("arr")[0].alias("value"),
                         F.col("arr")[1].alias("capacity")))
    long = parts[0]
    for p in parts[1:]:
        long = long.unionByName(p)
    long = long.filter(F.col("value").isNotNull())
    cumulative = F.col("metric").isin(*CUMULATIVE)
    # A restart resets every counter of the node: a report in which some
    # cumulative counter is lower than in the node's previous report starts a
    # new generation, and every counter in it counts from zero (including
    # keys the previous report did not have).
    by_node = Window.partitionBy("node").orderBy("t", "seq")
    long = long.withColumn("ridx", F.dense_rank().over(by_node))
    w = Window.partitionBy("node", "metric", "key").orderBy("t", "seq")
    long = (long.withColumn("prev", F.when(cumulative, F.lag("value").over(w)))
            .withColumn("prev_idx", F.lag("ridx").over(w)))
    down = (F.col("value") < F.col("prev")) & (F.col("prev_idx") == F.col("ridx") - 1)
    rec = Window.partitionBy("node", "t", "seq")
    long = long.withColumn("reset", F.max(F.coalesce(down, F.lit(False))).over(rec))
    long = long.withColumn("rfirst", F.row_number().over(rec.orderBy("metric", "key")) == 1)
    upto = (Window.partitionBy("node").orderBy("t", "seq")
            .rangeBetween(Window.unboundedPreceding, Window.currentRow))
    long = long.withColumn("gen", F.sum(F.when(F.col("rfirst") & F.col("reset"), 1).otherwise(0)).over(upto))
    w2 = Window.partitionBy("node", "gen", "metric", "key").orderBy("t", "seq")
    long = long.withColumn("prev", F.when(cumulative, F.lag("value").over(w2)))
    inc = (F.when(~cumulative, F.lit(None))
           .when(F.col("prev").isNull(), F.col("value"))
           .otherwise(F.col("value") - F.col("prev")))
    return (long.withColumn("inc", inc.cast("long")).drop("prev", "reset", "rfirst", "ridx", "prev_idx")
            .withColumn("run_minute", run_minute(t_start)))


def counter_totals(cl):
    ratio = F.when(F.col("capacity") > 0, F.col("value") / F.col("capacity"))
    return cl.groupBy("metric", "key").agg(
        F.sum("inc").alias("total"),
        F.max("value").alias("max"),
        F.min("value").alias("min"),
        F.max("capacity").alias("capacity"),
        F.max(ratio).alias("max_ratio"),
        F.countDistinct("node").alias("nodes"))


def series(pr, cl, t_start, bucket):
    """Long table (series, key, bucket, value) of per-bucket figures."""
    b = bucket_of(t_start, bucket).alias("bucket")
    pings = (pr.filter(F.col("probe") == "ping").groupBy(b)
             .agg(F.count("*").alias("pings"),
                  F.sum(F.when(F.col("ok"), 1).otherwise(0)).alias("pings_ok"),
                  F.avg(F.when(F.col("ok"), F.col("rtt_ms"))).alias("rtt_ms_mean")))
    pings = pings.select("bucket", F.explode(F.array(
        *[F.struct(F.lit(n).alias("series"), F.lit("").alias("key"), F.col(n).cast("double").alias("value"))
          for n in ("pings", "pings_ok", "rtt_ms_mean")])).alias("x")).select("x.series", "x.key", "bucket", "x.value")
    occ = (cl.filter((F.col("metric") == "occupancy") & (F.col("capacity") > 0))
           .groupBy(b, "key").agg(F.max(F.col("value") / F.col("capacity")).alias("value"))
           .select(F.lit("occupancy_max_ratio").alias("series"), "key", "bucket", "value"))
    drops = (cl.filter(F.col("metric").isin("drops", "evictions")).groupBy(b, "metric", "key")
             .agg(F.sum("inc").cast("double").alias("value"))
             .select(F.col("metric").alias("series"), "key", "bucket", "value"))
    return pings.unionByName(occ).unionByName(drops)


def node_activity(valid):
    ev = F.col("event")
    return valid.groupBy("node").agg(
        F.count("*").alias("records"),
        F.min("t").alias("first_t"),
        F.max("t").alias("last_t"),
        F.sum(F.when(F.col("kind") == "state", 1).otherwise(0)).alias("state_records"),
        F.sum(F.when(ev == "sanity_fail", 1).otherwise(0)).alias("sanity_fail"),
        F.sum(F.when(ev == "parent_changed", 1).otherwise(0)).alias("parent_changed_events"),
        F.sum(F.when(ev == "peer_down", 1).otherwise(0)).alias("peer_down_events"))
