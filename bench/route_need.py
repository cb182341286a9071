"""How a node's route need moves with the run's keys and timing (issue 28, rgg:1000).

    .venv/bin/python bench/route_need.py measure --generate rgg:1000 --seeds 2001,2002,2003 [--key-seed K] --out F.json
    .venv/bin/python bench/route_need.py table F.json [--caps 152,200,250,300]
    .venv/bin/python bench/route_need.py map F.json --cap 152 [--ball K] [--draws S,..] --out DIR

`measure` runs the planner's own measurement (host_tools/sim/planner.py
measure(): root at the graph's centre on the root candidate, every table
large but the base's ports and depth, live routes over the second half of
the run) once per seed and writes each node's routes per draw, its hops
from the root, its degree, its parent and subtree at the draw's end, and
the links refused for want of ports; with --key-seed every draw has that
seed's keys and only the timing changes. `table` answers, per route capacity C: how
many nodes need more than C in each draw and in the union of the draws; how
many a plan made from the other draws misses (leave-one-out: the nodes
above C in the left-out draw that no other draw put above C); how many move
from above C in one draw to below 0.8 C in another; how far from the root
the heavy nodes sit and how many of them the root's k-hop ball holds; how
well the tree (subtree sizes) explains a node's routes; how many refused
links the draws share. `map` writes DIR/profiles.txt and
DIR/topology.txt (as `snakemesh plan` does) for a rule over the measurement,
for `snakemesh sim --profile-map` on other key seeds.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "firmware"))


def cmd_measure(a):
    from host_tools.sim import planner as PL
    if a.key_seed is not None:
        # every draw the same keys (those of seed KEY_SEED), only the
        # timing from the draw's seed: how much of the movement is timing
        from host_tools.sim import harness, keys
        harness.make_signer = lambda seed, name, root=None: keys.make_signer(a.key_seed, name, root)
    topo = PL.load_topology(generate=a.generate, topology=a.topology, seed=a.seed)
    ladder = PL.ladder_of(a.profile, a.upgrade.split(","))
    root_prof = PL.root_choice(ladder)
    root, ecc, dist = PL.centre(topo)
    adj = topo.adjacency()
    out = {"graph": a.generate or a.topology, "gen_seed": a.seed, "root": root, "ecc": ecc,
           "duration": a.duration, "seeds": [], "runs": [], "refused": [],
           "key_seed": a.key_seed,
           "nodes": {n: {"dist": dist[n], "deg": len(adj[n]), "routes": [], "subtree": [],
                         "parent": []} for n in topo.names}}

    def tree_at_end(mesh):
        # each node's parent (by the port its tree takes) and subtree size
        parent = {}
        for n in topo.names:
            r = mesh.router(n)
            p = r.tree.parent if r is not None else 0
            parent[n] = None
            if p:
                for b in adj[n]:
                    if mesh.port_of(n, b) == p:
                        parent[n] = b
                        break
        size = dict((n, 1) for n in topo.names)
        for n in sorted(topo.names, key=lambda x: -dist[x]):
            seen = set()
            x = n
            while parent.get(x) is not None and x not in seen:
                seen.add(x)
                x = parent[x]
                size[x] += 1
        for n in topo.names:
            out["nodes"][n]["subtree"].append(size[n])
            out["nodes"][n]["parent"].append(parent[n])
        out["refused"].append(sorted("%s-%s" % tuple(sorted((l.a.name, l.b.name)))
                                     for l in mesh.links() if l.blocked))

    for s in [int(x) for x in a.seeds.split(",")]:
        needs, runs = PL.measure(topo, ladder[0], root, root_prof, 1, a.duration,
                                 progress=sys.stderr, seed0=s - 1, on_draw=tree_at_end)
        out["seeds"].append(s)
        out["runs"].extend(runs)
        for n, nd in needs.items():
            out["nodes"][n]["routes"].append(nd.routes)
        with open(a.out, "w") as f:
            json.dump(out, f)
        print(json.dumps(runs[0]), flush=True)
    return 0


def _corr(xs, ys):
    n = float(len(xs))
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / (sxx * syy) ** 0.5 if sxx and syy else float("nan")


def tree_table(nodes, root, k):
    """Does the load move because the tree moves? The tree at each draw's
    end: how many nodes keep their parent over the draws; the correlation
    of a node's routes with s (N - s) (s: its subtree; the bootstrap paths
    between random keys that cross its parent link), within a draw, and of
    the change between two draws with the change of s (N - s)."""
    N = float(len(nodes))
    names = [n for n in nodes if n != root]
    same = sum(1 for n in names if len(set(nodes[n]["parent"])) == 1)
    print()
    print("tree at the end of each draw: %d of %d nodes keep their parent in all %d draws"
          % (same, len(names), k))
    f = lambda sz: sz * (N - sz) / N
    within = [_corr([nodes[n]["routes"][i] for n in names], [f(nodes[n]["subtree"][i]) for n in names])
              for i in range(k)]
    dx, dy = [], []
    for i in range(k):
        for j in range(i + 1, k):
            for n in names:
                dy.append(nodes[n]["routes"][i] - nodes[n]["routes"][j])
                dx.append(f(nodes[n]["subtree"][i]) - f(nodes[n]["subtree"][j]))
    print("routes ~ s(N-s): correlation within a draw %s; of the change between draws %.2f"
          % (" / ".join("%.2f" % c for c in within), _corr(dx, dy)))
    print("the root's neighbours, per draw subtree / routes:")
    for n in sorted(x for x in names if nodes[x]["dist"] == 1):
        v = nodes[n]
        print("  %s deg %d: %s" % (n, v["deg"], "  ".join("%d/%d" % (v["subtree"][i], v["routes"][i])
                                                          for i in range(k))))


def cmd_table(a):
    with open(a.file) as f:
        d = json.load(f)
    nodes = d["nodes"]
    root = d["root"]
    k = len(d["seeds"])
    caps = [int(x) for x in a.caps.split(",")]
    print("graph %s, root %s (eccentricity %d), key seeds %s, %d nodes"
          % (d["graph"], root, d["ecc"], d["seeds"], len(nodes)))
    print("| C | above C per draw | union | in every draw | leave-one-out misses per draw "
          "(plan = union of the others) | above C in one draw, < 0.8 C in another |"
          " hops from root of the union (min-median-max) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in caps:
        per = [set(n for n, v in nodes.items() if v["routes"][i] > c and n != root) for i in range(k)]
        union = set().union(*per)
        every = set.intersection(*per) if per else set()
        loo = []
        for i in range(k):
            others = set().union(*[per[j] for j in range(k) if j != i])
            loo.append(len(per[i] - others))
        swing = sum(1 for n, v in nodes.items() if n != root and max(v["routes"]) > c
                    and min(v["routes"]) < 0.8 * c)
        ds = sorted(nodes[n]["dist"] for n in union)
        med = ds[len(ds) // 2] if ds else 0
        print("| %d | %s | %d | %d | %s | %d | %s |"
              % (c, " / ".join(str(len(p)) for p in per), len(union), len(every),
                 " / ".join(str(x) for x in loo), swing,
                 "%d-%d-%d" % (ds[0], med, ds[-1]) if ds else "-"))
    # a plan with margin: the union of the other draws at > m x C upgraded,
    # how many of the left-out draw's nodes above C it misses
    print()
    print("leave-one-out with a margin: plan = nodes above m x C in any other draw (mean plan "
          "size; misses per left-out draw)")
    ms = (1.0, 0.8, 0.67, 0.5)
    print("| C | " + " | ".join("m=%.2f plan / misses" % m for m in ms) + " |")
    print("|" + " --- |" * (1 + len(ms)))
    for c in caps:
        cells = []
        for m in ms:
            sizes = []
            miss = []
            for i in range(k):
                plan = set(n for n, v in nodes.items() if n != root
                           and any(v["routes"][j] > m * c for j in range(k) if j != i))
                sizes.append(len(plan))
                miss.append(sum(1 for n, v in nodes.items() if n != root and v["routes"][i] > c
                                and n not in plan))
            cells.append("%d / %s" % (round(sum(sizes) / float(k)), " ".join(str(x) for x in miss)))
        print("| %d | %s |" % (c, " | ".join(cells)))
    # the root's ball: how many nodes within k hops, how many of the heavy
    # nodes (union over the draws) it covers
    print()
    print("root ball (k hops): nodes in it; for each C, heavy nodes (union) inside / outside")
    maxd = max(v["dist"] for v in nodes.values())
    hdr = "| k | ball | " + " | ".join("C=%d in/out" % c for c in caps) + " |"
    print(hdr)
    print("|" + " --- |" * (2 + len(caps)))
    for r in range(0, min(maxd, a.max_ball) + 1):
        ball = set(n for n, v in nodes.items() if v["dist"] <= r)
        cells = []
        for c in caps:
            union = set(n for n, v in nodes.items() if n != root and max(v["routes"]) > c)
            cells.append("%d/%d" % (len(union & ball), len(union - ball)))
        print("| %d | %d | %s |" % (r, len(ball), " | ".join(cells)))
    if nodes[root].get("subtree"):
        tree_table(nodes, root, k)
    if d.get("refused") and len(d["refused"]) >= 2:
        sets = [set(x) for x in d["refused"]]
        print("links refused for ports: %s per draw, %d in every draw, %d in some"
              % (" / ".join(str(len(x)) for x in sets), len(set.intersection(*sets)),
                 len(set.union(*sets))))
    # need per hop distance: the mean and the spread across draws
    print()
    print("per hop distance: nodes, mean of max-over-draws routes, mean (max-min) across draws, "
          "nodes with max > 152")
    print("| hops | nodes | mean need | mean swing | >152 in some draw | >152 in every draw |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in range(0, maxd + 1):
        at = [v for n, v in nodes.items() if v["dist"] == r]
        if not at:
            continue
        mx = [max(v["routes"]) for v in at]
        sw = [max(v["routes"]) - min(v["routes"]) for v in at]
        print("| %d | %d | %.0f | %.0f | %d | %d |"
              % (r, len(at), sum(mx) / len(at), sum(sw) / len(at), sum(1 for x in mx if x > 152),
                 sum(1 for v in at if min(v["routes"]) > 152)))
    return 0


def cmd_map(a):
    """A profile map from the measurement: the root on the root candidate,
    every node whose need in the chosen draws exceeds --cap on the first
    upgrade, and with --ball K every node within K hops of the root."""
    from host_tools.sim import planner as PL
    from host_tools.sim import profiles as PR
    with open(a.file) as f:
        d = json.load(f)
    ups = a.upgrade.split(",")
    ladder = PL.ladder_of(a.profile, ups)
    root_prof = PL.root_choice(ladder)
    seeds = d["seeds"]
    use = [seeds.index(int(x)) for x in a.draws.split(",")] if a.draws else list(range(len(seeds)))
    root = d["root"]
    asg = {root: root_prof.name}
    for n, v in d["nodes"].items():
        if n == root:
            continue
        if max(v["routes"][i] for i in use) > a.cap or v["dist"] <= a.ball:
            asg[n] = ups[0]
    os.makedirs(a.out, exist_ok=True)
    topo = PL.load_topology(generate=d["graph"], seed=d["gen_seed"]) if ":" in d["graph"] \
        else PL.load_topology(topology=d["graph"])
    with open(os.path.join(a.out, "topology.txt"), "w") as f:
        f.write(topo.to_text())
    with open(os.path.join(a.out, "profiles.txt"), "w") as f:
        f.write(PR.format_profile_map(asg, root, ["route_need.py map: draws %s, cap %d, ball %d"
                                                  % ([seeds[i] for i in use], a.cap, a.ball)]))
    print("%d upgraded (%d by routes > %d in draws %s, ball %d)" % (
        len(asg), sum(1 for n in asg if n != root and max(d["nodes"][n]["routes"][i] for i in use) > a.cap),
        a.cap, [seeds[i] for i in use], a.ball))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    src = m.add_mutually_exclusive_group(required=True)
    src.add_argument("--generate")
    src.add_argument("--topology")
    m.add_argument("--seed", type=int, default=1, help="generator seed")
    m.add_argument("--seeds", default="2001,2002,2003", help="key seeds, one draw each")
    m.add_argument("--profile", default="ESP32_GENERIC")
    m.add_argument("--upgrade", default="ESP32_SPIRAM,GATEWAY")
    m.add_argument("--duration", type=float, default=60.0)
    m.add_argument("--key-seed", type=int, default=None,
                   help="the keys of this seed in every draw (the draw's seed sets the timing)")
    m.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("file")
    t.add_argument("--caps", default="152,200,250,300")
    t.add_argument("--max-ball", type=int, default=12)
    mp = sub.add_parser("map")
    mp.add_argument("file")
    mp.add_argument("--cap", type=int, default=152)
    mp.add_argument("--ball", type=int, default=-1, help="upgrade every node within K hops of the root")
    mp.add_argument("--draws", default="", help="key seeds of the file to use (default: all)")
    mp.add_argument("--profile", default="ESP32_GENERIC")
    mp.add_argument("--upgrade", default="ESP32_SPIRAM,GATEWAY")
    mp.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    return {"measure": cmd_measure, "table": cmd_table, "map": cmd_map}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
