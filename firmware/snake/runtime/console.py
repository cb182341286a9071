# Serial console: a line protocol on stdin/stdout (USB serial on a board).
#
# Request:  [#ID ]COMMAND [ARGS]            (one line, CR and/or LF ends it)
# Reply:    @sm {"re": COMMAND, "ok": true, "id": ID, ...data}
#           @sm {"re": COMMAND, "ok": false, "id": ID, "error": "..."}
# Telemetry (after `telemetry N`): @sm + a telemetry record (has "v").
# Everything else the node prints (logs, MicroPython's REPL banner) has no
# "@sm " prefix, so a parser that keeps only "@sm " lines never breaks.
#
# Commands and reply data (docs/guides/NODE.md has examples):
#   help                 {commands}
#   version              {version, board, platform, crypto}
#   status               {key, version, root, root_seq, parent, coords, depth,
#                         desc, peers, routes, uptime_s, mem_free, listen}
#   peers                {peers: [{port, key, link, root, root_seq, coords}]}
#   tree                 {root, root_seq, parent, coords, depth, ancestors}
#   snake                {desc: {key, port, root, root_seq} | null, routes}
#   routes               {routes: [...]}
#   stats                counters record fields + links, handshake_failures,
#                        queues, probes
#   mem                  {heap, used, free, largest_free, links, parts: {part:
#                        bytes}} heap after gc.collect(); parts = what each
#                        part took at boot (code, crypto, router, tx_pool,
#                        node, wifi, ble, console; radio_emulation on the
#                        host) + links_and_runtime (all allocated since:
#                        links, tasks, queues). docs/reports/MEMORY.md
#   ping KEY [COUNT]     {dst, sent, received, rtts_ms}     (asynchronous)
#   trace KEY            {dst, ok, reached, hops: [{key, rtt_ms}]} (asynchronous;
#                        ok = destination reached)
#   telemetry SECONDS|off  {telemetry}; then records state, counters, peers
#                        every SECONDS (and event records as they happen)
#   send KEY SERVICE ACK [HEX|@]  a datagram (docs/reference/DATAGRAMS.md) to
#                        KEY for SERVICE (0..65535), ACK 1 asks for an
#                        end-to-end ack; HEX its bytes, @ the bytes staged by
#                        `put`, none: empty. {dst, service, len, state,
#                        reason, rtt_ms} once final (with ACK 1: asynchronous)
#   put TOTAL OFFSET HEX {staged}: stage a datagram of TOTAL bytes too long
#                        for one line, HEX at OFFSET (OFFSET 0 starts anew)
#   recv SERVICE|all|off {recv}; then a record {v, kind: "datagram", src,
#                        service, src_service, len, data_hex} per datagram
#                        to SERVICE arriving here
# ID: up to 16 characters of [A-Za-z0-9_.-]. A line longer than MAX_LINE
# bytes is discarded with an error reply. ping/trace answer when done, with
# their ID; the console keeps answering other commands meanwhile.
# The private key is never printed.
#
# This module is the console's hot half: the line reader, the output and the
# probe/telemetry tasks. Parsing a request and the commands themselves
# (snake/runtime/cmds.py) are loaded per request and dropped after it on MicroPython, so the running node's heap
# does not hold their code; status/stats/mem/telemetry figures of the heap are
# taken before they are loaded (the node's steady state).
import asyncio
import json
import sys

from snake import platform
from snake.platform import const

PREFIX = b"@sm "
# the out-of-memory reply (re, then the id field or nothing), and it
# preallocated for when even formatting that fails
_OOM = b'@sm {"re": "%s", %s"ok": false, "error": "out of memory"}\n'
_OOM_LINE = _OOM % (b"", b"")
_UNSERIALISABLE = b'@sm {"re": "", "ok": false, "error": "unserialisable reply"}\n'
MAX_LINE = 256
SCHEMA_VERSION = 1
_WRITE_WAIT_MS = const(100)        # a full output that takes nothing this long cuts the line
_EAGAIN = (11, 35)         # EAGAIN on Linux, on macOS/BSD


