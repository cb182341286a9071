"""What the two emulated radio media share (CPython):
host_tools/blemu/medium.py (Bluetooth LE) and host_tools/espnowemu/medium.py
(ESP-NOW).

- The loopback protocol's server side. Every message, both ways:
  u16 length (big-endian, counts op + body) | u8 op | body. A radio's first
  message is its HELLO; a control client sends CTL messages (one command
  line each) and gets CTL_REPLY (JSON) back, before a HELLO or without one.
  A zero-length message, or anything but HELLO first, gets ERROR and the
  connection is closed.
- The radios' bookkeeping: one live radio per name, its counters carried
  over when it reconnects (a restarted node), still shown in `stats` after
  it left.
- The control commands both media have: `cut A B`, `link A B`, `kill NAME`,
  `topology`.
- The command line around a medium: the options both have, the checks,
  the `LABEL listening on HOST:PORT` line, the exit codes (2: bad input,
  1: cannot listen).

What a medium emulates (range, airtime, loss, acks, connections) stays in
its own module; so does its topology reader: the two read different lines of
the shared topology format.
"""
import argparse
import asyncio
import collections
import json
import random
import struct
import sys


def frame(op, body=b""):
    return struct.pack(">HB", len(body) + 1, op) + bytes(body)


def add_chain(rng, names):
    """Consecutive names of one topology line are in range of each other
    (rng: name -> set of names in range; duplicates and self-links ignored)."""
    for n in names:
        rng.setdefault(n, set())
    for a, b in zip(names, names[1:]):
        if a != b:
            rng[a].add(b)
            rng[b].add(a)


class Radio:
    """One emulated radio connected to the medium."""

    def __init__(self, name, writer):
        self.name = name
        self.writer = writer
        self.alive = True
        self.stats = collections.Counter()

    def send(self, fr):
        if self.alive:
            try:
                self.writer.write(fr)
            except Exception:
                self.alive = False


