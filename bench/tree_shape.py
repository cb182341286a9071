"""How deep the simulator's tree is, against a breadth-first tree on the
same links, and where the route load lands (issue 28: the planner's
upgrades are driven by depth and by routes near the root).

    .venv/bin/python bench/tree_shape.py rgg:250 [--seed 1] [--keys 1001]
        [--duration 40] [--depth-limit] [--json]

Generates the graph (generator seed --seed), places the root at the graph's
centre as `snakemesh plan` does (sim keys by seed --keys, the centre holding
the highest key), runs the shipped router cores with every table large
(ESP32_GENERIC's ports; its max_hops too with --depth-limit) and prints, at
the end and over the run: the tree's depth (max / mean) and the
breadth-first depth from the root on the links that came up, the root's
sequence, and the route entries per node (busiest, p90, how many nodes
above ESP32_GENERIC's 160, and how far from the root those are).
"""
import argparse
import collections
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (ROOT, os.path.join(ROOT, "firmware"), os.path.join(ROOT, "lib")):
    if p not in sys.path:
        sys.path.insert(0, p)

from host_tools.sim import planner as PL               # noqa: E402
from host_tools.sim import profiles as PR               # noqa: E402
from host_tools.sim.engine import US_PER_S              # noqa: E402
from host_tools.sim.harness import Mesh                 # noqa: E402
from snake import report                                # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graph")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keys", type=int, default=1001)
    ap.add_argument("--duration", type=float, default=40.0)
    ap.add_argument("--profile", default="ESP32_GENERIC")
    ap.add_argument("--depth-limit", action="store_true")
    ap.add_argument("--reseq", type=int, default=None,
                    help="a new root's early re-announcement, ms (0: every 30 min only); "
                         "default: the firmware's")
    ap.add_argument("--settle", type=float, default=None,
                    help="route peaks from this virtual second on (default: half the run)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    topo = PL.load_topology(generate=a.graph, seed=a.seed)
    root, ecc, _ = PL.centre(topo)
    base = PR.load(a.profile)
    big = PL._large(base, keep_depth=a.depth_limit)
    big_root = PL._large(PR.load("GATEWAY"))
    w0 = time.monotonic()
    mesh = Mesh(topo, seed=a.keys, profile=big, strict=False, node_profiles={root: big_root},
                root_node=root, verify_memo=True)
    if a.reseq is not None:
        for n in mesh._nodes:
            n.router.tree.reseq_early = n.router.tree.reseq_due = a.reseq
    settle = a.duration / 2.0 if a.settle is None else a.settle
    peak_routes = collections.Counter()
    peak_live = collections.Counter()       # entries refreshed within snek.ROUTE_STALE_MS
    t = 0.0
    conv = None
    timeline = []
    while t < a.duration:
        t = round(t + 1.0, 6)
        mesh._run(int(t * US_PER_S))
        if conv is None and mesh.converged():
            conv = t
        depths = []
        for n in mesh._nodes:
            r = n.router
            depths.append(len(report.coords(r)))
            if t >= settle:
                c = r.snake.routes.count
                if c > peak_routes[n.name]:
                    peak_routes[n.name] = c
                live = PL.live_routes(r.snake, r.now)
                if live > peak_live[n.name]:
                    peak_live[n.name] = live
        if t in (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0) or t >= a.duration:
            timeline.append((t, max(depths), round(statistics.mean(depths), 1)))
    # breadth-first depth on the links that came up
    adj = collections.defaultdict(list)
    for l in mesh.links():
        if not l.blocked and l.connected:
            adj[l.a.name].append(l.b.name)
            adj[l.b.name].append(l.a.name)
    bd = PL.bfs(adj, root)
    tree_d = {n.name: len(report.coords(n.router)) for n in mesh._nodes}
    rr = mesh.router(root)
    routes = sorted(peak_routes.values(), reverse=True)
    over = [n for n, c in peak_routes.items() if c > base.max_routes]
    end_routes = sorted((n.router.snake.routes.count for n in mesh._nodes), reverse=True)
    over_dist = collections.Counter(bd.get(n, -1) for n in over)
    out = {
        "graph": a.graph, "root": root, "eccentricity": ecc, "keys": a.keys,
        "tree_depth_max": max(tree_d.values()), "tree_depth_mean": round(statistics.mean(tree_d.values()), 2),
        "bfs_depth_max": max(bd.values()), "bfs_depth_mean": round(statistics.mean(bd.values()), 2),
        "over_max_hops": sum(1 for d in tree_d.values() if d > base.max_hops),
        "root_seq": rr.tree.seq, "converged_s": conv,
        "routes_busiest": routes[:5], "routes_p90": routes[len(routes) // 10],
        "nodes_over_%d_routes" % base.max_routes: len(over),
        "at_end_over": sum(1 for c in end_routes if c > base.max_routes), "settle_s": settle,
        "live_busiest": sorted(peak_live.values(), reverse=True)[:5],
        "live_over": sum(1 for c in peak_live.values() if c > base.max_routes),
        "their_bfs_distance": dict(sorted(over_dist.items())),
        "timeline_t_max_mean": timeline,
        "wall_s": round(time.monotonic() - w0, 1),
    }
    print(json.dumps(out) if a.json else json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
