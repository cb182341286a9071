"""Is the mesh healthy, and where not? The rules behind the report's verdict.

Pure functions over what `analyze` wrote (summary.json and one row per node):
no Spark, no plotting. Every rule and threshold is here, in one place, and
documented in docs/guides/PIPELINE.md ("Health verdict"):

    rows = load_nodes(out_dir, summary)      # one dict per node
    judge_nodes(rows, summary)               # row["issues"], row["status"]
    level, reasons = verdict(summary, rows)  # "healthy" / "degraded" / "broken"

A rule that has no data to look at (no pings, no heap figures, no capacity
telemetry) does not pass or fail: it adds a note saying what is unknown.
"""
import json
import math
import os

HEALTHY, DEGRADED, BROKEN = "healthy", "degraded", "broken"
UNKNOWN = "unknown"   # a node we cannot judge (no state record)
NOTE = "note"         # a reason that does not change the verdict
LEVELS = (HEALTHY, DEGRADED, BROKEN)
_RANK = {NOTE: 0, HEALTHY: 0, UNKNOWN: 1, DEGRADED: 2, BROKEN: 3}

# Thresholds for a field mesh (docs/guides/PIPELINE.md, "Health verdict").
THRESHOLDS = {
    "min_pings": 10,                  # fewer pings: delivery is a note, not a verdict
    "delivery_degraded": 0.95,        # ping delivery below this: degraded
    "delivery_broken": 0.80,          # ... below this: broken
    "snake_wrong_broken": 0.10,       # share of judged nodes with a wrong descending key: broken
    "lost_broken": 0.25,              # share of nodes down or silent at the end: broken
    "node_drop_ratio": 0.02,          # a node's problem drops / frames it received: degraded
    "node_drop_min": 10,              # ... and at least this many problem drops
    "mesh_drop_ratio": 0.10,          # all problem drops / all frames received: broken
    "heap_low": 16 * 1024,            # free heap (bytes) below this on a node: degraded
    "rejected_ratio": 0.01,           # rejected telemetry lines above this share: note
    "attack_min": 50,                 # a defence acting this often in the run: an attack (degraded)
}

# Drops that are the protocol working as designed (duplicate suppression,
# loop prevention, stale bootstraps and wakeups): counted, never a problem.
# hop_limit is here because every trace ends its probes that way; pings that
# die of it show up in the delivery figure (and its hint) instead.
ROUTINE_DROPS = frozenset((
    "wakeup_dup", "wakeup_root", "wakeup_hop_limit", "bootstrap_root", "bootstrap_replay",
    "bootstrap_self", "watermark", "hop_limit", "wakeup_budget",
))
# Hostile load (telemetry `defence` counters, firmware node.py "Admission" /
# "Receiving", router wakeup budgets): the attack each counter is evidence
# of. A mesh under one is degraded and the verdict names it; below
# attack_min counts in the run a defence acting is a note.
ATTACKS = (
    ("stalled or repeated handshakes holding a node's handshake slots",
     ("hs_source_limit", "hs_evicted", "hs_deadline", "hs_backoff")),
    ("links trickling frames to hold a node's receive buffers", ("rx_stall", "rx_slow")),
    ("a wakeup storm", ("wakeup_budget", "relay_shed")),
)
# Drops that lose traffic frames: named when delivery is low.
TRAFFIC_LOSS = ("hop_limit", "no_route", "loop", "queue_full", "no_buffer", "route_table_full", "no_memory")
# The tables that bound what the mesh can do (contract 2, `capacity`); every
# other table in `occupancy` is a cache that is meant to run full.
BOUNDING_TABLES = ("routes", "peers", "depth")
CACHE_TABLES_NOTE = ("sigcache, wakeups and coords are caches that are meant to run full: "
                     "their occupancy and evictions are shown for information only")


def is_problem_drop(reason):
    return reason not in ROUTINE_DROPS


# -- small helpers -----------------------------------------------------------------

def clean(x):
    """None for None/NaN/pandas NA, else x (numpy scalars become Python ones)."""
    if x is None:
        return None
    try:
        if x != x:      # NaN
            return None
    except (TypeError, ValueError):   # pandas.NA compares to NA
        return None
    if hasattr(x, "item") and not isinstance(x, (list, dict, str)):
        try:
            return x.item()
        except (AttributeError, ValueError):
            pass
    return x


