"""Capacity planner: which boards a mesh needs where (``snakemesh plan``).

How it finds where the load lands (docs/reports/CAPACITY.md "Planning a mesh"):

1. The root. The tree's root is the node with the highest key, and where it
   sits decides every node's depth and where bootstraps concentrate (they
   climb towards it). A root anywhere would put some node a diameter deep,
   so the plan places it: the graph's centre (least eccentricity, then the
   least total distance), with keys by the provisioning policy "a gateway
   is the root" restricted to that node (profiles.txt marks it ``root``;
   `sim`/`mesh --profile-map` draw keys so it holds the highest one, on a
   board `snakemesh keygen --profile GATEWAY` does). Every other key is
   random, so the load below is measured over several key draws.
2. A quick bound before any simulation: a node's depth is at least its
   distance from the root; a node farther than every profile's ``max_hops``
   cannot be carried by any assignment.
3. The load: the simulator runs the mesh (the shipped router cores) for
   each key draw with every table large (nothing refused) but the base
   profile's ports (so links a board would refuse are refused, and paths
   run where they will run) and its depth limit (the tree then forms
   within it where the graph allows; a node left outside the root's tree
   needs a deeper profile), the root on the upgrade that is a root
   candidate. Per node it records, over the second half of the run (once
   the tree has formed: while it forms, entries of earlier roots and the
   announcements of every peer come and go, and a full table only forgets
   them sooner), the most live route entries (refreshed within
   snek.ROUTE_STALE_MS: a full table evicts older ones first), hop-pool
   entries and the deepest
   depth, and whether refusing links cut anyone off; the need is the
   largest over the draws.
4. Each node gets the first profile of [BASE] + upgrades (cheapest first,
   as given) whose tables hold its need with margin (routes x `margin`:
   other key draws move bootstrap paths; the depth it took or, outside the
   root's tree, one more than the base holds; the hop pool is reported but
   binds only on request, see fits(); ports for every link when its refusals
   cut a node off). A node no profile holds makes the plan fail, naming what
   would.
5. With a budget (``plan --max-upgrades N``) and room left in it, the
   plan spends the rest on the base boards most likely to overflow in a
   fresh key draw (fill()): where the busy relays move with the keys
   (rgg:1000), the draws measured cannot name a fresh draw's, but a node
   busy in them and near the root is likelier to be busy again.
"""
import collections
import time

from host_tools.sim import profiles as PR
from host_tools.sim import topology as T

# a node's measured route entries must fit as they are: ba:500:2 holds on
# three fresh key draws with it (docs/reports/CAPACITY.md "Planning a mesh");
# a larger margin upgrades boards at 129-160 routes there and does not save
# rgg:1000, where the busy relays move with the keys by far more than 25 %
ROUTES_MARGIN = 1.0
DEPTH_MARGIN = 0          # measured under the base's own depth limit (measure())
BOUND_MARGIN = 2          # the quick bound on graph distances (depth_bound())
LARGE = {"max_routes": 4096, "route_hints": 0, "max_hops": 128, "hop_pool": 2048,
         "frame_max": 16384}


class PlanError(ValueError):
    """Bad plan input (the message is one line for the user)."""


class NoAssignment(Exception):
    """No profile holds some node's load: .line is the one-line verdict (exit 7,
    docs/guides/HOST_TOOLS.md "Errors")."""

    def __init__(self, line, need=None):
        Exception.__init__(self, line)
        self.line = line
        self.need = need


def bfs(adj, src):
    """{node: hops from src} over adjacency lists."""
    dist = {src: 0}
    q = collections.deque([src])
    while q:
        u = q.popleft()
        du = dist[u] + 1
        for v in adj[u]:
            if v not in dist:
                dist[v] = du
                q.append(v)
    return dist


def centre(topo):
    """(name, eccentricity, {node: distance}) of the node with the least
    eccentricity (ties: least total distance, then name)."""
    adj = topo.adjacency()
    best = None
    for name in topo.names:
        d = bfs(adj, name)
        if len(d) < len(adj):
            raise PlanError("the topology is not connected (%d of %d nodes reachable from %s)"
                            % (len(d), len(adj), name))
        k = (max(d.values()), sum(d.values()), name)
        if best is None or k < best[0]:
            best = (k, d)
    return best[0][2], best[0][0], best[1]


