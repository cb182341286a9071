"""Capacity model measurements: what a node's tables hold in a simulated mesh.

    .venv/bin/python bench/capacity.py rgg:250 --profile ESP32_GENERIC \
        [--set max_routes=512 ...] [--hub-profile GATEWAY] [--duration 90] [--seed 1] [--json]

Runs the virtual-time harness (host_tools.sim.harness.Mesh) on a generated
graph or a topology file and samples every node once per virtual second:

  routes   route entries in use (peak per node over the run, and at the end)
  depth    tree depth (len of our coordinates)
  peers    peers up
  hops     distinct announcement hops a node stores across all its peers
           (the hop pool's occupancy; what sharing prefixes saves)

and reports, next to them, the capacity model of docs/reports/CAPACITY.md for the same
graph (expected busiest-node routes, tree depth), convergence (first time the
ground truth held: tree agreed and every descending entry right), the
snake-correct ratio at the end, and ping delivery at the profile's traffic hop
limit. Tables are sized by the profile given; to see what a mesh *needs*,
run with large tables (--set max_routes=4096 --set max_hops=128 ...).
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

from host_tools.sim import topology as T          # noqa: E402
from host_tools.sim.harness import Mesh, load_profile   # noqa: E402
from snake import report                          # noqa: E402
from host_tools.sim import probes as PR            # noqa: E402


def parse_set(items):
    out = {}
    for it in items or ():
        k, _, v = it.partition("=")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def make_profile(name, overrides):
    from snake.profile import Profile
    prof = load_profile(name)
    if overrides:
        d = prof.as_dict()
        d.update(overrides)
        prof = Profile(d)
    return prof


def snake_ratio(mesh):
    """Fraction of alive nodes whose descending entry is the true one."""
    good = 0
    total = 0
    for comp in mesh.components():
        total += len(comp)
        good += PR.snake_correct_count(comp)
    return good / float(total) if total else None


def distinct_hops(r):
    """Distinct announcement hops stored by router r across its peers."""
    t = r.tree
    pool = getattr(t, "pool", None)
    if pool is not None and hasattr(pool, "count"):
        return pool.count
    seen = set()
    for p in range(1, len(r.up)):
        if r.up[p] and t.ann_valid[p]:
            raw = t.ann_raw[p]
            f = t.f
            f.decode(raw, t.ann_len[p])
            prev = None
            for i in range(f.nhops):
                ko = f.hop_key_off[i]
                h = (prev, f.hop_port[i], bytes(raw[ko:ko + 32]))
                seen.add(h)
                prev = h
    return len(seen)


def run(spec, profile, overrides, duration, seed, hub_profile=None, pings=60, sample_s=1.0,
        conv_step=0.25, quiet=False):
    if os.path.isfile(spec):
        topo = T.load(spec)
    else:
        topo = T.generate(spec, seed)
    prof = make_profile(profile, overrides)
    kw = {}
    if hub_profile:
        kw["hub_profile"] = hub_profile
    mesh = Mesh(topo, seed=seed, profile=prof, strict=False,
                hop_limit=prof.traffic_hop_limit, **kw)
    adj = topo.adjacency()
    deg = {n: len(adj[n]) for n in adj}
    peak_routes = collections.Counter()
    peak_hops = collections.Counter()
    first = None
    wall0 = time.monotonic()
    t = 0.0
    next_sample = 0.0
    while t < duration:
        t = round(t + conv_step, 6)
        mesh.run_until(t)
        if first is None and mesh.converged():
            first = t
        if t >= next_sample:
            next_sample += sample_s
            for n in mesh._nodes:
                if n.alive:
                    r = n.router
                    c = r.snake.routes.count
                    if c > peak_routes[n.name]:
                        peak_routes[n.name] = c
                    h = distinct_hops(r)
                    if h > peak_hops[n.name]:
                        peak_hops[n.name] = h
        if not quiet and abs(t - round(t / 10.0) * 10.0) < 1e-9:
            print("  t=%5.1f converged=%s snake=%.3f wall %.0f s" % (
                t, mesh.converged(), snake_ratio(mesh), time.monotonic() - wall0),
                file=sys.stderr, flush=True)
    end_conv = mesh.converged()
    ratio = snake_ratio(mesh)
    res = mesh.ping_pairs(pings) if pings else []
    ok = sum(1 for x in res if x.ok)
    depths = []
    routes_end = []
    peers = []
    for n in mesh._nodes:
        if n.alive:
            r = n.router
            depths.append(len(report.coords(r)))
            routes_end.append(r.snake.routes.count)
            peers.append(sum(r.up))
    N = len(mesh._nodes)
    pr = sorted(peak_routes.values(), reverse=True)
    ph = sorted(peak_hops.values(), reverse=True)
    caps = {}
    for n in mesh._nodes:
        if n.alive:
            cap = getattr(n.router, "capacity", None)
            if cap is not None:
                for k, v in cap().items():
                    agg = caps.setdefault(k, [0, 0, 0])
                    agg[0] = max(agg[0], v[0])
                    agg[1] = max(agg[1], v[1])
                    agg[2] += v[2]
    out = {
        "graph": spec, "nodes": N, "edges": len(topo.edges), "seed": seed,
        "profile": prof.name, "overrides": overrides, "hub_profile": hub_profile,
        "degree": {"mean": round(2.0 * len(topo.edges) / N, 2), "max": max(deg.values())},
        "diameter_hint": None,
        "converged_first_s": first, "converged_end": end_conv,
        "snake_correct_ratio_end": round(ratio, 4) if ratio is not None else None,
        "delivery": [ok, len(res)],
        "routes_peak": {"max": pr[0] if pr else 0, "p90": pr[len(pr) // 10] if pr else 0,
                        "median": pr[len(pr) // 2] if pr else 0,
                        "max_over_N": round(pr[0] / float(N), 3) if pr else 0,
                        "top5": pr[:5]},
        "routes_end_max": max(routes_end) if routes_end else 0,
        "depth": {"max": max(depths), "mean": round(statistics.mean(depths), 2),
                  "hist": dict(sorted(collections.Counter(depths).items()))},
        "peers": {"max": max(peers), "mean": round(statistics.mean(peers), 2)},
        "hops_stored_peak": {"max": ph[0] if ph else 0,
                             "median": ph[len(ph) // 2] if ph else 0, "top5": ph[:5]},
        "capacity_totals": caps,
        "sim_stats": dict(mesh.stats),
        "wall_s": round(time.monotonic() - wall0, 1),
    }
    full = []
    for n in mesh._nodes:
        if n.alive:
            cap = report.capacity(n.router)
            if any(cap[t][2] or (t in ("routes", "peers", "depth") and cap[t][0] >= cap[t][1])
                   for t in cap):
                full.append((n.name, n.router.profile.name, deg[n.name], peak_routes[n.name],
                             cap["routes"], cap["depth"], cap["peers"]))
    out["at_capacity"] = len(full)
    out["at_capacity_top"] = sorted(full, key=lambda x: -x[3])[:8]
    failed = [x for x in res if not x.ok]
    if failed:
        out["failed_probes"] = [{"src": x.src, "dst": x.dst, "reason": x.reason,
                                 "path_len": len(x.path)} for x in failed[:10]]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graph", help="grid:WxH, rgg:N, ba:N:M or a topology file")
    ap.add_argument("--profile", default="ESP32_GENERIC")
    ap.add_argument("--set", action="append", default=[], help="profile override KEY=VALUE")
    ap.add_argument("--hub-profile", default=None)
    ap.add_argument("--duration", type=float, default=90.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pings", type=int, default=60)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    out = run(a.graph, a.profile, parse_set(a.set), a.duration, a.seed, a.hub_profile,
              a.pings, quiet=a.quiet)
    if a.json:
        print(json.dumps(out, sort_keys=True))
    else:
        print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