def clean_name(x):
    x = clean(x)
    if not isinstance(x, str):
        return None
    x = x.strip()
    return x or None


def short_keys(keys, minimum=8):
    """{key: shortest unique hex prefix of at least `minimum` digits}."""
    keys = sorted(set(k for k in keys if k))
    out = {}
    for i, k in enumerate(keys):
        n = minimum
        for j in (i - 1, i + 1):
            if 0 <= j < len(keys):
                o = keys[j]
                common = 0
                while common < min(len(k), len(o)) and k[common] == o[common]:
                    common += 1
                n = max(n, common + 1)
        out[k] = k[:n]
    return out


def label(row):
    """What the page calls a node: its name, else its short key."""
    return row.get("name") or row.get("short") or (row.get("node") or "?")[:8]


# -- per-node rows -----------------------------------------------------------------

# The fields of one node (OUT/nodes.json, written by `analyze`; docs/guides/PIPELINE.md):
# silent_s = seconds between the node's last record and the end of the data;
# root_ok / snake_ok: true, false, or null when not judged (no state, down);
# capacity = {table: {used, capacity, max_used, refused}} for routes/peers/depth.
ROW_FIELDS = (
    "node", "name", "profile", "records", "silent_s", "down_at_end",
    "root", "root_seq", "parent", "depth", "desc", "expected_desc", "peers", "links",
    "root_ok", "snake_ok", "drops", "drops_total", "rx_total", "mem_free", "mem_free_min",
    "capacity", "restarts", "control_bytes_per_s", "anomalies",
)


def has_state(r):
    """The node sent at least one `state` record (its final root is known)."""
    return r.get("root") is not None or bool(r.get("state_records"))


def load_nodes(out_dir, summary=None):
    """One dict per node from OUT/nodes.json (written by `analyze`): the
    fields of ROW_FIELDS (missing ones None, never NaN), plus `short`, the
    shortest unique key prefix. Raises InputError when there is no readable
    nodes.json (an analysis made by an older snakemesh)."""
    from host_tools.errors import InputError
    path = os.path.join(out_dir, "nodes.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError("%s: no readable nodes.json (%s); re-run `snakemesh analyze` with this version"
                         % (out_dir, getattr(e, "strerror", None) or e))
    rows = data.get("nodes") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise InputError("%s: nodes.json has no node list; re-run `snakemesh analyze`" % out_dir)
    out = []
    for r in rows:
        if not isinstance(r, dict) or not isinstance(r.get("node"), str):
            continue
        row = dict((k, clean(r.get(k))) for k in ROW_FIELDS)
        for k in r:
            if k not in row:
                row[k] = clean(r[k])
        row["name"] = clean_name(row.get("name"))
        row["profile"] = clean_name(row.get("profile"))
        an = row.get("anomalies")
        if isinstance(an, str):
            an = [a for a in an.split(",") if a]
        row["anomalies"] = list(an or [])
        for k in ("drops", "capacity", "links"):
            if not isinstance(row.get(k), dict):
                row[k] = {} if k != "links" else None
        out.append(row)
    shorts = short_keys([r["node"] for r in out])
    for r in out:
        r["short"] = shorts.get(r["node"], r["node"][:8])
    return out


def _read(out_dir, name, columns):
    """Columns of a partitioned table as a DataFrame, or None if absent or unreadable."""
    p = os.path.join(out_dir, name)
    if not os.path.exists(p):
        return None
    try:
        import pandas as pd
        return pd.read_parquet(p, columns=list(columns))
    except Exception:   # a damaged or foreign table: the figures stay unknown
        return None


# -- rules -------------------------------------------------------------------------

def _issue(level, code, text):
    return {"level": level, "code": code, "text": text}


def _pct(x):
    return "%.1f%%" % (100.0 * x)


def _bytes(n):
    if n is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def problem_drops(row):
    return dict((k, v) for k, v in (row.get("drops") or {}).items() if v and is_problem_drop(k))


def capacity_warnings(summary, rows=None):
    """[(node, table, used, capacity, refused)] from summary.json's
    `capacity_warnings` (contract 2: `analyze` applies the rule); [] when
    the analysis has none."""
    out = []
    for w in summary.get("capacity_warnings") or []:
        if isinstance(w, dict) and w.get("node"):
            out.append((w["node"], w.get("table"), clean(w.get("used")), clean(w.get("capacity")),
                        clean(w.get("refused"))))
    return out


