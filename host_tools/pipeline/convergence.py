"""Tree agreement and snake correctness, in Spark.

The state stream S has one row per `state` record plus, at every topology
epoch boundary b, one synthetic row per node carrying that node's latest
state as of b (so a node whose descending key silently became wrong when the
topology changed gets a row at b). Each row knows the epoch in force at its
time, the node's component in that epoch and the true descending key (the
next-lower key in the component), so `correct` is a row-level column.

A node's tree value (`root/root_seq`) and correctness are piecewise constant
between its rows. "Reached and held" for the whole mesh is then the latest,
over all nodes, start of each node's final run (of its final tree value,
resp. of being correct), provided at the end every node agrees (resp. is
correct); before that time some node was not in its final state, after it
all are and stay so. The same computation per epoch gives reconvergence
times after each topology change (tree agreement per component there).
"""
from pyspark.sql import Window
from pyspark.sql import functions as F

STATE_FIELDS = ("value", "root", "root_seq", "desc", "parent", "depth")


def epoch_col(boundaries, tcol="t"):
    """Index of the topology epoch in force at time `tcol`."""
    if not boundaries:
        return F.lit(0)
    arr = F.array(*[F.lit(float(b)) for b in boundaries])
    return F.size(F.filter(arr, lambda x: x <= F.col(tcol)))


def state_stream(spark, valid, boundaries, expected):
    st = (valid.filter(F.col("kind") == "state")
          .select("node", "t", "seq",
                  F.concat_ws("/", "root", F.col("root_seq").cast("string")).alias("value"),
                  "root", "root_seq", "desc", "parent", "depth",
                  F.lit(False).alias("boundary")))
    if boundaries:
        bnd = spark.createDataFrame([(float(b),) for b in boundaries], "b double")
        asof = (st.join(F.broadcast(bnd), F.col("t") <= F.col("b"))
                .groupBy("node", "b")
                .agg(F.max_by(F.struct(*STATE_FIELDS), F.struct("t", "seq")).alias("s"))
                .select("node", F.col("b").alias("t"), F.lit(-1).cast("long").alias("seq"),
                        *[F.col("s." + f).alias(f) for f in STATE_FIELDS],
                        F.lit(True).alias("boundary")))
        st = st.unionByName(asof)
    st = st.withColumn("epoch", epoch_col(boundaries))
    st = st.join(F.broadcast(expected), ["epoch", "node"], "left")
    return st.withColumn("correct", F.col("desc").eqNullSafe(F.col("expected_desc")))


def node_level(S):
    """One row per (scope, node): scope -1 is the whole run, scope e >= 0 the
    rows of epoch e (boundary row included)."""
    U = S.withColumn("scope", F.lit(-1)).unionByName(S.withColumn("scope", F.col("epoch")))
    key = F.struct("t", "seq")
    full = (Window.partitionBy("scope", "node").orderBy("t", "seq")
            .rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing))
    ordered = Window.partitionBy("scope", "node").orderBy("t", "seq")
    U = (U.withColumn("final_value", F.last("value").over(full))
         .withColumn("final_correct", F.last("correct").over(full)))
    U = (U.withColumn("last_diff", F.max(F.when(F.col("value") != F.col("final_value"), key)).over(full))
         .withColumn("last_false", F.max(F.when(~F.col("correct"), key)).over(full))
         .withColumn("prev_t", F.lag("t").over(ordered))
         .withColumn("prev_parent", F.lag("parent").over(ordered))
         .withColumn("prev_value", F.lag("value").over(ordered))
         .withColumn("prev_desc", F.lag("desc").over(ordered)))
    later = F.col("prev_t").isNotNull()

    def changes(col, prev):
        return F.sum(F.when(later & ~F.col(col).eqNullSafe(F.col(prev)), 1).otherwise(0))

    return U.groupBy("scope", "node").agg(
        F.count("*").alias("rows"),
        F.sum(F.when(F.col("boundary"), 0).otherwise(1)).alias("own_rows"),
        F.min("t").alias("first_t"),
        F.max("t").alias("last_t"),
        F.min(F.when(F.col("last_diff").isNull() | (key > F.col("last_diff")), F.col("t"))).alias("tree_since"),
        F.min(F.when(F.col("final_correct")
                     & (F.col("last_false").isNull() | (key > F.col("last_false"))),
                     F.col("t"))).alias("snake_since"),
        F.max_by(F.struct("value", "root", "root_seq", "desc", "parent", "depth", "correct",
                          "comp", "expected_desc"), key).alias("final"),
        changes("parent", "prev_parent").alias("parent_changes"),
        changes("value", "prev_value").alias("root_changes"),
        changes("desc", "prev_desc").alias("desc_changes"),
    )