def _large(prof, keep_depth=False):
    """The profile with every table large and its own ports; with
    keep_depth its own max_hops (and the frame sizes that go with it)."""
    from snake.profile import Profile
    d = prof.as_dict()
    for k, v in LARGE.items():
        if keep_depth and k in ("max_hops", "frame_max"):
            continue
        d[k] = max(v, d.get(k) or 0)
    d["name"] = prof.name
    return Profile(d)


class Need(object):
    __slots__ = ("routes", "hops", "depth", "peers", "cut", "outside", "draw_routes")

    def __init__(self):
        self.outside = 0        # draws in which it ended outside the root's tree
        self.routes = 0
        self.draw_routes = []   # most live routes in each draw (routes: their largest)
        self.hops = 0
        self.depth = 0
        self.peers = 0          # links it must take (its degree) when refusing cuts a node off
        self.cut = 0            # nodes its refusals cut off (largest over the draws)


def measure(topo, base, root, root_profile, draws, duration, progress=None, seed0=1000,
            on_draw=None):
    """{node: Need} over `draws` key draws (seeds seed0+1..), each a
    simulator run of `duration` virtual seconds; returns (needs, runs) with
    runs a list of per-draw facts (converged time, refused links).
    on_draw(mesh), if given, sees each draw's mesh at its end (benches)."""
    from host_tools.sim.harness import Mesh
    from host_tools.sim.engine import US_PER_S
    from snake import report
    # the base keeps its depth limit: a node keeps the parent that first
    # brought the root's newest sequence, so the tree is the breadth-first
    # one only after the root's early new sequence (PROTOCOL_NOTES.md
    # choice I); where it is deeper than the board holds, a node drops the
    # deeper announcements and takes a parent within it, and only the
    # nodes that find none need a deeper profile
    big = _large(base, keep_depth=True)
    big_root = _large(root_profile)
    adj = topo.adjacency()
    needs = {n: Need() for n in topo.names}
    runs = []
    settle = duration / 2.0
    for k in range(draws):
        seed = seed0 + k + 1
        wall0 = time.monotonic()
        mesh = Mesh(topo, seed=seed, profile=big, strict=False, node_profiles={root: big_root},
                    root_node=root, verify_memo=True)
        for nd in needs.values():
            nd.draw_routes.append(0)
        depth_seen = {}
        first = None
        t = 0.0
        step = 1.0
        while t < duration:
            t = round(t + step, 6)
            mesh._run(int(t * US_PER_S))
            conv = mesh.converged()
            if first is None and conv:
                first = t
            if t >= settle:
                for n in mesh._nodes:
                    if not n.alive:
                        continue
                    r = n.router
                    nd = needs[n.name]
                    c = live_routes(r.snake, r.now)
                    if c > nd.routes:
                        nd.routes = c
                    if c > nd.draw_routes[-1]:
                        nd.draw_routes[-1] = c
                    h = r.tree.pool.count
                    if h > nd.hops:
                        nd.hops = h
                    d = len(report.coords(r))
                    if d > depth_seen.get(n.name, 0):
                        depth_seen[n.name] = d
            if progress is not None and (abs(t % 5.0) < 1e-9 or t >= duration):
                print("plan: draw %d/%d  %5.1f/%g s virtual  converged=%s  wall %.0f s"
                      % (k + 1, draws, t, duration, "yes" if conv else "no",
                         time.monotonic() - wall0), file=progress, flush=True)
        if on_draw is not None:
            on_draw(mesh)
        for name, d in depth_seen.items():
            if d > needs[name].depth:
                needs[name].depth = d
        # a node of the root's component not in its tree at the end found
        # no parent within the base's depth: it needs a deeper profile (a
        # node cut off by refused links needs ports, below, not depth)
        top = mesh.key(root)
        comps = mesh.components()
        main = next(c for c in comps if any(x.name == root for x in c))
        outside = [n for n in main if n.alive and report.root_key(n.router) != top]
        for n in outside:
            nd = needs[n.name]
            nd.depth = max(nd.depth, base.max_hops + 1)
            nd.outside += 1
        # links refused for want of ports: does the graph of the links that
        # came up leave anyone cut off? Then the refusing ends need a port
        # for every link.
        in_main = set(n.name for n in main)
        refused = [l for l in mesh.links() if l.blocked]
        for l in refused:
            a, b = l.a.name, l.b.name
            if (a in in_main) != (b in in_main):
                outside = b if a in in_main else a
                refuser = a if a in in_main else b
                cut = len(next(c for c in comps if any(x.name == outside for x in c)))
                nd = needs[refuser]
                nd.peers = max(nd.peers, len(adj[refuser]))
                nd.cut = max(nd.cut, cut)
        runs.append({"seed": seed, "converged_s": first, "refused_links": len(refused),
                     "outside_root_tree": len(outside),
                     "components": len(comps), "wall_s": round(time.monotonic() - wall0, 1)})
    return needs, runs


