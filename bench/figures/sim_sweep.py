"""Virtual-time simulator runs shared by figures 5 and 6.

One run (``measure``): a Mesh of the shipped router core on a shared
topology, every link Wi-Fi with the simulator's default latency. Bytes
sent are the routers' own counters (``counters.tx_bytes``, by frame type),
checked at the end of the run against what the simulator's links carried
(``Mesh.carried``; a mismatch fails the run). The mesh runs until it has converged (every
node agrees on the root, every descending entry is the true next-lower
key: ``Mesh.converge``), then SETTLE virtual seconds, then a WINDOW of
steady state. Reported per run:
  conv_s                    virtual seconds to convergence
  conv_*, steady_*          per node and second: verifications computed
                            (router.counters.verify_done), answered by the
                            signature cache (verify_cached), skipped by the
                            bootstrap policy (verify_skipped), control bytes
                            sent (by frame type), bootstraps originated;
                            mean over nodes and the busiest node
  stretch_*                 (when asked) first-message stretch: after the
                            window, seeded random node pairs (each pair
                            once, one direction, no coordinates cached) are
                            pinged; hops of the request / shortest path
The window is 60 s by default (figure 5: a reference node floods its wakeup
once a minute); figure 6 passes its own.

Signature cache variants: "cache" = the profile's SigCache (capacity
profile.sig_cache); "nocache" = each router's sigcache replaced before the
run by NoCache, which verifies every signature (no entry is ever kept).
"""
import os

from figures.common import TOPOLOGIES, median

SETTLE_S = 30.0
WINDOW_S = 60.0
CONV_TIMEOUT_S = 300.0
TOPOS_50 = ("line-0050", "rtree-0050", "grid4-0049")
TOPOS_ALL = TOPOS_50 + ("sim",)
POLICIES = ("all", "on-change", "off")
TYPE_NAMES = ("keepalive", "announcement", "bootstrap", "traffic", "wakeup")


class NoCache(object):
    """Stands in for snake.crypto.SigCache: verifies every time."""

    def __init__(self):
        from snake import crypto
        self._verify = crypto.verify
        self.capacity = 0
        self.count = 0
        self.hits = 0
        self.misses = 0
        self.failures = 0
        self.evictions = 0

    def verify(self, pub, msg, sig):
        self.misses += 1
        ok = self._verify(pub, msg, sig)
        if not ok:
            self.failures += 1
        return ok

    def clear(self):
        pass


def topology_path(name):
    p = os.path.join(TOPOLOGIES, name + ".txt")
    if not os.path.exists(p):
        raise FileNotFoundError("shared topology %s not found (%s)" % (name, p))
    return p


def profile_for(policy, base="UNIX"):
    """The sim profile: the UNIX board profile (max_hops 64: the shared
    topologies are up to 49 hops deep) with the bootstrap policy set."""
    from host_tools.sim.harness import load_profile
    from snake.profile import Profile
    d = load_profile(base).as_dict()
    d["bootstrap_verify"] = policy
    return Profile(d)


def _snapshot(mesh, originated):
    out = []
    for name in mesh.nodes:
        r = mesh.router(name)
        c = r.counters.as_dict()
        out.append((c["verify_done"], c["verify_cached"], c["verify_skipped"],
                    [c["tx_bytes"][t] for t in TYPE_NAMES], originated[name][0]))
    return out


def _rates(a, b, secs):
    """Per-node rates between snapshots a and b over secs seconds."""
    n = len(a)
    vd, vc, vs, by, bs = [], [], [], [], []
    by_type = [0.0] * len(TYPE_NAMES)
    for i in range(n):
        vd.append((b[i][0] - a[i][0]) / secs)
        vc.append((b[i][1] - a[i][1]) / secs)
        vs.append((b[i][2] - a[i][2]) / secs)
        bs.append((b[i][4] - a[i][4]) * 60.0 / secs)
        tot = 0
        for t in range(len(TYPE_NAMES)):
            d = b[i][3][t] - a[i][3][t]
            by_type[t] += d / secs / n
            tot += d
        by.append(tot / secs)
    return {
        "verify_mean": sum(vd) / n, "verify_max": max(vd),
        "cached_mean": sum(vc) / n, "skipped_mean": sum(vs) / n,
        "bytes_mean": sum(by) / n, "bytes_max": max(by),
        "bytes_by_type": dict((TYPE_NAMES[t], round(by_type[t], 2)) for t in range(len(TYPE_NAMES))),
        "bootstraps_per_min": sum(bs) / n,
    }


def _check_carried(mesh):
    """The routers' byte counters against what the simulator's links
    carried (counted by the simulator itself)."""
    for name in mesh.nodes:
        mine = mesh.router(name).counters.as_dict()["tx_bytes"]
        link = mesh.carried(name)["bytes"]
        if mine != link:
            raise RuntimeError("%s: router counted %s bytes, its links carried %s" % (name, mine, link))


