"""`snakemesh mesh`: a process mesh of unix-port firmware nodes (one process
per node of a topology), driven and inspected through the nodes' consoles."""
import os
import random
import signal
import sys
import time

from host_tools.procmesh.options import heapsize_arg, micropython_arg


def register(sub):
    p = sub.add_parser("mesh", help="run a mesh of unix-port firmware processes from a topology",
                       description="Start one MicroPython unix-port node per topology node (Wi-Fi "
                                   "edges over loopback TCP, @ble edges through the emulated BLE "
                                   "medium, @espnow edges through the emulated ESP-NOW medium), wait for convergence, ping and trace through the "
                                   "consoles, record telemetry, stop everything.")
    p.add_argument("--topology", required=True, metavar="FILE|NAME",
                   help="topology file (see README) or a shipped one by name (e.g. demo-mixed)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (telemetry.jsonl, logs/)")
    p.add_argument("--seed", type=int, default=1, help="key seed: node keys derive from it and the names")
    from host_tools.commands.sim import add_profile_options
    add_profile_options(p)
    p.add_argument("--duration", type=float, default=15.0, metavar="S",
                   help="seconds of telemetry and probes after convergence (default 15)")
    p.add_argument("--pings", type=int, default=12, metavar="N", help="random pairs to ping (default 12)")
    p.add_argument("--traces", type=int, default=4, metavar="N", help="random pairs to trace (default 4)")
    p.add_argument("--datagrams", type=int, default=4, metavar="N",
                   help="random pairs to send an acknowledged datagram (default 4)")
    p.add_argument("--converge-timeout", type=float, default=120.0, metavar="S")
    p.add_argument("--heapsize", type=heapsize_arg, metavar="SIZE",
                   help="MicroPython heap per node, e.g. 110K (default: the port's)")
    p.add_argument("--micropython", metavar="PATH",
                   help="micropython binary for every node (default: the venv's), e.g. a 32-bit build "
                        "from `make mp32`: build/mp32/micropython-frozen (firmware frozen in)")
    p.add_argument("--mpy", action="store_true", help="run the firmware compiled to .mpy, as on a board")
    p.add_argument("--espnow-loss", type=loss_arg, default=0.0, metavar="P",
                   help="@espnow edges: loss of each frame and ack in the emulated medium (default 0)")
    p.set_defaults(func=run)


def loss_arg(s):
    """argparse type of --espnow-loss: a probability within [0, 1)."""
    import argparse
    try:
        v = float(s)
    except ValueError:
        v = -1.0
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError("expected a loss probability within [0, 1), got %r" % s)
    return v


def percent(part, whole):
    """part/whole as a percentage for people: 100%, 93.8%, 0%."""
    if not whole:
        return "n/a"
    p = 100.0 * part / whole
    if part == whole:
        return "100%"
    return ("%.1f" % min(p, 99.9)).rstrip("0").rstrip(".") + "%"