class Medium:
    """A medium's server. A subclass sets LABEL, the op numbers and
    NOT_IN_RANGE, and provides:
      hello_args(body) -> (name, ...) from a HELLO body, None if malformed
      new_radio(writer, name, ...) -> Radio
      registered(r) / forget(r): the radio joins / leaves (addresses)
      hello_ack(r) -> the HELLO_ACK body
      handle(r, op, body): a radio's message (struct.error, IndexError,
        KeyError, ValueError: counted as a bad message, the radio stays)
      stats(): the `stats` reply
      cut(a, b) / kill(r): what else a medium does on these commands
      command(c, parts): its own commands (None: unknown)
      background(): coroutines that run while the medium serves
    """

    LABEL = "medium"
    OP_HELLO = OP_CTL = OP_HELLO_ACK = OP_ERROR = OP_CTL_REPLY = None
    NOT_IN_RANGE = "is not in the topology (no neighbours)"
    ZERO_LENGTH = b"zero-length message"
    BAD_MESSAGE = (struct.error, IndexError, KeyError, ValueError)

    def __init__(self, topology, latency_ms, loss, seed):
        self.range = topology
        self.latency = latency_ms / 1000.0
        self.loss = loss
        self.rng = random.Random(seed)
        self.radios = {}       # name -> Radio
        self.departed = {}     # name -> Radio that disconnected (for stats)
        self.loop = None

    # ------------------------------------------------------------ clients
    async def serve(self, reader, writer):
        buf = bytearray()
        radio = None
        try:
            while True:
                d = await reader.read(65536)
                if not d:
                    break
                buf += d
                while len(buf) >= 3:
                    n = (buf[0] << 8) | buf[1]
                    if n < 1:
                        writer.write(frame(self.OP_ERROR, self.ZERO_LENGTH))
                        return
                    if len(buf) < 2 + n:
                        break
                    op = buf[2]
                    body = bytes(buf[3:2 + n])
                    del buf[:2 + n]
                    if op == self.OP_CTL:
                        writer.write(frame(self.OP_CTL_REPLY, json.dumps(self.control(body.decode())).encode()))
                        continue
                    if radio is None:
                        args = self.hello_args(body) if op == self.OP_HELLO else None
                        if args is None:
                            writer.write(frame(self.OP_ERROR, b"first message must be HELLO"))
                            return
                        radio = self.hello(writer, *args)
                        if radio is None:
                            return
                        continue
                    try:
                        self.handle(radio, op, body)
                    except self.BAD_MESSAGE as e:
                        radio.stats["bad_messages"] += 1
                        print("%s: bad message op=%d from %s: %s" % (self.LABEL, op, radio.name, e),
                              file=sys.stderr)
        except (ConnectionError, OSError):
            pass
        finally:
            if radio is not None:
                self.goodbye(radio)
            try:
                writer.close()
            except Exception:
                pass

    def hello(self, writer, name, *extra):
        old = self.radios.get(name)
        if old is not None and old.alive:
            writer.write(frame(self.OP_ERROR, ("radio name already connected: " + name).encode()))
            return None
        r = self.new_radio(writer, name, *extra)
        prev = self.departed.pop(name, None)
        if prev is not None:
            r.stats = prev.stats          # counters continue across restarts
        if name not in self.range:
            print("%s: %s %s" % (self.LABEL, name, self.NOT_IN_RANGE), file=sys.stderr)
        self.radios[name] = r
        self.registered(r)
        writer.write(frame(self.OP_HELLO_ACK, self.hello_ack(r)))
        return r

    def goodbye(self, r):
        r.alive = False
        self.leaving(r)
        if self.radios.get(r.name) is r:
            del self.radios[r.name]
            self.forget(r)
            self.departed[r.name] = r     # counters stay visible in `stats`

    def leaving(self, r):
        """A radio's connection ended (before it leaves the tables)."""

    def every_radio(self):
        """name -> Radio, the present and the departed, sorted by name."""
        every = dict(self.departed)
        every.update(self.radios)
        return sorted(every.items())

    def present(self, name, r):
        return r.alive and self.radios.get(name) is r

    # ------------------------------------------------------------ control
    def control(self, line):
        parts = line.split()
        if not parts:
            return {"ok": False, "error": "empty command"}
        c = parts[0]
        if c == "stats":
            return self.stats()
        if c in ("cut", "link") and len(parts) == 3:
            a, b = parts[1], parts[2]
            if c == "link":
                self.range.setdefault(a, set()).add(b)
                self.range.setdefault(b, set()).add(a)
            else:
                self.range.get(a, set()).discard(b)
                self.range.get(b, set()).discard(a)
                self.cut(a, b)
            return {"ok": True}
        if c == "kill" and len(parts) == 2:
            r = self.radios.get(parts[1])
            if r is None:
                return {"ok": False, "error": "no such radio"}
            self.kill(r)
            return {"ok": True}
        if c == "topology":
            return {"ok": True, "range": {k: sorted(v) for k, v in self.range.items()}}
        reply = self.command(c, parts)
        if reply is not None:
            return reply
        return {"ok": False, "error": "unknown command: " + line}

    def cut(self, a, b):
        """a and b went out of range of each other (the range is updated)."""

    def command(self, c, parts):
        return None

    def background(self):
        return ()

    async def run(self, host, port, ready_cb=None):
        self.loop = asyncio.get_running_loop()
        server = await asyncio.start_server(self.serve, host, port)
        if ready_cb:
            ready_cb(server.sockets[0].getsockname())
        tasks = [asyncio.ensure_future(co) for co in self.background()]
        try:
            async with server:
                await server.serve_forever()
        finally:
            for t in tasks:
                t.cancel()


# ---------------------------------------------------------------- command line
def arguments(prog, description, topology_help, latency_ms, latency_help, loss_help, kbps_help):
    """The options both media have; a medium adds its own."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--topology", required=True, help=topology_help)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    ap.add_argument("--latency-ms", type=float, default=latency_ms, help=latency_help)
    ap.add_argument("--loss", type=float, default=0.0, help=loss_help)
    ap.add_argument("--kbps", type=float, default=1000.0, help=kbps_help)
    ap.add_argument("--seed", type=int, default=1)
    return ap


def usage_error(msg):
    """One line on stderr; the exit code of bad input."""
    print("error: " + msg, file=sys.stderr)
    return 2


def serve_main(a, label, load_topology, make_medium):
    """Read the topology, make the medium, serve until interrupted: the exit
    code (2: the topology cannot be read, 1: cannot listen)."""
    try:
        topo = load_topology(a.topology)
    except OSError as e:
        return usage_error("cannot read topology %s: %s" % (a.topology, e.strerror))
    m = make_medium(topo)

    def ready(addr):
        print("%s listening on %s:%d" % (label, addr[0], addr[1]), flush=True)

    try:
        asyncio.run(m.run(a.host, a.port, ready))
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0
