"""Emulated Bluetooth LE radio medium.

    python -m host_tools.blemu.medium --topology FILE --port N
        [--latency-ms X] [--loss P] [--mtu M] [--kbps K] [--seed S]
        [--supervision-ms T] [--conn-interval-ms C] [--max-retries R]

Each emulated node's `bluetooth` module (host_tools/blemu/bluetooth.py)
connects here over loopback TCP and introduces itself by name. The medium
knows from the topology file who is in radio range of whom and emulates, for
nodes in range only: advertising -> scan results, connection set-up, ATT MTU
exchange (the minimum of both sides' configured MTU and --mtu), GATT
service/characteristic discovery, write-without-response / write and
notify / indicate, and disconnects.

Timing per connection and direction: packets are serialised at --kbps, then
arrive --latency-ms later, in order. Loss (--loss P) is modelled as a real
link layer does it: a lost packet is retransmitted at the next connection
event (--conn-interval-ms later, again with probability P of being lost), so
loss shows up as extra latency and reduced throughput, never as silent data
loss inside a connection. A packet that needs more than --max-retries
retransmissions ends the connection (supervision timeout) on both sides.

Topology file (host_tools/topologies/README.md): each line is a chain of node
names, consecutive names are in range. Blank lines and lines starting with
`#` are ignored. A line starting with `@ble ` is a BLE chain like a plain
line; a line starting with `@wifi ` (or any other `@tag `) is ignored here,
so one file can describe a mixed Wi-Fi + BLE mesh.

Control: a client may connect and send CTL messages (one command line each,
reply is JSON): `stats`, `cut A B` (out of range, live connections drop after
--supervision-ms), `link A B` (back in range), `kill NAME` (drop every
connection of a radio), `topology`.

The first line printed on stdout is `blemu-medium listening on HOST:PORT`.
"""
import asyncio
import collections
import hashlib
import struct
import sys

from host_tools import radiomedium as RM
from host_tools.blemu import _blemu_proto as P

ADV_TICK_S = 0.05


def load_topology(path):
    """-> dict name -> set(names in range), from the untagged and `@ble ` lines."""
    rng = {}
    with open(path) as f:
        for line in f:
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            if s.startswith("@"):
                tag, _, rest = s.partition(" ")
                if tag != "@ble":
                    continue
                s = rest.strip()
            RM.add_chain(rng, s.split())
    return rng


def addr_for(name):
    """Static random address from the name: stable across runs."""
    a = bytearray(hashlib.sha256(b"blemu:" + name.encode()).digest()[:6])
    a[0] |= 0xC0  # static random address: two top bits set
    return bytes(a)


