"""Inspection over a node's serial console: status, peers, tree, snake,
routes, stats, ping, trace, monitor and an interactive console.

Every --port is a device path (/dev/ttyUSB0, a unix-port node's /dev/pts/N)
or a pyserial URL (socket://host:port, rfc2217://...). Tables are for people;
--json prints the node's reply as one JSON line for scripts.
"""
import json
import math
import sys
import threading
import time

from host_tools import boards, keystore
from host_tools.console_client import ConsoleClient, NodeError
from host_tools.errors import CliError, DeviceError, InputError

DEFAULT_TIMEOUT = 5.0


# ---------------------------------------------------------------- formatting --

def short(key, wide=False):
    if key is None:
        return "-"
    if not isinstance(key, str) or wide or len(key) <= 16:
        return str(key)
    return key[:16]


def fmt(v, wide=False):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return ("%.2f" % v).rstrip("0").rstrip(".")
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(fmt(x, wide) for x in v) + "]"
    if isinstance(v, dict):
        return " ".join("%s=%s" % (k, fmt(x, wide)) for k, x in sorted(v.items()))
    return str(v)


def table(headers, rows):
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def kv(pairs):
    width = max([len(k) for k, _ in pairs] or [0])
    return "\n".join("%s  %s" % (k.ljust(width), v) for k, v in pairs)


def strip_envelope(reply):
    return dict((k, v) for k, v in reply.items() if k not in ("re", "ok", "id"))


def _flatten(prefix, v, out):
    if isinstance(v, dict) and v:
        for k in sorted(v):
            _flatten(prefix + "." + str(k) if prefix else str(k), v[k], out)
    else:
        out.append((prefix, v))


STATUS_FIELDS = ["key", "version", "root", "root_seq", "parent", "coords", "depth", "desc",
                 "peers", "routes", "uptime_s", "mem_free"]


def render_status(d, wide=False):
    keys = STATUS_FIELDS + sorted(k for k in d if k not in STATUS_FIELDS)
    return kv([(k, fmt(d.get(k), True)) for k in keys if k in d])


def render_peers(d, wide=False):
    peers = d.get("peers") or []
    if not peers:
        return "no peers"
    rows = [[p.get("port"), short(p.get("key"), wide), p.get("link", "-"), short(p.get("root"), wide),
             fmt(p.get("root_seq")), fmt(p.get("coords"))] for p in peers]
    return table(["PORT", "KEY", "LINK", "ROOT", "ROOT_SEQ", "COORDS"], rows)


def render_tree(d, wide=False):
    pairs = [(k, fmt(d.get(k))) for k in ("root", "root_seq", "parent", "coords", "depth") if k in d]
    anc = d.get("ancestors") or []
    text = kv(pairs)
    if anc:
        text += "\nancestors (nearest first):\n" + "\n".join("  %d  %s" % (i + 1, a) for i, a in enumerate(anc))
    return text


def render_snake(d, wide=False):
    desc = d.get("desc")
    if not desc:
        text = "descending: none"
    else:
        text = "descending: %s (port %s, root %s, root_seq %s)" % (
            desc.get("key"), fmt(desc.get("port")), short(desc.get("root"), wide), fmt(desc.get("root_seq")))
    return text + "\nsnake routes: %s" % fmt(d.get("routes"))


def render_routes(d, wide=False):
    routes = d.get("routes") or []
    if not routes:
        return "no routes"
    rows = [[short(r.get("key"), wide), fmt(r.get("src_port")), fmt(r.get("dst_port")),
             short(r.get("root"), wide), fmt(r.get("root_seq")), short(r.get("wm_key"), wide),
             fmt(r.get("wm_seq")), fmt(r.get("age_ms"))] for r in routes]
    return table(["KEY", "SRC", "DST", "ROOT", "ROOT_SEQ", "WM_KEY", "WM_SEQ", "AGE_MS"], rows)


def render_stats(d, wide=False):
    out = []
    for k in sorted(d):
        _flatten(k, d[k], out)
    return kv([(k, fmt(v)) for k, v in out]) if out else "no counters"


RENDERERS = {"status": render_status, "peers": render_peers, "tree": render_tree,
             "snake": render_snake, "routes": render_routes, "stats": render_stats}


def ping_summary(d):
    sent = int(d.get("sent") or 0)
    rtts = [float(x) for x in (d.get("rtts_ms") or []) if isinstance(x, (int, float))]
    received = int(d.get("received", len(rtts)) or 0)
    loss = 100.0 * (sent - received) / sent if sent else 100.0
    lines = ["%d probes sent, %d received, %s%% loss" % (sent, received, fmt(round(loss, 1)))]
    if rtts:
        avg = sum(rtts) / len(rtts)
        mdev = math.sqrt(sum((x - avg) ** 2 for x in rtts) / len(rtts))
        lines.append("rtt min/avg/max/mdev = %.2f/%.2f/%.2f/%.2f ms" % (min(rtts), avg, max(rtts), mdev))
    return "\n".join(lines), received