# Drops by which a table that refused entries shows in traffic: routes it
# could not hold, or could not forward on.
CAPACITY_LOSS = ("route_table_full", "no_route")


def capacity_harm(summary, th=None):
    """What the mesh shows that a refusing table may have caused, or None:
    a table that refused entries is a problem only when the mesh lost
    something (delivery below the degraded threshold, a wrong descending
    key at the end, routes refused or traffic with no route)."""
    th = dict(THRESHOLDS, **(th or {}))
    parts = []
    pings, ratio = summary.get("pings") or 0, summary.get("ping_delivery_ratio")
    if pings >= th["min_pings"] and ratio is not None and ratio < th["delivery_degraded"]:
        parts.append("ping delivery is %s" % _pct(ratio))
    snake = summary.get("snake_correct_ratio_final")
    if snake is not None and snake < 1.0:
        parts.append("the snake is %s correct" % _pct(snake))
    lost = dict((k, v) for k, v in (summary.get("drops_by_reason") or {}).items() if v and k in CAPACITY_LOSS)
    if lost:
        parts.append("frames were dropped for %s" % _top(lost))
    return " and ".join(parts) or None


def judge_nodes(rows, summary, th=None):
    """Adds row["issues"] (list of {level, code, text}) and row["status"]
    (healthy / degraded / broken / unknown) to every row."""
    th = dict(THRESHOLDS, **(th or {}))
    harm = capacity_harm(summary, th)
    caps = {}
    for node, table, used, cap, refused in capacity_warnings(summary, rows):
        caps.setdefault(node, []).append((table, used, cap, refused))
    for r in rows:
        issues = []
        an = set(r.get("anomalies") or [])
        state = has_state(r)
        if r.get("down_at_end"):
            issues.append(_issue(BROKEN, "down", "down: no links and no state record in the last topology epoch"))
        elif not r.get("records"):
            issues.append(_issue(UNKNOWN, "no_telemetry", "in the topology but sent no telemetry"))
        elif not state:
            issues.append(_issue(UNKNOWN, "no_state", "sent no state record: tree and snake unknown"))
        if "silent" in an and not r.get("down_at_end"):
            issues.append(_issue(BROKEN, "silent", "silent for the last %.0f s of the data" % (r.get("silent_s") or 0)))
        if state and not r.get("down_at_end"):
            if r.get("root_ok") is False:
                issues.append(_issue(BROKEN, "root", "on another root than the rest of its component"))
            if r.get("snake_ok") is False:
                issues.append(_issue(BROKEN, "snake", "wrong descending neighbour at the end"))
        pd_ = problem_drops(r)
        n_pd = sum(pd_.values())
        rx = r.get("rx_total")
        if pd_.get("no_memory"):
            issues.append(_issue(DEGRADED, "no_memory", "%d frames dropped for lack of memory" % pd_["no_memory"]))
        if n_pd >= th["node_drop_min"] and rx and n_pd > th["node_drop_ratio"] * rx:
            top = ", ".join("%s %d" % kv for kv in sorted(pd_.items(), key=lambda kv: -kv[1])[:3])
            issues.append(_issue(DEGRADED, "drops", "dropped %d frames (%s), %s of the %d it received"
                                 % (n_pd, top, _pct(n_pd / float(rx)), rx)))
        heap = r.get("mem_free_min")
        if heap is not None and heap < th["heap_low"]:
            issues.append(_issue(DEGRADED, "heap", "free heap fell to %s" % _bytes(heap)))
        for table, used, cap, refused in caps.get(r["node"], []):
            text = "%s table %s/%s" % (table, "?" if used is None else used, "?" if cap is None else cap)
            if not refused:
                # a full table that turned nothing away cost the mesh nothing
                issues.append(_issue(NOTE, "capacity", text + ", nothing refused"))
                continue
            text += ", %d refused" % refused
            if harm:
                issues.append(_issue(DEGRADED, "capacity", text + " while " + harm))
            else:
                issues.append(_issue(NOTE, "capacity", text + ", no effect on the mesh seen"))
        flaps = [a.split("_")[1] for a in ("flapping_parent", "flapping_root") if a in an]
        if flaps:
            issues.append(_issue(DEGRADED, "flapping", "%s changed again and again within one topology epoch"
                                 % " and ".join(flaps)))
        if "sanity_fail" in an:
            issues.append(_issue(DEGRADED, "sanity", "sent sanity_fail events"))
        if r.get("restarts"):
            issues.append(_issue(DEGRADED, "restart", "restarted %d time%s during the run"
                                 % (r["restarts"], "" if r["restarts"] == 1 else "s")))
        r["issues"] = sorted(issues, key=lambda i: -_RANK[i["level"]])
        r["status"] = max([i["level"] for i in issues if i["level"] != NOTE] or [HEALTHY],
                          key=lambda lv: _RANK[lv])
    return rows