class Pipe:
    """One direction of one connection: ordered, serialised, delayed."""

    def __init__(self, medium, conn, src, dst):
        self.m = medium
        self.conn = conn
        self.src = src
        self.dst = dst
        self.q = collections.deque()  # (t_deliver, frame bytes, counts_as_tx)
        self.busy_until = 0.0
        self.last = 0.0
        self.timer = None

    def push(self, frame, nbytes, is_tx):
        m = self.m
        now = m.loop.time()
        start = max(now, self.busy_until)
        done = start + (nbytes * 8.0) / (m.kbps * 1000.0) if nbytes else start
        self.busy_until = done
        extra = 0.0
        if is_tx and m.loss > 0:
            tries = 0
            while m.rng.random() < m.loss:
                tries += 1
                extra += m.conn_interval
                if tries > m.max_retries:
                    m.stats_global["supervision_timeouts"] += 1
                    m.loop.call_soon(m.kill_conn, self.conn, 0x08, 0.0)
                    break
            if tries:
                m.stats_global["retransmissions"] += tries
        t = max(done + m.latency + extra, self.last)
        self.last = t
        self.q.append((t, frame, is_tx))
        if self.timer is None:
            self.timer = m.loop.call_at(t, self._drain)

    def _drain(self):
        self.timer = None
        now = self.m.loop.time()
        while self.q and self.q[0][0] <= now + 1e-6:
            _, frame, is_tx = self.q.popleft()
            if not self.conn.alive:
                break
            self.dst.send(frame)
            if is_tx:
                self.src.txdone(1)
        if self.q and self.conn.alive:
            self.timer = self.m.loop.call_at(self.q[0][0], self._drain)

    def drop_all(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        n = 0
        for _, _, is_tx in self.q:
            if is_tx:
                n += 1
        self.q.clear()
        if n:
            self.src.txdone(n)


class Conn:
    def __init__(self, medium, central, peripheral, hc, hp):
        self.central = central
        self.peripheral = peripheral
        self.hc = hc
        self.hp = hp
        self.mtu = 23
        self.mtu_done = False
        self.alive = True
        self.pipe = {central: Pipe(medium, self, central, peripheral),
                     peripheral: Pipe(medium, self, peripheral, central)}

    def other(self, r):
        return self.peripheral if r is self.central else self.central

    def handle_of(self, r):
        return self.hc if r is self.central else self.hp


class Radio(RM.Radio):
    def __init__(self, medium, name, writer):
        RM.Radio.__init__(self, name, writer)
        self.m = medium
        self.addr = addr_for(name)
        self.addr_type = 1
        self.mtu = 23
        self.maxconn = 4
        self.adv = None        # dict(connectable, interval, data, resp)
        self.scan = None       # dict(active, until)
        self.services = []     # list of entries from SERVICES
        self.conns = {}        # local handle -> Conn
        self.pending = None    # dict(addr, deadline) for a gap_connect

    def txdone(self, n):
        self.send(P.frame(P.TXDONE, struct.pack(">H", n)))

    def free_handle(self):
        h = 0
        while h in self.conns:
            h += 1
        return h


class Medium(RM.Medium):
    LABEL = "blemu-medium"
    OP_HELLO, OP_CTL, OP_HELLO_ACK, OP_ERROR, OP_CTL_REPLY = P.HELLO, P.CTL, P.HELLO_ACK, P.ERROR, P.CTL_REPLY
    ZERO_LENGTH = b"blemu: zero-length message"

    def __init__(self, topology, latency_ms=5.0, loss=0.0, mtu=527, kbps=1000.0, seed=1,
                 supervision_ms=1000.0, conn_interval_ms=15.0, max_retries=20):
        RM.Medium.__init__(self, topology, latency_ms, loss, seed)
        self.mtu_cap = mtu
        self.kbps = kbps
        self.supervision = supervision_ms / 1000.0
        self.conn_interval = conn_interval_ms / 1000.0
        self.max_retries = max_retries
        self.by_addr = {}      # addr -> Radio
        self.last_adv = {}     # (advertiser name, scanner name) -> time sent
        self.stats_global = collections.Counter()

    # ------------------------------------------------------------ range
    def in_range(self, a, b):
        return b.name in self.range.get(a.name, ())

    # ------------------------------------------------------------ radios (radiomedium.Medium)
    def hello_args(self, body):
        return (body.decode(),)

    def new_radio(self, writer, name):
        return Radio(self, name, writer)

    def registered(self, r):
        self.by_addr[r.addr] = r

    def forget(self, r):
        self.by_addr.pop(r.addr, None)

    def hello_ack(self, r):
        return struct.pack(">B", r.addr_type) + r.addr

    def leaving(self, r):
        for c in list(r.conns.values()):
            # The peer notices through its supervision timeout.
            self.kill_conn(c, 0x08, self.supervision)

    # ------------------------------------------------------------ messages
    def handle(self, r, op, b):
        if op == P.CFG:
            r.mtu, r.maxconn = struct.unpack(">HB", b[:3])
        elif op == P.ADV:
            on, conn, itv, alen = struct.unpack(">BBIB", b[:7])
            if on:
                r.adv = {"connectable": bool(conn), "interval": itv / 1e6,
                         "data": b[7:7 + alen], "resp": b[7 + alen:]}
            else:
                r.adv = None
        elif op == P.SCAN:
            on, active, dur = struct.unpack(">BBI", b[:6])
            if on:
                until = self.loop.time() + dur / 1000.0 if dur else None
                r.scan = {"active": bool(active), "until": until}
            else:
                # An explicit stop: the radio raises _IRQ_SCAN_DONE itself
                # (NimBLE does so synchronously inside gap_scan(None)).
                r.scan = None
        elif op == P.CONNECT:
            at = b[0]
            addr = b[1:7]
            (tmo,) = struct.unpack(">I", b[7:11])
            r.pending = {"addr": addr, "addr_type": at, "deadline": self.loop.time() + tmo / 1000.0}
            self.try_connect(r)
        elif op == P.CONNECT_CANCEL:
            if r.pending is not None:
                r.pending = None
                r.send(P.ev_conn(P.IRQ_PERIPHERAL_DISCONNECT, P.CONN_NONE, 0xFF, bytes(6)))
        elif op == P.DISCONNECT:
            (h,) = struct.unpack(">H", b[:2])
            c = r.conns.get(h)
            if c is not None:
                self.kill_conn(c, 0x16, 0.0)
        elif op == P.SERVICES:
            r.services = self.parse_services(b)
        elif op == P.MTU_REQ:
            (h,) = struct.unpack(">H", b[:2])
            c = r.conns.get(h)
            if c is not None and not c.mtu_done:
                c.mtu_done = True
                mtu = min(c.central.mtu, c.peripheral.mtu, self.mtu_cap)
                # request and response: one round trip; both sides learn it
                for side in (c.central, c.peripheral):
                    fr = P.ev_simple(P.IRQ_MTU_EXCHANGED, "HH", c.handle_of(side), mtu)
                    self.loop.call_later(2 * self.latency, self._mtu_done, c, mtu, side, fr)
        elif op == P.DISC_SVC:
            (h,) = struct.unpack(">H", b[:2])
            uuid = b[2:]
            c = r.conns.get(h)
            if c is None:
                return
            server = c.other(r)
            pipe = c.pipe[server]
            for e in server.services:
                if e[0] == 1 and (not uuid or e[4] == uuid):
                    pipe.push(P.ev_data(P.IRQ_GATTC_SERVICE_RESULT, "HHH", (h, e[1], e[2]), e[4]), 0, False)
            pipe.push(P.ev_simple(P.IRQ_GATTC_SERVICE_DONE, "HH", h, 0), 0, False)
        elif op == P.DISC_CHR:
            h, start, end = struct.unpack(">HHH", b[:6])
            uuid = b[6:]
            c = r.conns.get(h)
            if c is None:
                return
            server = c.other(r)
            pipe = c.pipe[server]
            for e in server.services:
                if e[0] == 2 and start <= e[1] <= end and (not uuid or e[4] == uuid):
                    pipe.push(P.ev_data(P.IRQ_GATTC_CHARACTERISTIC_RESULT, "HHHB", (h, e[1], e[2], e[3]), e[4]),
                              0, False)
            pipe.push(P.ev_simple(P.IRQ_GATTC_CHARACTERISTIC_DONE, "HH", h, 0), 0, False)
        elif op == P.ECHO:
            r.send(bytes(b))
        elif op == P.WRITE:
            h, vh, mode = struct.unpack(">HHB", b[:5])
            self.data(r, h, vh, b[5:], "write", mode)
        elif op == P.NOTIFY:
            h, vh, ind = struct.unpack(">HHB", b[:5])
            self.data(r, h, vh, b[5:], "notify", ind)
        else:
            r.stats["bad_messages"] += 1

    def _mtu_done(self, c, mtu, side, fr):
        if c.alive:
            c.mtu = mtu
            side.send(fr)

    def data(self, r, h, vh, payload, kind, flag):
        c = r.conns.get(h)
        if c is None or not c.alive:
            r.txdone(1)
            return
        dst = c.other(r)
        if len(payload) > c.mtu - 3:
            # The radio truncates before sending (as NimBLE does); anything
            # longer here is a radio bug. Truncate and count.
            r.stats["oversize"] += 1
            payload = payload[:c.mtu - 3]
        r.stats[kind + "_pkts"] += 1
        r.stats[kind + "_bytes"] += len(payload)
        dst.stats["rx_pkts"] += 1
        dst.stats["rx_bytes"] += len(payload)
        dh = c.handle_of(dst)
        if kind == "write":
            fr = P.ev_data(P.IRQ_GATTS_WRITE, "HH", (dh, vh), payload)
        else:
            fr = P.ev_data(P.IRQ_GATTC_INDICATE if flag else P.IRQ_GATTC_NOTIFY, "HH", (dh, vh), payload)
        # ATT header (3) + L2CAP header (4) on the air
        c.pipe[r].push(fr, len(payload) + 7, True)
        if kind == "write" and flag == 1:
            c.pipe[dst].push(P.ev_simple(P.IRQ_GATTC_WRITE_DONE, "HHH", h, vh, 0), 0, False)
        elif kind == "notify" and flag == 1:
            c.pipe[dst].push(P.ev_simple(P.IRQ_GATTS_INDICATE_DONE, "HHH", h, vh, 0), 0, False)

    @staticmethod
    def parse_services(b):
        out = []
        i = 0
        while i < len(b):
            kind, a, z, props, ul = struct.unpack(">BHHBB", b[i:i + 7])
            i += 7
            out.append((kind, a, z, props, bytes(b[i:i + ul])))
            i += ul
        return out

    # ------------------------------------------------------------ connections
    def try_connect(self, c_radio):
        p = c_radio.pending
        if p is None:
            return
        now = self.loop.time()
        target = self.by_addr.get(bytes(p["addr"]))
        ok = (target is not None and target is not c_radio and target.alive
              and target.adv is not None and target.adv["connectable"]
              and self.in_range(c_radio, target)
              and len(c_radio.conns) < c_radio.maxconn and len(target.conns) < target.maxconn)
        if ok:
            c_radio.pending = None
            hc = c_radio.free_handle()
            hp = target.free_handle()
            conn = Conn(self, c_radio, target, hc, hp)
            c_radio.conns[hc] = conn
            target.conns[hp] = conn
            target.adv = None  # connectable advertising ends with the connection
            c_radio.stats["connects"] += 1
            target.stats["connects"] += 1
            self.loop.call_later(self.latency, self._conn_event, conn, target,
                                 P.ev_conn(P.IRQ_CENTRAL_CONNECT, hp, c_radio.addr_type, c_radio.addr))
            self.loop.call_later(self.latency, self._conn_event, conn, c_radio,
                                 P.ev_conn(P.IRQ_PERIPHERAL_CONNECT, hc, target.addr_type, target.addr))
        elif now >= p["deadline"]:
            c_radio.pending = None
            c_radio.stats["connect_timeouts"] += 1
            c_radio.send(P.ev_conn(P.IRQ_PERIPHERAL_DISCONNECT, P.CONN_NONE, 0xFF, bytes(6)))

    def _conn_event(self, conn, r, fr):
        if conn.alive:
            r.send(fr)

    def kill_conn(self, c, reason, delay):
        if not c.alive:
            return
        c.alive = False
        for side in (c.central, c.peripheral):
            c.pipe[side].drop_all()
        for side in (c.central, c.peripheral):
            h = c.handle_of(side)
            if side.conns.get(h) is c:
                del side.conns[h]
            other = c.other(side)
            ev = P.IRQ_PERIPHERAL_DISCONNECT if side is c.central else P.IRQ_CENTRAL_DISCONNECT
            fr = P.ev_conn(ev, h, other.addr_type, other.addr)
            side.stats["disconnects"] += 1
            self.loop.call_later(max(delay, self.latency), side.send, fr)

    # ------------------------------------------------------------ advertising
    async def adv_loop(self):
        while True:
            await asyncio.sleep(ADV_TICK_S)
            now = self.loop.time()
            radios = list(self.radios.values())
            for s in radios:
                if s.pending is not None:
                    self.try_connect(s)
                sc = s.scan
                if sc is None:
                    continue
                if sc["until"] is not None and now >= sc["until"]:
                    s.scan = None
                    s.send(P.ev_simple(P.IRQ_SCAN_DONE, ""))
                    continue
                for a in radios:
                    if a is s or a.adv is None or not self.in_range(a, s):
                        continue
                    key = (a.name, s.name)
                    itv = max(a.adv["interval"], 0.1)
                    if now - self.last_adv.get(key, -1e9) < itv:
                        continue
                    self.last_adv[key] = now
                    adv_type = 0 if a.adv["connectable"] else 3
                    s.send(P.frame(P.EVENT, struct.pack(">BB", P.IRQ_SCAN_RESULT, a.addr_type) + a.addr
                                   + struct.pack(">Bb", adv_type, -60) + a.adv["data"]))
                    if sc["active"] and a.adv["resp"]:
                        s.send(P.frame(P.EVENT, struct.pack(">BB", P.IRQ_SCAN_RESULT, a.addr_type) + a.addr
                                       + struct.pack(">Bb", 4, -60) + a.adv["resp"]))

    # ------------------------------------------------------------ control (radiomedium.Medium)
    def stats(self):
        nodes = {}
        for name, r in self.every_radio():
            conns = []
            for h, c in sorted(r.conns.items()):
                conns.append({"handle": h, "peer": c.other(r).name,
                              "role": "central" if c.central is r else "peripheral", "mtu": c.mtu})
            d = dict(r.stats)
            d.update({"conns": conns, "adv": r.adv is not None, "scan": r.scan is not None,
                      "present": self.present(name, r), "mtu": r.mtu, "addr": r.addr.hex()})
            nodes[name] = d
        links = set()
        for r in self.radios.values():
            for c in r.conns.values():
                links.add(tuple(sorted((c.central.name, c.peripheral.name))))
        return {"ok": True, "nodes": nodes, "links": sorted(links), "global": dict(self.stats_global)}

    def cut(self, a, b):
        ra = self.radios.get(a)
        if ra is not None:
            for c in list(ra.conns.values()):
                if c.other(ra).name == b:
                    self.kill_conn(c, 0x08, self.supervision)

    def kill(self, r):
        for c in list(r.conns.values()):
            self.kill_conn(c, 0x08, self.supervision)

    def background(self):
        return (self.adv_loop(),)


def main(argv=None):
    ap = RM.arguments("python -m host_tools.blemu.medium",
                      "Emulated Bluetooth LE radio medium for snakemesh host nodes",
                      "topology file (chains of node names)",
                      5.0, "one-way latency per packet",
                      "link-layer packet loss probability (retransmitted)",
                      "per-connection, per-direction throughput")
    ap.add_argument("--mtu", type=int, default=527, help="largest ATT MTU the medium allows (23..527)")
    ap.add_argument("--supervision-ms", type=float, default=1000.0,
                    help="how long a peer takes to notice a link that went out of range")
    ap.add_argument("--conn-interval-ms", type=float, default=15.0, help="delay of one retransmission")
    ap.add_argument("--max-retries", type=int, default=20,
                    help="retransmissions of one packet before the connection is dropped")
    a = ap.parse_args(argv)
    if not 23 <= a.mtu <= 527:
        return RM.usage_error("--mtu must be within 23..527")
    if not 0.0 <= a.loss < 1.0:
        return RM.usage_error("--loss must be within [0, 1)")
    if a.kbps <= 0 or a.latency_ms < 0:
        return RM.usage_error("--kbps must be > 0 and --latency-ms >= 0")
    return RM.serve_main(a, "blemu-medium", load_topology, lambda topo: Medium(
        topo, latency_ms=a.latency_ms, loss=a.loss, mtu=a.mtu, kbps=a.kbps, seed=a.seed,
        supervision_ms=a.supervision_ms, conn_interval_ms=a.conn_interval_ms, max_retries=a.max_retries))


if __name__ == "__main__":
    sys.exit(main())
