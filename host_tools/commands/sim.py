"""`snakemesh sim`: the virtual-time simulator (docs/guides/SIMULATOR.md).

    snakemesh sim --topology sim --duration 120 --seed 1 --out out/sim
    snakemesh sim --generate rgg:1000 --duration 300 --seed 7 --out out/big --scenario churn.txt
    snakemesh sim --generate ba:500:2 --profile ESP32_GENERIC --hub-profile GATEWAY --duration 120 --out out/ba

Runs the shipped router core of every node on one discrete-event clock and
writes telemetry.jsonl, topology.txt and truth.json to --out; prints
progress on stderr and a one-line summary on stdout.
"""
import sys

from host_tools.errors import InputError, UsageError


def register(subparsers):
    p = subparsers.add_parser(
        "sim", help="run the virtual-time mesh simulator",
        description="Simulate a mesh of snakemesh router cores on a virtual clock "
                    "(deterministic for a seed) and write telemetry, the topology and "
                    "ground truth to --out.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--topology", metavar="FILE|NAME",
                     help="topology file (see docs/guides/SIMULATOR.md) or a shipped one by name (e.g. grid4-0049)")
    src.add_argument("--generate", metavar="SPEC",
                     help="generated topology: grid:WxH, rgg:N[:RADIUS] (random geometric), "
                          "ba:N:M (Barabasi-Albert scale-free: hubs) or community:N:C "
                          "(C communities with hubs, joined by a few links)")
    p.add_argument("--duration", type=float, required=True, metavar="SECONDS", help="virtual seconds to run")
    p.add_argument("--seed", type=int, default=1, help="run seed: keys, timing, loss, pairs (default %(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    p.add_argument("--scenario", metavar="FILE", help="scripted events (docs/guides/SIMULATOR.md)")
    add_profile_options(p)
    p.add_argument("--profile-set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one setting of the base profile, e.g. max_hops=48 (repeatable; "
                        "VALUE is JSON or a plain string)")
    p.add_argument("--hop-limit", type=int, default=None, metavar="N",
                   help="hop limit of probe traffic (default: the sending node's profile "
                        "traffic_hop_limit)")
    p.add_argument("--pings", type=int, default=20, metavar="N",
                   help="without a ping-set in the scenario: ping N random pairs 3 times at half "
                        "time (0 = none; default %(default)s)")
    p.add_argument("--state-interval", type=float, default=1.0, metavar="S",
                   help="state records every S virtual seconds (default %(default)s)")
    p.add_argument("--counters-interval", type=float, default=5.0, metavar="S",
                   help="counters records every S virtual seconds (default %(default)s)")
    p.add_argument("--crash-detect-ms", default="0", metavar="MS|keepalive",
                   help="how long neighbours of a crashed node take to see its links drop; "
                        "'keepalive' = only through their own dead-peer timer (default %(default)s)")
    p.add_argument("--no-telemetry", action="store_true", help="skip telemetry.jsonl (truth.json only)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def add_profile_options(p):
    """--profile, --hub-profile, --node-profile (shared with `snakemesh mesh`)."""
    p.add_argument("--profile", default="UNIX", metavar="NAME_OR_PATH",
                   help="board profile of every node: a board name (boards/NAME) or a "
                        "profile.json path (default %(default)s)")
    p.add_argument("--hub-profile", default=None, metavar="NAME_OR_PATH",
                   help="profile of every node with more links than the base profile's "
                        "max_peers (e.g. GATEWAY)")
    p.add_argument("--node-profile", action="append", default=[], metavar="NAME=PROFILE",
                   help="profile of one node (repeatable; wins over --hub-profile and "
                        "--profile-map)")
    p.add_argument("--profile-map", metavar="FILE",
                   help="profiles of single nodes from a file of 'NAME PROFILE' lines, as "
                        "`snakemesh plan` writes it (wins over --hub-profile); a line "
                        "'NAME PROFILE root' makes the keys put that node at the root")
    p.add_argument("--gateway-root", action="store_true",
                   help="node keys by the provisioning policy 'a gateway is the root': nodes on a "
                        "root-candidate profile (GATEWAY) get keys above every other node's, as "
                        "`snakemesh keygen --profile GATEWAY` makes them")


def profile_options(args):
    """(hub profile, {node: profile}, root node or None) from the parsed
    options, checked: UsageError/InputError with one line on a bad value.
    The root is the profile map's node marked root."""
    from host_tools.sim import profiles as PR
    try:
        node_profiles = PR.parse_node_profiles(args.node_profile)
    except PR.ProfileSpecError as e:
        raise UsageError(str(e))
    root = None
    if getattr(args, "profile_map", None):
        try:
            mapped, root = PR.load_profile_map(args.profile_map)
        except PR.ProfileSpecError as e:
            raise InputError(str(e))
        mapped.update(node_profiles)
        node_profiles = mapped
    loaded = []
    try:
        for spec in [args.profile, args.hub_profile] + sorted(set(node_profiles.values())):
            if spec is not None:
                loaded.append(PR.load(spec))
    except PR.ProfileSpecError as e:
        raise InputError(str(e))
    if getattr(args, "gateway_root", False):
        from host_tools import keystore
        if not any(keystore.is_root_candidate(p) for p in loaded):
            raise UsageError("--gateway-root needs a root-candidate profile (%s) in the mesh: "
                             "--hub-profile GATEWAY or --node-profile NAME=GATEWAY"
                             % ", ".join(keystore.ROOT_CANDIDATE_PROFILES))
    if root is not None and getattr(args, "gateway_root", False):
        raise UsageError("--gateway-root and a profile map with a root are two root policies: "
                         "give one")
    return args.hub_profile, node_profiles, root


def run(args):
    from host_tools.sim import runner
    from host_tools.sim.harness import MeshError
    from host_tools import topofiles
    if args.duration <= 0:
        raise UsageError("--duration must be > 0")
    if args.topology is not None:
        args.topology = topofiles.resolve(args.topology)
    if args.pings < 0:
        raise UsageError("--pings must be >= 0")
    if args.state_interval <= 0 or args.counters_interval <= 0:
        raise UsageError("--state-interval and --counters-interval must be > 0")
    if args.hop_limit is not None and not 1 <= args.hop_limit <= 255:
        raise UsageError("--hop-limit must be within 1..255")
    from host_tools.sim import profiles as PR
    try:
        overrides = PR.parse_profile_set(args.profile_set)
    except PR.ProfileSpecError as e:
        raise UsageError(str(e))
    hub, node_profiles, root = profile_options(args)
    if args.crash_detect_ms == "keepalive":
        crash = None
    else:
        try:
            crash = float(args.crash_detect_ms)
            if crash < 0:
                raise ValueError
        except ValueError:
            raise UsageError("--crash-detect-ms must be a number >= 0 or 'keepalive'")
    try:
        s = runner.run(args.out, args.duration, seed=args.seed, topology=args.topology,
                       generate=args.generate, scenario=args.scenario, profile=args.profile,
                       pings=args.pings, state_interval=args.state_interval,
                       counters_interval=args.counters_interval, crash_detect_ms=crash,
                       progress=None if args.quiet else sys.stderr,
                       telemetry=not args.no_telemetry, profile_set=overrides,
                       hop_limit=args.hop_limit, hub_profile=hub, node_profiles=node_profiles,
                       gateway_root=args.gateway_root, root_node=root)
    except (runner.RunError, MeshError) as e:
        raise InputError(str(e))
    print(runner.summary_line(s))
    return 0