def say(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def run_mesh(args, progress=say):
    from host_tools.procmesh.mesh import ProcessMesh
    from host_tools import topofiles
    args.topology = topofiles.resolve(args.topology)
    os.makedirs(args.out, exist_ok=True)
    from host_tools.commands.sim import profile_options
    hub, node_profiles, root = profile_options(args)
    rnd = random.Random(args.seed)
    summary = {}
    micropython = micropython_arg(getattr(args, "micropython", None))
    with ProcessMesh(args.topology, args.out, seed=args.seed, profile=args.profile,
                     heapsize=args.heapsize, log=progress, hub_profile=hub,
                     node_profiles=node_profiles, micropython=micropython,
                     gateway_root=getattr(args, "gateway_root", False), root_node=root,
                     mpy=getattr(args, "mpy", False),
                     espnow_loss=getattr(args, "espnow_loss", 0.0),
                     node_args=getattr(args, "node_args", None)) as m:
        m.outside = list(getattr(args, "outside_keys", None) or [])
        progress("%d nodes up, %d links (%d BLE, %d ESP-NOW)" % (
            len(m.names), len(m.edges), sum(1 for e in m.edges if e[2] == "ble"),
            sum(1 for e in m.edges if e[2] == "espnow")))
        if m.node_profiles:
            progress("profiles: %s on %s; others %s" % (
                ", ".join(sorted(set(m.node_profiles.values()))),
                " ".join(sorted(m.node_profiles)), args.profile))
        progress("waiting for every node to agree on the root (the highest key) and for the snake "
                 "to close (each node linked to the next lower key); up to %g s" % args.converge_timeout)
        t_tree, t_snake = m.wait_converged(timeout=args.converge_timeout, progress=progress)
        summary.update(tree_converged_s=round(t_tree, 1), snake_converged_s=round(t_snake, 1))
        progress("telemetry on: every node reports state, counters and peers each second")
        m.telemetry(1)
        pairs = [(a, b) for a in m.names for b in m.names if a != b]
        rnd.shuffle(pairs)
        ok = 0
        n_pings = min(args.pings, len(pairs))     # a 2-node mesh has 2 pairs, whatever --pings says
        if n_pings:
            progress("pinging %d random pairs (one probe each, sent by the source node)" % n_pings)
        for a, b in pairs[:n_pings]:
            r = m.ping(a, b, count=1)
            good = bool(r.get("received"))
            ok += good
            rtt = (r.get("rtts_ms") or [None])[0]
            progress("ping %-8s -> %-8s %s" % (a, b, ("%.1f ms" % rtt) if good else "LOST"))
        summary.update(pings=n_pings, pings_ok=ok)
        if n_pings:
            progress("pings answered: %d of %d (%s)" % (ok, n_pings, percent(ok, n_pings)))
        n_dg = min(getattr(args, "datagrams", 0), len(pairs))
        dg_ok = 0
        if n_dg:
            progress("sending %d datagrams with an end-to-end ack (service 1, through the source node's "
                     "console: `send KEY 1 1 HEX`)" % n_dg)
        for a, b in pairs[-n_dg:] if n_dg else ():
            r = m.send(a, b, ("hello %s from %s" % (b, a)).encode(), service=1, ack=True)
            good = r.get("state") == "delivered"
            dg_ok += good
            progress("datagram %-8s -> %-8s %s" % (a, b, ("delivered, ack after %s ms" % r.get("rtt_ms")) if good
                                                    else "%s (%s)" % (r.get("state"), r.get("reason"))))
        summary.update(datagrams=n_dg, datagrams_ok=dg_ok)
        if n_dg:
            progress("datagrams delivered: %d of %d (%s)" % (dg_ok, n_dg, percent(dg_ok, n_dg)))
        traces = pairs[n_pings:n_pings + args.traces]
        if traces:
            progress("tracing %d more pairs hop by hop" % len(traces))
        for a, b in traces:
            r = m.trace(a, b)
            hops = r.get("hops") or []
            names = [m.name_of(h.get("key")) for h in hops]
            progress("trace %-8s -> %-8s %s" % (a, b, " > ".join(str(x) for x in names) or "no reply"))
        progress("recording telemetry for %g s" % args.duration)
        m.drain(args.duration)
        m.telemetry(0)
        summary["pids"] = m.pids()
        media = [k for k, on in (("BLE", m.medium), ("ESP-NOW", m.espnow)) if on]
        progress("stopping the %d nodes%s" % (len(m.names), " and the %s medium%s" % (
            " and ".join(media), "s" if len(media) > 1 else "") if media else ""))
    return summary


def run(args):
    def on_term(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, on_term)
    try:
        s = run_mesh(args)
    finally:
        signal.signal(signal.SIGTERM, old)
    say("converged: tree %.1f s, snake %.1f s; pings %d/%d (%s); telemetry in %s"
        % (s["tree_converged_s"], s["snake_converged_s"], s["pings_ok"], s["pings"],
           percent(s["pings_ok"], s["pings"]), os.path.join(args.out, "telemetry.jsonl")))
    return 0 if s["pings_ok"] == s["pings"] else 1