def stretch(mesh, pairs, seed):
    """First-message stretch over `pairs` seeded random unordered node
    pairs: each pinged once in one direction (request by SNEK: nothing has
    sent to the destination's coordinates yet). Returns mean, p95, max of
    hops / shortest path, the probes counted and delivered."""
    import random
    names = sorted(mesh.nodes)
    rng = random.Random("stretch:%s" % seed)
    allp = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    rng.shuffle(allp)
    chosen = [(a, b) if rng.random() < 0.5 else (b, a) for a, b in allp[:pairs]]
    res = mesh.ping_pairs(pairs=chosen)
    ok = sum(1 for r in res if r.ok)
    # ProbeResult.stretch: hops of the request / shortest path when sent
    # (the definition of the simulator's truth.json first_message_stretch)
    vals = sorted(r.stretch for r in res if r.stretch is not None)
    if not vals:
        return {"mean": None, "p95": None, "max": None, "probes": len(chosen), "delivered": ok}
    return {"mean": sum(vals) / len(vals), "p95": vals[int(0.95 * (len(vals) - 1))],
            "max": vals[-1], "probes": len(chosen), "delivered": ok}


def measure(topo, seed=1, policy="all", cache=True, base_profile="UNIX", window=None,
            stretch_pairs=0, router_class=None):
    import host_tools  # noqa: F401
    from host_tools.sim.harness import Mesh
    window = WINDOW_S if window is None else window
    prof = profile_for(policy, base_profile)
    mesh = Mesh(topology_path(topo), seed=seed, profile=prof, hop_limit=64,
                router_class=router_class)
    originated = {}
    for name in mesh.nodes:
        r = mesh.router(name)
        count = [0]
        originated[name] = count
        sn = r.snake
        orig = sn.originate_bootstrap

        def ob(buf, now, orig=orig, count=count):
            nh = orig(buf, now)
            if nh:
                count[0] += 1
            return nh
        sn.originate_bootstrap = ob
        if not cache:
            r.sigcache = NoCache()
    s0 = _snapshot(mesh, originated)
    conv = mesh.converge(timeout=CONV_TIMEOUT_S)
    if conv is None:
        raise RuntimeError("%s seed %d policy %s: no convergence within %g s: %s"
                           % (topo, seed, policy, CONV_TIMEOUT_S, mesh.problems(3)))
    s1 = _snapshot(mesh, originated)
    mesh.run(SETTLE_S)
    s2 = _snapshot(mesh, originated)
    # the snake's state every second of the window: a policy that lets
    # entries expire shows up here, not only in the bytes
    wrong = 0
    steps = int(window)
    for _ in range(steps):
        mesh.run(window / steps)
        if not mesh.converged():
            wrong += 1
    s3 = _snapshot(mesh, originated)
    still = mesh.converged()
    _check_carried(mesh)
    res = {"topology": topo, "nodes": len(mesh.nodes), "seed": seed, "policy": policy,
           "cache": cache, "conv_s": conv, "converged_at_end": still,
           "window_s": window, "wrong_s": wrong,
           "conv": _rates(s0, s1, conv) if conv > 0 else None,
           "steady": _rates(s2, s3, window),
           "exceptions": mesh.stats.get("router_exceptions", 0)}
    if stretch_pairs:
        res["stretch"] = stretch(mesh, stretch_pairs, seed)
    return res


def sweep(ctx, topos, policies, caches, window=None, stretch_pairs=0):
    """Every (topology, policy, cache) over ctx seeds; results cached in
    ctx.shared so that figures asking for the same runs share them.
    Returns {(topology, policy, cache): [runs]}."""
    store = ctx.shared.setdefault("sim_sweep", {})
    seeds = list(range(1, sim_reps(ctx) + 1))
    out = {}
    for topo in topos:
        for policy in policies:
            for cache in caches:
                key = (topo, policy, cache)
                skey = key + (window, stretch_pairs)
                if skey in store:
                    out[key] = store[skey]
                    continue
                runs = []
                for s in seeds:
                    runs.append(measure(topo, s, policy, cache, window=window,
                                        stretch_pairs=stretch_pairs))
                store[skey] = out[key] = runs
                ctx.log("sim %s policy=%s cache=%s: conv %s s, steady verify/s/node %s" % (
                    topo, policy, "on" if cache else "off",
                    [r["conv_s"] for r in runs],
                    [round(r["steady"]["verify_mean"], 3) for r in runs]))
    return out


def sim_reps(ctx):
    if ctx.reps_given:
        return ctx.reps
    return 2 if ctx.quick else 3


def med(runs, *path):
    vals = []
    for r in runs:
        v = r
        for p in path:
            v = None if v is None else v.get(p)
        vals.append(v)
    return median(vals)
