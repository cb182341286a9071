"""Emulated ESP-NOW radio medium.

    python -m host_tools.espnowemu.medium --topology FILE --port N
        [--latency-ms 2] [--loss P] [--kbps 1000] [--retries 2] [--seed S]

Each emulated node's `espnow` module (host_tools/espnowemu/espnow.py)
connects here over loopback TCP and introduces itself by name and Wi-Fi
channel; the medium gives it a MAC address (stable, from the name).

Range: the topology file's `@espnow` edges (the shared format: each line a
chain of names, consecutive names in range; only lines carrying the token
`@espnow` count here, so one file describes a mixed mesh). Two radios hear
each other when they share an edge and a channel.

A unicast send is one 802.11 action frame: serialised at --kbps per sender
(the message + 43 bytes of MAC header, vendor element and FCS), then in the
air --latency-ms; each attempt is lost with probability P, and the sender's
MAC retries up to --retries times (a lost ack looks the same to it). The
sender's radio gets a status: ok when an attempt and its ack got through.
The receiving radio may still drop the message (a full receive buffer: the
module counts it and the sender saw ok). Broadcasts (ff:ff:ff:ff:ff:ff) go
once to every radio in range, each copy lost with P, no ack, status ok.

Control (CTL messages, reply JSON): `stats`, `cut A B` / `link A B` (out of /
back into range), `kill NAME` (its connection closed), `topology`,
`inject SRC_MAC_HEX DST_NAME HEX` (a message from any MAC to a radio: tests
of malformed input and floods from many MACs), `loss P`.

The first line printed on stdout is `espnow-medium listening on HOST:PORT`.
"""
import argparse
import asyncio
import collections
import hashlib
import json
import random
import struct
import sys

from host_tools.espnowemu import espnow as E

AIR_OVERHEAD = 43
BROADCAST = b"\xff" * 6


def load_topology(path):
    """-> dict name -> set(names in range) from the `@espnow` lines."""
    rng = {}
    with open(path) as f:
        for line in f:
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            toks = s.split()
            if "@espnow" not in toks:
                continue
            names = [t for t in toks if not t.startswith("@")]
            for n in names:
                rng.setdefault(n, set())
            for a, b in zip(names, names[1:]):
                if a != b:
                    rng[a].add(b)
                    rng[b].add(a)
    return rng


def mac_for(name):
    """A locally administered unicast MAC from the name: stable across runs."""
    a = bytearray(hashlib.sha256(b"espnowemu:" + name.encode()).digest()[:6])
    a[0] = (a[0] | 0x02) & 0xFE
    return bytes(a)


class Radio:
    def __init__(self, name, channel, writer):
        self.name = name
        self.channel = channel
        self.writer = writer
        self.mac = mac_for(name)
        self.alive = True
        self.busy_until = 0.0
        self.stats = collections.Counter()

    def send(self, fr):
        if self.alive:
            try:
                self.writer.write(fr)
            except Exception:
                self.alive = False


