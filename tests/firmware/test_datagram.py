# Application datagrams (snake/datagram.py, its logic in
# snake/datagram_cold.py): every send state, acks, retries on the measured
# round trip, duplicate suppression, fragments with selective resend,
# bounded state and refusals, malformed input counted, when the logic is
# loaded and let go, and datagrams across real routers. Runs under CPython
# and MicroPython.
from snake import datagram, datagram_cold, platform, wire
from snake.datagram import (Datagrams, S_PENDING, S_SENT, S_DELIVERED, S_FAILED, NO_ROUTE,
                            TIMEOUT, TOO_BIG, NO_MEMORY, BUSY, via_router)
from snake.profile import Profile
from snake.report import DGRAM_STATS
from fwtest import counter_names_follow, Rng, allocated_by

# The wire's numbers (docs/reference/DATAGRAMS.md) and the layer's timing
# (snake/datagram_cold.py's _RTO_* .. _DEDUP_MS): private constants there (no
# module-level names on MicroPython), stated here, so a change fails here.
OK = 0
HDR = 17
ACK_HDR = 12
T_DATA = 1
T_ACK = 2
F_ACK_REQ = 0x01
F_ACK_NOW = 0x02
MAX_TRIES = 6
RTO_INIT_MS = 1000
RTO_MIN_MS = 150
RTO_MAX_MS = 5000
REASM_IDLE_MS = 10000
DEDUP_MS = 60000


def put_head(b, t, fl, dsvc, ssvc, hid):
    """The first 11 bytes of a datagram header (DATAGRAMS.md)."""
    b[0:11] = bytes([0x53, 0x44, 1, t, fl, dsvc >> 8, dsvc & 0xFF, ssvc >> 8, ssvc & 0xFF,
                     hid >> 8, hid & 0xFF])


KA = b"\xa0" * 32
KB = b"\xb0" * 32
KC = b"\xc0" * 32


def prof(**kw):
    d = {"dgram_max": 1000, "dgram_frag": 100, "dgram_reasm": 2, "dgram_pending": 3,
         "dgram_acks": 4, "dgram_dedup": 4}
    d.update(kw)
    return Profile(d)


def stat(dg, name):
    return dg.stats[DGRAM_STATS.index(name)]


class Net:
    """Datagram endpoints joined by a virtual wire with a fixed one-way
    latency; `drop(src, payload)` decides losses; `mode` makes tx answer
    NO_ROUTE/BUSY instead of sending."""

    def __init__(self, latency=50, **kw):
        self.now = 0
        self.latency = latency
        self.eps = {}
        self.q = []          # (arrival, dst, src, payload)
        self.log = []        # (time, src, dst, payload) of every frame sent
        self.drop = None
        self.mode = {}       # src key -> tx result
        self.states = {}     # (src key, handle) -> [(state, reason)]
        self.got = {}        # dst key -> [(src, dsvc, ssvc, bytes)]
        self.kw = kw

    def add(self, key, **kw):
        d = dict(self.kw)
        d.update(kw)
        dg = Datagrams(prof(**d), key, first_id=100)
        dg.tx = lambda dst, buf, n, now, body=None, k=key: self._tx(k, dst, buf, n, now, body)
        dg.on_state = lambda h, s, r, k=key: self.states.setdefault((k, h), []).append((s, r))
        dg.on_datagram = lambda src, ds, ss, data, k=key: self.got.setdefault(k, []).append(
            (src, ds, ss, bytes(data)))
        self.eps[key] = dg
        return dg

    def _tx(self, src, dst, buf, n, now, body=None):
        m = self.mode.get(src, OK)
        if m != OK:
            return m
        p = bytes(buf[:n]) + (bytes(body) if body is not None else b"")
        self.log.append((now, src, bytes(dst), p))
        if self.drop is not None and self.drop(src, p):
            return OK
        if bytes(dst) in self.eps:
            self.q.append((now + self.latency, bytes(dst), src, p))
        return OK

    def run(self, ms, step=10):
        end = self.now + ms
        while self.now < end:
            self.now += step
            due = [x for x in self.q if x[0] <= self.now]
            self.q = [x for x in self.q if x[0] > self.now]
            for _, dst, src, p in due:
                dg = self.eps[dst]
                assert dg.receive(src, p, self.now)
                dg.flush(self.now)
            for dg in self.eps.values():
                dg.tick(self.now)

    def sent(self, src, kind=None):
        return [p for t, s, d, p in self.log if s == src and (kind is None or p[3] == kind)]


