# snake.runtime.espnow_port without a radio: two (or more) managers on a fake
# `espnow.ESPNow` "air" with a virtual clock. Link set-up from beacons, the
# byte stream both ways byte-exact through loss and a receive buffer that
# drops (after the radio ack), the 250-byte limit, the radio's tx queue
# (NO_MEM), the peer table limit, dead links, a restarted peer, bad input.
# Runs under CPython and MicroPython.
import asyncio

from snake.runtime import espnow_port as P
from snake.runtime.espnow_cold import STAT_NAMES
from snake.profile import Profile
from fwtest import Lcg, counter_names_follow, pattern

BCAST = b"\xff" * 6


def st(m, name):
    # EspNowManager.stats is a list indexed in STAT_NAMES order
    return m.stats[STAT_NAMES.index(name)]


def test_stat_indices_follow_the_names():
    counter_names_follow(P, "_S_", STAT_NAMES)


class Air:
    def __init__(self, loss=0, seed=1):
        self.radios = []
        self.queue = []
        self.loss = loss
        self.rng = Lcg(seed)
        self.cut = set()

    def deliver(self):
        q = self.queue
        self.queue = []
        for src, dst, msg in q:
            for r in self.radios:
                if r is src or (r.mac != dst and dst != BCAST):
                    continue
                if (src.mac, r.mac) in self.cut:
                    continue
                if self.loss and self.rng.next(1000) < self.loss:
                    continue
                r.arrive(src.mac, msg)


class FakeNow:
    """espnow.ESPNow as documented: registered peers (20), 250 bytes, a tx
    queue that raises NO_MEM, a receive buffer of rxbuf bytes that drops
    (the radio acked), irecv's reused pair, peers_table per sender."""

    def __init__(self, air, mac, rxbuf=526, txq=8):
        self.air = air
        self.mac = bytes(mac)
        air.radios.append(self)
        self.peers = {}
        self.inbox = []
        self.held = 0
        self.rxbuf = rxbuf
        self.txq = txq
        self.sent_lens = []
        self.dropped = 0
        self.nomem = 0
        self.peers_table = {}
        self.pair = [None, None]
        self.cb = None

    def _err(self, code, name):
        return OSError(code, name)

    def active(self, on=None):
        return True

    def irq(self, cb):
        self.cb = cb

    def add_peer(self, mac):
        mac = bytes(mac)
        if mac in self.peers:
            raise self._err(0x306B, "ESP_ERR_ESPNOW_EXIST")
        if len(self.peers) >= 20:
            raise self._err(0x3068, "ESP_ERR_ESPNOW_FULL")
        self.peers[mac] = 1

    def del_peer(self, mac):
        mac = bytes(mac)
        if mac not in self.peers:
            raise self._err(0x3069, "ESP_ERR_ESPNOW_NOT_FOUND")
        del self.peers[mac]

    def send(self, mac, msg, sync=True):
        if len(msg) > 250:
            raise ValueError("msg too long")
        if bytes(mac) not in self.peers:
            raise self._err(0x3069, "ESP_ERR_ESPNOW_NOT_FOUND")
        mine = 0
        for q in self.air.queue:
            if q[0] is self:
                mine += 1
        if mine >= self.txq:
            self.nomem += 1
            raise self._err(0x3067, "ESP_ERR_ESPNOW_NO_MEM")
        self.sent_lens.append(len(msg))
        self.air.queue.append((self, bytes(mac), bytes(msg)))
        return True

    def arrive(self, src, msg):
        cost = len(msg) + 13
        if self.held + cost > self.rxbuf:
            self.dropped += 1
            return
        self.held += cost
        self.inbox.append((src, msg))

    def irecv(self, timeout=None):
        p = self.pair
        if not self.inbox:
            p[0] = p[1] = None
            return p
        src, msg = self.inbox.pop(0)
        self.held -= len(msg) + 13
        if src not in self.peers_table:
            self.peers_table[src] = [-50, 0]
        p[0] = src
        p[1] = msg
        return p


class Clock:
    def __init__(self):
        self.t = 1000

    def __call__(self):
        return self.t


def profile(links=4, ring=1024):
    return Profile({"espnow": True, "espnow_links": links, "espnow_ring": ring})


class Node:
    def __init__(self, air, key, mac, links=4, ring=1024, rxbuf=526, txq=8):
        self.radio = FakeNow(air, mac, rxbuf, txq)
        self.links = []
        self.m = P.EspNowManager(profile(links, ring), key, self.links.append, self.radio, None)
        self.m.mac = bytes(mac)
        self.m.ptable = self.radio.peers_table      # what start() takes from the module
        self.radio.add_peer(BCAST)


