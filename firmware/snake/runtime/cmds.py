# The console's commands and telemetry records (snake/runtime/console.py's cold half).
#
# Loaded for one request (or one telemetry period) and dropped again on
# MicroPython (platform.cold): a running node's heap holds only the
# line reader and the output; this module's code (as .mpy: bytecode,
# constants; frozen: function objects and dicts) is there only while a
# command runs. It is imported once at boot too, so its qstrs are interned
# while the heap is still unfragmented (stream.py, "Nothing new after boot").
# Protocol and reply fields: console.py's header.
import asyncio
import binascii
import sys

from snake import platform
from snake.platform import const

# the record builders, held while this module is (and dropped with it)
report = platform.cold("snake.report")

COMMANDS = ("help", "version", "status", "peers", "tree", "snake", "routes", "stats",
            "mem", "ping", "trace", "telemetry", "send", "put", "recv")
_MAX_ID = const(16)
# node.tele, what snake/runtime/telesink.py keeps between periods: copies of its indices
_T_SINK = const(1)
_T_SENT = const(3)
_T_BYTES = const(4)
_T_DEFERRED = const(5)
_T_FAILED = const(6)
_T_TOO_BIG = const(7)
_T_NO_SINK = const(8)
PING_MAX = 100
TELEMETRY_MIN_S = 0.1
TELEMETRY_MAX_S = 86400


class ConsoleError(Exception):
    pass


# _id_ok and the console's line reader walk bytes, not str: MicroPython
# interns every 1-character str it makes (iterating or indexing a str), and
# a qstr made after boot can need
# a new qstr pool the fragmented heap cannot give (stream.py, "Nothing new
# after boot"); a console fed odd characters would also grow the pool forever.
def _id_ok(s):
    if not s or len(s) > _MAX_ID:
        return False
    for c in s.encode():
        if not (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95 or c == 46 or c == 45):
            return False
    return True


def parse_request(line):
    """bytes -> (id or None, command, [args]); ConsoleError on garbage.

    Returns None for an empty line. The error message never echoes more
    than a short printable prefix of the input."""
    try:
        text = bytes(line).decode("utf-8")
    except (UnicodeError, ValueError):
        raise ConsoleError("line is not valid UTF-8")
    parts = text.split()
    if not parts:
        return None
    rid = None
    if parts[0].startswith("#"):
        rid = parts[0][1:]
        if not _id_ok(rid):
            raise ConsoleError("bad request id (1..16 of A-Z a-z 0-9 _ . -)")
        parts = parts[1:]
        if not parts:
            raise ConsoleError("missing command after the id")
    return rid, parts[0], parts[1:]


def parse(c, line):
    """A request line for Console c: (id, command, args), or None when
    there is nothing to run (an empty line; garbage: answered here)."""
    try:
        return parse_request(line)
    except ConsoleError as e:
        c.bad_lines += 1
        c.reply("", None, error=str(e))
        return None


def parse_key(s):
    """64 hex digits -> bytes(32); ConsoleError otherwise."""
    if len(s) != 64:
        raise ConsoleError("bad key: expected 64 hex digits")
    try:
        return binascii.unhexlify(s)
    except (ValueError, TypeError):
        raise ConsoleError("bad key: expected 64 hex digits")


def parse_count(s):
    try:
        n = int(s)
    except ValueError:
        raise ConsoleError("bad count: expected an integer 1..%d" % PING_MAX)
    if n < 1 or n > PING_MAX:
        raise ConsoleError("bad count: expected an integer 1..%d" % PING_MAX)
    return n


def parse_interval(s):
    """telemetry argument: seconds (float) or 'off' -> float or None."""
    if s == "off":
        return None
    try:
        v = float(s)
    except ValueError:
        raise ConsoleError("telemetry: expected SECONDS or off")
    if not (TELEMETRY_MIN_S <= v <= TELEMETRY_MAX_S):
        raise ConsoleError("telemetry: SECONDS must be within %g..%d" % (TELEMETRY_MIN_S, TELEMETRY_MAX_S))
    return v


