"""Tree agreement and snake correctness, in Spark.

The state stream S has one row per `state` record plus, at every topology
epoch boundary b, one synthetic row per node carrying that node's latest
state as of b (so a node whose descending key silently became wrong when the
topology changed gets a row at b). Each row knows the epoch in force at its
time and the true descending key in that epoch (the next-lower key in the
node's component), so `correct` is a row-level column.

A node's tree value (`root/root_seq`) and correctness are piecewise constant
between its rows. "Reached and held" for the whole mesh is then the latest,
over all nodes, start of each node's final run (of its final tree value,
resp. of being correct), provided at the end every node agrees (resp. is
correct); before that time some node was not in its final state, after it
all are and stay so. The same computation per epoch gives reconvergence
times after each topology change (tree agreement per component there).

Plan: the state records are shuffled once, by node. Within a node, ordered
by (t, seq), one window adds the boundary rows (a row generates the
boundaries between itself and the node's next row), a second one compares
each row with the previous one. From there two small aggregates are
collected: one row per (node, epoch) (where the node's final run of each
kind started, its final state, change counts) and the per-bucket changes of
the mesh-wide counts (nodes per root, nodes correct, nodes reported), from
which the driver rebuilds the time series by a running sum. Neither grows
with the number of records: the first with nodes x epochs, the second with
the number of state changes.
"""
import heapq

from pyspark.sql import Window
from pyspark.sql import functions as F

CARRIED = ("value", "root", "root_seq", "desc", "parent", "depth", "peers", "profile")


def epoch_col(boundaries, tcol="t", strict=False):
    """Index of the topology epoch in force at time `tcol` (the number of
    epoch starts <= t; < t with strict), as a binary search of CASE WHENs:
    compiled code, no per-row lambda. Built as one SQL expression: the same
    tree built from Column objects is one py4j round trip per node (a few
    thousand for dozens of epochs, each a driver-side pause)."""
    bs = [float(b) for b in boundaries]
    op = "<" if strict else "<="

    def search(lo, hi):   # number of starts among bs[lo:hi] that are <= (<) t, plus lo
        if lo == hi:
            return str(lo)
        mid = (lo + hi) // 2
        # repr() round-trips the double exactly; the D suffix makes it a DOUBLE literal
        return "CASE WHEN %rD %s `%s` THEN %s ELSE %s END" % (bs[mid], op, tcol, search(mid + 1, hi), search(lo, mid))

    return F.expr("CAST(%s AS INT)" % search(0, len(bs)))


def state_stream(states, boundaries, expected):
    """states: valid `state` records (node, t, seq, root, root_seq, desc,
    parent, depth, peers_n, profile). expected: (epoch, node, comp,
    expected_desc), small. Returns S: one row per state record and boundary
    row, with epoch, boundary, correct."""
    st = states.select(
        "node", "t", "seq",
        F.concat_ws("/", "root", F.col("root_seq").cast("string")).alias("value"),
        "root", "root_seq", "desc", "parent", "depth", F.col("peers_n").alias("peers"), "profile")
    fields = ["t", "seq"] + list(CARRIED)
    if not boundaries:
        S = st.select("node", *fields, F.lit(0).alias("epoch"), F.lit(False).alias("boundary"))
    else:
        n_epochs = len(boundaries) + 1
        w = Window.partitionBy("node").orderBy("t", "seq")
        # one projection per step (each withColumn is a round of analysis on the driver)
        st = st.select("*", epoch_col(boundaries).alias("epoch"), epoch_col(boundaries, strict=True).alias("elo"))
        st = st.select("*", F.lead("t").over(w).alias("next_t"), F.lead("elo").over(w).alias("next_elo"))
        # Boundary k carries the state of the node's latest row with t <= b_k:
        # row r generates the boundaries strictly between itself and the
        # node's next row (all later ones if it is the last), and the one at
        # its own time if t == b_k and it is the last row at that time.
        lo = F.col("epoch") + 1
        hi = F.coalesce(F.col("next_elo"), F.lit(n_epochs - 1))
        exact = (F.col("epoch") > F.col("elo")) & (F.col("next_t").isNull() | (F.col("next_t") != F.col("t")))
        first = F.when(exact, F.col("epoch")).otherwise(lo)
        # k = 0 stands for the row itself, k >= 1 for the boundary of epoch k
        ks = F.when(first <= hi, F.concat(F.array(F.lit(0)), F.sequence(first, hi))).otherwise(F.array(F.lit(0)))
        starts = F.array(*[F.lit(float(b)) for b in boundaries])   # starts[k-1] = start of epoch k
        x = st.select("*", F.explode(ks).alias("k"))
        own = F.col("k") == 0
        S = x.select("node",
                     F.when(own, F.col("t")).otherwise(F.element_at(starts, F.col("k"))).alias("t"),
                     F.when(own, F.col("seq")).otherwise(F.lit(-1).cast("long")).alias("seq"),
                     *CARRIED,
                     F.when(own, F.col("epoch")).otherwise(F.col("k")).cast("int").alias("epoch"),
                     (~own).alias("boundary"))
    S = S.join(F.broadcast(expected), ["epoch", "node"], "left")
    return S.withColumn("correct", F.col("desc").eqNullSafe(F.col("expected_desc")))


