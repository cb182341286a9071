# Tree announcements vs every other frame (docs/reports/CAPACITY.md "Sizing"):
# only announcements grow with the tree's depth, so their limit follows
# from max_hops (profile.ann_max) while frame_max bounds the rest; a node
# with a transmit pool builds its announcement straight into one of the
# pool's buffers (no announcement-sized buffer in the router, no copy).
from snake import wire
from snakehost import wire_host
from snake.runtime.node import BufPool
from snake.profile import Profile, ann_max
from snake.router import Router, CTL_MAX
from routertest import Node, signer, keys_sorted, announcement, traffic
from snake.telemetry import D_OVERSIZE, D_QUEUE_FULL, D_TOO_DEEP
from snake import report

IDS = list(range(61, 70))
K = keys_sorted(IDS)


def pub(i):
    return signer(K[i]).public


def test_ann_max_is_the_longest_storable_announcement():
    # worst case: a 10-byte root sequence, every port 16 bits (3-byte varu64)
    for hops in (1, 2, 10, 30):
        buf = bytearray(ann_max(hops) + 8)
        h = [(0xFFFF, b"\x01" * 32, b"\x02" * 64)] * hops
        n = wire_host.encode_announcement(buf, b"\x03" * 32, (1 << 64) - 1, h)
        assert n == ann_max(hops)


def test_profile_large_buffers_take_the_deepest_announcement():
    p = Profile({"max_hops": 30, "frame_max": 1152})
    assert p.ann_max == ann_max(30)
    assert p.large == p.ann_max
    p = Profile({"max_hops": 10, "frame_max": 2048})
    assert p.large == 2048


def test_announcement_above_frame_max_is_taken_other_frames_are_not():
    # frame_max 256, depth 6: a 3-hop announcement (~340 B) is accepted,
    # a 300-byte traffic frame is oversize
    n = Node(K[1], frame_max=256, max_hops=6)
    n.r.port_up(1, pub(7), 1, 0)
    a = announcement(K[8], 1, [(K[8], 3), (K[6], 2), (K[7], 1)])
    assert 256 < len(a) <= n.r.profile.ann_max
    n.rx(1, a, 1)
    assert report.parent_port(n.r) == 1
    assert n.r.counters.drops[D_OVERSIZE] == 0
    t = traffic(n.key, pub(7), b"x" * 200)
    assert len(t) > 256
    n.rx(1, t, 2)
    assert n.r.counters.drops[D_OVERSIZE] == 1
    assert n.delivered == []


class Owned:
    """A runtime's tx_owned: records what it was handed, gives buffers back
    (or keeps them, as a queued frame would)."""

    def __init__(self, pool):
        self.pool = pool
        self.sent = []
        self.keep = False
        self.held = []

    def __call__(self, port, j, n):
        self.sent.append((port, bytes(self.pool.bufs[j][:n])))
        if self.keep:
            self.held.append(j)
        else:
            self.pool.give(j)
        return True


def _pool_router(pool):
    d = {"max_peers": 4, "max_routes": 8, "coord_cache": 4, "max_hops": 6,
         "frame_max": 256, "wakeup_filter": 4}
    r = Router(Profile(d), signer(K[4]), 0, pool)
    r.tx = lambda port, buf, n: True
    r.wall_ms = lambda: 1000
    own = Owned(pool)
    r.tx_owned = own
    return r, own


def _rx(r, port, frame, now):
    buf = bytearray(1024)
    buf[0:len(frame)] = frame
    r.receive(port, buf, len(frame), now)


def test_announcement_is_built_in_the_tx_pool_byte_exact():
    pool = BufPool(1, Profile({"max_hops": 6, "frame_max": 256}).large, 1, 128)
    r, own = _pool_router(pool)
    assert len(r.buf) == CTL_MAX        # no buffer for long frames of its own
    ref = Node(K[4], max_peers=4, max_hops=6, frame_max=256)   # no pool: own buffer
    for x in (r, ref.r):
        x.port_up(1, pub(7), 1, 0)
        x.port_up(2, pub(2), 1, 0)
    a = announcement(K[8], 1, [(K[8], 3), (K[6], 2), (K[7], 1)])
    ref.clear()
    own.sent = []
    _rx(r, 1, a, 5)
    ref.rx(1, a, 5)
    mine = [(p, b) for p, b in own.sent if b[5] == wire.T_ANNOUNCEMENT]
    theirs = ref.frames(wire.T_ANNOUNCEMENT)
    assert len(mine) == 2 and mine == theirs
    assert len(mine[0][1]) > 256        # longer than frame_max
    assert pool.free() == 2             # every buffer back


