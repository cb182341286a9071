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

from pyspark.sql import functions as F

from host_tools.pipeline import sqlq

CARRIED = ("value", "root", "root_seq", "desc", "parent", "depth", "peers", "profile")


def epoch_sql(boundaries, tcol="t", strict=False):
    """Index of the topology epoch in force at time `tcol` (the number of
    epoch starts <= t; < t with strict), as SQL text: a binary search of
    CASE WHENs (compiled code, no per-row lambda) in one expression, not a
    tree of Column objects (a py4j round trip per node)."""
    bs = [float(b) for b in boundaries]
    op = "<" if strict else "<="

    def search(lo, hi):   # number of starts among bs[lo:hi] that are <= (<) t, plus lo
        if lo == hi:
            return str(lo)
        mid = (lo + hi) // 2
        # the D suffix makes an exact DOUBLE literal (sqlq.double)
        return "CASE WHEN %s %s `%s` THEN %s ELSE %s END" % (sqlq.double(bs[mid]), op, tcol, search(mid + 1, hi),
                                                           search(lo, mid))

    return "CAST(%s AS INT)" % search(0, len(bs))


def epoch_col(boundaries, tcol="t", strict=False):
    """epoch_sql as a Column."""
    return F.expr(epoch_sql(boundaries, tcol, strict))


def state_stream(boundaries):
    """S as SQL text over {states} (valid `state` records: node, t, seq,
    root, root_seq, desc, parent, depth, peers_n, profile) and {expected}
    ((epoch, node, comp, expected_desc), small): one row per state record
    and boundary row, with epoch, boundary, correct."""
    st = ("SELECT node, t, seq, concat_ws('/', root, CAST(root_seq AS STRING)) AS value, root, root_seq, `desc`,"
          " parent, depth, peers_n AS peers, profile FROM {states}")
    carried = ", ".join("`%s`" % c for c in CARRIED)
    if not boundaries:
        s_rows = "SELECT node, t, seq, %s, 0 AS epoch, false AS boundary FROM (%s)" % (carried, st)
    else:
        n_epochs = len(boundaries) + 1
        w = "OVER (PARTITION BY node ORDER BY t, seq)"
        st = "SELECT *, %s AS epoch, %s AS elo FROM (%s)" % (epoch_sql(boundaries), epoch_sql(boundaries, strict=True), st)
        st = "SELECT *, lead(t) %s AS next_t, lead(elo) %s AS next_elo FROM (%s)" % (w, w, st)
        # Boundary k carries the state of the node's latest row with t <= b_k:
        # row r generates the boundaries strictly between itself and the
        # node's next row (all later ones if it is the last), and the one at
        # its own time if t == b_k and it is the last row at that time.
        lo = "(epoch + 1)"
        hi = "coalesce(next_elo, %d)" % (n_epochs - 1)
        exact = "(epoch > elo AND (next_t IS NULL OR next_t != t))"
        first = "CASE WHEN %s THEN epoch ELSE %s END" % (exact, lo)
        # k = 0 stands for the row itself, k >= 1 for the boundary of epoch k
        ks = ("CASE WHEN %s <= %s THEN concat(array(0), sequence(%s, %s)) ELSE array(0) END"
              % (first, hi, first, hi))
        starts = "array(%s)" % ", ".join(sqlq.double(b) for b in boundaries)   # starts[k-1] = start of epoch k
        x = "SELECT *, explode(%s) AS k FROM (%s)" % (ks, st)
        s_rows = ("SELECT node, CASE WHEN k = 0 THEN t ELSE element_at(%s, k) END AS t,"
                  " CASE WHEN k = 0 THEN seq ELSE CAST(-1 AS BIGINT) END AS seq, %s,"
                  " CAST(CASE WHEN k = 0 THEN epoch ELSE k END AS INT) AS epoch, NOT (k = 0) AS boundary FROM (%s)"
                  % (starts, carried, x))
    return ("SELECT /*+ BROADCAST(e) */ *, `desc` <=> expected_desc AS correct"
            " FROM (%s) LEFT JOIN {expected} e USING (epoch, node)" % s_rows)


# the columns of S (state_stream), in order
S_COLUMNS = ("epoch", "node", "t", "seq") + CARRIED + ("boundary", "comp", "expected_desc", "correct")


def flagged(states, boundaries, expected):
    """flags(state_stream) as one SQL query (sqlq): the DataFrame f that
    node_epochs, finals and bucket_deltas read (cached by the caller)."""
    return sqlq.query(states.sparkSession, flags(state_stream(boundaries)), states=states, expected=expected)