def test_stat_indices_follow_the_names():
    counter_names_follow(datagram_cold, "_G_", DGRAM_STATS)
    assert len(DGRAM_STATS) == len(Datagrams(prof(), KA).stats)
    # the resident module's copies of the cold module's indices (const:
    # module names on CPython only; the tests below check them by behaviour
    # on both)
    for name in ("_G_FAILED_NO_MEMORY", "_G_NO_MEMORY", "_O_DUE", "_O_RUN", "_SN", "_MN"):
        mine = getattr(datagram, name, None)
        assert mine == getattr(datagram_cold, name, None), name


def test_header_and_fragment_limit_are_the_profiles():
    # the profile checks dgram_max and dgram_frag against DGRAM_HDR and
    # DGRAM_MAX_FRAGS; the layer, which loads without snake.profile, must
    # write what the profile allowed
    from snake.profile import DGRAM_HDR, DGRAM_MAX_FRAGS
    net = Net()
    a = net.add(KA, dgram_max=100 * DGRAM_MAX_FRAGS, dgram_frag=100, dgram_reasm=1)
    net.add(KB, dgram_max=100 * DGRAM_MAX_FRAGS, dgram_frag=100, dgram_reasm=1)
    h = a.send(KB, 1, bytes(100 * DGRAM_MAX_FRAGS), net.now, ack=True)
    frames = net.sent(KA, T_DATA)
    assert len(frames) == DGRAM_MAX_FRAGS and frames[0][11] == DGRAM_MAX_FRAGS
    assert all(len(f) == DGRAM_HDR + 100 for f in frames) and HDR == DGRAM_HDR
    net.run(2000)
    assert net.states[(KA, h)] == [(S_DELIVERED, 0)]
    h = a.send(KB, 1, bytes(100 * DGRAM_MAX_FRAGS + 1), net.now, ack=True)
    assert a.last_state == S_FAILED and a.last_reason == TOO_BIG


def test_ack_send_is_pending_then_delivered_once_and_measures_the_round_trip():
    net = Net(latency=40)
    a = net.add(KA)
    b = net.add(KB)
    h = a.send(KB, 7, b"hello", net.now, ack=True, src_service=9)
    assert a.last_state == S_PENDING and a.pending() == 1
    net.run(200)
    assert net.got[KB] == [(KA, 7, 9, b"hello")]
    assert net.states[(KA, h)] == [(S_DELIVERED, 0)]
    assert a.pending() == 0
    srtt, var = a.rtt_of(KB)
    assert 80 <= srtt <= 100            # two one-way latencies (+ tick granularity)
    assert stat(a, "sent") == 1 and stat(a, "delivered") == 1 and stat(b, "acks_sent") == 1
    assert stat(b, "received") == 1 and stat(a, "retries") == 0


def test_send_without_ack_says_sent_and_nothing_more():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    h = a.send(KB, 1, b"x" * 10, net.now)
    assert a.last_state == S_SENT
    assert net.states[(KA, h)] == [(S_SENT, 0)]
    net.run(300)
    assert net.got[KB] == [(KA, 1, 0, b"x" * 10)]
    assert net.states[(KA, h)] == [(S_SENT, 0)]     # never "delivered" without proof
    assert net.sent(KB, T_ACK) == [] and stat(a, "sent") == 1 and stat(a, "delivered") == 0


def test_too_big_fails_at_once_and_sends_nothing():
    net = Net()
    a = net.add(KA)
    h = a.send(KB, 1, bytes(1001), 0, ack=True)
    assert (a.last_state, a.last_reason) == (S_FAILED, TOO_BIG)
    assert net.states[(KA, h)] == [(S_FAILED, TOO_BIG)] and net.log == []
    assert stat(a, "failed_too_big") == 1


def test_bad_service_number_is_a_value_error():
    a = Net().add(KA)
    for svc, ssvc in ((-1, 0), (65536, 0), (1, 70000)):
        try:
            a.send(KB, svc, b"x", 0, src_service=ssvc)
        except ValueError as e:
            assert "service" in str(e)
        else:
            assert False, (svc, ssvc)


def test_sends_in_flight_are_bounded_the_next_fails_busy():
    net = Net()
    a = net.add(KA)          # dgram_pending 3, nobody answers
    hs = [a.send(KB, 1, b"x", 0, ack=True) for _ in range(3)]
    assert a.pending() == 3
    h = a.send(KB, 1, b"x", 0, ack=True)
    assert (a.last_state, a.last_reason) == (S_FAILED, BUSY)
    assert net.states[(KA, h)] == [(S_FAILED, BUSY)] and stat(a, "failed_busy") == 1
    assert len(set(hs + [h])) == 4