def _router_version():
    try:
        from snake.router import VERSION
        return VERSION
    except ImportError:
        return None


def version(c):
    impl = sys.implementation.name
    d = {"version": _router_version(), "platform": "%s-%s" % (impl, sys.platform),
         "board": c.node.profile.name if c.node is not None else None}
    try:
        from snake import crypto
        d["crypto"] = crypto.BACKEND
    except ImportError:
        d["crypto"] = None
    return d


def boot_reply(c):
    """The boot line's data (Console.boot): key, board, listeners and
    warnings, or the boot error."""
    d = {"re": "boot", "ok": c.node is not None}
    n = c.node
    if n is not None:
        d["key"] = platform.hexstr(n.key)
        d["board"] = n.profile.name
        d["listen"] = n.listeners
        if n.warnings:
            d["warnings"] = n.warnings
    else:
        d["error"] = c.boot_error or "not running"
    d["version"] = _router_version()
    return d


async def open_stdin():
    """An asyncio reader for stdin with read(n), or None."""
    stdin = getattr(sys.stdin, "buffer", sys.stdin)
    proto = getattr(asyncio, "StreamReaderProtocol", None)
    if proto is None:
        # MicroPython: Stream polls any stream object (sys.stdin on a board)
        return asyncio.StreamReader(stdin)
    # CPython: a pipe transport over fd 0
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: proto(reader), sys.stdin)
    except (OSError, ValueError):
        return None
    return reader


def _need(args, lo, hi, usage):
    if len(args) < lo or len(args) > hi:
        raise ConsoleError("usage: " + usage)


def mem(node, heap):
    """`mem` from the heap figures the console took before loading this
    module (heap = (used, free, largest_free) or None on CPython)."""
    if heap is None:
        return {"heap": None, "used": None, "free": None}
    used, free, largest = heap
    d = {"heap": used + free, "used": used, "free": free, "largest_free": largest}
    m = node.meter
    if m is not None:
        parts = dict(zip(m.names, m.sizes))
        parts["links_and_runtime"] = used - sum(m.sizes)
        d["parts"] = parts
    n = 0
    for lk in node.links:
        if lk is not None:
            n += 1
    d["links"] = n
    return d


def _printable(s, n=32):
    b = bytearray(s.encode()[:n])
    for i in range(len(b)):
        if not 32 <= b[i] < 127:
            b[i] = 63      # "?"
    return b.decode()


def dispatch(c, cmd, args, rid):
    """Run console command `cmd` for Console c: the reply's data, or None
    when there is none to send now: the reply comes later (ping, trace) or
    was an error reply, made here (a bad or unknown command, a bug in one
    command: the node goes on). MemoryError goes to the caller (the console
    answers it once this module has left the heap). c.heap: the heap figures
    taken before this module was loaded (status, stats, mem)."""
    if cmd not in COMMANDS:
        c.bad_lines += 1
        c.reply(_printable(cmd), rid, error="unknown command (try help)")
        return None
    try:
        return _run(c, cmd, args, rid)
    except ConsoleError as e:
        c.reply(cmd, rid, error=str(e))
    except MemoryError:
        raise
    except Exception as e:   # a bug in one command must not stop the node
        c.reply(cmd, rid, error="internal error: %s" % type(e).__name__)
    return None


