"""Inspection over a node's serial console: status, peers, tree, snake,
routes, stats, ping, trace, monitor and an interactive console.

Every --port is a device path (/dev/ttyUSB0, a unix-port node's /dev/pts/N)
or a pyserial URL (socket://host:port, rfc2217://...). Tables are for people;
--json prints the node's reply as one JSON line for scripts.
"""
import json
import sys
import threading
import time

from host_tools import boards
from host_tools.console_client import ConsoleClient, NodeError
from host_tools.errors import CliError, DeviceError, InputError

DEFAULT_TIMEOUT = 5.0


from host_tools.render import RENDERERS, strip_envelope, ping_summary, render_ping, render_trace  # noqa: F401
from host_tools import names as names_mod


# ---------------------------------------------------------------- commands ---

def _common(p, json_flag=True, port=True, names=True):
    if port:
        p.add_argument("--port", required=True, help="device path or pyserial URL (socket://host:port)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds to wait for a reply (default %(default)s)")
    boards.add_verbose(p)
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the node's reply as JSON")
        p.add_argument("--wide", action="store_true", help="show full keys in tables")
    if names:
        p.add_argument("--names", metavar="FILE|DIR",
                       help="node names: a mesh/demo/sim output folder, nodes.json, truth.json, telemetry "
                            "with a topology record, or NAME KEY lines (default $%s)" % names_mod.ENV)


KEY_HELP = ("destination: a public key (64 hex digits), a unique prefix of at least %d hex digits, "
            "or a node name from --names" % names_mod.MIN_PREFIX)


def register(subparsers):
    helps = {"status": "the node's key, version, tree position, counts",
             "peers": "the node's peers (port, key, link, root)",
             "tree": "spanning-tree position: root, parent, coordinates, ancestors",
             "snake": "virtual snake: descending neighbour",
             "routes": "snake routing table",
             "stats": "counters: frames, drops, verifications, tables, memory",
             "mem": "the node's heap: used, free, largest free block, heap per part"}
    for name in ("status", "peers", "tree", "snake", "routes", "stats", "mem"):
        p = subparsers.add_parser(name, help=helps[name], description=helps[name])
        _common(p)
        p.set_defaults(func=run_query, query=name)

    p = subparsers.add_parser("ping", help="ping a key through the mesh; RTT statistics")
    _common(p)
    p.add_argument("key", metavar="KEY", help=KEY_HELP)
    p.add_argument("-c", "--count", type=int, default=4, help="number of probes (default %(default)s)")
    p.set_defaults(func=run_ping)

    p = subparsers.add_parser("trace", help="trace the path to a key, hop by hop")
    _common(p)
    p.add_argument("key", metavar="KEY", help=KEY_HELP)
    p.set_defaults(func=run_trace)

    p = subparsers.add_parser(
        "monitor", help="stream telemetry from one or more nodes to a JSONL file",
        description="Turn on telemetry on every --port and write each record as one JSON line "
                    "(with `port` added, and `t` = host time if the node sent none) until "
                    "--duration passes or Ctrl-C.")
    p.add_argument("--port", required=True, action="append", help="repeat for several nodes")
    p.add_argument("--out", required=True, metavar="FILE.jsonl")
    p.add_argument("--duration", type=float, default=None, help="seconds to record (default: until Ctrl-C)")
    p.add_argument("--interval", default="1", help="telemetry period asked of each node, seconds (default 1)")
    p.add_argument("--append", action="store_true", help="append to FILE instead of replacing it")
    _common(p, json_flag=False, port=False, names=False)
    p.set_defaults(func=run_monitor)

    p = subparsers.add_parser(
        "console", help="interactive session with a node's console",
        description="A prompt with line editing, history (~/.snakemesh_history) and tab completion; "
                    "each command goes to the node and its reply is printed as a table (raw JSON with "
                    "--json); what the node sends on its own (peer up/down, telemetry) is printed as "
                    "it comes. ping/trace take a key prefix or a --names name. Ctrl-D or quit leaves. "
                    "From a pipe: no prompt, one reply per input line.")
    _common(p)
    p.set_defaults(func=run_console)


def _print_json(reply):
    print(json.dumps(reply, sort_keys=True))


def run_query(args):
    names = names_mod.from_args(args.names)
    with ConsoleClient(args.port, timeout=args.timeout) as c:
        reply = c.request(args.query)
    if args.json:
        _print_json(reply)
    else:
        print(RENDERERS[args.query](strip_envelope(reply), args.wide, names))
    return 0


def resolve_key(c, text, names):
    """KEY argument -> 64 hex digits (a prefix is looked up in the names
    and among the keys the node knows)."""
    return names_mod.resolve(text, names, known=lambda: names_mod.node_keys(c))


def _check_key(text, names):
    names_mod.classify(text, names)      # a malformed KEY fails before the port is opened


def _dest(key, names):
    n = names.name(key)
    return "%s (%s)" % (key, n) if n else key