def flags(S):
    """The rows of S that matter, with what changed at each: a node's first
    and last row in every epoch, and every row where its tree value,
    correctness, parent or descending key changes. One window over the
    node-partitioned, (t, seq)-ordered rows; running counts carry the
    number of rows (and of the node's own rows) so the dropped rows are
    still counted. In a healthy mesh this is a few rows per node and epoch,
    whatever the number of records."""
    w = Window.partitionBy("node").orderBy("t", "seq")
    own = (~F.col("boundary")).cast("long")
    S = S.select("*", F.lag("t").over(w).alias("p_t"),
                 F.lag("value").over(w).alias("p_value"),
                 F.lag("parent").over(w).alias("p_parent"),
                 F.lag("desc").over(w).alias("p_desc"),
                 F.lag("correct").over(w).alias("p_correct"),
                 F.lag("epoch").over(w).alias("p_epoch"),
                 F.lead("epoch").over(w).alias("n_epoch"),
                 F.row_number().over(w).alias("rn"),
                 F.sum(own).over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow)).alias("own_cum"))
    first = F.col("p_t").isNull()
    x = S.select(
        "*", first.alias("first"), own.alias("own"),
        (first | (F.col("p_epoch") != F.col("epoch"))).alias("first_in_epoch"),
        (F.col("n_epoch").isNull() | (F.col("n_epoch") != F.col("epoch"))).alias("last_in_epoch"),
        (first | (F.col("value") != F.col("p_value"))).alias("value_start"),
        (~first & (F.col("value") != F.col("p_value"))).alias("value_chg"),
        (F.col("correct") & (first | ~F.col("p_correct"))).alias("correct_start"),
        (~first & (F.col("correct") != F.col("p_correct"))).alias("correct_chg"),
        (~first & ~F.col("parent").eqNullSafe(F.col("p_parent"))).alias("parent_chg"),
        (~first & ~F.col("desc").eqNullSafe(F.col("p_desc"))).alias("desc_chg"))
    keep = (F.col("first_in_epoch") | F.col("last_in_epoch") | F.col("value_start") | F.col("correct_start")
            | F.col("correct_chg") | F.col("parent_chg") | F.col("desc_chg"))
    return x.where(keep).drop("p_t", "p_parent", "p_desc", "p_epoch", "n_epoch")


def node_epochs(f):
    """One row per (node, epoch) the node has rows in (f = flags(S)):
    numeric aggregates only (a hash aggregate). The node's final state in
    the epoch is in finals()."""
    one = lambda c: F.sum(F.when(c, 1).otherwise(0))  # noqa: E731
    return f.groupBy("node", "epoch").agg(
        (F.max("rn") - F.min("rn") + 1).alias("rows"),
        (F.max("own_cum") - F.min(F.col("own_cum") - F.col("own"))).alias("own_rows"),
        F.min("t").alias("first_t"),
        F.max("t").alias("last_t"),
        F.max(F.when(F.col("value_start"), F.col("t"))).alias("last_value_start"),
        F.max(F.when(F.col("correct_start"), F.col("t"))).alias("last_correct_start"),
        one(F.col("parent_chg")).alias("parent_changes"),
        one(F.col("value_chg")).alias("root_changes"),
        one(F.col("desc_chg")).alias("desc_changes"))


def finals(f):
    """The last row of each (node, epoch): the node's state at the end of it."""
    return f.where(F.col("last_in_epoch")).select(
        "node", "epoch", F.struct(*[F.col(c) for c in CARRIED], "correct", "comp", "expected_desc").alias("final"))


def bucket_deltas(f, t_start, bucket):
    """Per (bucket, value): the change of the number of nodes whose latest
    tree value is `value` (dn), and on value-null rows the change of the
    number of correct nodes (dc) and of nodes that have reported (dr)."""
    c = F.col("correct").cast("int")
    pc = F.coalesce(F.col("p_correct").cast("int"), F.lit(0))
    f = f.filter(F.col("first") | F.col("value_chg") | F.col("correct_chg"))
    ev = F.struct(F.lit(None).cast("string").alias("v"), F.lit(0).alias("dn"), (c - pc).alias("dc"),
                  F.col("first").cast("int").alias("dr"))
    plus = F.struct(F.col("value").alias("v"), F.lit(1).alias("dn"), F.lit(0).alias("dc"), F.lit(0).alias("dr"))
    minus = F.struct(F.col("p_value").alias("v"), F.lit(-1).alias("dn"), F.lit(0).alias("dc"), F.lit(0).alias("dr"))
    events = (F.when(F.col("first"), F.array(ev, plus))
              .when(F.col("value_chg"), F.array(ev, plus, minus))
              .otherwise(F.array(ev)))
    b = F.floor((F.col("t") - F.lit(t_start)) / F.lit(bucket)).cast("long")
    return (f.select(b.alias("bucket"), F.explode(events).alias("e"))
            .groupBy("bucket", F.col("e.v").alias("value"))
            .agg(F.sum("e.dn").alias("dn"), F.sum("e.dc").alias("dc"), F.sum("e.dr").alias("dr")))


