"""Synthetic telemetry for pipeline tests and benchmarks.

Given a topology (networkx graph, node names), a seed and a scenario, this
schedules how every node's view evolves (tree root, parent, descending key),
when pings/traces run and which paths they take, how counters grow, and
emits telemetry records in the docs/reference/INTERFACES.md format. It returns the
records together with an independent ground truth built from its own
schedule: convergence times, per-probe stretch computed from the paths it
generated, delivery ratio, counter totals.

Scenario knobs: duration, report intervals, ping loss, an optional partition
(edges cut at t_cut, restored at t_heal), a node whose descending key flaps,
a node whose parent flaps, a node that restarts (its counters reset), a node
whose descending key never becomes right ("stuck").
"""
import hashlib
import json
import random

import networkx as nx

REASONS = ("no_route", "queue_full", "hop_limit", "bad_signature", "malformed", "watermark")
TABLES = {"routes": 64, "peers": 8, "sigcache": 32, "coords": 32}
FRAME_TYPES = ("keepalive", "tree", "bootstrap", "traffic", "wakeup")


def load_topology(path):
    """Shared format: each line a chain of names, consecutive names linked."""
    g = nx.Graph()
    with open(path) as f:
        for line in f:
            chain = line.split("#", 1)[0].split()
            g.add_nodes_from(chain)
            for a, b in zip(chain, chain[1:]):
                if a != b:
                    g.add_edge(a, b)
    return g


def node_key(seed, name):
    return hashlib.sha256(("snakemesh-synth:%s:%s" % (seed, name)).encode()).hexdigest()


def _r(t):
    return round(t, 3)


def _at(timeline, t):
    """Value of a step function [(t, v)...] at time t (None before the first)."""
    v = None
    for tt, vv in timeline:
        if tt <= t:
            v = vv
        else:
            break
    return v


class Scenario(object):
    def __init__(self, duration=40.0, state_interval=1.0, counters_interval=5.0,
                 peers_interval=10.0, ping_interval=2.0, trace_interval=5.0, ping_loss=0.1,
                 partition=None, flap_desc=True, flap_parent=True, restart=True, stuck=False,
                 sanity_fail=True, emit_topology=True, detour_prob=0.4, flap_count=6, drop_reasons=REASONS,
                 control=False, capacity=False, profile=None, port=False):
        self.duration = duration
        self.state_interval = state_interval
        self.counters_interval = counters_interval
        self.peers_interval = peers_interval
        self.ping_interval = ping_interval
        self.trace_interval = trace_interval
        self.ping_loss = ping_loss
        self.partition = partition   # (t_cut, t_heal or None, [(name_a, name_b), ...])
        self.flap_desc = flap_desc
        self.flap_parent = flap_parent
        self.restart = restart
        self.stuck = stuck
        self.sanity_fail = sanity_fail
        self.emit_topology = emit_topology
        self.detour_prob = detour_prob
        self.flap_count = flap_count
        self.drop_reasons = tuple(drop_reasons)   # drop reasons the counters draw from (2 per report)
        # contract 1 (tx_bytes, tx_link, tx_bytes_link), contract 2 (capacity),
        # contract 3 (state `profile`), `port` as `snakemesh monitor` adds it.
        # Drawn from their own random stream: the other records stay the same.
        self.control = control
        self.capacity = capacity
        self.profile = profile
        self.port = port


def middle_cut(g):
    """A set of edges whose removal splits g in two: a bridge near the middle
    of the graph if there is one, else all edges crossing a BFS level."""
    names = sorted(g.nodes())
    bridges = sorted(tuple(sorted(e)) for e in nx.bridges(g))
    if bridges:
        best = None
        for a, b in bridges:
            h = g.copy()
            h.remove_edge(a, b)
            small = min(len(c) for c in nx.connected_components(h))
            if best is None or small > best[0]:
                best = (small, [(a, b)])
        return best[1]
    dist = nx.single_source_shortest_path_length(g, names[0])
    half = max(dist.values()) // 2
    return sorted(tuple(sorted((a, b))) for a, b in g.edges() if {dist[a], dist[b]} == {half, half + 1})