# ---------------------------------------------------------------- commands ---

def _common(p, json_flag=True, port=True):
    if port:
        p.add_argument("--port", required=True, help="device path or pyserial URL (socket://host:port)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds to wait for a reply (default %(default)s)")
    boards.add_verbose(p)
    if json_flag:
        p.add_argument("--json", action="store_true", help="print the node's reply as JSON")
        p.add_argument("--wide", action="store_true", help="show full keys in tables")


def register(subparsers):
    helps = {"status": "the node's key, version, tree position, counts",
             "peers": "the node's peers (port, key, link, root)",
             "tree": "spanning-tree position: root, parent, coordinates, ancestors",
             "snake": "virtual snake: descending neighbour",
             "routes": "snake routing table",
             "stats": "counters: frames, drops, verifications, tables, memory"}
    for name in ("status", "peers", "tree", "snake", "routes", "stats"):
        p = subparsers.add_parser(name, help=helps[name], description=helps[name])
        _common(p)
        p.set_defaults(func=run_query, query=name)

    p = subparsers.add_parser("ping", help="ping a key through the mesh; RTT statistics")
    _common(p)
    p.add_argument("key", metavar="KEY", help="destination public key (64 hex digits)")
    p.add_argument("-c", "--count", type=int, default=4, help="number of probes (default %(default)s)")
    p.set_defaults(func=run_ping)

    p = subparsers.add_parser("trace", help="trace the path to a key, hop by hop")
    _common(p)
    p.add_argument("key", metavar="KEY", help="destination public key (64 hex digits)")
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
    _common(p, json_flag=False, port=False)
    p.set_defaults(func=run_monitor)

    p = subparsers.add_parser(
        "console", help="interactive session with a node's console",
        description="Send each line you type to the node and print everything it sends. "
                    "Ctrl-D (end of input) or Ctrl-C quits.")
    _common(p, json_flag=False)
    p.set_defaults(func=run_console)


def _print_json(reply):
    print(json.dumps(reply, sort_keys=True))


def run_query(args):
    with ConsoleClient(args.port, timeout=args.timeout) as c:
        reply = c.request(args.query)
    if args.json:
        _print_json(reply)
    else:
        print(RENDERERS[args.query](strip_envelope(reply), args.wide))
    return 0


def run_ping(args):
    key = keystore.parse_public_key(args.key)
    if args.count < 1:
        raise CliError("ping: -c must be at least 1", exit_code=2)
    with ConsoleClient(args.port, timeout=args.timeout) as c:
        # The node sends the probes; allow it about a second per probe.
        reply = c.request("ping", key, args.count, timeout=args.timeout + args.count)
    d = strip_envelope(reply)
    summary, received = ping_summary(d)
    if args.json:
        _print_json(reply)
    else:
        print("ping %s from %s" % (key, args.port))
        for i, r in enumerate(d.get("rtts_ms") or []):
            print("  reply %d: rtt %s ms" % (i + 1, fmt(r)))
        print(summary)
    return 0 if received else 1


def run_trace(args):
    key = keystore.parse_public_key(args.key)
    with ConsoleClient(args.port, timeout=args.timeout) as c:
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
        print("trace to %s from %s" % (key, args.port))
        for i, h in enumerate(d.get("hops") or []):
            print("  %2d  %s  %s ms" % (i + 1, short(h.get("key"), args.wide), fmt(h.get("rtt_ms"))))
        print("reached" if ok else "destination not reached")
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
    c = ConsoleClient(args.port, timeout=args.timeout).open()
    stop = threading.Event()
    last_rx = [time.monotonic()]
    errors = []

    def reader():
        while not stop.is_set():
            try:
                data = c._read_some(time.monotonic() + 0.1)
            except CliError as e:
                errors.append(e)
                stop.set()
                return
            if data:
                last_rx[0] = time.monotonic()
                sys.stdout.write(data.decode("utf-8", "replace").replace("\r\n", "\n"))
                sys.stdout.flush()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    if sys.stdin.isatty():
        sys.stderr.write("connected to %s; type commands (help, status, ...), Ctrl-D to quit\n" % args.port)
    last_tx = time.monotonic()
    try:
        while not stop.is_set():
            line = sys.stdin.readline()
            if not line:
                break
            c.send_line(line.rstrip("\r\n"))
            last_tx = time.monotonic()
        # End of input: let the last replies arrive (until the line has been
        # quiet for 0.3 s after an answer, at most --timeout after the last send).
        end = last_tx + args.timeout
        while not stop.is_set() and time.monotonic() < end:
            if last_rx[0] > last_tx and time.monotonic() - last_rx[0] >= 0.3:
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        sys.stderr.write("\n")
    finally:
        stop.set()
        t.join(1.0)
        c.close()
    if errors:
        raise errors[0]
    return 0
