"""Virtual-time simulator runs shared by figures 5 and 6.

One run (``measure``): a Mesh of the shipped router core on a shared
topology, every link Wi-Fi with the simulator's default latency; each
router's ``tx`` callback is wrapped to count the bytes of every frame the
link accepted, by frame type. The mesh runs until it has converged (every
node agrees on the root, every descending entry is the true next-lower
key: ``Mesh.converge``), then SETTLE virtual seconds, then a WINDOW of
steady state. Reported per run:
  conv_s                    virtual seconds to convergence
  conv_*, steady_*          per node and second: verifications computed
                            (router.counters.verify_done), answered by the
                            signature cache (verify_cached), skipped by the
                            bootstrap policy (verify_skipped), control bytes
                            sent (by frame type); mean over nodes and the
                            busiest node
The window is 60 s because every node floods its own wakeup once a minute.

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


def _snapshot(mesh, bytes_by_node):
    out = []
    for name in mesh.nodes:
        r = mesh.router(name)
        c = r.counters
        out.append((c.verify_done, c.verify_cached, c.verify_skipped, list(bytes_by_node[name])))
    return out


def _rates(a, b, secs):
    """Per-node rates between snapshots a and b over secs seconds."""
    n = len(a)
    vd, vc, vs, by = [], [], [], []
    by_type = [0.0] * len(TYPE_NAMES)
    for i in range(n):
        vd.append((b[i][0] - a[i][0]) / secs)
        vc.append((b[i][1] - a[i][1]) / secs)
        vs.append((b[i][2] - a[i][2]) / secs)
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
    }


def measure(topo, seed=1, policy="all", cache=True, base_profile="UNIX"):
    import host_tools  # noqa: F401
    from host_tools.sim.harness import Mesh
    prof = profile_for(policy, base_profile)
    mesh = Mesh(topology_path(topo), seed=seed, profile=prof, hop_limit=64)
    bytes_by_node = {}
    for name in mesh.nodes:
        r = mesh.router(name)
        counts = [0] * len(TYPE_NAMES)
        bytes_by_node[name] = counts
        orig = r.tx

        def tx(port, buf, n, orig=orig, counts=counts):
            ok = orig(port, buf, n)
            if ok:
                counts[buf[5]] += n
            return ok
        r.tx = tx
        if not cache:
            r.sigcache = NoCache()
    s0 = _snapshot(mesh, bytes_by_node)
    conv = mesh.converge(timeout=CONV_TIMEOUT_S)
    if conv is None:
        raise RuntimeError("%s seed %d policy %s: no convergence within %g s: %s"
                           % (topo, seed, policy, CONV_TIMEOUT_S, mesh.problems(3)))
    s1 = _snapshot(mesh, bytes_by_node)
    mesh.run(SETTLE_S)
    s2 = _snapshot(mesh, bytes_by_node)
    mesh.run(WINDOW_S)
    s3 = _snapshot(mesh, bytes_by_node)
    still = mesh.converged()
    res = {"topology": topo, "nodes": len(mesh.nodes), "seed": seed, "policy": policy,
           "cache": cache, "conv_s": conv, "converged_at_end": still,
           "conv": _rates(s0, s1, conv) if conv > 0 else None,
           "steady": _rates(s2, s3, WINDOW_S),
           "exceptions": mesh.stats.get("router_exceptions", 0)}
    return res


def sweep(ctx, topos, policies, caches):
    """Every (topology, policy, cache) over ctx seeds; results cached in
    ctx.shared so figures 5 and 6 share runs. Returns {key: [runs]}."""
    store = ctx.shared.setdefault("sim_sweep", {})
    seeds = list(range(1, sim_reps(ctx) + 1))
    for topo in topos:
        for policy in policies:
            for cache in caches:
                key = (topo, policy, cache)
                if key in store:
                    continue
                runs = []
                for s in seeds:
                    runs.append(measure(topo, s, policy, cache))
                store[key] = runs
                ctx.log("sim %s policy=%s cache=%s: conv %s s, steady verify/s/node %s" % (
                    topo, policy, "on" if cache else "off",
                    [r["conv_s"] for r in runs],
                    [round(r["steady"]["verify_mean"], 3) for r in runs]))
    return store


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
