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
import collections
import hashlib
import struct
import sys

from host_tools import radiomedium as RM
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
            RM.add_chain(rng, [t for t in toks if not t.startswith("@")])
    return rng


def mac_for(name):
    """A locally administered unicast MAC from the name: stable across runs."""
    a = bytearray(hashlib.sha256(b"espnowemu:" + name.encode()).digest()[:6])
    a[0] = (a[0] | 0x02) & 0xFE
    return bytes(a)


class Radio(RM.Radio):
    def __init__(self, name, channel, writer):
        RM.Radio.__init__(self, name, writer)
        self.channel = channel
        self.mac = mac_for(name)
        self.busy_until = 0.0


class Medium(RM.Medium):
    LABEL = "espnow-medium"
    OP_HELLO, OP_CTL, OP_HELLO_ACK, OP_ERROR, OP_CTL_REPLY = (
        E.OP_HELLO, E.OP_CTL, E.OP_HELLO_ACK, E.OP_ERROR, E.OP_CTL_REPLY)
    NOT_IN_RANGE = "has no @espnow edge (no neighbours)"

    def __init__(self, topology, latency_ms=2.0, loss=0.0, kbps=1000.0, retries=2, seed=1):
        RM.Medium.__init__(self, topology, latency_ms, loss, seed)
        self.kbps = kbps
        self.retries = retries
        self.by_mac = {}
        self.g = collections.Counter()

    def hears(self, a, b):
        return a is not b and b.alive and a.channel == b.channel and b.name in self.range.get(a.name, ())

    # ------------------------------------------------------------ radios (radiomedium.Medium)
    def hello_args(self, body):
        if len(body) < 2:
            return None
        return body[1:].decode(), body[0]      # name, channel

    def new_radio(self, writer, name, channel):
        return Radio(name, channel, writer)

    def registered(self, r):
        self.by_mac[r.mac] = r

    def forget(self, r):
        self.by_mac.pop(r.mac, None)

    def hello_ack(self, r):
        return r.mac

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

    # ------------------------------------------------------------ control (radiomedium.Medium)
    def stats(self):
        nodes = {}
        for n, r in self.every_radio():
            d = dict(r.stats)
            d.update({"mac": r.mac.hex(), "channel": r.channel, "present": self.present(n, r)})
            nodes[n] = d
        return {"ok": True, "nodes": nodes, "global": dict(self.g)}

    def kill(self, r):
        try:
            r.writer.close()
        except Exception:
            pass

    def command(self, c, p):
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
        return None


def main(argv=None):
    ap = RM.arguments("python -m host_tools.espnowemu.medium",
                      "Emulated ESP-NOW radio medium for snakemesh host nodes",
                      "topology file (its @espnow lines)",
                      2.0, "one-way latency per frame",
                      "loss probability of each frame and ack",
                      "air rate per sender (ESP-NOW default: 1 Mbit/s)")
    ap.add_argument("--retries", type=int, default=2, help="MAC retransmissions of an unacked unicast")
    a = ap.parse_args(argv)
    if not 0.0 <= a.loss < 1.0:
        return RM.usage_error("--loss must be within [0, 1)")
    if a.kbps <= 0 or a.latency_ms < 0 or a.retries < 0:
        return RM.usage_error("--kbps must be > 0, --latency-ms and --retries >= 0")
    return RM.serve_main(a, "espnow-medium", load_topology,
                         lambda topo: Medium(topo, a.latency_ms, a.loss, a.kbps, a.retries, a.seed))


if __name__ == "__main__":
    sys.exit(main())