def generate(g, seed, scenario=None):
    """Returns (records, truth). records are dicts sorted by t."""
    sc = scenario or Scenario()
    rng = random.Random(seed)
    names = sorted(g.nodes())
    key = dict((n, node_key(seed, n)) for n in names)
    name_of = dict((v, k) for k, v in key.items())
    K = nx.relabel_nodes(g, key)           # graph on keys
    nodes = sorted(K.nodes())
    T = sc.duration

    # -- topology epochs ------------------------------------------------------
    epochs = [(0.0, K.copy())]
    if sc.partition:
        t_cut, t_heal, cut = sc.partition
        h = K.copy()
        for a, b in cut:
            h.remove_edge(key[a], key[b])
        epochs.append((float(t_cut), h))
        if t_heal is not None:
            epochs.append((float(t_heal), K.copy()))

    def epoch_at(t):
        i = 0
        for j, (s, _h) in enumerate(epochs):
            if s <= t:
                i = j
        return i

    info = []   # per epoch: comp root, depth, parent, expected desc per node
    for s, h in epochs:
        root_of, depth, parent, exp = {}, {}, {}, {}
        for comp in nx.connected_components(h):
            members = sorted(comp)
            root = members[-1]
            d = nx.single_source_shortest_path_length(h, root)
            for m in members:
                root_of[m] = root
                depth[m] = d[m]
                ups = [p for p in h.neighbors(m) if d[p] == d[m] - 1]
                parent[m] = max(ups) if ups else None
            prev = None
            for m in members:
                exp[m] = prev
                prev = m
        info.append({"root": root_of, "depth": depth, "parent": parent, "exp": exp})

    # -- per-node schedules ---------------------------------------------------
    tree = dict((n, []) for n in nodes)     # [(t, (root, seq))]
    desc = dict((n, []) for n in nodes)     # [(t, key or None)]
    par = dict((n, []) for n in nodes)      # [(t, key or None)]

    def push(tl, t, v):
        t = _r(t)
        if t > T:
            return
        if tl and tl[-1][1] == v:
            return
        assert not tl or t > tl[-1][0], (t, tl[-1])
        tl.append((t, v))

    first_t = dict((n, _r(rng.uniform(0.0, 1.5))) for n in nodes)
    candidates = [n for n in nodes if info[0]["exp"][n] is not None and K.degree(n) >= 2]
    rng.shuffle(candidates)
    flap_desc_node = candidates[0] if sc.flap_desc and candidates else None
    flap_par_node = None
    if sc.flap_parent:
        for n in candidates[1:]:
            if info[0]["parent"][n] is not None and K.degree(n) >= 2:
                flap_par_node = n
                break
    stuck_node = candidates[-1] if sc.stuck and len(candidates) > 2 else None
    restart_node = candidates[2 % len(candidates)] if sc.restart and candidates else None
    sanity_node = nodes[len(nodes) // 3] if sc.sanity_fail else None

    e0 = info[0]
    tree_time = {}
    for n in nodes:
        f = first_t[n]
        final = (e0["root"][n], 1)
        if final[0] == n:
            tt = f
            push(tree[n], f, final)
            push(par[n], f, None)
        else:
            tt = _r(f + 0.2 + e0["depth"][n] * rng.uniform(0.1, 0.4))
            push(tree[n], f, (n, 1))
            push(par[n], f, None)
            near = max(nx.single_source_shortest_path_length(K, n, cutoff=2))
            if near != n and near != final[0] and near < final[0]:
                push(tree[n], (f + tt) / 2.0, (near, 1))
                push(par[n], (f + tt) / 2.0, max(K.neighbors(n)))
            push(tree[n], tt, final)
            push(par[n], tt, e0["parent"][n])
        tree_time[n] = tt
        exp = e0["exp"][n]
        push(desc[n], f, None)
        if exp is None:
            continue
        st = _r(tt + rng.uniform(0.5, 3.0))
        lower = [m for m in nodes if m < n and m != exp and e0["root"][m] == e0["root"][n]]
        wrong = rng.choice(lower) if lower else None
        if wrong is not None:
            push(desc[n], (f + st) / 2.0, wrong)
        if n == stuck_node:
            continue
        push(desc[n], st, exp)
        if n == flap_desc_node:
            push(desc[n], st + 1.0, None)
            push(desc[n], st + 2.0, exp)
        if n == flap_par_node and len(list(K.neighbors(n))) >= 2:
            others = [p for p in sorted(K.neighbors(n)) if p != e0["parent"][n]]
            t = tt
            for i in range(sc.flap_count):
                t += 0.5
                push(par[n], t, others[i % len(others)] if i % 2 == 0 else e0["parent"][n])
            push(par[n], t + 0.5, e0["parent"][n])

    for i in range(1, len(epochs)):
        b, h = epochs[i]
        ei = info[i]
        for n in nodes:
            if not tree[n]:
                continue
            cur = tree[n][-1][1] if tree[n] else None
            final = (ei["root"][n], 1)
            last_t = max(tl[-1][0] if tl else 0.0 for tl in (tree[n], desc[n], par[n]))
            base = max(b, last_t)
            if cur != final:
                if final[0] == n:
                    tt = base + rng.uniform(0.05, 0.3)
                    push(tree[n], tt, final)
                    push(par[n], tt, None)
                else:
                    t_self = base + rng.uniform(0.05, 0.3)
                    push(tree[n], t_self, (n, 1))
                    push(par[n], t_self, None)
                    tt = t_self + 0.2 + ei["depth"][n] * rng.uniform(0.1, 0.4)
                    push(tree[n], tt, final)
                    push(par[n], tt, ei["parent"][n])
            else:
                tt = base
                if par[n][-1][1] != ei["parent"][n]:
                    push(par[n], base + rng.uniform(0.1, 0.5), ei["parent"][n])
            if n == stuck_node:
                continue
            if desc[n][-1][1] != ei["exp"][n]:
                push(desc[n], max(tt, base) + rng.uniform(0.5, 3.0), ei["exp"][n])

    # -- ground truth for convergence, from the schedule ------------------------
    def since_final(tl):
        return tl[-1][0] if tl else None

    truth = {"nodes": len(nodes), "keys": key, "names": name_of, "epochs": [s for s, _h in epochs],
             "flap_desc_node": flap_desc_node, "flap_parent_node": flap_par_node,
             "stuck_node": stuck_node, "restart_node": restart_node, "sanity_node": sanity_node}
    finals = set(tree[n][-1][1] for n in nodes if tree[n])
    if len(finals) == 1 and all(tree[n] for n in nodes):
        truth["tree_converged_s"] = max(since_final(tree[n]) for n in nodes)
    else:
        truth["tree_converged_s"] = None
    snake_since = {}
    correct_final = 0
    for n in nodes:
        points = sorted(set([t for t, _v in desc[n]] + [s for s, _h in epochs[1:] if s >= desc[n][0][0]]))
        since = None
        ok = False
        for t in points:
            c = _at(desc[n], t) == info[epoch_at(t)]["exp"][n]
            if c and not ok:
                since = t
            ok = c
        snake_since[n] = since if ok else None
        correct_final += 1 if ok else 0
    truth["snake_since"] = snake_since
    truth["snake_converged_s"] = (max(snake_since.values())
                                  if all(v is not None for v in snake_since.values()) else None)
    truth["snake_correct_ratio_final"] = correct_final / float(len(nodes))
    truth["parent_changes"] = dict((n, max(0, len(par[n]) - 1)) for n in nodes)

    # -- records ------------------------------------------------------------------
    recs = []

    port_of = dict((n, "/dev/ttyUSB%d" % i) for i, n in enumerate(nodes))

    def rec(kind, t, node, **f):
        r = {"v": 1, "kind": kind, "t": _r(t), "node": node}
        r.update(f)
        if sc.port and kind != "topology":
            r["port"] = port_of[node]
        recs.append(r)

    link_of = {}
    for a, b in K.edges():
        link_of[tuple(sorted((a, b)))] = rng.choice(("wifi", "ble"))
    if sc.emit_topology:
        for s, h in epochs:
            rec("topology", s, nodes[0],
                edges=[[a, b, link_of[(a, b)]] for a, b in sorted(tuple(sorted(e)) for e in h.edges())],
                names=dict((k, name_of[k]) for k in nodes))

    for n in nodes:
        ports = dict((p, i + 1) for i, p in enumerate(sorted(K.neighbors(n))))
        times = set()
        t = first_t[n]
        while t <= T:
            times.add(_r(t))
            t += sc.state_interval * rng.uniform(0.9, 1.1)
        for tl in (tree[n], desc[n], par[n]):
            times.update(tt for tt, _v in tl)
        for t in sorted(times):
            root, seq = _at(tree[n], t)
            parent = _at(par[n], t)
            e = epoch_at(t)
            depth = info[e]["depth"][n] if root == info[e]["root"][n] else (0 if parent is None else 1)
            rec("state", t, n, root=root, root_seq=seq, parent=parent,
                coords=[ports.get(parent, 1)] * depth, depth=depth, desc=_at(desc[n], t),
                peers=len(list(epochs[e][1].neighbors(n))), routes=rng.randint(0, 12))
            if sc.profile:
                recs[-1]["profile"] = sc.profile
        for tl, ev in ((par[n], "parent_changed"), (tree[n], "root_changed"), (desc[n], "desc_changed")):
            for i in range(1, len(tl)):
                old, new = tl[i - 1][1], tl[i][1]
                rec("event", tl[i][0], n, event=ev, detail="%s -> %s" % (str(old)[:16], str(new)[:16]))
        t = first_t[n] + rng.uniform(0, sc.peers_interval)
        while t <= T:
            h = epochs[epoch_at(t)][1]
            plist = []
            for p in sorted(h.neighbors(n)):
                pv = _at(tree[p], t) or (p, 1)
                plist.append({"port": ports[p], "key": p, "link": link_of[tuple(sorted((n, p)))],
                              "root": pv[0], "root_seq": pv[1]})
            rec("peers", t, n, peers=plist)
            t += sc.peers_interval
    if sanity_node:
        rec("event", T / 2.0, sanity_node, event="sanity_fail", detail="hop key repeated")

    # counters: cumulative since the node started, reset on restart
    totals = {"drops": {}, "evictions": {}, "verify_done": 0, "verify_skipped": 0, "verify_cached": 0}
    occ_max = 0.0
    crng = random.Random(seed * 7919 + 1)         # the new counters fields' own stream
    reports = dict((n, []) for n in nodes)       # (t, {type: bytes increase}) for the control truth
    cap_state = {}
    if sc.capacity:
        # one node's routes table runs full and refuses entries, one refuses
        # links for max_peers late in the run, the others stay within bounds
        cap_routes = candidates[3 % len(candidates)] if candidates else nodes[0]
        cap_peers = candidates[4 % len(candidates)] if candidates else nodes[-1]
        truth["capacity_nodes"] = {"routes": cap_routes, "peers": cap_peers}
    for n in nodes:
        t = first_t[n] + rng.uniform(0, sc.counters_interval)
        cum = None
        restarted = False
        while t <= T:
            if cum is None or (n == restart_node and not restarted and t > T / 2.0):
                restarted = cum is not None
                cum = {"rx": dict((f, 0) for f in FRAME_TYPES), "tx": dict((f, 0) for f in FRAME_TYPES),
                       "drops": {}, "evictions": {}, "verify_done": 0, "verify_skipped": 0,
                       "verify_cached": 0, "tx_bytes": dict((f, 0) for f in FRAME_TYPES),
                       "tx_link": {}, "tx_bytes_link": {}, "refused": {"routes": 0, "peers": 0, "depth": 0}}
                fresh = True
            else:
                fresh = False
            for f in FRAME_TYPES:
                cum["rx"][f] += rng.randint(0, 20)
                cum["tx"][f] += rng.randint(0, 20)
            for reason in rng.sample(sc.drop_reasons, 2):
                inc = rng.randint(0, 4)
                cum["drops"][reason] = cum["drops"].get(reason, 0) + inc
                totals["drops"][reason] = totals["drops"].get(reason, 0) + inc
            if rng.random() < 0.3:
                tb = rng.choice(("routes", "sigcache"))
                inc = rng.randint(1, 3)
                cum["evictions"][tb] = cum["evictions"].get(tb, 0) + inc
                totals["evictions"][tb] = totals["evictions"].get(tb, 0) + inc
            for v in ("verify_done", "verify_skipped", "verify_cached"):
                inc = rng.randint(0, 10)
                cum[v] += inc
                totals[v] += inc
            occ = {}
            for tb, cap in TABLES.items():
                used = rng.randint(0, cap if rng.random() < 0.05 else int(cap * 0.8))
                occ[tb] = [used, cap]
                occ_max = max(occ_max, used / float(cap))
            rec("counters", t, n, rx=dict(cum["rx"]), tx=dict(cum["tx"]), drops=dict(cum["drops"]),
                verify_done=cum["verify_done"], verify_skipped=cum["verify_skipped"],
                verify_cached=cum["verify_cached"], evictions=dict(cum["evictions"]), occupancy=occ,
                mem_free=rng.randint(40000, 90000))
            if sc.control:
                incs = {}
                for f in FRAME_TYPES:
                    # a node's rate depends on its degree: the busiest node is the best connected
                    inc = crng.randint(0, 200) * (1 + K.degree(n))
                    cum["tx_bytes"][f] += inc
                    incs[f] = cum["tx_bytes"][f] if fresh else inc
                for ln in ("wifi", "ble"):
                    cum["tx_link"][ln] = cum["tx_link"].get(ln, 0) + crng.randint(0, 10)
                    cum["tx_bytes_link"][ln] = cum["tx_bytes_link"].get(ln, 0) + crng.randint(0, 900)
                recs[-1].update(tx_bytes=dict(cum["tx_bytes"]), tx_link=dict(cum["tx_link"]),
                                tx_bytes_link=dict(cum["tx_bytes_link"]))
                reports[n].append((recs[-1]["t"], incs))
            if sc.capacity:
                caps = {"routes": TABLES["routes"], "peers": TABLES["peers"], "depth": 12}
                used = {"routes": crng.randint(0, caps["routes"] - 8), "peers": crng.randint(1, caps["peers"] - 2),
                        "depth": crng.randint(1, 6)}
                if n == cap_routes:
                    used["routes"] = caps["routes"]
                    cum["refused"]["routes"] += crng.randint(1, 5)
                if n == cap_peers and t > T * 0.7:
                    cum["refused"]["peers"] += 1
                recs[-1]["capacity"] = dict((k, [used[k], caps[k], cum["refused"][k]]) for k in caps)
                cs = cap_state.setdefault(n, {})
                for k in caps:
                    # refused counts since boot: the sum of every generation's last value
                    c = cs.setdefault(k, {"max": 0, "done": 0, "last": 0, "capacity": caps[k]})
                    c["max"] = max(c["max"], used[k])
                    if fresh:
                        c["done"] += c["last"]
                    c["last"] = cum["refused"][k]
            t += sc.counters_interval
    truth["drops_by_reason"] = totals["drops"]
    truth["evictions_by_table"] = totals["evictions"]
    truth["evictions"] = sum(totals["evictions"].values())
    truth["verify_done"] = totals["verify_done"]
    truth["verify_skipped"] = totals["verify_skipped"]
    truth["table_occupancy_max"] = occ_max
    if sc.capacity:
        warn = []
        for n in nodes:
            for k, c in sorted(cap_state.get(n, {}).items()):
                refused = c["done"] + c["last"]
                full = k in ("routes", "peers", "depth") and c["max"] >= c["capacity"]
                if refused or full:
                    warn.append({"node": n, "name": name_of[n], "table": k, "used": c["max"],
                                 "capacity": c["capacity"], "refused": refused})
        truth["capacity_warnings"] = warn
    truth["_counter_reports"] = reports

    # probes: pings and traces along generated paths
    pred_cache = {}

    def shortest(e, s, d):
        k = (e, s)
        if k not in pred_cache:
            pred_cache[k] = nx.single_source_shortest_path(epochs[e][1], s)
        return pred_cache[k].get(d)

    paths, stretch = {}, {}
    pings = pings_ok = 0
    pid = 0
    for n in nodes:
        for kind, every in (("ping", sc.ping_interval), ("trace", sc.trace_interval)):
            if not every:
                continue
            t = first_t[n] + 1.0 + rng.uniform(0, every)
            while t <= T:
                pid += 1
                dst = rng.choice(nodes)
                while dst == n:
                    dst = rng.choice(nodes)
                e = epoch_at(_r(t))
                sp = shortest(e, n, dst)
                ok = sp is not None and rng.random() >= sc.ping_loss
                path = None
                if ok:
                    path = sp
                    if rng.random() < sc.detour_prob:
                        comp = list(nx.node_connected_component(epochs[e][1], n)) if len(sp) > 1 else []
                        w = rng.choice(sorted(comp)) if comp else n
                        a, b2 = shortest(e, n, w), shortest(e, w, dst)
                        if a and b2:
                            path = a + b2[1:]
                hops = len(path) - 1 if ok else None
                rtt = _r(hops * 2 * rng.uniform(2.0, 6.0) + rng.uniform(0.0, 2.0)) if ok else None
                rec("probe", t, n, probe=kind, id=pid, src=n, dst=dst, ok=ok, rtt_ms=rtt, hops=hops,
                    path=path if kind == "trace" else None)
                if kind == "ping":
                    pings += 1
                    pings_ok += 1 if ok else 0
                if ok:
                    paths[pid] = path
                    stretch[pid] = hops / float(len(sp) - 1)
                t += every
    truth["paths"] = paths
    truth["stretch"] = stretch
    truth["pings"] = pings
    truth["pings_ok"] = pings_ok
    truth["ping_delivery_ratio"] = pings_ok / float(pings) if pings else None
    recs.sort(key=lambda r: r["t"])
    truth["records"] = len(recs)
    # times relative to the first record, as the pipeline reports them
    t0 = recs[0]["t"]
    for k in ("tree_converged_s", "snake_converged_s"):
        if truth[k] is not None:
            truth[k] = truth[k] - t0
    return recs, truth


def write_jsonl(path, records, extra_lines=()):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")))
            f.write("\n")
        for line in extra_lines:
            f.write(line)
            f.write("\n")


def corrupt(records, rng, per_kind=2):
    """Malformed lines to mix into a file: returns (lines, {reason: count})."""
    lines, reasons = [], {}

    def add(line, reason):
        lines.append(line)
        reasons[reason] = reasons.get(reason, 0) + 1

    states = [r for r in records if r["kind"] == "state"]
    probes = [r for r in records if r["kind"] == "probe"]
    for _ in range(per_kind):
        s = json.dumps(rng.choice(records), separators=(",", ":"))
        add(s[: rng.randint(5, len(s) - 2)], "malformed_json")          # truncated line
        r = dict(rng.choice(states))
        r["t"] = "soon"
        add(json.dumps(r), "wrong_type:t")
        r = dict(rng.choice(states))
        r["root_seq"] = "one"
        add(json.dumps(r), "wrong_type:root_seq")
        r = dict(rng.choice(records))
        r["v"] = 2
        add(json.dumps(r), "unknown_version")
        r = dict(rng.choice(probes))
        del r["dst"]
        add(json.dumps(r), "missing_field:dst")
        r = dict(rng.choice(records))
        r["kind"] = "weather"
        add(json.dumps(r), "unknown_kind")
        r = dict(rng.choice(states))
        r["node"] = "not-a-key"
        add(json.dumps(r), "bad_key:node")
        add("".join(chr(rng.randint(0x80, 0xff)) for _ in range(40)), "not_json")
    return lines, reasons


def control_truth(truth, window_start, exclude=("traffic",)):
    """Steady-state control bytes as docs/guides/PIPELINE.md defines them, from the
    generator's own per-report increases: per node, from its first counters
    report at or after `window_start` (t_a) to its last (t_b), the bytes of
    every frame type but `exclude` reported after t_a, over t_b - t_a.
    Returns (mean over nodes, {node: rate}, {type: mean rate})."""
    rates, by_type = {}, {}
    for n, reps in truth["_counter_reports"].items():
        reps = [r for r in reps if r[0] >= window_start]
        if len(reps) < 2 or reps[-1][0] <= reps[0][0]:
            continue
        span = reps[-1][0] - reps[0][0]
        per = {}
        for _t, incs in reps[1:]:
            for k, v in incs.items():
                if k not in exclude:
                    per[k] = per.get(k, 0) + v
        rates[n] = sum(per.values()) / span
        for k, v in per.items():
            by_type.setdefault(k, {})[n] = v / span
    mean = sum(rates.values()) / len(rates) if rates else None
    types = dict((k, sum(d.get(n, 0.0) for n in rates) / len(rates)) for k, d in by_type.items())
    return mean, rates, types
