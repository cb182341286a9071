"""`snakemesh plan`: which boards a mesh needs where (docs/reports/CAPACITY.md
"Planning a mesh").

    snakemesh plan --generate rgg:1000 --seed 1 --profile ESP32_GENERIC \\
        --upgrade ESP32_SPIRAM,GATEWAY --out out/plan
    snakemesh sim --topology out/plan/topology.txt --profile ESP32_GENERIC \\
        --profile-map out/plan/profiles.txt --duration 150 --seed 2 --out out/run

Writes DIR/profiles.txt (``NAME PROFILE`` per upgraded node, the root marked
``root``), DIR/topology.txt (the graph planned for) and DIR/plan.json (every
node's measured need); prints the bill of materials on stdout, progress on
stderr. Exit 3 with one line when no assignment exists.
"""
import json
import os
import sys

from host_tools.errors import CliError, InputError, UsageError


class NoPlan(CliError):
    exit_code = 7


def register(subparsers):
    p = subparsers.add_parser(
        "plan", help="capacity planner: which nodes need a larger board",
        description="Find where a mesh's load lands (the simulator's run of it, over several "
                    "key draws, with the root placed at the graph's centre) and give each node "
                    "the cheapest profile of --profile and --upgrade that holds its load with "
                    "margin; write DIR/profiles.txt for sim/mesh --profile-map.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--topology", metavar="FILE|NAME", help="topology file or a shipped one by name")
    src.add_argument("--generate", metavar="SPEC", help="generated topology: grid:WxH, rgg:N[:R], ba:N:M, community:N:C")
    p.add_argument("--seed", type=int, default=1, help="generator seed (default %(default)s)")
    p.add_argument("--profile", required=True, metavar="BASE", help="the board most nodes are")
    p.add_argument("--upgrade", required=True, metavar="P1[,P2...]",
                   help="larger profiles, cheapest first")
    p.add_argument("--profile-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting of the base profile, e.g. max_routes=300, as "
                        "`sim --profile-set` does (repeatable; give the same to sim)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    p.add_argument("--draws", type=int, default=2, metavar="K",
                   help="key draws simulated (default %(default)s)")
    p.add_argument("--duration", type=float, default=60.0, metavar="SECONDS",
                   help="virtual seconds per draw (default %(default)s)")
    p.add_argument("--routes-margin", type=float, default=None, metavar="X",
                   help="a node's measured route entries times X must fit its table (default 1.0)")
    p.add_argument("--max-upgrades", default=None, metavar="N|P%",
                   help="a budget of upgraded boards (the root included), a number or a share "
                        "of the nodes: what the measured needs leave of it goes to the base "
                        "boards likeliest to overflow in a fresh key draw (busy in the draws "
                        "measured, near the root)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args):
    from host_tools.sim import planner as PL
    from host_tools.sim import profiles as PR
    from host_tools import topofiles
    if args.draws < 1:
        raise UsageError("--draws must be >= 1")
    if args.duration <= 0:
        raise UsageError("--duration must be > 0")
    margin = PL.ROUTES_MARGIN if args.routes_margin is None else args.routes_margin
    if not margin >= 1.0:
        raise UsageError("--routes-margin must be >= 1")
    upgrades = [u.strip() for u in args.upgrade.split(",") if u.strip()]
    if not upgrades:
        raise UsageError("--upgrade needs at least one profile")
    progress = None if args.quiet else sys.stderr
    budget_spec = args.max_upgrades
    try:
        base_set = PR.parse_profile_set(args.profile_set)
    except PR.ProfileSpecError as e:
        raise UsageError(str(e))
    try:
        topo_path = topofiles.resolve(args.topology) if args.topology is not None else None
        topo = PL.load_topology(topo_path, args.generate, args.seed)
        budget = parse_budget(budget_spec, len(topo))
        ladder = PL.ladder_of(args.profile, upgrades, base_set)
        root_prof = PL.root_choice(ladder)
        if progress:
            print("plan: %d nodes, %d links; finding the centre" % (len(topo), len(topo.edges)),
                  file=progress, flush=True)
        root, ecc, dist = PL.centre(topo)
        if progress:
            print("plan: root %s (eccentricity %d) on %s" % (root, ecc, root_prof.name),
                  file=progress, flush=True)
    except PL.PlanError as e:
        raise InputError(str(e))
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise InputError("cannot create output folder %s: %s" % (args.out, e.strerror or e))
    with open(os.path.join(args.out, "topology.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(topo.to_text())
    try:
        PL.depth_bound(dist, ladder, root)
        needs, runs = PL.measure(topo, ladder[0], root, root_prof, args.draws, args.duration,
                                 progress)
        assignment, why = PL.assign(needs, ladder, root, root_prof, margin=margin)
        required = len(assignment)
        filled = (PL.fill(assignment, why, needs, ladder, budget, dist, root, margin)
                  if budget is not None else [])
    except PL.NoAssignment as e:
        _remove(os.path.join(args.out, "profiles.txt"))
        raise NoPlan(e.line)
    source = args.topology or ("generate:%s seed %d" % (args.generate, args.seed))
    base_text = ladder[0].name + (" with " + PR.describe_settings(base_set) if base_set else "")
    header = ["snakemesh plan: %s, base %s, upgrades %s" % (source, base_text, ",".join(upgrades)),
              "root %s: keys put it highest (snakemesh keygen --profile %s on the board)"
              % (root, root_prof.name)]
    with open(os.path.join(args.out, "profiles.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(PR.format_profile_map(assignment, root, header))
    misses = PL.fresh_draw_misses(needs, ladder[0], margin, root)
    plan = {
        "fresh_draw_misses": [len(m) for m in misses],
        "source": source, "base": ladder[0].name, "base_settings": base_set,
        "upgrades": upgrades, "root": root,
        "root_eccentricity": ecc, "runs": runs, "routes_margin": margin,
        "max_upgrades": budget, "required_upgrades": required, "filled": filled,
        "assignment": assignment, "binding": why,
        "needs": {n: {"routes": nd.routes, "draw_routes": nd.draw_routes, "depth": nd.depth,
                      "hops": nd.hops,
                      "ports": nd.peers, "cuts_off": nd.cut} for n, nd in sorted(needs.items())},
    }
    with open(os.path.join(args.out, "plan.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(plan, f, sort_keys=True, indent=1)
        f.write("\n")
    text = bill(topo, ladder, assignment, why, needs, root, runs, args.out, misses)
    if budget is not None:
        if required > budget:
            text += ("\n  over budget: the measured needs require %d upgrades, --max-upgrades "
                     "allows %d" % (required, budget))
        else:
            text += ("\n  budget %d: %d required by the measured needs, %d more on the boards "
                     "likeliest to overflow in a fresh draw (fresh-draw)"
                     % (budget, required, len(filled)))
    if base_set:
        text += ("\n  the base is %s: give sim the same (%s)"
                 % (base_text, " ".join("--profile-set " + x for x in args.profile_set)))
    print(text)
    return 0


def parse_budget(spec, nodes):
    """--max-upgrades: None, a count ("100") or a share of the nodes
    ("10%", rounded down); UsageError otherwise."""
    if spec is None:
        return None
    text = spec.strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if not 0 <= share <= 100:
                raise ValueError
            return int(share * nodes / 100.0 + 1e-9)
        n = int(text)
        if n < 0:
            raise ValueError
        return n
    except ValueError:
        raise UsageError("--max-upgrades takes a count or a share like 10%%, got %r" % spec)


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def bill(topo, ladder, assignment, why, needs, root, runs, out, misses=()):
    """The bill of materials as text."""
    n = len(topo)
    counts = {p.name: 0 for p in ladder}
    for name in topo.names:
        counts[assignment.get(name, ladder[0].name)] += 1
    up = len(assignment)
    lines = ["plan: %d nodes: %s; %d upgraded (%.1f %%); root %s"
             % (n, ", ".join("%d %s" % (counts[p.name], p.name) for p in ladder), up,
                100.0 * up / n, root)]
    for p in ladder[1:]:
        names = sorted(k for k, v in assignment.items() if v == p.name)
        if not names:
            continue
        lines.append("  %s (%d):" % (p.name, len(names)))
        by = {}
        for k in names:
            by.setdefault(why[k], []).append(k)
        for table in sorted(by):
            ks = by[table]
            shown = ", ".join("%s (%s)" % (k, _need_short(needs[k])) for k in ks[:12])
            more = " and %d more" % (len(ks) - 12) if len(ks) > 12 else ""
            if table == "fresh-draw":
                lines.append("    spare budget, likeliest to overflow %s in a fresh draw: %s%s"
                             % (ladder[0].name, shown, more))
            else:
                lines.append("    %s binds on %s: %s%s" % (table, ladder[0].name, shown, more))
    lines.append("  binding table on %s: %s" % (
        ladder[0].name, ", ".join("%s %d" % (t, c) for t, c in
                                  sorted(_count(why.values()).items())) or "none"))
    lines.append("  measured over %d key draws: %s" % (len(runs), "; ".join(
        "converged %s, %d links refused, %d components, %d nodes outside the root's tree, wall %.0f s"
        % ("at %.0f s" % r["converged_s"] if r["converged_s"] is not None else "no",
           r["refused_links"], r["components"], r["outside_root_tree"], r["wall_s"]) for r in runs)))
    if misses and any(misses):
        lines.append("  fresh-draw check: routes overflow %s in one draw only on %s nodes "
                     "(draws %s): the load moves with the keys, and a fresh key draw may "
                     "overflow boards this plan leaves on %s (more --draws, or bench/route_need.py "
                     "to see how far)" % (
                         ladder[0].name, " / ".join(str(len(m)) for m in misses),
                         " / ".join(str(i + 1) for i in range(len(misses))), ladder[0].name))
    elif misses:
        lines.append("  fresh-draw check: every node whose routes overflow %s in one of the %d "
                     "draws does in every other" % (ladder[0].name, len(misses)))
    lines.append("  wrote %s" % os.path.join(out, "profiles.txt"))
    return "\n".join(lines)


def _need_short(nd):
    s = "r%d d%d h%d" % (nd.routes, nd.depth, nd.hops)
    if nd.peers:
        s += " p%d" % nd.peers
    return s


def _count(xs):
    out = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return out