class Console:
    def __init__(self, node=None, boot_error=None, out=None):
        self.node = None
        self.boot_error = boot_error
        self.out = out if out is not None else getattr(sys.stdout, "buffer", sys.stdout)
        self.dropped = 0           # output lines lost (stdout would block)
        self.cut = False           # the last line was cut short (see write)
        self.oom = 0               # replies lost to MemoryError
        self.bad_lines = 0
        self.requests = 0
        self.telemetry_s = None
        self.telemetry_task = None
        self.tasks = 0             # running ping/trace commands
        self.heap = None           # (used, free, largest) before a command (_measure)
        if node is not None:
            self.attach(node)

    def attach(self, node):
        self.node = node
        node.console = self

    # ---- output -----------------------------------------------------------
    def write(self, data):
        """Write one whole output line. The output may be non-blocking (a
        pty or pipe nobody drains fast enough): a short write is continued;
        when the output takes nothing for _WRITE_WAIT_MS, the rest of the
        line is dropped (counted in dropped_lines) and the
        next write first ends the cut line, so a parser sees one bad line
        and resynchronises instead of losing the next reply too."""
        if self.cut:
            if not self._put(b"\n"):
                self.dropped += 1
                return
            self.cut = False
        if not self._put(data):
            self.dropped += 1
            self.cut = True

    def _put(self, data):
        out = self.out
        n = len(data)
        off = 0
        waited = 0
        mv = None
        while off < n:
            try:
                k = out.write(data if off == 0 else mv[off:])
            except OSError as e:
                # CPython: BlockingIOError carries the bytes it did write;
                # any other error (EIO, a closed pty) ends the line here
                k = getattr(e, "characters_written", 0) or 0
                if not k and (e.args[0] if e.args else None) not in _EAGAIN:
                    return False
            if k:
                off += k
                waited = 0
                if mv is None and off < n:
                    mv = memoryview(data)
                continue
            if waited >= _WRITE_WAIT_MS:
                return False
            platform.sleep_ms(2)
            waited += 2
        fl = getattr(out, "flush", None)
        if fl is not None:
            try:
                fl()
            except OSError:
                pass
        return True

    def emit(self, obj):
        try:
            data = PREFIX + json.dumps(obj).encode() + b"\n"
        except (TypeError, ValueError):
            data = _UNSERIALISABLE
        except MemoryError:
            data = None
        if data is not None:
            self.write(data)
            return
        # no room for the whole line in one piece (a fragmented heap):
        # stream the JSON out in small writes instead
        import gc
        gc.collect()
        out = self.out
        try:
            out.write(PREFIX)
            json.dump(obj, out)
            out.write(b"\n")
            fl = getattr(out, "flush", None)
            if fl is not None:
                fl()
        except MemoryError:
            self.oom += 1
            self.write(b"\n" + _OOM_LINE)
        except (TypeError, ValueError):
            self.write(b"\n" + _UNSERIALISABLE)
        except OSError:
            self.dropped += 1

    def oom_reply(self, re, rid):
        """An out-of-memory error reply, built with as little memory as possible."""
        self.oom += 1
        try:
            self.write(_OOM % (re.encode(), b"" if rid is None else b'"id": "%s", ' % rid.encode()))
        except MemoryError:
            self.write(_OOM_LINE)

    def log(self, msg):
        self.write(b"snakemesh: " + str(msg).encode() + b"\n")

    def reply(self, re, rid, data=None, error=None, ok=None):
        d = {"re": re}
        if rid is not None:
            d["id"] = rid
        if error is not None:
            d["ok"] = False
            d["error"] = error
        else:
            d["ok"] = True if ok is None else ok
            if data:
                for k in data:
                    if k != "re" and k != "id":
                        d[k] = data[k]
        self.emit(d)

    def boot(self):
        # the boot line, built by the command code: loaded once now, its
        # qstrs are interned while the heap is unfragmented (a later request
        # only loads its code)
        m = platform.cold("snake.runtime.cmds")
        d = m.boot_reply(self)
        m = None
        self.emit(d)

    # ---- input ------------------------------------------------------------
    async def run(self, reader=None):
        """Serve requests from stdin (or `reader`: anything with an async
        read(n)) until EOF."""
        if reader is None:
            reader = await platform.cold("snake.runtime.cmds").open_stdin()     # once: the boot code's
        if reader is None:
            return
        line = bytearray(MAX_LINE)
        n = 0
        overflow = False
        while True:
            try:
                b = await reader.read(1)
            except (OSError, ValueError):
                return
            if not b:
                return
            c = b[0]
            if c == 10 or c == 13:
                if overflow:
                    self.bad_lines += 1
                    self.reply("", None, error="line too long (max %d bytes): discarded" % MAX_LINE)
                    overflow = False
                elif n:
                    try:
                        self.handle(line, n)
                    except MemoryError:
                        self.oom += 1
                        self.write(_OOM_LINE)
                n = 0
            elif overflow:
                continue
            elif n < MAX_LINE:
                line[n] = c
                n += 1
            else:
                overflow = True
                n = 0

    def handle(self, buf, n=None):
        """One request line (bytes); replies (now or, for ping/trace, later).
        Parsing it and the commands are snake/runtime/cmds.py's, loaded for
        the request; the data is sent once that code has left the heap."""
        if n is None:
            n = len(buf)
        self.requests += 1
        line = buf[0:n]
        self._measure(line)
        req = None
        try:
            m = platform.cold("snake.runtime.cmds")
            try:
                req = m.parse(self, line)      # (id, command, args); None: nothing to do
                if req is None:
                    return
                data = m.dispatch(self, req[1], req[2], req[0])
            finally:
                m = None
            if data is not None:
                self.reply(req[1], req[0], data)
        except MemoryError:
            if req is None:
                self.oom += 1
                self.write(_OOM_LINE)
            else:
                self.oom_reply(req[1], req[0])
        except Exception as e:   # (the command code would not load): the node goes on
            self.reply("" if req is None else req[1], None if req is None else req[0],
                       error="internal error: %s" % type(e).__name__)

    def records(self):
        """The periodic telemetry records: state, counters, peers."""
        self._measure(b"stats")
        m = platform.cold("snake.runtime.cmds")
        try:
            return m.records(self)
        finally:
            m = None

    def _measure(self, line):
        # heap figures for status/stats/mem/telemetry, taken before the
        # command code is loaded (the node's heap at steady state), so
        # before the line is parsed: for any line naming one of them
        self.heap = None
        if platform.MICROPYTHON and (b"stat" in line or b"mem" in line):
            import gc
            gc.collect()
            free = gc.mem_free()
            self.heap = (gc.mem_alloc(), free, platform.largest_free() if b"mem" in line else None)

    async def _probe_task(self, cmd, rid, coro):
        # coro: a ping/trace of node.probes made with reply=(self, rid): it
        # replies itself and returns None. A finished task outlives its run
        # for a while (a stale reference the GC still finds: a 2-node mesh
        # showed ~400 B more in use after each ping, up to two pings'
        # worth), and with it this frame and every value its stack held:
        # the probe's record (~250 B) would stay with it, and
        # snake/runtime/probing.py's code (~2 KB as .mpy) with the coroutine (let
        # go below); only the coroutine's own frame holds the record. This
        # frame is kept small too (one handler, a short stack; the error
        # replies are _probe_failed's)
        e = None
        try:
            await coro
        except Exception as x:       # MemoryError included
            e = x
        coro = None
        if e is not None:
            self._probe_failed(cmd, rid, e)

    def _probe_failed(self, cmd, rid, e):
        if isinstance(e, MemoryError):
            self.oom_reply(cmd, rid)
        else:
            self.reply(cmd, rid, error="%s failed: %s" % (cmd, type(e).__name__))

    def set_telemetry(self, seconds):
        self.telemetry_s = seconds
        if seconds is not None and self.telemetry_task is None:
            self.telemetry_task = asyncio.create_task(self._telemetry())

    async def _telemetry(self):
        try:
            while self.telemetry_s is not None:
                try:
                    for rec in self.records():
                        self.emit(rec)
                except MemoryError:
                    self.oom += 1
                # sleep in short steps so `telemetry off` / a new period act soon
                waited = 0.0
                while self.telemetry_s is not None and waited < self.telemetry_s:
                    step = self.telemetry_s - waited
                    if step > 0.25:
                        step = 0.25
                    await asyncio.sleep(step)
                    waited += step
        finally:
            self.telemetry_task = None

    def _record(self, kind):
        n = self.node
        d = {"v": SCHEMA_VERSION, "kind": kind}
        if not platform.BOARD:
            d["t"] = platform.wall_ms() / 1000
        d["up"] = n.uptime_s()
        d["node"] = platform.hexstr(n.key)
        return d

    def on_event(self, kind, detail):
        if self.telemetry_s is None or self.node is None:
            return
        try:
            d = self._record("event")
            d["event"] = kind
            d["detail"] = detail
            self.emit(d)
        except MemoryError:
            self.oom += 1