def _run(c, cmd, args, rid):
    if cmd == "help":
        _need(args, 0, 0, "help")
        return {"commands": list(COMMANDS)}
    if cmd == "version":
        _need(args, 0, 0, "version")
        return version(c)
    node = c.node
    if node is None:
        raise ConsoleError("node not running: " + (c.boot_error or "no router"))
    r = node.router
    now = node.now()
    if cmd == "status":
        _need(args, 0, 0, "status")
        d = report.snapshot(r)
        d["version"] = _router_version()
        d["uptime_s"] = node.uptime_s()
        d["mem_free"] = c.heap[1] if c.heap is not None else None
        d["listen"] = node.listeners
        d["capacity"] = report.capacity(r)
        return d
    if cmd == "peers":
        _need(args, 0, 0, "peers")
        return {"peers": report.peers(r)}
    if cmd == "tree":
        _need(args, 0, 0, "tree")
        s = report.snapshot(r)
        return {"root": s["root"], "root_seq": s["root_seq"], "parent": s["parent"],
                "coords": s["coords"], "depth": s["depth"], "ancestors": report.ancestors(r)}
    if cmd == "snake":
        _need(args, 0, 0, "snake")
        sn = r.snake
        desc = None
        if sn.desc_valid:
            desc = {"key": platform.hexstr(sn.desc_key), "port": sn.desc_port,
                    "root": platform.hexstr(sn.desc_root), "root_seq": sn.desc_root_seq}
        return {"desc": desc, "routes": sn.routes.count}
    if cmd == "routes":
        _need(args, 0, 0, "routes")
        return {"routes": report.routes(r, now)}
    if cmd == "stats":
        _need(args, 0, 0, "stats")
        d = counters_fields(c)
        d["links"] = dict(node.stats)
        d["handshake_failures"] = dict(node.hs_fail)
        d["queues"] = report.queues(node)
        d["probes"] = report.probes(node.probes)
        d["console"] = {"requests": c.requests, "bad_lines": c.bad_lines,
                        "dropped_lines": c.dropped, "oom": c.oom}
        if getattr(node, "espnow", None) is not None:
            d["espnow"] = node.espnow.snapshot()
        return d
    if cmd == "mem":
        _need(args, 0, 0, "mem")
        return mem(node, c.heap)
    if cmd == "ping":
        _need(args, 1, 2, "ping KEY [COUNT]")
        key = parse_key(args[0])
        count = parse_count(args[1]) if len(args) > 1 else 3
        _spawn(c, "ping", rid, node.probes.ping(key, count, reserved=True, reply=(c, rid)))
        return None
    if cmd == "trace":
        _need(args, 1, 1, "trace KEY")
        key = parse_key(args[0])
        max_ttl = node.hop_limit if node.hop_limit < 32 else 32
        _spawn(c, "trace", rid, node.probes.trace(key, max_ttl, reserved=True, reply=(c, rid)))
        return None
    if cmd == "telemetry":
        _need(args, 1, 1, "telemetry SECONDS|off")
        v = parse_interval(args[0])
        c.set_telemetry(v)
        return {"telemetry": "off" if v is None else v}
    if cmd == "send" or cmd == "put" or cmd == "recv":
        return _datagram(c, node, cmd, args, rid)
    raise ConsoleError("unknown command (try help)")


def parse_u16(s, what):
    try:
        v = int(s)
    except ValueError:
        v = -1
    if not 0 <= v <= 0xFFFF:
        raise ConsoleError("bad %s: expected an integer 0..65535" % what)
    return v


def _unhex(s):
    try:
        return binascii.unhexlify(s)
    except (ValueError, TypeError):
        raise ConsoleError("bad data: expected an even number of hex digits")