def test_no_free_tx_buffer_owes_the_announcement_and_counts_it():
    pool = BufPool(1, Profile({"max_hops": 6, "frame_max": 256}).large, 0, 128)
    r, own = _pool_router(pool)
    r.port_up(1, pub(7), 1, 0)
    r.port_up(2, pub(2), 1, 0)
    own.keep = True                      # the first one stays queued
    own.sent = []
    _rx(r, 1, announcement(K[8], 1, [(K[8], 3), (K[6], 2), (K[7], 1)]), 5)
    anns = [p for p, b in own.sent if b[5] == wire.T_ANNOUNCEMENT]
    assert anns == [1]                   # port 2 found no buffer
    assert r.ann_pending[2] == 1
    assert r.counters.drops[D_QUEUE_FULL] >= 1
    own.keep = False
    pool.give(own.held.pop())            # the queued frame went out
    own.sent = []
    r.tick(200)
    assert [p for p, b in own.sent if b[5] == wire.T_ANNOUNCEMENT] == [2]
    assert r.ann_pending[2] == 0


def test_announcement_deeper_than_the_pool_buffer_is_too_deep_not_owed():
    # at depth max_hops our own announcement (max_hops + 1 hops) fits no
    # buffer: counted as too deep, the buffer given back, nothing owed
    pool = BufPool(1, Profile({"max_hops": 2, "frame_max": 256}).large, 0, 128)
    d = {"max_peers": 4, "max_routes": 8, "coord_cache": 4, "max_hops": 2,
         "frame_max": 256, "wakeup_filter": 4}
    r = Router(Profile(d), signer(K[4]), 0, pool)
    r.wall_ms = lambda: 1000
    own = Owned(pool)
    r.tx_owned = own
    r.port_up(1, pub(7), 1, 0)
    r.port_up(2, pub(2), 1, 0)
    _rx(r, 1, announcement(K[8], 1, [(K[8], 3), (K[7], 1)]), 5)
    assert report.parent_port(r) == 1
    assert r.counters.drops[D_TOO_DEEP] >= 1
    assert r.ann_pending[2] == 0
    assert pool.free() == 1


def test_traffic_we_originate_is_built_in_the_tx_pool():
    pool = BufPool(1, Profile({"max_hops": 6, "frame_max": 256}).large, 1, 128)
    r, own = _pool_router(pool)
    r.port_up(1, pub(7), 1, 0)
    _rx(r, 1, announcement(K[8], 1, [(K[8], 3), (K[7], 1)]), 5)
    own.sent = []
    # SNEK towards the parent; a short payload takes the small buffer
    assert r.send(pub(8), b"hi", 10)
    got = [(p, b) for p, b in own.sent if b[5] == wire.T_TRAFFIC]
    assert len(got) == 1 and got[0][0] == 1 and got[0][1].endswith(b"hi")
    assert pool.free() == 2
    # a frame above frame_max is refused with the codec's error, the buffer back
    try:
        r.send(pub(8), b"x" * 300, 11)
        raise AssertionError("no error")
    except wire.WireError as e:
        assert e.reason == "oversize"
    assert pool.free() == 2
    # no free buffer: refused and counted, nothing sent
    a = pool.take(10)
    b = pool.take(200)
    q = r.counters.drops[D_QUEUE_FULL]
    own.sent = []
    assert not r.send(pub(8), b"hi", 12)
    assert own.sent == [] and r.counters.drops[D_QUEUE_FULL] == q + 1
    pool.give(a)
    pool.give(b)
    # to ourselves: delivered, the buffer back
    got = []
    r.deliver = lambda src, payload: got.append(bytes(payload))
    assert r.send(r.key, b"me", 13)
    assert got == [b"me"] and pool.free() == 2