def fresh_draw_misses(needs, base, margin=ROUTES_MARGIN, root=None):
    """Per draw, the nodes whose routes overflow the base in that draw and
    in no other: the ones a plan made from the other draws would leave on
    the base. Where the busy relays move with the keys (rgg:1000: most of
    them, docs/reports/CAPACITY.md "Planning a mesh") these are many, and a
    plan measured on a few draws does not hold on a fresh one. [] for one
    draw (nothing to compare)."""
    k = min((len(nd.draw_routes) for nd in needs.values()), default=0)
    if k < 2:
        return []
    out = []
    for i in range(k):
        miss = []
        for name, nd in needs.items():
            if name == root:
                continue
            over = [r * margin > base.max_routes for r in nd.draw_routes]
            if over[i] and not any(over[j] for j in range(k) if j != i):
                miss.append(name)
        out.append(sorted(miss))
    return out


# fresh_need(): a node's mean over the draws counts as this many draws
# against the mean of the nodes as far from the root. Chosen on rgg:1000
# (generator seed 1, six draws: each pair of draws ranks, each of the other four
# checks with 99 boards filled): 2 - 12 prior draws leave 6.5 - 7.2 nodes a
# fresh draw above 250 routes (4: 6.5), the largest measured need 8.5, the
# mean alone 7.7, the hop distance alone 8.4 (docs/LOG.md 2026-12-06)
PRIOR_DRAWS = 4


def fresh_need(needs, dist, root=None, prior=PRIOR_DRAWS):
    """{node: the routes it is expected to need in a fresh key draw}: its
    mean over the measured draws (Need.draw_routes), shrunk towards the
    mean of every node at its hop distance from the root (dist) with the
    weight of `prior` draws. The load near the root is large and moves the
    most between draws (docs/reports/CAPACITY.md "Planning a mesh"), so a
    node's own draws say less than their largest value suggests and its
    place says something. The root is left out."""
    by = {}
    mean = {}
    for name, nd in needs.items():
        if name == root:
            continue
        r = nd.draw_routes or [nd.routes]
        mean[name] = sum(r) / float(len(r))
        by.setdefault(dist.get(name), []).append(mean[name])
    mu = dict((d, sum(v) / len(v)) for d, v in by.items())
    out = {}
    for name, m in mean.items():
        k = len(needs[name].draw_routes) or 1
        out[name] = (k * m + prior * mu[dist.get(name)]) / float(k + prior)
    return out


def fill(assignment, why, needs, ladder, budget, dist, root=None, margin=ROUTES_MARGIN):
    """Spend what `budget` (most upgraded boards) leaves after the nodes
    the measurement requires on the base boards with the largest
    fresh_need(): each gets the first upgrade that holds its measured need
    (why: "fresh-draw"). Returns the nodes added, most likely first; none
    when the required ones fill the budget already (then the plan is over
    it: the caller says so)."""
    room = budget - len(assignment)
    if room <= 0:
        return []
    score = fresh_need(needs, dist, root)
    cand = sorted((n for n in score if n not in assignment), key=lambda n: (-score[n], n))
    added = []
    for name in cand:
        if len(added) >= room:
            break
        for prof in ladder[1:]:
            if fits(prof, needs[name], margin) is None:
                assignment[name] = prof.name
                why[name] = "fresh-draw"
                added.append(name)
                break
    return added


def live_routes(snake, now):
    """Route entries refreshed within snek.ROUTE_STALE_MS: the paths
    bootstraps take through the node now. An older entry's bootstrap took
    another path (bootstrap paths move), and a full table evicts such an
    entry first (snek.Snake._victim), so it needs no room of its own."""
    from snake.snek import ROUTE_STALE_MS
    t = snake.routes
    order = t.order
    n = 0
    for i in range(t.count):
        if snake.age(order[i], now) < ROUTE_STALE_MS:
            n += 1
    return n


def hop_pool(prof):
    """The hop pool a router of this profile has (0 in a profile: 2 x
    max_hops + 2 x max_peers, as snake/tree.py sizes it)."""
    return prof.hop_pool or 2 * prof.max_hops + 2 * prof.max_peers