def series_from_deltas(rows, nbuckets):
    """Rebuild (bucket, reported, max_agree, correct) for every bucket from
    bucket_deltas rows (dicts)."""
    by_bucket = {}
    for r in rows:
        by_bucket.setdefault(r["bucket"], []).append(r)
    counts = {}
    heap = []
    reported = correct = 0
    out = []
    for k in range(nbuckets):
        for r in by_bucket.get(k, ()):
            if r.get("value") is None:
                correct += r.get("dc") or 0
                reported += r.get("dr") or 0
            elif r.get("dn"):
                v = r["value"]
                counts[v] = counts.get(v, 0) + r["dn"]
                heapq.heappush(heap, (-counts[v], v))
        while heap and counts.get(heap[0][1], 0) != -heap[0][0]:
            heapq.heappop(heap)
        best = -heap[0][0] if heap else 0
        out.append({"bucket": k, "reported": reported, "max_agree": max(0, best), "correct": correct})
    return out


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


def scopes(ne_rows, final_rows, epochs, t_start):
    """From node_epochs rows (dicts) to {scope: {node: row}} with scope -1
    the whole run and scope e the rows of epoch e (its boundary row
    included); each row has rows, own_rows, first_t, last_t, final,
    tree_since, snake_since and the change counts."""
    per_node = {}
    for r in ne_rows:
        per_node.setdefault(r["node"], {})[r["epoch"]] = r
    for r in final_rows:
        per_node[r["node"]][r["epoch"]]["final"] = r["final"]
    out = {-1: {}}
    for n, eps in per_node.items():
        cum_v = cum_c = None
        whole = {"rows": 0, "own_rows": 0, "first_t": None, "last_t": None, "parent_changes": 0,
                 "root_changes": 0, "desc_changes": 0}
        for e in sorted(eps):
            r = eps[e]
            if r.get("last_value_start") is not None:
                cum_v = r["last_value_start"] if cum_v is None else max(cum_v, r["last_value_start"])
            if r.get("last_correct_start") is not None:
                cum_c = r["last_correct_start"] if cum_c is None else max(cum_c, r["last_correct_start"])
            start = t_start if e == 0 or epochs[e].start is None else epochs[e].start
            final = r["final"]
            row = dict(r)
            row["tree_since"] = None if cum_v is None else max(cum_v, start)
            row["snake_since"] = max(cum_c, start) if (final.get("correct") and cum_c is not None) else None
            out.setdefault(e, {})[n] = row
            for k in ("rows", "own_rows", "parent_changes", "root_changes", "desc_changes"):
                whole[k] += r.get(k) or 0
            whole["first_t"] = r["first_t"] if whole["first_t"] is None else min(whole["first_t"], r["first_t"])
            whole["last_t"] = r["last_t"] if whole["last_t"] is None else max(whole["last_t"], r["last_t"])
            whole["final"] = final
            whole["tree_since"] = cum_v
            whole["snake_since"] = cum_c if final.get("correct") else None
        out[-1][n] = whole
    return out


def rollup(by_scope, nodes, epochs, comps, t_start, t_end, has_topology=True):
    """Combine the per-(scope, node) rows (already small) into mesh-level
    figures. Returns (run, per_epoch, per_node, down) with down[e] = nodes
    down in epoch e."""
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
        if not all(scope_rows[m]["final"].get("correct") for m in members):
            return None
        return max(scope_rows[m]["snake_since"] for m in members)

    # a mesh whose links did not all come up (ports full, partitions) may
    # end in several components: each agrees on its own root, as in the
    # simulator's truth (judged on the links that came up)
    end_groups = {}
    for m in alive_end:
        end_groups.setdefault(comps[-1].get(m, m) if comps else m, []).append(m)
    held = [tree_held(whole, members) for members in end_groups.values()]
    t_tree = None if not held or any(x is None for x in held) else max(held)
    t_snake = snake_held(whole, alive_end)
    correct_final = sum(1 for m in alive_end if m in whole and whole[m]["final"].get("correct"))
    run = {
        "tree_converged_at": t_tree,
        "snake_converged_at": t_snake,
        "tree_converged_s": None if t_tree is None else t_tree - t_start,
        "snake_converged_s": None if t_snake is None else t_snake - t_start,
        "snake_correct_final": correct_final,
        "snake_correct_ratio_final": (correct_final / float(n)) if n else None,
        "nodes_down_at_end": len(down[-1]),
        "components_at_end": len(end_groups),
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
    per_node = dict((m, whole.get(m)) for m in nodes)
    return run, per_epoch, per_node, down