def setup(loss=0, n=2, **kw):
    clock = Clock()
    P.ticks_ms = clock
    air = Air(loss)
    nodes = [Node(air, bytes([0x10 + 0x10 * i] * 32), bytes([2, 0, 0, 0, 0, i + 1]), **kw) for i in range(n)]
    return clock, air, nodes


def step(clock, air, nodes, ms=5):
    clock.t += ms
    for nd in nodes:
        nd.m._rx_all(clock.t)
        nd.m.tick(clock.t)
    air.deliver()


def run_until(clock, air, nodes, cond, limit_ms=20000, ms=5):
    end = clock.t + limit_ms
    while clock.t < end:
        if cond():
            return True
        step(clock, air, nodes, ms)
    return cond()


def read_all(link, out, maxn=4096):
    # recv_into does not wait while bytes are held
    mv = memoryview(bytearray(maxn))
    while link.slot.rn:
        n = asyncio.run(link.recv_into(mv))
        out += mv[0:n]


def restore():
    from snake.platform import ticks_ms
    P.ticks_ms = ticks_ms


def test_lower_key_opens_and_both_get_one_link():
    try:
        clock, air, (a, b) = setup()
        assert run_until(clock, air, [a, b], lambda: a.links and b.links)
        la, lb = a.links[0], b.links[0]
        assert la.outbound and not lb.outbound          # a holds the lower key
        assert la.slot.sid == lb.slot.sid != 0
        assert la.link_type == 5 and la.name.startswith("espnow 02:00:00:00:00:02")
        assert b.radio.mac in a.radio.peers and a.radio.mac in b.radio.peers
        for _ in range(400):
            step(clock, air, [a, b])
        assert len(a.links) == 1 and len(b.links) == 1  # no second link while it lives
        assert la._ok() and lb._ok()
    finally:
        restore()


def stream_both_ways(loss, size, rxbuf=526, txq=8, ring=1024):
    clock, air, (a, b) = setup(loss, rxbuf=rxbuf, txq=txq, ring=ring)
    assert run_until(clock, air, [a, b], lambda: a.links and b.links)
    la, lb = a.links[0], b.links[0]
    da, db = pattern(size, 1), pattern(size, 2)
    oa = ob = 0
    got_a, got_b = bytearray(), bytearray()
    end = clock.t + 600000
    while (len(got_a) < size or len(got_b) < size) and clock.t < end:
        if oa < size:
            k = la.try_send(da, size if size - oa < 700 else oa + 700, oa)
            assert k >= 0
            oa += k
        if ob < size:
            k = lb.try_send(db, size if size - ob < 700 else ob + 700, ob)
            assert k >= 0
            ob += k
        step(clock, air, [a, b])
        read_all(lb, got_b)
        read_all(la, got_a)
    assert bytes(got_b) == bytes(da)
    assert bytes(got_a) == bytes(db)
    assert max(a.radio.sent_lens) <= 250 and max(b.radio.sent_lens) <= 250
    return a, b


def test_stream_byte_exact_without_loss():
    try:
        a, b = stream_both_ways(0, 20000)
        assert st(a.m, "bytes_out") >= 20000
        assert max(a.radio.sent_lens) == 250           # full messages when there is enough
    finally:
        restore()


def test_stream_byte_exact_with_loss_and_a_small_receive_buffer():
    try:
        a, b = stream_both_ways(100, 20000)            # 10 % of the messages lost
        tot = {k: st(a.m, k) + st(b.m, k) for k in ("retransmits", "resumes", "rx_dropped")}
        assert tot["retransmits"] + tot["resumes"] > 0
        assert tot["rx_dropped"] > 0
        a2, b2 = stream_both_ways(0, 8000, rxbuf=300)   # a radio buffer of one message: drops after the ack
        assert a2.radio.dropped + b2.radio.dropped > 0
    finally:
        restore()


def test_radio_tx_queue_full_is_back_pressure():
    try:
        a, b = stream_both_ways(0, 6000, txq=1)
        assert a.radio.nomem > 0 and st(a.m, "tx_busy") > 0
    finally:
        restore()