def run_ping(args):
    if args.count < 1:
        raise CliError("ping: -c must be at least 1", exit_code=2)
    names = names_mod.from_args(args.names)
    _check_key(args.key, names)
    with ConsoleClient(args.port, timeout=args.timeout) as c:
        key = resolve_key(c, args.key, names)
        # The node sends the probes; allow it about a second per probe.
        reply = c.request("ping", key, args.count, timeout=args.timeout + args.count)
        d = strip_envelope(reply)
        _, received = ping_summary(d)
        why = None
        if not received and not args.json:
            try:
                why = names_mod.no_answer(key, names_mod.node_keys(c))
            except CliError:
                why = names_mod.no_answer(key, None)
    if args.json:
        _print_json(reply)
    else:
        print(render_ping(d, args.wide, names, header="ping %s from %s" % (_dest(key, names), args.port)))
        if why:
            print(why)
    return 0 if received else 1


def run_trace(args):
    names = names_mod.from_args(args.names)
    _check_key(args.key, names)
    with ConsoleClient(args.port, timeout=args.timeout) as c:
        key = resolve_key(c, args.key, names)
        reply = c.request("trace", key, timeout=args.timeout * 2, check=False)
    # The trace data's `ok` (destination reached) shares the reply envelope's
    # `ok`: ok:false *with* hops is an unreached destination, without hops
    # it is an error. A `reached` field, if the node sends one, wins.
    if reply.get("ok") is False and "hops" not in reply:
        raise NodeError("%s: 'trace' failed on the node: %s"
                        % (args.port, reply.get("error") or "no reason given"))
    ok = bool(reply.get("reached", reply.get("ok")))
    d = strip_envelope(reply)
    if args.json:
        _print_json(reply)
    else:
        print(render_trace(d, args.wide, names, header="trace to %s from %s" % (_dest(key, names), args.port),
                           reached=ok))
    return 0 if ok else 1


def _open_out(path, append):
    try:
        return open(path, "a" if append else "w", encoding="utf-8")
    except OSError as e:
        raise InputError("cannot write %s: %s" % (path, e.strerror or e))


def run_monitor(args):
    ports = list(dict.fromkeys(args.port))
    clients = []
    try:
        for port in ports:
            c = ConsoleClient(port, timeout=args.timeout).open()
            clients.append(c)
            c.request("telemetry", args.interval)
        out = _open_out(args.out, args.append)
        return _monitor_loop(clients, out, args)
    finally:
        for c in clients:
            try:
                if c.ser is not None:
                    c.request("telemetry", "off", timeout=min(args.timeout, 1.0), check=False)
            except CliError:
                pass
            c.close()


def _monitor_loop(clients, out, args):
    import queue
    q = queue.Queue(maxsize=10000)
    stop = threading.Event()

    def pump(c):
        try:
            for rec in c.records(stop=stop.is_set):
                q.put((c.port, rec, None))
        except CliError as e:
            q.put((c.port, None, e))
        q.put((c.port, None, None))

    threads = [threading.Thread(target=pump, args=(c,), daemon=True) for c in clients]
    for t in threads:
        t.start()
    sys.stderr.write("monitoring %d node(s) -> %s%s (Ctrl-C to stop)\n"
                     % (len(clients), args.out, " for %g s" % args.duration if args.duration else ""))
    end = None if args.duration is None else time.monotonic() + args.duration
    counts = dict((c.port, 0) for c in clients)
    failed = {}
    live = len(clients)
    interrupted = False
    try:
        while live:
            timeout = 0.2 if end is None else max(0.0, min(0.2, end - time.monotonic()))
            if end is not None and time.monotonic() >= end:
                break
            try:
                port, rec, err = q.get(timeout=timeout)
            except queue.Empty:
                continue
            if rec is None:
                if err is not None:
                    failed[port] = err.message
                    sys.stderr.write("snakemesh: %s stopped: %s\n" % (port, err.message))
                live -= 1
                continue
            rec = dict(rec)
            now = time.time()
            if "t" not in rec:
                rec["t"] = now
            rec["host_t"] = round(now, 3)
            rec["port"] = port
            out.write(json.dumps(rec, separators=(",", ":")) + "\n")
            out.flush()
            counts[port] += 1
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.set()
        for t in threads:
            t.join(1.0)
        out.close()
    total = sum(counts.values())
    print("wrote %d records to %s (%s)%s" % (
        total, args.out, ", ".join("%s: %d" % (p, n) for p, n in counts.items()),
        " (interrupted)" if interrupted else ""))
    if failed and len(failed) == len(clients):
        raise DeviceError("every node stopped: " + "; ".join("%s: %s" % kv_ for kv_ in failed.items()))
    return 0


def run_console(args):
    from host_tools.console_session import Console
    names = names_mod.from_args(args.names)
    c = ConsoleClient(args.port, timeout=args.timeout).open()
    try:
        return Console(c, timeout=args.timeout, json_out=args.json, names=names, wide=args.wide).run()
    finally:
        c.close()