def _datagram(c, node, cmd, args, rid):
    # send / put / recv (console.py's header); the datagram layer
    # (snake/runtime/dglink.py) is built on first use
    m = node.datagrams()
    if m is None:
        raise ConsoleError("datagrams unavailable (out of memory, or profile dgram_pending 0)")
    if cmd == "recv":
        _need(args, 1, 1, "recv SERVICE|all|off")
        a = args[0]
        if a == "off":
            m.tap = None
            return {"recv": "off"}
        svc = -1 if a == "all" else parse_u16(a, "service")
        m.tap = (c, svc)
        return {"recv": a if svc < 0 else svc}
    if cmd == "put":
        _need(args, 3, 3, "put TOTAL OFFSET HEX")
        try:
            total = int(args[0])
            off = int(args[1])
        except ValueError:
            raise ConsoleError("put: TOTAL and OFFSET are integers")
        if total < 0 or total > m.dg.max_size:
            raise ConsoleError("too_big: datagrams here hold at most %d bytes" % m.dg.max_size)
        data = _unhex(args[2])
        if off == 0:
            m.stage = None
            m.stage = bytearray(total)
            m.staged = 0
        st = m.stage
        if st is None or len(st) != total or off != m.staged or off + len(data) > total:
            raise ConsoleError("put: OFFSET %d does not follow the %d bytes staged" % (off, m.staged))
        st[off:off + len(data)] = data
        m.staged = off + len(data)
        return {"staged": m.staged, "total": total}
    _need(args, 3, 4, "send KEY SERVICE ACK [HEX|@]")
    key = parse_key(args[0])
    svc = parse_u16(args[1], "service")
    if args[2] not in ("0", "1"):
        raise ConsoleError("bad ACK: expected 0 or 1")
    ack = args[2] == "1"
    if len(args) < 4:
        data = b""
    elif args[3] == "@":
        data = m.stage
        if data is None or m.staged != len(data):
            raise ConsoleError("send: nothing staged (put the whole datagram first)")
        m.stage = None
    else:
        data = _unhex(args[3])
    # the reply now when the datagram is already final, else when it is
    # (the Link's state())
    from snake.datagram import S_PENDING
    from snake.runtime.dglink import reply
    dg = m.dg
    now = platform.ticks_ms()
    hid = dg.send(key, svc, data, now, ack)
    dg.flush(now)       # acks owed to a local delivery (a datagram to our own key)
    w = (hid, c, rid, key, svc, len(data), now)
    if dg.last_state == S_PENDING:
        m.waits.append(w)
        return None
    return reply(w, dg.last_state, dg.last_reason, now)


def _spawn(c, cmd, rid, coro):
    # coro is an un-started coroutine of the node's probes (hot code: the
    # task outlives this module); reserve a probe session first
    from snake.runtime.probe import ProbeBusy
    try:
        c.node.probes.reserve()
    except ProbeBusy as e:
        coro.close()
        raise ConsoleError(str(e))
    import asyncio
    asyncio.create_task(c._probe_task(cmd, rid, coro))


def counters_fields(c):
    r = c.node.router
    d = report.counters(r.counters)
    d["evictions"] = report.evictions(r)
    d["occupancy"] = report.occupancy(r)
    d["capacity"] = report.capacity(r)
    d["mem_free"] = c.heap[1] if c.heap is not None else None
    d["defence"] = report.defence(c.node)
    ln = c.node.dgl
    dd = None
    if ln is not None:
        dd = report.datagrams(ln.dg)
        dd["no_listener"] = ln.no_listener
        dd["app_dropped"] = 0
        m = c.node.app
        if m is not None:
            a = m.stats()
            for k in a:
                dd[k] += a[k]
    d["datagrams"] = dd
    t = c.node.tele
    tt = None
    if t is not None:
        k = t[_T_SINK]
        tt = {"sink": platform.hexstr(k) if k is not None else None, "sent": t[_T_SENT],
              "bytes": t[_T_BYTES], "deferred": t[_T_DEFERRED], "failed": t[_T_FAILED],
              "too_big": t[_T_TOO_BIG], "no_sink": t[_T_NO_SINK]}
    d["telemetry"] = tt
    return d


def records(c):
    """The periodic telemetry records: state, counters, peers."""
    r = c.node.router
    st = c._record("state")
    s = report.snapshot(r)
    for k in ("root", "root_seq", "parent", "coords", "depth", "desc", "peers", "routes"):
        st[k] = s[k]
    st["profile"] = c.node.profile.name
    co = c._record("counters")
    f = counters_fields(c)
    for k in f:
        co[k] = f[k]
    pe = c._record("peers")
    pe["peers"] = report.peers(r)
    return (st, co, pe)