def test_no_route_without_ack_fails_at_once_with_ack_after_the_retries():
    net = Net()
    a = net.add(KA)
    net.mode[KA] = NO_ROUTE
    h1 = a.send(KB, 1, b"x", 0)
    assert (a.last_state, a.last_reason) == (S_FAILED, NO_ROUTE)
    h2 = a.send(KB, 1, b"x", 0, ack=True)
    assert a.last_state == S_PENDING
    net.run(40000, step=50)
    assert net.states[(KA, h1)] == [(S_FAILED, NO_ROUTE)]
    assert net.states[(KA, h2)] == [(S_FAILED, NO_ROUTE)]
    assert stat(a, "failed_no_route") == 2 and stat(a, "retries") == MAX_TRIES - 1


def test_no_answer_times_out_after_backed_off_retries():
    net = Net()
    a = net.add(KA)
    net.add(KB)
    net.drop = lambda src, p: True          # everything lost
    h = a.send(KB, 1, b"abc", net.now, ack=True)
    net.run(40000)
    assert net.states[(KA, h)] == [(S_FAILED, TIMEOUT)]
    times = [t for t, s, d, p in net.log if s == KA]
    assert len(times) == MAX_TRIES
    gaps = [times[i + 1] - times[i] for i in range(len(times) - 1)]
    want = [min(RTO_INIT_MS << i, RTO_MAX_MS) for i in range(MAX_TRIES - 1)]
    for g, w in zip(gaps, want):
        assert w <= g <= w + 20, (gaps, want)
    assert stat(a, "retries") == MAX_TRIES - 1 and stat(a, "failed_timeout") == 1
    assert a.pending() == 0


def test_a_partial_ack_during_a_burst_is_taken_as_a_datagram():
    # the ack is consumed by the layer (receive says True), never handed on
    # to the node as an application payload, while fragments are still owed
    net = Net()
    a = net.add(KA)
    net.mode[KA] = BUSY                     # tx refuses: the burst stays owed
    h = a.send(KB, 1, bytes(250), net.now, ack=True)
    assert a.pending() == 1
    ack = bytearray(ACK_HDR + 1)
    put_head(ack, T_ACK, 0, 1, 0, h)
    ack[11] = 3                             # fragments of 100 bytes
    ack[ACK_HDR] = 0x80                     # the first one arrived
    assert a.receive(KB, bytes(ack), net.now) is True
    assert stat(a, "acks_received") == 1 and a.pending() == 1


def test_retry_after_a_lost_ack_is_acked_again_but_delivered_once():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    lost = []

    def drop(src, p):
        if p[3] == T_ACK and not lost:
            lost.append(p)
            return True
        return False
    net.drop = drop
    h = a.send(KB, 3, b"once", net.now, ack=True)
    net.run(3000)
    assert len(lost) == 1
    assert net.got[KB] == [(KA, 3, 0, b"once")]
    assert net.states[(KA, h)] == [(S_DELIVERED, 0)]
    assert stat(b, "duplicates") == 1 and stat(a, "retries") == 1 and stat(b, "acks_sent") == 2


def test_timeout_follows_the_measured_round_trip():
    net = Net(latency=100)
    a = net.add(KA)
    net.add(KB)
    for i in range(6):
        a.send(KB, 1, b"s", net.now, ack=True)
        net.run(400)
    srtt, var = a.rtt_of(KB)
    assert 190 <= srtt <= 220
    # now the answer never comes: the retry goes out after SRTT + 4 RTTVAR
    # (bounded), not after the initial 1 s
    net.drop = lambda src, p: True
    n0 = len(net.log)
    t0 = net.now
    a.send(KB, 1, b"s", net.now, ack=True)
    net.run(2000)
    retry = [t for t, s, d, p in net.log[n0:] if s == KA][1]
    rto = max(RTO_MIN_MS, min(RTO_MAX_MS, srtt + 4 * var))
    assert rto < RTO_INIT_MS
    assert rto <= retry - t0 <= rto + 20