def bucket_series(spark, S, nodes_df, t_start, bucket, nbuckets):
    """Per bucket k (covering [t_start + k*bucket, t_start + (k+1)*bucket)):
    the state of every node after all its rows up to the end of the bucket.
    Returns rows (bucket, reported, max_agree, correct)."""
    grid = spark.range(nbuckets).withColumnRenamed("id", "bucket").crossJoin(F.broadcast(nodes_df))
    snap = (S.withColumn("bucket", F.floor((F.col("t") - F.lit(t_start)) / F.lit(bucket)).cast("long"))
            .groupBy("node", "bucket")
            .agg(F.max_by(F.struct("value", "correct"), F.struct("t", "seq")).alias("s")))
    g = grid.join(snap, ["node", "bucket"], "left")
    wf = Window.partitionBy("node").orderBy("bucket").rowsBetween(Window.unboundedPreceding, 0)
    g = g.withColumn("s", F.last("s", ignorenulls=True).over(wf))
    per_val = (g.groupBy("bucket", F.col("s.value").alias("value"))
               .agg(F.count("*").alias("n"),
                    F.sum(F.when(F.col("s.correct"), 1).otherwise(0)).alias("c")))
    return per_val.groupBy("bucket").agg(
        F.sum(F.when(F.col("value").isNotNull(), F.col("n")).otherwise(0)).alias("reported"),
        F.max(F.when(F.col("value").isNotNull(), F.col("n")).otherwise(0)).alias("max_agree"),
        F.sum("c").alias("correct"))


def down_nodes(epoch, scope_rows, nodes):
    """Nodes taken as down (crashed, switched off) during an epoch: no link in
    the epoch's topology and no `state` record of their own in it. They are
    left out of that epoch's checks (the simulator's truth does the same with
    nodes that are not alive)."""
    linked = set()
    for a, b in epoch.edges:
        linked.add(a)
        linked.add(b)
    out = set()
    for m in nodes:
        r = scope_rows.get(m)
        if m not in linked and (r is None or not r["own_rows"]):
            out.add(m)
    return out


def rollup(rows, nodes, epochs, comps, t_start, t_end, has_topology=True):
    """Combine the per-(scope, node) aggregates (one row per node and epoch,
    already small) into mesh-level figures. Returns (run, per_epoch, per_node,
    down) with down[e] = nodes down in epoch e."""
    by_scope = {}
    for r in rows:
        by_scope.setdefault(r["scope"], {})[r["node"]] = r
    whole = by_scope.get(-1, {})
    down = [down_nodes(ep, by_scope.get(ep.index, {}), nodes) if has_topology else set()
            for ep in epochs]
    alive_end = [m for m in nodes if m not in down[-1]]
    n = len(alive_end)

    def tree_held(scope_rows, members):
        if not members or any(m not in scope_rows for m in members):
            return None
        vals = set(scope_rows[m]["final"]["value"] for m in members)
        if len(vals) != 1:
            return None
        return max(scope_rows[m]["tree_since"] for m in members)

    def snake_held(scope_rows, members):
        if not members or any(m not in scope_rows for m in members):
            return None
        if not all(scope_rows[m]["final"]["correct"] for m in members):
            return None
        return max(scope_rows[m]["snake_since"] for m in members)

    t_tree = tree_held(whole, alive_end)
    t_snake = snake_held(whole, alive_end)
    correct_final = sum(1 for m in alive_end if m in whole and whole[m]["final"]["correct"])
    run = {
        "tree_converged_at": t_tree,
        "snake_converged_at": t_snake,
        "tree_converged_s": None if t_tree is None else t_tree - t_start,
        "snake_converged_s": None if t_snake is None else t_snake - t_start,
        "snake_correct_final": correct_final,
        "snake_correct_ratio_final": (correct_final / float(n)) if n else None,
        "nodes_down_at_end": len(down[-1]),
    }
    per_epoch = []
    for i, ep in enumerate(epochs):
        start = t_start if ep.start is None else ep.start
        end = epochs[i + 1].start if i + 1 < len(epochs) else t_end
        rows_e = by_scope.get(ep.index, {})
        alive = [m for m in nodes if m not in down[ep.index]]
        groups = {}
        for m in alive:
            groups.setdefault(comps[ep.index].get(m, m), []).append(m)
        comp_times = [tree_held(rows_e, members) for members in groups.values()]
        tt = None if any(x is None for x in comp_times) else max(comp_times)
        ts = snake_held(rows_e, alive)
        per_epoch.append({
            "epoch": ep.index, "start_s": start - t_start, "end_s": end - t_start,
            "components": len(groups), "links": len(ep.edges), "nodes_down": len(down[ep.index]),
            "tree_converged_s": None if tt is None else max(tt, start) - start,
            "snake_converged_s": None if ts is None else max(ts, start) - start,
        })
    per_node = {}
    for m in nodes:
        r = whole.get(m)
        per_node[m] = r
    return run, per_epoch, per_node, down