def flags(S):
    """SQL text over the SQL text S (state_stream): the rows of S that
    matter, with what changed at each: a node's first and last row in every epoch, and every row where its tree value,
    correctness, parent or descending key changes. One window over the
    node-partitioned, (t, seq)-ordered rows; running counts carry the
    number of rows (and of the node's own rows) so the dropped rows are
    still counted. In a healthy mesh this is a few rows per node and epoch,
    whatever the number of records."""
    w = "PARTITION BY node ORDER BY t, seq"
    own = "CAST(NOT boundary AS BIGINT)"
    lagged = ("SELECT *, lag(t) OVER ({w}) AS p_t, lag(value) OVER ({w}) AS p_value,"
              " lag(parent) OVER ({w}) AS p_parent, lag(`desc`) OVER ({w}) AS p_desc,"
              " lag(correct) OVER ({w}) AS p_correct, lag(epoch) OVER ({w}) AS p_epoch,"
              " lead(epoch) OVER ({w}) AS n_epoch, row_number() OVER ({w}) AS rn,"
              " sum({own}) OVER ({w} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS own_cum FROM ({S})"
              .format(w=w, own=own, S=S))
    first = "(p_t IS NULL)"
    x = ("SELECT *, {first} AS `first`, {own} AS own,"
         " ({first} OR p_epoch != epoch) AS first_in_epoch,"
         " (n_epoch IS NULL OR n_epoch != epoch) AS last_in_epoch,"
         " ({first} OR value != p_value) AS value_start,"
         " (NOT {first} AND value != p_value) AS value_chg,"
         " (correct AND ({first} OR NOT p_correct)) AS correct_start,"
         " (NOT {first} AND correct != p_correct) AS correct_chg,"
         " (NOT {first} AND NOT parent <=> p_parent) AS parent_chg,"
         " (NOT {first} AND NOT `desc` <=> p_desc) AS desc_chg FROM ({lagged})"
         .format(first=first, own=own, lagged=lagged))
    keep = ("first_in_epoch OR last_in_epoch OR value_start OR correct_start OR correct_chg OR parent_chg"
            " OR desc_chg")
    cols = list(S_COLUMNS) + ["p_value", "p_correct", "rn", "own_cum", "first", "own", "first_in_epoch",
                              "last_in_epoch", "value_start", "value_chg", "correct_start", "correct_chg",
                              "parent_chg", "desc_chg"]
    return "SELECT %s FROM (%s) WHERE %s" % (", ".join("`%s`" % c for c in cols), x, keep)


def node_epochs(f):
    """One row per (node, epoch) the node has rows in (f = flagged()):
    numeric aggregates only (a hash aggregate). The node's final state in
    the epoch is in finals(). f is cached: these read it as a DataFrame (a
    query over a view of it would not find the cache)."""
    return f.groupBy("node", "epoch").agg(*[F.expr(x) for x in (
        "max(rn) - min(rn) + 1 AS `rows`", "max(own_cum) - min(own_cum - own) AS own_rows",
        "min(t) AS first_t", "max(t) AS last_t",
        "max(CASE WHEN value_start THEN t END) AS last_value_start",
        "max(CASE WHEN correct_start THEN t END) AS last_correct_start",
        "sum(CASE WHEN parent_chg THEN 1 ELSE 0 END) AS parent_changes",
        "sum(CASE WHEN value_chg THEN 1 ELSE 0 END) AS root_changes",
        "sum(CASE WHEN desc_chg THEN 1 ELSE 0 END) AS desc_changes")])


def finals(f):
    """The last row of each (node, epoch): the node's state at the end of it."""
    return f.where("last_in_epoch").selectExpr(
        "node", "epoch", "struct(%s, correct, comp, expected_desc) AS final" % ", ".join("`%s`" % c for c in CARRIED))


def bucket_deltas(f, t_start, bucket):
    """Per (bucket, value): the change of the number of nodes whose latest
    tree value is `value` (dn), and on value-null rows the change of the
    number of correct nodes (dc) and of nodes that have reported (dr)."""
    ev = ("struct(CAST(NULL AS STRING) AS v, 0 AS dn,"
          " CAST(correct AS INT) - coalesce(CAST(p_correct AS INT), 0) AS dc, CAST(`first` AS INT) AS dr)")
    plus = "struct(value AS v, 1 AS dn, 0 AS dc, 0 AS dr)"
    minus = "struct(p_value AS v, -1 AS dn, 0 AS dc, 0 AS dr)"
    events = ("CASE WHEN `first` THEN array({ev}, {plus}) WHEN value_chg THEN array({ev}, {plus}, {minus})"
              " ELSE array({ev}) END".format(ev=ev, plus=plus, minus=minus))
    b = "CAST(floor((t - %s) / %s) AS BIGINT)" % (sqlq.double(t_start), sqlq.double(bucket))
    return (f.where("`first` OR value_chg OR correct_chg")
            .selectExpr("%s AS `bucket`" % b, "explode(%s) AS e" % events)
            .groupBy("bucket", F.expr("e.v AS value"))
            .agg(F.expr("sum(e.dn) AS dn"), F.expr("sum(e.dc) AS dc"), F.expr("sum(e.dr) AS dr")))


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