def severity(r):
    """How much a node did wrong within its status, for ordering: the sum of
    its issue levels, then frames it dropped for problems plus entries its
    tables refused."""
    ranks = sum(_RANK.get(i["level"], 0) for i in r.get("issues") or [])
    refused = sum((c.get("refused") or 0) for c in (r.get("capacity") or {}).values() if isinstance(c, dict))
    return ranks, sum(problem_drops(r).values()) + refused


def sort_worst_first(rows):
    """Broken, degraded, unknown, healthy; within each the most severe
    first (severity), then by name."""
    order = {BROKEN: 0, DEGRADED: 1, UNKNOWN: 2, HEALTHY: 3}

    def key(r):
        ranks, amount = severity(r)
        return (order.get(r.get("status"), 3), -ranks, -amount, -len(r.get("issues") or []),
                label(r).lower(), r["node"])
    return sorted(rows, key=key)


def _who(rows, limit=6):
    names = [label(r) for r in rows]
    more = len(names) - limit
    return ", ".join(names[:limit]) + (" and %d more" % more if more > 0 else "")


def already_converged(summary, what):
    """True when the data starts with the tree agreed (what="tree") or the
    snake correct ("snake") and one topology epoch: a capture of a settled
    mesh, with no convergence time to report."""
    return bool(summary.get("%s_from_start" % ("tree_agreed" if what == "tree" else "snake_correct"))) \
        and len(summary.get("epochs") or []) <= 1


def _who_for(rows, limit=6):
    """Nodes with how long each has not been heard from (silent_s)."""
    shown = ", ".join("%s for %.0f s" % (label(r), r.get("silent_s") or 0) for r in rows[:limit])
    return shown + (" and %d more" % (len(rows) - limit) if len(rows) > limit else "")