def test_fragments_reassemble_and_only_the_lost_one_is_resent():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    data = bytes((i * 7) & 0xFF for i in range(950))       # 10 fragments of 95
    lost = []

    def drop(src, p):
        if p[3] == T_DATA and p[12] in (3, 6) and len(lost) < 2:
            lost.append(p[12])
            return True
        return False
    net.drop = drop
    h = a.send(KB, 5, data, net.now, ack=True)
    net.run(2000)
    assert net.got[KB] == [(KA, 5, 0, data)]
    assert net.states[(KA, h)] == [(S_DELIVERED, 0)]
    frags = [p[12] for p in net.sent(KA, T_DATA)]
    assert frags == list(range(10)) + [3, 6]             # the missing two only, once
    acks = net.sent(KB, T_ACK)
    assert len(acks) == 2
    assert acks[0][ACK_HDR:] == bytes([0b11101101, 0b11000000])   # 3 and 6 missing
    assert stat(a, "fragments_sent") == 12 and stat(b, "fragments_received") == 10
    assert stat(a, "retries") == 1 and stat(b, "received") == 1


def test_lost_last_fragment_costs_a_probe_then_the_missing_ones():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    data = bytes(range(250))                 # 3 fragments: 84, 84, 82
    lost = []

    def drop(src, p):
        if p[3] == T_DATA and p[12] in (1, 2) and len(lost) < 2:
            lost.append(p[12])
            return True
        return False
    net.drop = drop
    h = a.send(KB, 5, data, net.now, ack=True)
    net.run(5000)
    assert net.states[(KA, h)] == [(S_DELIVERED, 0)]
    assert net.got[KB] == [(KA, 5, 0, data)]
    # first burst 0 1 2, the timeout probes 2 alone, the bitmap asks for 1
    assert [p[12] for p in net.sent(KA, T_DATA)] == [0, 1, 2, 2, 1]


def test_fragmented_send_without_ack_loses_the_datagram_honestly():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    net.drop = lambda src, p: p[12] == 1
    h = a.send(KB, 5, bytes(300), net.now)
    assert a.last_state == S_SENT
    net.run(REASM_IDLE_MS + 500, step=100)
    assert KB not in net.got
    assert b.reassemblies() == 0 and stat(b, "reasm_expired") == 1


def test_reassembly_slots_are_bounded_refusal_counted_and_retried():
    net = Net()
    a = net.add(KA)
    c = net.add(KC)
    b = net.add(KB, dgram_reasm=1)
    lost = []

    def drop(src, p):
        # A's last fragment is late: its reassembly holds the one slot
        if src == KA and p[3] == T_DATA and p[12] == 2 and not lost:
            lost.append(1)
            return True
        return False
    net.drop = drop
    ha = a.send(KB, 1, bytes([1]) * 300, net.now, ack=True)
    hc = c.send(KB, 1, bytes([2]) * 300, net.now, ack=True)
    net.run(8000)
    assert stat(b, "reasm_refused") >= 1
    assert net.states[(KA, ha)] == [(S_DELIVERED, 0)]
    assert net.states[(KC, hc)] == [(S_DELIVERED, 0)]
    assert sorted(g[0] for g in net.got[KB]) == [KA, KC]
    assert len(b.m_buf) == 1 and len(b.m_buf[0]) == 1000   # preallocated, never grown


def test_receiver_refuses_a_datagram_larger_than_its_dgram_max():
    net = Net()
    a = net.add(KA)
    b = net.add(KB, dgram_max=200)
    h = a.send(KB, 1, bytes(500), net.now, ack=True)
    net.run(500)
    assert net.states[(KA, h)] == [(S_FAILED, TOO_BIG)]
    assert stat(b, "reasm_too_big") >= 1 and KB not in net.got


def test_dedup_memory_is_bounded_and_ages():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)              # dgram_dedup 4
    for i in range(6):
        hid = a.send(KB, 1, b"d", net.now, ack=True)
        net.run(200)
    # d_v holds (used, id, time) a slot (snake/datagram_cold.py _D_*)
    assert len(b.d_v) == 4 * 3 and [b.d_v[3 * i] for i in range(4)] == [1] * 4
    # a remembered (src, id) is suppressed; after DEDUP_MS it is not
    assert hid in [b.d_v[3 * i + 1] for i in range(4)]
    p = bytearray(HDR + 1)
    put_head(p, T_DATA, F_ACK_REQ | F_ACK_NOW, 1, 0, hid)
    p[11], p[12], p[13], p[14], p[15], p[16] = 1, 0, 0, 1, 0, 1
    got = len(net.got[KB])
    b.receive(KA, bytes(p), net.now)
    assert len(net.got[KB]) == got and stat(b, "duplicates") == 1
    b.receive(KA, bytes(p), net.now + DEDUP_MS)
    assert len(net.got[KB]) == got + 1