def test_dead_link_after_silence_and_back():
    try:
        clock, air, (a, b) = setup()
        assert run_until(clock, air, [a, b], lambda: a.links and b.links)
        la, lb = a.links[0], b.links[0]
        air.cut.add((a.radio.mac, b.radio.mac))
        air.cut.add((b.radio.mac, a.radio.mac))
        t0 = clock.t
        assert run_until(clock, air, [a, b], lambda: not la._ok() and not lb._ok(), P.DEAD_MS + 1000)
        assert clock.t - t0 > P.DEAD_MS - 200
        assert b.radio.mac not in a.radio.peers           # the slot's peer entry is gone
        assert st(a.m, "dead") == 1
        air.cut.clear()
        assert run_until(clock, air, [a, b], lambda: len(a.links) == 2 and len(b.links) == 2, 10000)
        assert a.links[1]._ok() and a.links[1].slot.sid != 0
    finally:
        restore()


def test_restarted_peer_replaces_the_link():
    try:
        clock, air, (a, b) = setup()
        assert run_until(clock, air, [a, b], lambda: a.links and b.links)
        old = b.links[0]
        # a restarts: a fresh manager on the same MAC opens a new session
        air.radios.remove(a.radio)
        a2 = Node(air, bytes([0x10] * 32), a.radio.mac)
        assert run_until(clock, air, [a2, b], lambda: a2.links and len(b.links) == 2)
        assert not old._ok() and b.links[1]._ok()
        assert b.links[1].slot.sid == a2.links[0].slot.sid
    finally:
        restore()


def test_full_link_table_and_full_peer_table_refuse_and_count():
    try:
        clock, air, nodes = setup(n=4, links=2)
        b = nodes[0]          # lowest key: opens towards the others, 2 slots
        assert run_until(clock, air, nodes, lambda: len(b.links) == 2)
        for _ in range(300):
            step(clock, air, nodes)
        assert len(b.links) == 2                      # the third neighbour gets no slot
        # an OPEN from an unknown MAC: refused (no free slot)
        b.radio.arrive(b"\x02\x99\x00\x00\x00\x01", b"\xe2\x00\x07")
        step(clock, air, nodes)
        assert st(b.m, "refused_full") >= 1
        # a radio peer table at its limit: a slot is free, add_peer fails
        assert all(lk._ok() for lk in b.links)
        clock, air, (d,) = setup(n=1)
        assert d.m._free_slot(0) is not None
        for i in range(20 - len(d.radio.peers)):
            d.radio.add_peer(bytes([2, 0x77, 0, 0, 0, i]))
        d.radio.arrive(b"\x02\x98\x00\x00\x00\x01", b"\xe2\x00\x09")
        step(clock, air, [d])
        assert st(d.m, "peer_full") >= 1
        assert st(d.m, "links_up") == 0 and d.m._free_slot(3) is not None   # no slot taken
    finally:
        restore()


def test_bad_messages_and_a_beacon_flood_are_counted():
    try:
        clock, air, (a, b) = setup()
        assert run_until(clock, air, [a, b], lambda: a.links and b.links)
        bad = [b"", b"\x00", b"\xe1", b"\xe1\x01", b"\xe4\x00", b"\xe5\x00", b"\xe7\x00\x00",
               b"\xe1\x02" + bytes(34), b"\xe5\x00\x00\x00\x00\x00\x00"]
        for m in bad:
            b.radio.arrive(b"\x02\xaa\x00\x00\x00\x01", m)
        step(clock, air, [a, b])
        assert st(b.m, "bad_msg") >= 7
        # DATA for a session that is not the link's: not taken
        sid = b.links[0].slot.sid ^ 0x5555
        b.radio.arrive(a.radio.mac, bytes([0xE4, sid >> 8, sid & 255, 0, 0, 0, 0, 1, 2, 3]))
        step(clock, air, [a, b])
        assert st(b.m, "no_link") >= 1
        # a beacon flood from 100 MACs with keys above ours: one open at a time, bounded state
        for i in range(100):
            a.radio.arrive(bytes([2, 0xbb, 0, 0, i >> 8, i & 255]), b"\xe1\x01\x04\x00" + bytes([0xF0] + [i & 255] * 31))
            if i % 8 == 7:
                step(clock, air, [a, b])
        for _ in range(200):
            step(clock, air, [a, b])
        assert st(a.m, "beacons_in") >= 100
        assert len(a.radio.peers) <= 1 + 4             # broadcast + the slots
        assert len(a.radio.peers_table) <= a.m.nslots + 4 + 8
        assert st(a.m, "table_cleared") >= 1
        assert a.links[0]._ok() and b.links[0]._ok()
        data = pattern(3000, 9)
        got = bytearray()
        off = 0
        while len(got) < 3000:
            if off < 3000:
                off += a.links[0].try_send(data, 3000, off)
            step(clock, air, [a, b])
            read_all(b.links[0], got)
        assert bytes(got) == bytes(data)
    finally:
        restore()