def verdict(summary, rows, th=None):
    """(level, reasons): level is healthy / degraded / broken; reasons is a
    list of {level, code, text, nodes} (worst first). Call judge_nodes first."""
    th = dict(THRESHOLDS, **(th or {}))
    reasons = []

    def add(level, code, text, nodes=()):
        reasons.append({"level": level, "code": code, "text": text, "nodes": [r["node"] for r in nodes]})

    n = len(rows)
    with_state = [r for r in rows if has_state(r)]
    down = [r for r in rows if r.get("down_at_end")]
    alive = [r for r in rows if not r.get("down_at_end")]
    if not n or not with_state:
        add(BROKEN, "no_state", "no node reported its state: nothing to judge the mesh by")
        return BROKEN, reasons

    # tree: agreed per component in the last topology epoch
    epochs = summary.get("epochs") or []
    last = epochs[-1] if epochs else {}
    off_root = [r for r in alive if r.get("root_ok") is False]
    tree_t = last.get("tree_converged_s") if epochs else summary.get("tree_converged_s")
    unknown = [r for r in alive if not has_state(r)]
    if off_root:
        add(BROKEN, "tree", "spanning tree not agreed at the end: %d node%s on another root than the rest "
            "of their component (%s)" % (len(off_root), "" if len(off_root) == 1 else "s", _who(off_root)),
            off_root)
    elif tree_t is None and unknown:
        add(NOTE, "tree", "spanning tree agreed among the %d nodes that reported a state"
            % (len(alive) - len(unknown)))
    elif tree_t is None:
        add(BROKEN, "tree", "spanning tree not agreed at the end of the data")
    elif already_converged(summary, "tree"):
        add(HEALTHY, "tree", "spanning tree already agreed when recording began, and held")
    else:
        add(HEALTHY, "tree", "spanning tree agreed %.2f s after the %s" % (
            tree_t, "start" if len(epochs) <= 1 else "last topology change"))

    # snake
    judged = [r for r in alive if r.get("snake_ok") is not None]
    wrong = [r for r in judged if r.get("snake_ok") is False]
    if wrong:
        share = len(wrong) / float(len(judged))
        add(BROKEN if share >= th["snake_wrong_broken"] else DEGRADED, "snake",
            "snake not converged: %d of %d nodes have the wrong descending neighbour at the end (%s)"
            % (len(wrong), len(judged), _who(wrong)), wrong)
    elif judged:
        snake_t = last.get("snake_converged_s") if epochs else summary.get("snake_converged_s")
        add(HEALTHY, "snake", "snake correct on all %d nodes%s" % (
            len(judged), " (already when recording began)" if already_converged(summary, "snake") else
            "" if snake_t is None else " (%.2f s after the %s)" % (
                snake_t, "start" if len(epochs) <= 1 else "last topology change")))

    # nodes that cannot be judged
    if unknown:
        add(DEGRADED, "unknown", "%d node%s sent no state record, so %s unknown (%s)" % (
            len(unknown), "" if len(unknown) == 1 else "s", "its health is" if len(unknown) == 1 else
            "their health is", _who(unknown)), unknown)

    # nodes lost: down or silent at the end
    silent = [r for r in alive if "silent" in (r.get("anomalies") or [])]
    lost = down + silent
    if lost:
        share = len(lost) / float(n)
        parts = []
        if down:
            parts.append("%d down (%s)" % (len(down), _who(down)))
        if silent:
            parts.append("%d silent (%s)" % (len(silent), _who_for(silent)))
        add(BROKEN if share >= th["lost_broken"] else DEGRADED, "lost",
            "nodes lost at the end: " + "; ".join(parts), lost)

    # ping delivery
    pings = summary.get("pings") or 0
    ratio = summary.get("ping_delivery_ratio")
    if pings and ratio is not None:
        text = "ping delivery %s (%d of %d)" % (_pct(ratio), summary.get("pings_ok") or 0, pings)
        if pings < th["min_pings"]:
            add(NOTE, "delivery", text + ": too few pings to judge (fewer than %d)" % th["min_pings"])
        elif ratio < th["delivery_broken"]:
            add(BROKEN, "delivery", text + " is below %s" % _pct(th["delivery_broken"]) + _drop_hint(summary))
        elif ratio < th["delivery_degraded"]:
            add(DEGRADED, "delivery", text + " is below %s" % _pct(th["delivery_degraded"]) + _drop_hint(summary))
        else:
            add(HEALTHY, "delivery", text)
    else:
        add(NOTE, "delivery", "no pings in the telemetry: delivery unknown")

    # drops
    by_reason = summary.get("drops_by_reason") or {}
    problem = dict((k, v) for k, v in by_reason.items() if v and is_problem_drop(k))
    rx_all = sum((r.get("rx_total") or 0) for r in rows)
    droppers = [r for r in rows if any(i["code"] in ("drops", "no_memory") for i in r.get("issues") or [])]
    if problem and rx_all and sum(problem.values()) > th["mesh_drop_ratio"] * rx_all:
        add(BROKEN, "drops", "%d frames dropped for problems (%s): %s of all frames received" % (
            sum(problem.values()), _top(problem), _pct(sum(problem.values()) / float(rx_all))), droppers)
    elif not droppers and not rx_all and not by_reason:
        add(NOTE, "drops", "no counters in the telemetry: drops unknown")
    elif not droppers:
        add(HEALTHY, "drops", "no node drops more than %s of the frames it receives for problems"
            % _pct(th["node_drop_ratio"]) + (" (%d problem drops in all)" % sum(problem.values()) if problem else ""))
    else:
        add(DEGRADED, "drops", "%d node%s drop more than %s of the frames they receive (at least %d), or ran out of "
            "memory (%s)" % (len(droppers), "" if len(droppers) == 1 else "s", _pct(th["node_drop_ratio"]),
                             th["node_drop_min"], _who(droppers)),
            droppers)

    # capacity of the tables that bound the mesh
    # judged by what the tables did to the mesh: a full table is the design
    # working (the profile sizes them for the mesh), a refusal matters when
    # the mesh lost something
    cw = capacity_warnings(summary, rows)
    refusing = [w for w in cw if w[4]]
    if refusing:
        tables = sorted(set(w[1] for w in refusing if w[1]))
        hit = _worst_refusers(rows, refusing)
        n_ref = sum(w[4] for w in refusing)
        text = "%s table%s refused %d entr%s on %d node%s (%s)" % (
            "/".join(tables), "" if len(tables) == 1 else "s", n_ref, "y" if n_ref == 1 else "ies",
            len(hit), "" if len(hit) == 1 else "s", _who(hit))
        harm = capacity_harm(summary, th)
        if harm:
            add(DEGRADED, "capacity", text + " while " + harm, hit)
        else:
            add(HEALTHY, "capacity", text + "; the mesh lost nothing by it")
    elif cw:
        tables = sorted(set(w[1] for w in cw if w[1]))
        add(HEALTHY, "capacity", "%s table%s full on %d node%s, nothing refused" % (
            "/".join(tables), "" if len(tables) == 1 else "s", len(set(w[0] for w in cw)),
            "" if len(set(w[0] for w in cw)) == 1 else "s"))
    elif isinstance(summary.get("capacity_warnings"), list) and any(r.get("capacity") for r in rows):
        add(HEALTHY, "capacity", "no routes/peers/depth table full or refusing entries")
    else:
        add(NOTE, "capacity", "no routes/peers/depth capacity figures in the telemetry")

    # free heap
    heaps = [r.get("mem_free_min") for r in rows if r.get("mem_free_min") is not None]
    low = [r for r in rows if r.get("mem_free_min") is not None and r["mem_free_min"] < th["heap_low"]]
    if low:
        add(DEGRADED, "heap", "free heap below %s on %d node%s (%s)" % (
            _bytes(th["heap_low"]), len(low), "" if len(low) == 1 else "s", _who(low)), low)
    elif heaps:
        add(HEALTHY, "heap", "free heap at least %s on every node (lowest %s)" % (_bytes(th["heap_low"]),
                                                                            _bytes(min(heaps))))
    else:
        add(NOTE, "heap", "no node reported its free heap (the simulator does not)")

    for code, what in (("flapping", "flapping parent or root"), ("sanity", "sanity_fail events"),
                       ("restart", "restarts during the run")):
        hit = [r for r in rows if any(i["code"] == code for i in r.get("issues") or [])]
        if hit:
            add(DEGRADED, code, "%s on %d node%s (%s)" % (what, len(hit), "" if len(hit) == 1 else "s",
                                                        _who(hit)), hit)

    # hostile load: which defences acted, and on which nodes
    dk = summary.get("defence_by_kind") or {}
    for what, keys in ATTACKS:
        n_act = sum(dk.get(k) or 0 for k in keys)
        if not n_act:
            continue
        hit = [r for r in rows if any(((r.get("defence") or {}).get(k) or 0) for k in keys)]
        parts = ", ".join("%s %d" % (k, dk[k]) for k in keys if dk.get(k))
        add(DEGRADED if n_act >= th["attack_min"] else NOTE, "attack",
            "under attack: %s (%s) on %d node%s (%s)" % (what, parts, len(hit), "" if len(hit) == 1 else "s",
                                                       _who(hit)), hit)

    rej = summary.get("rejected_records") or 0
    total = rej + (summary.get("records") or 0)
    if total and rej > th["rejected_ratio"] * total:
        add(NOTE, "rejected", "%d of %d telemetry lines rejected (%s): see Rejected lines" % (
            rej, total, _top(summary.get("rejected_by_reason") or {})))

    level = max([x["level"] for x in reasons if x["level"] in LEVELS] or [HEALTHY], key=lambda lv: _RANK[lv])
    reasons.sort(key=lambda x: -_RANK[x["level"]])
    return level, reasons


def _worst_refusers(rows, refusing):
    """The rows of the nodes in `refusing`, most refused entries first."""
    n = {}
    for w in refusing:
        n[w[0]] = n.get(w[0], 0) + (w[4] or 0)
    hit = [r for r in rows if r["node"] in n]
    return sorted(hit, key=lambda r: (-n[r["node"]], label(r).lower()))


def _top(d, k=3):
    return ", ".join("%s %d" % kv for kv in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:k])


def _drop_hint(summary):
    lost = dict((k, v) for k, v in (summary.get("drops_by_reason") or {}).items() if v and k in TRAFFIC_LOSS)
    return ("; traffic drops: " + _top(lost)) if lost else ""


def finite(x):
    return x is not None and isinstance(x, (int, float)) and not math.isnan(x) and not math.isinf(x)