def test_malformed_datagrams_are_counted_never_raised():
    net = Net()
    b = net.add(KB)
    good = bytearray(HDR + 5)
    put_head(good, T_DATA, 0, 1, 0, 1)
    good[11], good[12], good[13], good[14], good[15], good[16] = 1, 0, 0, 5, 0, 5
    bad = []
    bad.append(b"SD")                                   # no header
    bad.append(bytes(good[:10]))                        # short
    g = bytearray(good); g[2] = 9; bad.append(bytes(g))          # unknown version
    g = bytearray(good); g[3] = 7; bad.append(bytes(g))          # unknown type
    g = bytearray(good); g[11] = 0; bad.append(bytes(g))         # zero fragments
    g = bytearray(good); g[11] = 65; bad.append(bytes(g))        # too many fragments
    g = bytearray(good); g[12] = 1; bad.append(bytes(g))         # index past count
    g = bytearray(good); g[16] = 9; bad.append(bytes(g))         # length disagrees
    g = bytearray(good); g[11] = 2; g[14] = 0; bad.append(bytes(g))   # stride 0
    bad.append(bytes(good) + b"x")                      # trailing byte
    ack = bytearray(ACK_HDR + 1)
    put_head(ack, T_ACK, 0, 1, 0, 1)
    ack[11] = 9
    bad.append(bytes(ack))                              # bitmap length disagrees
    for p in bad:
        assert b.receive(KA, p, 0) is True, p
    assert stat(b, "malformed") == len(bad)
    assert KB not in net.got
    assert b.receive(KA, bytes(good), 0) is True and net.got[KB] == [(KA, 1, 0, b"\x00" * 5)]
    # random payloads behind the magic: never an exception
    rng = Rng(5)
    for i in range(300):
        p = b"SD" + rng.bytes(rng.below(40))
        b.receive(KA, p, i)
        b.flush(i)


def test_other_payloads_are_left_to_other_layers():
    from snake.runtime import probe
    b = Net().add(KB)
    assert b.receive(KA, probe.make(probe.PING, 5), 0) is False
    assert b.receive(KA, b"hello", 0) is False
    assert b.receive(KA, b"", 0) is False
    assert stat(b, "malformed") == 0


def test_unmatched_and_late_acks_change_nothing():
    net = Net()
    a = net.add(KA)
    net.add(KB)
    ack = bytearray(ACK_HDR + 1)
    put_head(ack, T_ACK, 0, 1, 0, 4242)
    ack[11] = 1
    ack[12] = 0x80
    assert a.receive(KB, bytes(ack), 0)
    assert stat(a, "acks_unmatched") == 1 and net.states == {}


def test_ack_ring_is_bounded():
    net = Net()
    b = net.add(KB, dgram_acks=2)
    for i in range(4):
        p = bytearray(HDR + 1)
        put_head(p, T_DATA, F_ACK_REQ | F_ACK_NOW, 1, 0, 10 + i)
        p[11], p[12], p[13], p[14], p[15], p[16] = 1, 0, 0, 1, 0, 1
        b.receive(KA, bytes(p), 0)
    assert stat(b, "acks_dropped") == 2 and stat(b, "received") == 4
    b.flush(0)
    assert stat(b, "acks_sent") == 2


def test_tick_with_nothing_due_allocates_nothing():
    net = Net()
    a = net.add(KA)
    a.send(KB, 1, b"x", 0, ack=True)
    got = allocated_by(lambda: a.tick(10))
    assert got in (None, 0), got


# ---- the logic loaded per event ------------------------------------------
class Loads:
    """Counts the loads of the layer's logic (snake.datagram's cold());
    fail: each load raises MemoryError instead, as on a heap that cannot
    take the module. close() puts cold() back."""

    def __init__(self, fail=False):
        self.n = 0
        self.fail = fail
        self.real = datagram.cold
        datagram.cold = self.cold

    def cold(self, name):
        assert name == "snake.datagram_cold", name
        self.n += 1
        if self.fail:
            raise MemoryError("no heap for the logic (test)")
        return self.real(name)

    def close(self):
        datagram.cold = self.real


def test_payloads_that_are_no_datagram_do_not_load_the_logic():
    from snake.runtime import probe
    b = Net().add(KB)
    ld = Loads()
    try:
        for p in (probe.make(probe.PING, 5), b"hello", b"S", b"", b"SMxx"):
            assert b.receive(KA, p, 0) is False
        assert ld.n == 0
        assert b.receive(KA, b"SD", 0) is True and ld.n == 1 and stat(b, "malformed") == 1
    finally:
        ld.close()


