# Ping/trace probes (snake/runtime/probe.py): payload format, reply queueing from
# inside router callbacks, and the ping/trace procedures against a scripted
# network. Runs under CPython and MicroPython.
import asyncio

from snake import wire
from snake.runtime import probe
from snake.runtime.probe import Prober, PING, PONG, TRACE, TRACE_HOP, TRACE_END
from snake.report import PROBE_STATS
from fwtest import counter_names_follow


def _stat(p, name):
    # Prober.stats is a list indexed in report.PROBE_STATS order
    return p.stats[PROBE_STATS.index(name)]


def test_probe_stat_indices_follow_the_names():
    # probe.py counts by its _P_* indices (const: only CPython keeps them as
    # names); report.PROBE_STATS names them in that order
    counter_names_follow(probe, "_P_", PROBE_STATS)

K_SELF = b"\x50" * 32
K1 = b"\x11" * 32
K2 = b"\x22" * 32
DST = b"\x33" * 32


class FakeRouter:
    """router.send stand-in: records sends; `net` (if set) is called with
    (dst, payload, hop_limit) and returns the reply (src, payload) or None."""

    def __init__(self):
        self.sent = []
        self.net = None
        self.prober = None
        self.ok = True

    def send(self, dst, payload, now, hop_limit=10):
        self.sent.append((bytes(dst), bytes(payload), hop_limit))
        if not self.ok:
            return False
        if self.net is not None:
            rep = self.net(bytes(dst), bytes(payload), hop_limit)
            if rep is not None:
                self.prober.on_deliver(rep[0], rep[1])
        return True


class FakeNode:
    def __init__(self):
        self.router = FakeRouter()
        self.hop_limit = 64
        self.key = K_SELF


def make():
    n = FakeNode()
    p = Prober(n)
    n.router.prober = p
    return n, p


def test_payload_roundtrip():
    b = probe.make(TRACE, 0xDEADBEEF, 7)
    assert len(b) == probe.PAYLOAD_LEN == 8
    assert bytes(b[0:2]) == b"SM"
    assert probe.kind_at(b, 0, 8) == TRACE
    assert probe.id_at(b, 0) == 0xDEADBEEF and b[7] == 7
    buf = bytearray(20)
    probe.encode(buf, PONG, 1, 0)
    assert probe.kind_at(buf, 0, 8) == PONG
    # not probes: wrong length, magic or kind
    assert probe.kind_at(b, 0, 7) == 0
    assert probe.kind_at(b"XM" + bytes(b[2:]), 0, 8) == 0
    assert probe.kind_at(b"SM\x09" + bytes(b[3:]), 0, 8) == 0
    assert probe.kind_at(b"SM\x00" + bytes(b[3:]), 0, 8) == 0


def test_requests_answered_after_receive():
    n, p = make()
    assert p.on_deliver(K1, bytes(probe.make(PING, 5)))
    assert p.on_deliver(K2, bytes(probe.make(TRACE, 6, 3)))
    assert not p.on_deliver(K1, b"hello")          # application payload
    assert n.router.sent == []                      # nothing sent inside the callback
    assert p.pending() == 2
    p.flush()
    assert p.pending() == 0
    (d1, pl1, _), (d2, pl2, _) = n.router.sent
    assert d1 == K1 and probe.kind_at(pl1, 0, 8) == PONG and probe.id_at(pl1, 0) == 5
    assert d2 == K2 and probe.kind_at(pl2, 0, 8) == TRACE_END and probe.id_at(pl2, 0) == 6
    assert pl2[7] == 3
    assert _stat(p, "replies_sent") == 2