class Medium:
    def __init__(self, topology, latency_ms=2.0, loss=0.0, kbps=1000.0, retries=2, seed=1):
        self.range = topology
        self.latency = latency_ms / 1000.0
        self.loss = loss
        self.kbps = kbps
        self.retries = retries
        self.rng = random.Random(seed)
        self.radios = {}
        self.by_mac = {}
        self.departed = {}
        self.loop = None
        self.g = collections.Counter()

    def hears(self, a, b):
        return a is not b and b.alive and a.channel == b.channel and b.name in self.range.get(a.name, ())

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
                        writer.write(E.frame(E.OP_ERROR, b"zero-length message"))
                        return
                    if len(buf) < 2 + n:
                        break
                    op = buf[2]
                    body = bytes(buf[3:2 + n])
                    del buf[:2 + n]
                    if op == E.OP_CTL:
                        writer.write(E.frame(E.OP_CTL_REPLY, json.dumps(self.control(body.decode())).encode()))
                        continue
                    if radio is None:
                        if op != E.OP_HELLO or len(body) < 2:
                            writer.write(E.frame(E.OP_ERROR, b"first message must be HELLO"))
                            return
                        radio = self.hello(body[1:].decode(), body[0], writer)
                        if radio is None:
                            return
                        continue
                    try:
                        self.handle(radio, op, body)
                    except (struct.error, IndexError, ValueError) as e:
                        radio.stats["bad_messages"] += 1
                        print("espnow-medium: bad message op=%d from %s: %s" % (op, radio.name, e),
                              file=sys.stderr)
        except (ConnectionError, OSError):
            pass
        finally:
            if radio is not None:
                radio.alive = False
                if self.radios.get(radio.name) is radio:
                    del self.radios[radio.name]
                    self.by_mac.pop(radio.mac, None)
                    self.departed[radio.name] = radio
            try:
                writer.close()
            except Exception:
                pass

    def hello(self, name, channel, writer):
        old = self.radios.get(name)
        if old is not None and old.alive:
            writer.write(E.frame(E.OP_ERROR, ("radio name already connected: " + name).encode()))
            return None
        r = Radio(name, channel, writer)
        prev = self.departed.pop(name, None)
        if prev is not None:
            r.stats = prev.stats
        if name not in self.range:
            print("espnow-medium: %s has no @espnow edge (no neighbours)" % name, file=sys.stderr)
        self.radios[name] = r
        self.by_mac[r.mac] = r
        writer.write(E.frame(E.OP_HELLO_ACK, r.mac))
        return r

    def handle(self, r, op, b):
        if op == E.OP_CHANNEL:
            r.channel = b[0]
        elif op == E.OP_SEND:
            tok, flags = struct.unpack(">HB", b[:3])
            dst = b[3:9]
            data = b[9:]
            if len(dst) != 6 or not 1 <= len(data) <= E.MAX_DATA_LEN:
                r.stats["bad_messages"] += 1
                r.send(E.frame(E.OP_STATUS, struct.pack(">HB", tok, 0)))
                return
            self.transmit(r, tok, flags, bytes(dst), data)
        else:
            r.stats["bad_messages"] += 1

    def transmit(self, r, tok, flags, dst, data):
        now = self.loop.time()
        air = (len(data) + AIR_OVERHEAD) * 8.0 / (self.kbps * 1000.0)
        start = max(now, r.busy_until)
        r.stats["tx"] += 1
        r.stats["tx_bytes"] += len(data)
        rx_frame = E.frame(E.OP_RX, r.mac + struct.pack(">b", -50) + data)
        if dst == BROADCAST or dst[0] & 1:
            r.busy_until = start + air
            t = r.busy_until + self.latency
            for o in list(self.radios.values()):
                if self.hears(r, o):
                    if self.loss and self.rng.random() < self.loss:
                        self.g["lost"] += 1
                        continue
                    o.stats["rx"] += 1
                    self.loop.call_at(t, o.send, rx_frame)
            self.loop.call_at(t, r.send, E.frame(E.OP_STATUS, struct.pack(">HB", tok, 1)))
            return
        o = self.by_mac.get(dst)
        reach = o is not None and self.hears(r, o)
        tries = 0
        delivered = acked = False
        while tries <= self.retries:
            tries += 1
            if not reach:
                continue
            if self.loss and self.rng.random() < self.loss:
                self.g["lost"] += 1
                continue
            delivered = True
            if self.loss and self.rng.random() < self.loss:
                self.g["ack_lost"] += 1
                continue          # the MAC resends; the receiver's MAC drops the duplicate
            acked = True
            break
        r.busy_until = start + air * tries
        t = start + air * tries + self.latency
        if delivered:
            o.stats["rx"] += 1
            self.loop.call_at(start + air + self.latency, o.send, rx_frame)
        if not acked:
            r.stats["tx_fail"] += 1
        self.loop.call_at(t, r.send, E.frame(E.OP_STATUS, struct.pack(">HB", tok, 1 if acked else 0)))

    def control(self, line):
        p = line.split()
        if not p:
            return {"ok": False, "error": "empty command"}
        c = p[0]
        if c == "stats":
            every = dict(self.departed)
            every.update(self.radios)
            nodes = {}
            for n, r in sorted(every.items()):
                d = dict(r.stats)
                d.update({"mac": r.mac.hex(), "channel": r.channel,
                          "present": r.alive and self.radios.get(n) is r})
                nodes[n] = d
            return {"ok": True, "nodes": nodes, "global": dict(self.g)}
        if c in ("cut", "link") and len(p) == 3:
            a, b = p[1], p[2]
            if c == "link":
                self.range.setdefault(a, set()).add(b)
                self.range.setdefault(b, set()).add(a)
            else:
                self.range.get(a, set()).discard(b)
                self.range.get(b, set()).discard(a)
            return {"ok": True}
        if c == "kill" and len(p) == 2:
            r = self.radios.get(p[1])
            if r is None:
                return {"ok": False, "error": "no such radio"}
            try:
                r.writer.close()
            except Exception:
                pass
            return {"ok": True}
        if c == "loss" and len(p) == 2:
            self.loss = float(p[1])
            return {"ok": True}
        if c == "inject" and len(p) == 4:
            try:
                src = bytes.fromhex(p[1])
                data = bytes.fromhex(p[3])
            except ValueError:
                return {"ok": False, "error": "bad hex"}
            o = self.radios.get(p[2])
            if o is None or len(src) != 6:
                return {"ok": False, "error": "no such radio or bad mac"}
            o.send(E.frame(E.OP_RX, src + struct.pack(">b", -40) + data))
            return {"ok": True}
        if c == "topology":
            return {"ok": True, "range": {k: sorted(v) for k, v in self.range.items()}}
        return {"ok": False, "error": "unknown command: " + line}

    async def run(self, host, port, ready_cb=None):
        self.loop = asyncio.get_running_loop()
        server = await asyncio.start_server(self.serve, host, port)
        if ready_cb:
            ready_cb(server.sockets[0].getsockname())
        async with server:
            await server.serve_forever()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m host_tools.espnowemu.medium",
                                 description="Emulated ESP-NOW radio medium for snakemesh host nodes")
    ap.add_argument("--topology", required=True, help="topology file (its @espnow lines)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="TCP port (0: any free port)")
    ap.add_argument("--latency-ms", type=float, default=2.0, help="one-way latency per frame")
    ap.add_argument("--loss", type=float, default=0.0, help="loss probability of each frame and ack")
    ap.add_argument("--kbps", type=float, default=1000.0, help="air rate per sender (ESP-NOW default: 1 Mbit/s)")
    ap.add_argument("--retries", type=int, default=2, help="MAC retransmissions of an unacked unicast")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if not 0.0 <= a.loss < 1.0:
        print("error: --loss must be within [0, 1)", file=sys.stderr)
        return 2
    if a.kbps <= 0 or a.latency_ms < 0 or a.retries < 0:
        print("error: --kbps must be > 0, --latency-ms and --retries >= 0", file=sys.stderr)
        return 2
    try:
        topo = load_topology(a.topology)
    except OSError as e:
        print("error: cannot read topology %s: %s" % (a.topology, e.strerror), file=sys.stderr)
        return 2
    m = Medium(topo, a.latency_ms, a.loss, a.kbps, a.retries, a.seed)

    def ready(addr):
        print("espnow-medium listening on %s:%d" % (addr[0], addr[1]), flush=True)

    try:
        asyncio.run(m.run(a.host, a.port, ready))
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