def test_tick_loads_the_logic_only_when_work_is_due():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    ld = Loads()
    try:
        for t in range(0, 5000, 50):
            a.tick(t)                               # nothing in flight
        assert ld.n == 0
        h = a.send(KC, 1, b"x", 0, ack=True)        # nobody answers: retry at RTO_INIT_MS
        assert ld.n == 1
        for t in range(0, RTO_INIT_MS, 10):
            a.tick(t)
        assert ld.n == 1 and stat(a, "retries") == 0
        a.tick(RTO_INIT_MS)
        assert ld.n == 2 and stat(a, "retries") == 1
        a.tick(RTO_INIT_MS + 10)                    # the next retry is 2 RTO_INIT_MS later
        assert ld.n == 2
        # a reassembly in flight: due when it has been idle REASM_IDLE_MS
        n0 = ld.n
        p = bytearray(HDR + 10)
        put_head(p, T_DATA, 0, 1, 0, 77)
        p[11], p[12], p[13], p[14], p[15], p[16] = 2, 0, 0, 10, 0, 15
        b.receive(KA, bytes(p), 100)
        assert b.reassemblies() == 1 and ld.n == n0 + 1     # counting slots needs no logic
        for t in range(100, 100 + REASM_IDLE_MS, 100):
            b.tick(t)
        assert ld.n == n0 + 1
        b.tick(100 + REASM_IDLE_MS)
        assert ld.n == n0 + 2 and stat(b, "reasm_expired") == 1
        b.tick(100 + 2 * REASM_IDLE_MS)
        assert ld.n == n0 + 2
        # fragments tx refused: every tick tries again until it takes them
        n0 = ld.n
        net.mode[KB] = BUSY
        b.send(KA, 1, bytes(250), 20000, ack=True)
        b.tick(20010)
        b.tick(20020)
        assert ld.n == n0 + 3
        net.mode[KB] = OK
        b.tick(20030)
        assert len([f for f in net.sent(KB, T_DATA)]) == 3
        b.tick(20040)
        assert ld.n == n0 + 4
        assert h is not None
    finally:
        ld.close()


def test_one_load_carries_a_receive_and_the_flush_of_its_ack():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    p = bytearray(HDR + 1)
    put_head(p, T_DATA, F_ACK_REQ | F_ACK_NOW, 1, 0, 5)
    p[11], p[12], p[13], p[14], p[15], p[16] = 1, 0, 0, 1, 0, 1
    ld = Loads()
    try:
        b.receive(KA, bytes(p), 0)
        assert b.a_n == 1 and b.code is not None     # held: an ack is owed
        b.flush(0)
        assert ld.n == 1 and b.a_n == 0 and b.code is None
        assert stat(b, "acks_sent") == 1 and a.code is None
    finally:
        ld.close()


def test_an_event_nested_in_tx_uses_the_same_load():
    # a datagram to our own key: the router delivers it inside tx, and the
    # ack inside the flush's tx
    a = Datagrams(prof(), KA, 1)
    a.tx = lambda dst, buf, n, now, body=None: (
        a.receive(KA, bytes(buf[:n]) + (bytes(body) if body is not None else b""), now) and OK)
    got = []
    ends = []
    a.on_datagram = lambda src, ds, ss, data: got.append(bytes(data))
    a.on_state = lambda h, s, r: ends.append((s, r))
    ld = Loads()
    try:
        a.send(KA, 1, b"self", 0, ack=True)
        a.flush(0)
        assert got == [b"self"] and ends == [(S_DELIVERED, 0)]
        assert ld.n == 1 and a.code is None and a.pending() == 0
    finally:
        ld.close()


def test_the_logic_leaves_the_heap_between_events():
    import sys
    a = Datagrams(prof(), KA, 1)
    a.tx = lambda *x, **kw: OK
    a.send(KB, 1, b"warm", 0)                  # interns the logic's names once
    assert a.code is None and a.last_state == S_SENT
    if not platform.MICROPYTHON:
        return                                 # CPython keeps it imported (platform.cold)
    import gc
    assert "snake.datagram_cold" not in sys.modules
    gc.collect()
    m0 = gc.mem_alloc()
    a.send(KB, 1, b"again", 0)
    a.tick(5000)
    gc.collect()
    m1 = gc.mem_alloc()
    assert m1 - m0 < 512, (m0, m1)
    held = platform.cold("snake.datagram_cold")  # the same module, held: the check can fail
    gc.collect()
    assert gc.mem_alloc() - m1 > 2048, (m1, gc.mem_alloc())
    assert held is not None