def test_expired_trace_probe_answered_by_relay():
    n, p = make()
    buf = bytearray(256)
    ln = wire.encode_traffic(buf, b"", b"\x01", DST, K1, wire.FULL_KEY, 0, bytes(probe.make(TRACE, 77, 2)), 1)
    f = wire.Frame(8)
    f.decode(buf, ln)
    p.on_expired(buf, f)
    # an expired frame that is not a trace probe: ignored
    ln2 = wire.encode_traffic(buf, b"", b"\x01", DST, K2, wire.FULL_KEY, 0, b"application", 1)
    f.decode(buf, ln2)
    p.on_expired(buf, f)
    p.flush()
    assert len(n.router.sent) == 1
    d, pl, _ = n.router.sent[0]
    assert d == K1 and probe.kind_at(pl, 0, 8) == TRACE_HOP and probe.id_at(pl, 0) == 77 and pl[7] == 2
    assert _stat(p, "trace_expired") == 1


def test_pending_ring_bounded():
    n, p = make()
    for i in range(probe.PENDING + 5):
        p.on_deliver(K1, bytes(probe.make(PING, i)))
    assert p.pending() == probe.PENDING
    assert _stat(p, "replies_dropped") == 5
    p.flush()
    assert len(n.router.sent) == probe.PENDING


def test_unmatched_reply_counted():
    n, p = make()
    p.on_deliver(K1, bytes(probe.make(PONG, 12345)))
    assert _stat(p, "unmatched") == 1


def _line(dst, payload, hl):
    # scripted path K1 -> K2 -> DST: a probe expires at hop hl
    path = [K1, K2, DST]
    kind = probe.kind_at(payload, 0, len(payload))
    pid = probe.id_at(payload, 0)
    if kind == PING:
        return dst, bytes(probe.make(PONG, pid))
    if kind == TRACE:
        if hl < len(path):
            return path[hl - 1], bytes(probe.make(TRACE_HOP, pid, hl))
        return DST, bytes(probe.make(TRACE_END, pid, hl))
    return None


def test_ping_and_trace_procedures():
    n, p = make()
    n.router.net = _line

    async def go():
        r = await p.ping(DST, 3, interval_ms=10, timeout_ms=500)
        t = await p.trace(DST, 10, timeout_ms=500)
        return r, t
    r, t = asyncio.run(go())
    assert r["sent"] == 3 and r["received"] == 3 and len(r["rtts_ms"]) == 3
    assert r["dst"] == "33" * 32
    assert t["ok"] is True
    assert [h["key"] for h in t["hops"]] == ["11" * 32, "22" * 32, "33" * 32]
    assert all(h["rtt_ms"] >= 0 for h in t["hops"])
    # hop limits 1, 2, 3 were used
    assert [s[2] for s in n.router.sent if probe.kind_at(s[1], 0, 8) == TRACE] == [1, 2, 3]
    assert p.sessions == 0


def test_trace_silent_hop_and_unreachable():
    n, p = make()

    def lossy(dst, payload, hl):
        if hl == 1:
            return None        # first relay does not answer
        return _line(dst, payload, hl)
    n.router.net = lossy

    async def go():
        return await p.trace(DST, 10, timeout_ms=50)
    t = asyncio.run(go())
    assert t["ok"] is True
    assert t["hops"][0] == {"key": None, "rtt_ms": None}
    assert [h["key"] for h in t["hops"][1:]] == ["22" * 32, "33" * 32]
    # nothing answers: stops after 3 silent probes, no hops listed
    n.router.net = lambda d, pl, hl: None

    async def go2():
        return await p.trace(DST, 10, timeout_ms=20)
    t = asyncio.run(go2())
    assert t["ok"] is False and t["hops"] == []
    assert len([s for s in n.router.sent if s[2] <= 3]) >= 3


def test_ping_without_route_and_busy():
    n, p = make()
    n.router.ok = False

    async def go():
        return await p.ping(DST, 2, interval_ms=10, timeout_ms=1000)
    r = asyncio.run(go())
    assert r["sent"] == 2 and r["received"] == 0
    p.reserve()
    p.reserve()
    try:
        p.reserve()
        raise AssertionError("a third session was allowed")
    except probe.ProbeBusy:
        pass
    assert p.sessions == probe.MAX_SESSIONS