def fits(prof, need, margin=ROUTES_MARGIN, depth_margin=DEPTH_MARGIN, strict_hops=False):
    """The first table of prof that does not hold need (None = it fits).
    The hop pool binds only with strict_hops: a full pool forgets a
    non-parent announcement (counted) and the node keeps its place in the
    tree and the snake (grid:16x16 meets every target with the pool full on
    58 nodes, "Acceptance runs")."""
    if need.routes * margin > prof.max_routes:
        return "routes"
    if need.depth + depth_margin > prof.max_hops:
        return "depth"
    if strict_hops and need.hops > hop_pool(prof):
        return "hops"
    if need.peers > prof.max_peers:
        return "peers"
    return None


def requirement(need, margin=ROUTES_MARGIN, depth_margin=DEPTH_MARGIN):
    """What a profile needs to hold `need` (for the no-assignment line)."""
    import math
    out = ["max_routes >= %d" % int(math.ceil(need.routes * margin)),
           "max_hops >= %d" % (need.depth + depth_margin)]
    if need.peers:
        out.append("max_peers >= %d" % need.peers)
    return ", ".join(out)


def assign(needs, ladder, root=None, root_profile=None, margin=ROUTES_MARGIN,
           depth_margin=DEPTH_MARGIN):
    """({node: profile name} for the nodes above the base, {node: binding
    table on the base}) with `ladder` = [base] + upgrades (Profile objects,
    cheapest first). The root gets `root_profile` if given and it holds its
    need. NoAssignment when no profile holds some node."""
    out = {}
    why = {}
    for name in sorted(needs):
        nd = needs[name]
        binding = fits(ladder[0], nd, margin, depth_margin)
        if name == root and root_profile is not None and fits(root_profile, nd, margin,
                                                               depth_margin) is None:
            out[name] = root_profile.name
            why[name] = binding or "root"
            continue
        if binding is None:
            continue
        for prof in ladder[1:]:
            if fits(prof, nd, margin, depth_margin) is None:
                out[name] = prof.name
                why[name] = binding
                break
        else:
            biggest = ladder[-1]
            raise NoAssignment(
                "no assignment: node %s needs %s, more than any of %s holds "
                "(%s binds on %s); would: a profile with %s"
                % (name, _need_text(nd), ", ".join(p.name for p in ladder),
                   fits(biggest, nd, margin, depth_margin), biggest.name,
                   requirement(nd, margin, depth_margin)), nd)
    return out, why


def _need_text(nd):
    s = "%d routes, depth %d, %d hops" % (nd.routes, nd.depth, nd.hops)
    if nd.peers:
        s += ", %d ports (refusing cuts off %d nodes)" % (nd.peers, nd.cut)
    return s


def depth_bound(dist, ladder, root, depth_margin=BOUND_MARGIN):
    """NoAssignment when a node's distance from the root exceeds the
    deepest profile: no simulation needed to know."""
    deepest = max(ladder, key=lambda p: p.max_hops)
    far = max(dist, key=lambda n: (dist[n], n))
    if dist[far] + depth_margin > deepest.max_hops:
        raise NoAssignment(
            "no assignment: node %s is %d hops from the best root %s (the graph's "
            "centre), deeper than any of %s holds (max_hops %d on %s); would: a profile "
            "with max_hops >= %d, or links that shorten the graph"
            % (far, dist[far], root, ", ".join(p.name for p in ladder), deepest.max_hops,
               deepest.name, dist[far] + depth_margin))


def load_topology(topology=None, generate=None, seed=1):
    try:
        if generate is not None:
            return T.generate(generate, seed)
        return T.load(topology)
    except T.TopologyError as e:
        raise PlanError(str(e))


def ladder_of(base, upgrades, base_set=None):
    """[base] + upgrades as Profile objects; base_set: {key: value}
    overrides of the base (`plan --profile-set`, as `sim --profile-set`
    applies them to its base)."""
    try:
        return [PR.with_settings(base, base_set)] + [PR.load(u) for u in upgrades]
    except PR.ProfileSpecError as e:
        raise PlanError(str(e))


def root_choice(ladder):
    """The upgrade the root runs: the first root candidate of the upgrades
    (GATEWAY: its key is ground on the host), else the last upgrade."""
    from host_tools import keystore
    for p in ladder[1:]:
        if keystore.is_root_candidate(p):
            return p
    return ladder[-1]