def test_no_heap_for_the_logic_is_counted_never_raised():
    net = Net()
    a = net.add(KA)
    b = net.add(KB)
    h0 = a.send(KB, 1, b"first", 0, ack=True)      # pending: retry due at RTO_INIT_MS
    net.drop = lambda src, p: True
    ld = Loads(fail=True)
    try:
        h = a.send(KB, 1, b"x", 0, ack=True)
        assert (a.last_state, a.last_reason) == (S_FAILED, NO_MEMORY)
        assert net.states[(KA, h)] == [(S_FAILED, NO_MEMORY)] and h == (h0 + 1) & 0xFFFF
        assert stat(a, "failed_no_memory") == 1 and stat(a, "no_memory") == 1
        p = bytearray(HDR + 1)
        put_head(p, T_DATA, 0, 1, 0, 9)
        p[11], p[12], p[13], p[14], p[15], p[16] = 1, 0, 0, 1, 0, 1
        assert b.receive(KA, bytes(p), 10) is True        # dropped, counted
        assert stat(b, "no_memory") == 1 and KB not in net.got
        a.tick(RTO_INIT_MS)                               # the retry cannot run now
        assert stat(a, "no_memory") == 2 and stat(a, "retries") == 0
        assert a.pending() == 1 and a.rtt_of(KB) is None  # counted without the logic; no rtt
    finally:
        ld.close()
    a.tick(RTO_INIT_MS + 10)                              # it runs at the next tick
    assert stat(a, "retries") == 1 and a.pending() == 1


def test_first_id_picks_the_handles():
    a = Datagrams(prof(), KA, first_id=0xFFFF)
    a.tx = lambda *x: OK
    assert a.send(KB, 1, b"x", 0) == 0xFFFF and a.send(KB, 1, b"x", 0) == 0


# ---- across real routers ------------------------------------------------
class Line:
    """Routers in a line (each link a pair of ports), frames carried at
    once, one Datagrams per node driven through via_router."""

    def __init__(self, ids, drop=None, **pk):
        from routertest import signer
        from snake.router import Router
        self.now = 0
        self.drop = drop
        self.q = []
        self.nodes = []
        self.got = {}
        self.states = {}
        d = {"max_peers": 4, "max_routes": 8, "coord_cache": 4, "sig_cache": 16, "max_hops": 8,
             "frame_max": 1152, "wakeup_filter": 4, "bootstrap_verify": "off",
             "dgram_max": 4096, "dgram_reasm": 1, "dgram_pending": 2, "dgram_acks": 2,
             "dgram_dedup": 4}
        d.update(pk)
        for idx, i in enumerate(ids):
            s = signer(i)
            r = Router(Profile(d), s, 0)
            r.tx = lambda port, buf, n, idx=idx: self._tx(idx, port, buf, n)
            dg = Datagrams(r.profile, s.public, first_id=idx * 1000)
            dg.tx = via_router(r)
            dg.on_datagram = lambda src, ds, ss, data, idx=idx: self.got.setdefault(idx, []).append(
                (bytes(src), ds, bytes(data)))
            dg.on_state = lambda h, st, rs, idx=idx: self.states.setdefault((idx, h), []).append((st, rs))
            self.other = []
            r.deliver = lambda src, p, idx=idx: self._deliver(idx, src, p)
            self.nodes.append((r, dg, s.public))
        for i in range(len(ids) - 1):
            # node i's port 2 faces i+1, node i+1's port 1 faces i
            self.nodes[i][0].port_up(2, self.nodes[i + 1][2], 1, 0)
            self.nodes[i + 1][0].port_up(1, self.nodes[i][2], 1, 0)
        self.pump()

    def _tx(self, idx, port, buf, n):
        j = idx + 1 if port == 2 else idx - 1
        frame = bytes(buf[:n])
        if self.drop is not None and self.drop(idx, j, frame):
            return True
        self.q.append((j, 1 if port == 2 else 2, frame))
        return True

    def _deliver(self, idx, src, p):
        if not self.nodes[idx][1].receive(src, p, self.now):
            self.other.append((idx, bytes(p)))

    def pump(self):
        while self.q:
            j, port, frame = self.q.pop(0)
            buf = bytearray(self.nodes[j][0].profile.large)
            buf[:len(frame)] = frame
            self.nodes[j][0].receive(port, buf, len(frame), self.now)
            self.nodes[j][1].flush(self.now)

    def run(self, ms, step=20):
        end = self.now + ms
        while self.now < end:
            self.now += step
            for r, dg, k in self.nodes:
                r.tick(self.now)
                dg.tick(self.now)
            self.pump()

    def key(self, i):
        return self.nodes[i][2]


