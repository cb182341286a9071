"""What a checking run of a planned mesh lost, and where (issue 28, rgg:1000).

    .venv/bin/python bench/run_report.py show RUN_DIR [--map DIR/profiles.txt] [--json]
    .venv/bin/python bench/run_report.py run --topology DIR/topology.txt --profile ESP32_GENERIC \
        --profile-map DIR/profiles.txt [--profile-set K=V] --seed S --out RUN_DIR

`show` reads RUN_DIR/truth.json (a `snakemesh sim` folder; --no-telemetry
is enough) and, with the profile map, which boards were upgraded. Prints one
line: converged (first / held from), snake right at the end, delivery,
the boards refusing routes (and their refusals, hops from the root), then
per lost ping: when it was sent (before or after the snake converged),
source, destination, the node where its path ended, how many hops from
the root that is, and whether the path crossed a board that refused routes.

`run` is the checking run of bench/plan_accept.py (`snakemesh sim ...
--duration 130 --pings 100 --no-telemetry`, the same code in this process,
so the same result for a seed) with two read-only taps: where and why each
probe frame was dropped (the router's drop reason: no route, loop,
watermark), and every 5 s each board's route refusals (bootstraps refused,
live entries evicted), written to RUN_DIR/trace.json; then `show`.
"""
import argparse
import collections
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def bfs(adj, src):
    dist = {src: 0}
    q = collections.deque([src])
    while q:
        u = q.popleft()
        for v in adj[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                q.append(v)
    return dist


def load_adj(run):
    adj = collections.defaultdict(set)
    with open(os.path.join(run, "topology.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) >= 2 and "=" not in line[1]:
                a = line[0]
                for b in line[1:]:
                    if "=" in b or b.startswith("@"):
                        continue
                    adj[a].add(b)
                    adj[b].add(a)
    return adj


def report(run, profile_map=None):
    with open(os.path.join(run, "truth.json")) as f:
        t = json.load(f)
    s = t["summary"]
    conv = t["convergence"]
    root = t["params"].get("root_node")
    mapped = {}
    if profile_map:
        from host_tools.sim import profiles as PR
        mapped, root2 = PR.load_profile_map(profile_map)
        root = root or root2
    if root is None:
        root = max(t["nodes"], key=t["nodes"].get)
    adj = load_adj(run)
    dist = bfs(adj, root) if root in adj else {}
    refusing = {}
    for w in t["capacity_warnings"] or ():
        if w["table"] == "routes" and w["refused"] > 0:
            refusing[w["name"]] = w["refused"]
    snake_at = conv.get("snake_held_from")
    lost = []
    for p in t["probes"]:
        if p["ok"]:
            continue
        end = p["path"][-1] if p["path"] else p["src"]
        lost.append({"t": p["t"], "src": p["src"], "dst": p["dst"], "end": end, "path": p["path"],
                     "end_dist": dist.get(end), "reason": p["reason"], "hops": len(p["path"]) - 1,
                     "shortest": p["shortest"],
                     "via_refusing": [x for x in p["path"] if x in refusing],
                     "before_convergence": snake_at is None or p["t"] < snake_at})
    trace = None
    if os.path.exists(os.path.join(run, "trace.json")):
        with open(os.path.join(run, "trace.json")) as f:
            trace = json.load(f)
        by_probe = {}
        for d in trace["drops"]:
            by_probe.setdefault(d["probe"], []).append(d)
        for x, p in zip(lost, [p for p in t["probes"] if not p["ok"]]):
            x["drops"] = by_probe.get(p["id"], [])
    rd = sorted(dist.get(n, -1) for n in refusing)
    out = {"run": run, "seed": t["params"]["seed"], "converged_first_s": conv.get("first"),
           "converged_s": conv.get("held_from"), "snake_converged_s": snake_at,
           "converged_at_end": s["converged_at_end"],
           "snake_correct_ratio_final": s["snake_correct_ratio_final"],
           "delivery": "%d/%d" % (s["probes_ok"], s["probes"]),
           "delivery_ratio": s["delivery_ratio"],
           "pings_sent_s": [min(p["t"] for p in t["probes"]), max(p["t"] for p in t["probes"])]
           if t["probes"] else None,
           "routes_refusing_boards": len(refusing),
           "routes_refused": sum(refusing.values()),
           "refusing_upgraded": sorted(n for n in refusing if n in mapped),
           "refusing_hops_from_root": "%d-%d-%d" % (rd[0], rd[len(rd) // 2], rd[-1]) if rd else "-",
           "lost": lost,
           "transitions": conv.get("transitions", [])[-6:]}
    if trace is not None:
        # refusals per 10 s of the run (growth of bootstraps refused +
        # live entries evicted, summed over the boards) and the boards
        # still refusing over the last 30 s
        end = t["params"]["duration_s"]
        per = collections.Counter()
        late = {}
        for name, rows in trace["route_refusals"].items():
            prev = (0, 0)
            for tt, a, b, _used in rows:
                g = (a - prev[0]) + (b - prev[1])
                prev = (a, b)
                if g:
                    per[int(tt // 10) * 10] += g
                    if tt > end - 30:
                        late[name] = late.get(name, 0) + g
        out["refusals_per_10s"] = dict(sorted(per.items()))
        # the nodes whose descending entry was wrong from half time (when
        # the pings go) on: how long
        # (s, at the 250 ms checks) and the last stretch
        wl = trace.get("snake_wrong") or []
        wrong_s = collections.Counter()
        for (t0, names), nxt in zip(wl, wl[1:] + [[end, None]]):
            a0 = max(t0, end / 2.0)
            if nxt[0] > a0:
                for nm in names:
                    wrong_s[nm] += nxt[0] - a0
        out["wrong_after_half"] = dict((nm, {"s": round(v, 2), "dist": dist.get(nm),
                                            "upgraded": nm in mapped})
                                      for nm, v in wrong_s.most_common())
        out["wrong_at_end"] = wl[-1][1] if wl else []
        out["refusing_late"] = len(late)
        out["refused_late"] = sum(late.values())
    return out


def traced_run(a):
    """The checking run with the taps (see the module docstring)."""
    sys.path.insert(0, os.path.join(ROOT, "firmware"))
    from host_tools.sim import harness, runner, probes as P
    from host_tools.sim import profiles as PR
    from host_tools.sim.engine import US_PER_S
    from snake import router as R
    from snake.telemetry import (D_NO_ROUTE, D_LOOP, D_WATERMARK, D_ROUTE_TABLE_FULL, D_QUEUE_FULL,
                                 D_HOP_LIMIT)
    meshes = []
    drops = []
    refusals = {}
    init0 = harness.Mesh.__init__

    def init(self, *args, **kw):
        init0(self, *args, **kw)
        meshes.append(self)
    traffic0 = R.Router._traffic
    kinds = ((D_NO_ROUTE, "no_route"), (D_LOOP, "loop"), (D_WATERMARK, "watermark"),
             (D_QUEUE_FULL, "queue_full"), (D_HOP_LIMIT, "hop_limit"))

    def traffic(self, port, buf, n, f, now):
        d = self.counters.drops
        before = [d[k] for k, _ in kinds]
        traffic0(self, port, buf, n, f, now)
        for (k, why), b in zip(kinds, before):
            if d[k] != b:
                kind, pid = P.parse_payload(bytes(buf[f.payload_off:f.payload_off + f.payload_len]))
                if kind is not None:
                    m = meshes[-1]
                    drops.append({"t": m.engine.now / float(US_PER_S), "router": id(self),
                                  "probe": pid, "kind": kind, "why": why,
                                  "routes_full": self.snake.routes.count >= self.snake.routes.capacity})
    read0 = harness.Mesh._capacity_read

    def read(self):
        read0(self)
        t = self.engine.now / float(US_PER_S)
        for nd in self._nodes:
            r = nd.router
            if r is None or not nd.alive:
                continue
            sn = r.snake
            v = (r.counters.drops[D_ROUTE_TABLE_FULL] + sn.routes_refused, sn.evicted_live)
            if v != (0, 0):
                refusals.setdefault(nd.name, []).append([t, v[0], v[1], sn.routes.count])
    check0 = harness.Mesh._truth_check
    wrong_log = []

    def check(self, step, arg):
        check0(self, step, arg)
        wrong = []
        if not self._truth["snake"]:
            for c in self.components():
                prev = None
                for nd in sorted(c, key=lambda x: x.key):
                    got = report_mod.desc_key(nd.router)
                    want = prev.key if prev is not None else None
                    if (bytes(got) if got is not None else None) != want:
                        wrong.append(nd.name)
                    prev = nd
        wrong.sort()
        if not wrong_log or wrong_log[-1][1] != wrong:
            wrong_log.append([self.engine.now / float(US_PER_S), wrong])
    from snake import report as report_mod
    harness.Mesh._truth_check = check
    harness.Mesh.__init__ = init
    R.Router._traffic = traffic
    harness.Mesh._capacity_read = read
    try:
        base_set = PR.parse_profile_set(a.profile_set)
        node_profiles, root = PR.load_profile_map(a.profile_map) if a.profile_map else ({}, None)
        s = runner.run(a.out, a.duration, seed=a.seed, topology=a.topology, profile=a.profile,
                       pings=a.pings, telemetry=False, profile_set=base_set,
                       node_profiles=node_profiles, root_node=root)
    finally:
        harness.Mesh.__init__ = init0
        R.Router._traffic = traffic0
        harness.Mesh._capacity_read = read0
        harness.Mesh._truth_check = check0
    m = meshes[-1]
    names = dict((id(nd.router), nd.name) for nd in m._nodes)
    for x in drops:
        x["node"] = names.get(x.pop("router"), "?")
    with open(os.path.join(a.out, "trace.json"), "w") as f:
        json.dump({"drops": drops, "route_refusals": refusals, "snake_wrong": wrong_log}, f)
    print(runner.summary_line(dict(s)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sh = sub.add_parser("show")
    sh.add_argument("run")
    sh.add_argument("--map", default=None)
    sh.add_argument("--json", action="store_true")
    rn = sub.add_parser("run")
    rn.add_argument("--topology", required=True)
    rn.add_argument("--profile", default="ESP32_GENERIC")
    rn.add_argument("--profile-map", default=None)
    rn.add_argument("--profile-set", action="append", default=[])
    rn.add_argument("--seed", type=int, default=1)
    rn.add_argument("--duration", type=float, default=130.0)
    rn.add_argument("--pings", type=int, default=100)
    rn.add_argument("--out", required=True)
    rn.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        traced_run(a)
        a.run, a.map = a.out, a.profile_map
    r = report(a.run, a.map)
    if a.json:
        print(json.dumps(r))
        return 0
    print("seed %s: converged %s (held from %s; snake %s), right at the end %s, delivery %s, "
          "pings sent %s s; routes refused on %d boards (%d refusals; hops from root %s)%s"
          % (r["seed"], r["converged_first_s"], r["converged_s"], r["snake_converged_s"],
             r["snake_correct_ratio_final"], r["delivery"], r["pings_sent_s"],
             r["routes_refusing_boards"], r["routes_refused"], r["refusing_hops_from_root"],
             ("; upgraded among them: %s" % ", ".join(r["refusing_upgraded"]))
             if r["refusing_upgraded"] else ""))
    if r.get("refusing_late") is not None:
        print("  boards still refusing routes in the last 30 s: %d (refusals there %d); "
              "refusals per 10 s: %s" % (r["refusing_late"], r["refused_late"], r["refusals_per_10s"]))
    if r.get("wrong_after_half") is not None:
        print("  descending entries wrong from half time (the pings) on: %s; at the end: %s" % (
            ", ".join("%s %.2f s (%s hops%s)" % (nm, v["s"], v["dist"], ", upgraded" if v["upgraded"] else "")
                      for nm, v in list(r["wrong_after_half"].items())[:10]) or "none",
            ", ".join(r["wrong_at_end"]) or "none"))
    for x in r["lost"]:
        print("  lost t=%.3f %s -> %s ended at %s (%s hops from root, %d hops of %d shortest) %s%s%s%s"
              % (x["t"], x["src"], x["dst"], x["end"], x["end_dist"], x["hops"], x["shortest"],
                 x["reason"], " via refusing " + ",".join(x["via_refusing"]) if x["via_refusing"] else "",
                 " (before convergence)" if x["before_convergence"] else "",
                 "; dropped: " + ", ".join("%s at %s t=%.2f%s" % (d["kind"], d["node"], d["t"],
                                                                  " " + d["why"] + (" (table full)" if d["routes_full"] else ""))
                                           for d in x["drops"]) if x.get("drops") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