def test_datagrams_cross_relays_on_real_routers_with_a_lost_fragment():
    lost = []

    def drop(i, j, frame):
        # the first copy of fragment 2 dies between the relay and the end
        if i == 1 and j == 2 and frame[5] == wire.T_TRAFFIC and len(frame) > 900 and not lost:
            lost.append(1)
            return True
        return False
    ln = Line([61, 62, 63], drop=drop)
    ln.run(3000)
    a = ln.nodes[0][1]
    data = bytes((i * 13 + 1) & 0xFF for i in range(4096))
    h = a.send(ln.key(2), 80, data, ln.now, ack=True, src_service=81)
    assert a.last_state == S_PENDING
    ln.run(3000)
    assert ln.states[(0, h)] == [(S_DELIVERED, 0)]
    assert ln.got[2] == [(ln.key(0), 80, data)]
    assert lost and stat(a, "retries") == 1
    assert stat(a, "fragments_sent") == 5 + 1          # 5 of 880 bytes, one resent
    assert ln.nodes[1][0].counters.forwarded >= 6
    # a reply the other way, small, no ack
    c = ln.nodes[2][1]
    c.send(ln.key(0), 81, b"thanks", ln.now)
    ln.run(200)
    assert ln.got[0] == [(ln.key(2), 81, b"thanks")]


def test_datagrams_and_probes_share_the_traffic_payload():
    from snake.runtime import probe
    ln = Line([61, 62, 63])
    ln.run(2000)
    r0 = ln.nodes[0][0]
    r0.send(ln.key(2), probe.make(probe.PING, 77), ln.now)
    ln.nodes[0][1].send(ln.key(2), 1, b"dg", ln.now)
    ln.pump()
    assert ln.other == [(2, bytes(probe.make(probe.PING, 77)))]
    assert ln.got[2] == [(ln.key(0), 1, b"dg")]


def test_a_key_not_in_the_mesh_ends_failed_in_bounded_time():
    ln = Line([61, 62, 63])
    ln.run(2000)
    a = ln.nodes[0][1]
    h = a.send(b"\x01" * 32, 1, b"anyone?", ln.now, ack=True)
    ln.run(30000, step=100)
    st = ln.states[(0, h)]
    assert len(st) == 1 and st[0][0] == S_FAILED and st[0][1] in (TIMEOUT, NO_ROUTE)
    assert a.pending() == 0


def test_timeouts_survive_the_ticks_wrap():
    from snake.platform import ticks_add
    sent = []
    a = Datagrams(prof(), KA, 1)
    a.tx = lambda dst, buf, n, now, body=None: sent.append(now) or OK
    ends = []
    a.on_state = lambda h, s, r: ends.append((s, r))
    now = ticks_add(0, -300)           # 300 ms before the ticks counter wraps
    a.send(KB, 1, b"x", now, ack=True)
    for i in range(3000):
        now = ticks_add(now, 10)
        a.tick(now)
    assert ends == [(S_FAILED, TIMEOUT)] and len(sent) == MAX_TRIES


def test_profile_checks_the_datagram_keys():
    from snake.profile import ProfileError, dgram_frag
    assert dgram_frag(Profile({})) == 880
    assert dgram_frag(Profile({"frame_max": 512, "max_hops": 8})) == 512 - 17 - (12 + 64 + 2 + 12 + 42)
    for bad in ({"dgram_pending": 0}, {"dgram_acks": 256}, {"dgram_dedup": "4"},
                {"dgram_reasm": -1}, {"dgram_frag": 63}, {"dgram_frag": 8000},
                {"dgram_max": 0}, {"dgram_max": 70000},
                {"dgram_frag": 100, "dgram_max": 6401}):
        try:
            Profile(bad)
        except ProfileError as e:
            assert "dgram_" in str(e), bad
        else:
            assert False, bad
    Profile({"dgram_frag": 100, "dgram_max": 6400, "dgram_reasm": 0})


def test_a_datagram_to_our_own_key_is_delivered_and_acked_locally():
    ln = Line([61, 62])
    a = ln.nodes[0][1]
    h = a.send(ln.key(0), 3, bytes(2000), ln.now, ack=True)
    ln.run(100)
    assert ln.got[0] == [(ln.key(0), 3, bytes(2000))]
    assert ln.states[(0, h)] == [(S_DELIVERED, 0)]
