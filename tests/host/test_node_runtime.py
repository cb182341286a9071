"""The node runtime in-process (CPython asyncio, in-memory links): bounded
send queues and back-pressure, BLE queues smaller than Wi-Fi, the writer
never overwrites a slot on its way out, link up/down reported to the core,
the duplicate-link rule, read-buffer limits, and config parsing."""
import asyncio
import time

import pytest

import host_tools  # noqa: F401  (puts firmware/ and lib/ on sys.path)
from snake import wire
from snake.runtime import stream, config
from snakehost import wire_host
from snake.crypto import Signer
from snake.runtime import node as nodemod
from snake.runtime import guard
from snake.runtime.node import BufPool, Node, SendQueues
from snake.profile import Profile
from snake.report import DROP_NAMES
from snake import report

D_QUEUE_FULL = DROP_NAMES.index("queue_full")


class MemLink(object):
    """An in-memory Link: the test feeds bytes in, collects what is sent;
    `gate` (an asyncio.Event) holds every send until set."""

    def __init__(self, link_type=3, outbound=False, name="mem"):
        self.link_type = link_type
        self.outbound = outbound
        self.name = name
        self.inq = asyncio.Queue()
        self.sent = []
        self.closed = False
        self.gate = asyncio.Event()
        self.gate.set()
        self.sending = None

    def feed(self, data):
        self.inq.put_nowait(bytes(data))

    async def recv_into(self, mv):
        if self.closed:
            return 0
        get = asyncio.ensure_future(self.inq.get())
        try:
            data = await get
        except asyncio.CancelledError:
            get.cancel()
            return 0
        if not data:
            return 0
        n = min(len(mv), len(data))
        mv[0:n] = data[:n]
        if n < len(data):
            # keep the rest for the next read (front of the queue)
            rest = data[n:]
            items = [rest]
            while not self.inq.empty():
                items.append(self.inq.get_nowait())
            for it in items:
                self.inq.put_nowait(it)
        return n

    async def send(self, buf, n):
        if self.closed:
            raise OSError(9, "closed")
        self.sending = buf
        before = bytes(buf[:n])
        await self.gate.wait()
        if bytes(buf[:n]) != before:
            raise AssertionError("a queued frame was overwritten while being sent")
        self.sending = None
        if self.closed:
            raise OSError(9, "closed")
        self.sent.append(before)

    def try_send(self, buf, n, off):
        # frames: the peer takes them while the gate is open
        if self.closed:
            return -1
        if not self.gate.is_set():
            return 0
        self.sent.append(bytes(buf[off:n]))
        return n - off

    def close(self):
        self.closed = True
        self.inq.put_nowait(b"")


def handshake_of(seed):
    s = Signer(seed)
    buf = bytearray(wire.HANDSHAKE_LEN)
    wire.encode_handshake(buf, s.public, s.sign(wire.handshake_signed(s.public)))
    return bytes(buf), s.public


async def _link_peer(node, link, seed):
    """Run stream.run for a peer with key seed on link until its port is up
    and its queue empty (our first frames to it out): (task, port, peer key)."""
    hs, peer = handshake_of(seed)
    link.feed(hs)
    task = asyncio.ensure_future(stream.run(node, link))
    await _settle(lambda: report.peers(node.router) != [])
    port = report.peers(node.router)[0]["port"]
    await _settle(lambda: node.sq.count[port] == 0)
    return task, port, peer


def make_node(**kw):
    d = {"max_peers": 4, "wifi_queue": 3, "ble_queue": 2, "frame_max": 1024, "max_hops": 8,
         "max_routes": 8, "coord_cache": 4, "sig_cache": 8, "wakeup_filter": 4}
    d.update(kw)
    n = Node(Profile(d), Signer(bytes([0x55]) * 32))
    # the flusher (what sends queued frames), without the router's tick
    n.flusher = asyncio.get_running_loop().create_task(n._flush())
    return n


async def _settle(cond, timeout=3.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


def keepalive():
    buf = bytearray(10)
    wire.encode_keepalive(buf)
    return bytes(buf)


def test_send_queue_ring_bounded():
    pool = BufPool(8, 64, 0, 256)
    sq = SendQueues(3, 5, pool)
    sq.reset(1, 3)
    src = bytearray(64)
    for i in range(3):
        src[0] = i
        assert sq.put(1, src, 10 + i)
    src[0] = 99
    assert not sq.put(1, src, 5)
    assert sq.count[1] == 3 and sq.full[1] == 1 and sq.high[1] == 3
    assert pool.free() == 5
    sq.pop(1)
    assert pool.free() == 6
    assert sq.put(1, src, 7)
    link = RecLink(room=10 ** 6)
    assert sq.drain(1, link)
    assert link.frames == [(1, 11), (2, 12), (99, 7)]
    assert pool.free() == 8             # every buffer went back
    # the limit is what bounds a ring, never more than its depth
    sq.reset(1, 9)
    assert sq.limit[1] == 5


def test_send_queues_share_a_fixed_pool():
    pool = BufPool(4, 64, 0, 256)
    sq = SendQueues(3, 3, pool)
    sq.reset(1, 3)
    sq.reset(2, 3)
    src = bytearray(64)
    assert sq.put(1, src, 1) and sq.put(1, src, 1) and sq.put(1, src, 1)
    assert sq.put(2, src, 1)
    assert not sq.put(2, src, 1)        # the pool is empty: refused, counted
    assert pool.empty == 1 and sq.full[2] == 1
    sq.reset(1, 3)                      # a link going down returns its buffers
    assert pool.free() == 3 and sq.put(2, src, 1)


def test_drain_resumes_a_frame_where_the_link_stopped():
    pool = BufPool(2, 64, 0, 256)
    sq = SendQueues(2, 4, pool)
    sq.reset(1, 4)
    a = bytes(range(30))
    b = bytes(range(100, 120))
    assert sq.put(1, a, 30) and sq.put(1, b, 20)
    link = RecLink(room=12)
    assert not sq.drain(1, link) and sq.off[1] == 12 and sq.count[1] == 2
    link.room = 25                      # the rest of a, then 7 bytes of b
    assert not sq.drain(1, link) and sq.count[1] == 1 and sq.off[1] == 7
    link.room = 100
    assert sq.drain(1, link) and sq.count[1] == 0 and pool.free() == 2
    assert bytes(link.wire) == a + b
    # a link that failed: the ring is emptied, its buffers back
    assert sq.put(1, a, 30)
    link.room = -1
    assert sq.drain(1, link) and sq.count[1] == 0 and pool.free() == 2


class RecLink(object):
    """try_send side only: takes `room` bytes (-1: failed), records them."""

    def __init__(self, room):
        self.room = room
        self.wire = bytearray()
        self.frames = []

    def try_send(self, buf, n, off):
        if self.room < 0:
            return -1
        k = min(n - off, self.room)
        self.room -= k
        self.wire += bytes(buf[off:off + k])
        if off == 0 and k == n:
            self.frames.append((buf[0], n))
        return k


def test_pool_takes_the_smallest_buffer_that_fits():
    pool = BufPool(2, 1024, 3, 128)
    assert pool.size == 5 and [len(b) for b in pool.bufs] == [128] * 3 + [1024] * 2
    small = [pool.take(100) for _ in range(3)]
    assert all(i < 3 for i in small)
    big = pool.take(100)                # no small one left: a large one
    assert big >= 3
    assert pool.take(1000) >= 3         # the other large one
    assert pool.take(10) == -1 and pool.take(1024) == -1 and pool.empty == 2
    assert pool.take(2000) == -1        # larger than any buffer
    pool.give(small[0])
    assert pool.take(1000) == -1        # a small buffer does not hold it
    assert pool.take(128) == small[0]
    for i in small[1:] + [small[0], big]:
        pool.give(i)
    assert pool.free() == 4
    # small buffers not smaller than frame_max: one size only
    one = BufPool(2, 256, 3, 512)
    assert one.size == 5 and all(len(b) == 256 for b in one.bufs)
    # a queued frame keeps its bytes (copied from a larger buffer)
    sq = SendQueues(2, 2, pool)
    sq.reset(1, 2)
    src = bytearray(range(200))
    assert sq.put(1, src, 50, 10)       # bytes 10..49 (the rest after a partial write)
    i = sq.slots[1 * 2 + sq.head[1]]
    assert len(pool.bufs[i]) == 128 and bytes(pool.bufs[i][:40]) == bytes(range(10, 50))
    assert sq.lens[1 * 2 + sq.head[1]] == 40


def test_link_up_backpressure_and_down():
    async def go():
        node = make_node()
        r = node.router
        link = MemLink(link_type=3)
        task, port, peer = await _link_peer(node, link, bytes([0x66]) * 32)
        assert report.peers(r)[0]["key"] == peer.hex() and report.peers(r)[0]["link"] == "remote"
        sq = node.sq
        assert sq.limit[port] == 3         # profile wifi_queue
        link.gate.clear()                  # the peer stops reading
        # flood the port: the ring holds `limit` frames, the rest is refused
        # and counted by the core
        d0 = r.counters.drops[D_QUEUE_FULL]
        buf = bytearray(64)
        for i in range(10):
            buf[0:10] = keepalive()
            r._tx(port, buf, 10)
        assert sq.count[port] == sq.limit[port]
        assert r.counters.drops[D_QUEUE_FULL] > d0
        assert sq.full[port] > 0
        link.gate.set()                    # the peer reads again: the ring drains
        await _settle(lambda: sq.count[port] == 0)
        assert len(link.sent) == 2 + sq.limit[port], [f[:12] for f in link.sent]
        assert all(f == keepalive() for f in link.sent[2:])
        assert len(link.sent[0]) == wire.HANDSHAKE_LEN and link.sent[1][5] == wire.T_ANNOUNCEMENT
        # frames in reach the core
        rx0 = r.counters.rx[wire.T_KEEPALIVE]
        link.feed(keepalive())
        await _settle(lambda: r.counters.rx[wire.T_KEEPALIVE] == rx0 + 1)
        # EOF: the port goes down in the core
        link.close()
        await asyncio.wait_for(task, 3)
        assert report.peers(r) == [] and node.links[port] is None
        assert node.stats["links_down"] == 1
    asyncio.run(go())


def test_ble_queue_smaller():
    async def go():
        node = make_node()
        link = MemLink(link_type=4)
        hs, peer = handshake_of(bytes([0x67]) * 32)
        link.feed(hs)
        task = asyncio.ensure_future(stream.run(node, link))
        await _settle(lambda: report.peers(node.router) != [])
        port = report.peers(node.router)[0]["port"]
        assert node.sq.limit[port] == 2 and report.peers(node.router)[0]["link"] == "ble"
        link.close()
        await asyncio.wait_for(task, 3)
    asyncio.run(go())


def test_duplicate_rule():
    async def go():
        node = make_node()
        hs, peer = handshake_of(bytes([0x68]) * 32)
        a = MemLink(link_type=1, outbound=False)
        a.feed(hs)
        ta = asyncio.ensure_future(stream.run(node, a))
        await _settle(lambda: len(report.peers(node.router)) == 1)
        # same key, same link type, same direction: the newer one is closed
        b = MemLink(link_type=1, outbound=False)
        b.feed(hs)
        tb = asyncio.ensure_future(stream.run(node, b))
        assert await asyncio.wait_for(tb, 3) == "refused"
        assert b.closed and not a.closed and node.stats["duplicate"] == 1
        # same key, another link type: a second port
        c = MemLink(link_type=3)
        c.feed(hs)
        tc = asyncio.ensure_future(stream.run(node, c))
        await _settle(lambda: len(report.peers(node.router)) == 2)
        # opposite directions at once: both ends keep the link the lower key dialled
        lower_is_us = node.key < peer
        d = MemLink(link_type=1, outbound=lower_is_us)
        d.feed(hs)
        a.outbound = not lower_is_us
        td = asyncio.ensure_future(stream.run(node, d))
        await _settle(lambda: a.closed)
        await asyncio.wait_for(ta, 3)
        links = [x["link"] for x in report.peers(node.router)]
        assert sorted(links) == ["remote", "wifi"] and not d.closed
        for lk in (c, d):
            lk.close()
        await asyncio.wait_for(asyncio.gather(tc, td), 3)
        assert report.peers(node.router) == []
    asyncio.run(go())


def test_core_disconnect_closes_link():
    async def go():
        node = make_node()
        hs, peer = handshake_of(bytes([0x69]) * 32)
        link = MemLink()
        link.feed(hs)
        task = asyncio.ensure_future(stream.run(node, link))
        await _settle(lambda: report.peers(node.router) != [])
        # a malformed announcement fails the sanity check: the core asks the
        # runtime to drop the peer
        bad = bytearray(b"pine" + bytes([0, wire.T_ANNOUNCEMENT, 0, 0, 0, 14]) + b"\x00\x02\x00\x00")
        link.feed(bad)
        await asyncio.wait_for(task, 3)
        assert link.closed and report.peers(node.router) == []
        assert node.stats["core_disconnect"] == 1
    asyncio.run(go())


def test_read_buffers_bounded():
    async def go():
        node = make_node(max_peers=1)
        # max_peers + 2 links may be in their handshake; the next is refused
        links = [MemLink() for _ in range(4)]
        tasks = [asyncio.ensure_future(stream.run(node, lk)) for lk in links]
        await asyncio.sleep(0.05)
        assert node.rx_out == 3
        assert node.hs_fail.get("busy") == 1
        for lk in links:
            lk.close()
        await asyncio.wait_for(asyncio.gather(*tasks), 3)
        assert node.rx_out == 0 and node.rxpool.free() == node.rxpool.size
    asyncio.run(go())


class DirectLink(MemLink):
    """A MemLink whose transport takes `room` bytes (try_send)."""

    def __init__(self, room, **kw):
        MemLink.__init__(self, **kw)
        self.room = room
        self.wire = bytearray()          # every frame byte sent, in order

    def try_send(self, buf, n, off):
        k = min(n - off, self.room)
        self.room -= k
        self.wire += bytes(buf[off:off + k])
        return k


def test_direct_send_then_queue_keeps_order():
    async def go():
        node = make_node()
        r = node.router
        link = DirectLink(10 ** 6)
        task, port, peer = await _link_peer(node, link, bytes([0x6a]) * 32)
        sq = node.sq
        free0 = node.txpool.free()
        frames = []
        buf = bytearray(1024)
        for i in range(4):
            wire.encode_keepalive(buf)
            buf[7] = i                   # tell the frames apart (hop limit byte)
            frames.append(bytes(buf[:10]))
        link.wire = bytearray()
        # the transport takes the first frame whole: nothing queued, no buffer used
        assert node._tx(port, frames[0], 10) and sq.count[port] == 0 and node.txpool.free() == free0
        # then only 4 bytes: the other 6 queue behind them, and so does the
        # next frame (never ahead of queued bytes)
        link.room = 4
        assert node._tx(port, frames[1], 10) and sq.count[port] == 1
        assert sq.lens[port * sq.depth + sq.head[port]] == 6
        assert node._tx(port, frames[2], 10) and sq.count[port] == 2
        await asyncio.sleep(0.05)
        assert sq.count[port] == 2       # the link takes nothing: still queued
        link.room = 100
        await _settle(lambda: sq.count[port] == 0)
        assert node._tx(port, frames[3], 10)
        assert bytes(link.wire) == b"".join(frames)
        assert node.txpool.free() == free0
        link.close()
        await asyncio.wait_for(task, 3)
    asyncio.run(go())


def test_a_frame_whose_rest_cannot_be_queued_closes_the_link():
    # the transport took the first bytes of a frame (ESP-NOW: a window
    # smaller than the frame) and no buffer is free for the rest: the link
    # must not carry a torn frame (the peer would lose framing): it is closed
    async def go():
        node = make_node()
        link = DirectLink(10 ** 6)
        task, port, peer = await _link_peer(node, link, bytes([0x6d]) * 32)
        pool = node.txpool
        held = []
        while True:
            j = pool.take(1)
            if j < 0:
                break
            held.append(j)
        buf = bytearray(1024)
        wire.encode_keepalive(buf)
        link.room = 4
        assert not node._tx(port, bytes(buf[:10]), 10)
        assert node.stats["torn"] == 1 and link.closed
        for j in held:
            pool.give(j)
        await asyncio.wait_for(task, 3)
    asyncio.run(go())


def test_put_owned_queues_the_buffer_itself_and_resumes_at_its_offset():
    # our announcement is built in a pool buffer (router.announce_to): what
    # the link does not take at once is queued as that buffer, not copied
    pool = BufPool(1, 64, 0, 256)
    sq = SendQueues(2, 2, pool)
    sq.reset(1, 2)
    j = pool.take(40)
    pool.bufs[j][:40] = bytes(range(40))
    assert pool.free() == 0
    assert sq.put_owned(1, j, 40, 15)            # 15 bytes already sent
    assert sq.count[1] == 1 and sq.off[1] == 15 and pool.free() == 0
    link = RecLink(room=100)
    assert sq.drain(1, link)
    assert bytes(link.wire) == bytes(range(15, 40)) and pool.free() == 1
    # a full ring refuses it (counted) and gives the buffer back
    pool = BufPool(2, 64, 0, 256)
    sq = SendQueues(2, 2, pool)
    sq.reset(1, 1)
    assert sq.put(1, bytes(8), 8)                # the ring's one frame
    j = pool.take(10)
    assert j >= 0 and pool.free() == 0
    assert not sq.put_owned(1, j, 10, 0)
    assert sq.full[1] == 1 and sq.count[1] == 1 and pool.free() == 1


def test_tx_owned_sends_at_once_or_queues_without_a_copy():
    async def go():
        node = make_node()
        r = node.router
        link = DirectLink(10 ** 6)
        task, port, peer = await _link_peer(node, link, bytes([0x6b]) * 32)
        sq = node.sq
        pool = node.txpool
        free0 = pool.free()
        link.wire = bytearray()
        r.announce_to(port)              # taken whole: the buffer is back
        assert pool.free() == free0 and sq.count[port] == 0
        first = bytes(link.wire)
        assert first[5] == wire.T_ANNOUNCEMENT and len(first) > 10
        link.wire = bytearray()
        link.room = 7                    # 7 bytes now, the rest queued as it is
        r.announce_to(port)
        assert sq.count[port] == 1 and sq.off[port] == 7 and pool.free() == free0 - 1
        link.room = 10 ** 6
        await _settle(lambda: sq.count[port] == 0)
        assert bytes(link.wire) == first and pool.free() == free0
        link.close()
        await asyncio.wait_for(task, 3)
    asyncio.run(go())


def test_receive_pool_shared_and_slow_link_closed(monkeypatch):
    async def go():
        monkeypatch.setattr(nodemod, "RX_HOLD_MS", 300)
        node = make_node(rx_buffers=1, rx_small=0)
        node.ticker = asyncio.ensure_future(node._tick())
        r = node.router
        a, b = MemLink(), MemLink()
        hs_a, _ = handshake_of(bytes([0x6b]) * 32)
        hs_b, _ = handshake_of(bytes([0x6c]) * 32)
        a.feed(hs_a)
        b.feed(hs_b)
        ta = asyncio.ensure_future(stream.run(node, a))
        tb = asyncio.ensure_future(stream.run(node, b))
        await _settle(lambda: len(report.peers(r)) == 2)
        assert node.rxpool.free() == 1
        # a sends a header and trickles nothing more: it holds the only buffer
        ka = keepalive()
        a.feed(ka[:8] + bytes([0, 20]))
        await _settle(lambda: node.rxpool.free() == 0)
        # b's frame waits for a buffer ...
        rx0 = r.counters.rx[wire.T_KEEPALIVE]
        b.feed(keepalive())
        await asyncio.sleep(0.1)
        assert r.counters.rx[wire.T_KEEPALIVE] == rx0
        # ... until a is closed as slow, then goes through
        await _settle(lambda: a.closed, timeout=3)
        await _settle(lambda: r.counters.rx[wire.T_KEEPALIVE] == rx0 + 1)
        assert node.stats["slow"] == 1 and not b.closed
        await asyncio.wait_for(ta, 3)
        await _settle(lambda: node.rxpool.free() == 1)
        b.close()
        await asyncio.wait_for(tb, 3)
        node.ticker.cancel()
    asyncio.run(go())


class CancelLink(MemLink):
    """A MemLink whose recv_into keeps the Link contract for cancellation:
    a cancelled read consumes nothing and raises (unless the link closed);
    with a source address (an accepted TCP link's)."""

    made = 0

    def source(self):
        if not hasattr(self, "src"):
            CancelLink.made += 1
            self.src = "10.0.2.%d" % CancelLink.made
        return self.src

    async def recv_into(self, mv):
        if self.closed:
            return 0
        get = asyncio.ensure_future(self.inq.get())
        try:
            data = await get
        except asyncio.CancelledError:
            get.cancel()
            if self.closed:
                return 0
            raise
        if not data:
            return 0
        n = min(len(mv), len(data))
        mv[0:n] = data[:n]
        if n < len(data):
            items = [data[n:]]
            while not self.inq.empty():
                items.append(self.inq.get_nowait())
            for it in items:
                self.inq.put_nowait(it)
        return n


def test_trickling_link_gives_its_buffer_back_then_is_closed():
    async def go():
        node = make_node(rx_buffers=1, rx_small=0)
        node.ticker = asyncio.ensure_future(node._tick())
        r = node.router
        a, b = CancelLink(), CancelLink()
        hs_a, _ = handshake_of(bytes([0x7b]) * 32)
        hs_b, _ = handshake_of(bytes([0x7c]) * 32)
        a.feed(hs_a)
        b.feed(hs_b)
        ta = asyncio.ensure_future(stream.run(node, a))
        tb = asyncio.ensure_future(stream.run(node, b))
        await _settle(lambda: len(report.peers(r)) == 2)
        # a starts a 20-byte frame and stops: it holds the only buffer
        ka = keepalive()
        a.feed(ka[:8] + bytes([0, 20]) + b"\x00\x00")
        await _settle(lambda: node.rxpool.free() == 0)
        rx0 = r.counters.rx[wire.T_KEEPALIVE]
        t0 = time.monotonic()
        b.feed(keepalive())
        # b waits: a's stall deadline (300 ms + 1 ms a byte) takes the buffer
        # back; b's frame goes through, a stays up
        await _settle(lambda: r.counters.rx[wire.T_KEEPALIVE] == rx0 + 1, timeout=3)
        took = time.monotonic() - t0
        assert 0.25 <= took <= 1.5, took
        assert node.defence[guard.DF_RX_STALL] == 1 and not a.closed
        assert node.stats.get("slow", 0) == 0
        # a's stalled frame is read past without a buffer: its next frame
        # is in sync and delivered
        a.feed(b"\x00" * 8 + keepalive())
        await _settle(lambda: r.counters.rx[wire.T_KEEPALIVE] == rx0 + 2)
        assert node.rxpool.free() == 1 and not a.closed
        # a second stall within the window closes a (and backs off its source)
        a.feed(ka[:8] + bytes([0, 30]))
        await _settle(lambda: node.rxpool.free() == 0)
        b.feed(keepalive())
        await _settle(lambda: a.closed, timeout=3)
        await _settle(lambda: r.counters.rx[wire.T_KEEPALIVE] == rx0 + 3)
        assert node.defence[guard.DF_RX_STALL] == 2 and node.defence[guard.DF_RX_SLOW] == 1
        assert node.stats["slow"] == 1 and not b.closed
        await asyncio.wait_for(ta, 3)
        await _settle(lambda: node.rxpool.free() == 1 and node.rx_wait == 0)
        b.close()
        await asyncio.wait_for(tb, 3)
        node.ticker.cancel()
    asyncio.run(go())


class SrcLink(MemLink):
    def __init__(self, src):
        MemLink.__init__(self)
        self.src = src

    def source(self):
        return self.src


def test_admission_per_source_limit_eviction_and_backoff():
    async def go():
        node = make_node(max_peers=2)          # 4 links at once
        # one source: two pending handshakes; a third within _HS_STALL_MS is refused
        ev = [SrcLink("10.0.0.9") for _ in range(3)]
        tasks = [asyncio.ensure_future(stream.run(node, lk)) for lk in ev]
        await asyncio.sleep(0.05)
        assert node.hs_n == 2 and ev[2].closed
        assert node.defence[guard.DF_HS_SOURCE] == 1 and node.hs_fail.get("source_limit") == 1
        # other sources fill the remaining slots
        others = [SrcLink("10.0.0.%d" % i) for i in (1, 2)]
        tasks += [asyncio.ensure_future(stream.run(node, lk)) for lk in others]
        await asyncio.sleep(0.05)
        assert node.rx_out == 4
        # all slots pending: a newcomer from another source takes the slot
        # of the oldest handshake of the source holding the most (two)
        late = SrcLink("10.0.0.3")
        tasks.append(asyncio.ensure_future(stream.run(node, late)))
        await asyncio.sleep(0.05)
        assert not late.closed and ev[0].closed and not ev[1].closed
        assert node.defence[guard.DF_HS_EVICTED] == 1 and node.hs_fail.get("evicted") == 1
        # every source holds one, all fresh: the next newcomer is refused ...
        busy = SrcLink("10.0.0.5")
        tasks.append(asyncio.ensure_future(stream.run(node, busy)))
        await asyncio.sleep(0.05)
        assert busy.closed and node.hs_fail.get("busy") == 1
        # ... until the oldest has stalled: then it goes, and an honest
        # handshake gets in
        node.hs_t = [t - 1500 for t in node.hs_t]
        hs, _ = handshake_of(bytes([0x7d]) * 32)
        honest = SrcLink("10.0.0.4")
        honest.feed(hs)
        tasks.append(asyncio.ensure_future(stream.run(node, honest)))
        await _settle(lambda: len(report.peers(node.router)) == 1)
        assert node.defence[guard.DF_HS_EVICTED] == 2 and ev[1].closed
        assert node.rx_out == 4
        # a backed-off source is refused
        guard.back_off(node, "10.0.0.7", time_ms())
        bo = SrcLink("10.0.0.7")
        tasks.append(asyncio.ensure_future(stream.run(node, bo)))
        await asyncio.sleep(0.05)
        assert bo.closed and node.defence[guard.DF_HS_BACKOFF] == 1
        for lk in ev + others + [late, busy, honest, bo]:
            lk.close()
        await asyncio.wait_for(asyncio.gather(*tasks), 3)
        assert node.rx_out == 0 and node.hs_n == 0
    asyncio.run(go())


def test_pending_handshakes_get_the_short_deadline_under_pressure():
    async def go():
        node = make_node(max_peers=2)
        links = [SrcLink("10.0.1.%d" % i) for i in range(2)]
        tasks = [asyncio.ensure_future(stream.run(node, lk)) for lk in links]
        await asyncio.sleep(0.05)
        assert node.hs_n == 2          # half of the 4 slots: pressure
        node.hs_t = [t - guard.HS_BUSY_MS - 100 for t in node.hs_t]
        node._slow(time_ms())
        await asyncio.wait_for(asyncio.gather(*tasks), 3)
        assert all(lk.closed for lk in links)
        assert node.defence[guard.DF_HS_DEADLINE] == 2 and node.defence[guard.DF_HS_EVICTED] == 0
        assert node.rx_out == 0 and node.hs_n == 0
    asyncio.run(go())


def time_ms():
    from snake.platform import ticks_ms
    return ticks_ms()


def test_config_from_argv():
    c = config.from_argv(["--seed", "aa" * 32, "--listen", "127.0.0.1:7000", "--connect", "h:1",
                          "--connect", "10.0.0.2:65535", "--no-multicast", "--ble-medium", "127.0.0.1:9",
                          "--handshake-timeout", "2.5"], getenv=lambda k: None)
    assert c.take_seed() == b"\xaa" * 32 and c.seed is None
    assert c.listen == ("127.0.0.1", 7000)
    assert c.connect == [("h", 1), ("10.0.0.2", 65535)]
    assert c.multicast is False and c.ble_medium == "127.0.0.1:9" and c.hs_timeout_ms == 2500
    env = {"SNAKEMESH_SEED": "0b" * 32}
    assert config.from_argv([], getenv=env.get).seed == b"\x0b" * 32
    c = config.from_argv([], getenv=lambda k: None)
    assert c.seed is None and "no key" in c.key_error
    for bad in (["--listen", "x:0"], ["--listen", "x:99999"], ["--connect"], ["--bogus"],
                ["--seed", "zz"], ["--handshake-timeout", "0"]):
        with pytest.raises(config.ConfigError):
            config.from_argv(bad, getenv=lambda k: None)


def test_config_key_file_and_json(tmp_path):
    kf = tmp_path / "k"
    kf.write_bytes(b"\x01" * 32)
    assert config.from_argv(["--key-file", str(kf)], getenv=lambda k: None).seed == b"\x01" * 32
    kf.write_text("  " + "02" * 32 + "\n")
    assert config.from_argv(["--key-file", str(kf)], getenv=lambda k: None).seed == b"\x02" * 32
    kf.write_bytes(b"short")
    c = config.from_argv(["--key-file", str(kf)], getenv=lambda k: None)
    assert c.seed is None and "key file" in c.key_error and "short" not in c.key_error
    cj = tmp_path / "config.json"
    cj.write_text('{"wifi": {"ssid": "lab", "password": "pw"}, "peers": ["10.0.0.1:7000"], '
                  '"listen": ":7001", "multicast": false, "handshake_timeout": 3}')
    c = config.from_argv(["--config", str(cj), "--seed", "03" * 32], getenv=lambda k: None)
    assert (c.ssid, c.password) == ("lab", "pw") and c.connect == [("10.0.0.1", 7000)]
    assert c.listen == ("0.0.0.0", 7001) and c.multicast is False and c.hs_timeout_ms == 3000
    cj.write_text('{"nonsense": 1}')
    with pytest.raises(config.ConfigError):
        config.from_argv(["--config", str(cj)], getenv=lambda k: None)


def test_out_of_memory_in_a_handshake_is_counted_and_the_node_carries_on():
    """A MemoryError while checking a peer's handshake signature, or while
    allocating a link's read buffer, closes that link with a counted
    no_memory failure (never an uncaught task exception); the buffer goes
    back, and the next link works."""
    async def go():
        node = make_node()
        real_verify = node.verify
        calls = []

        def failing_verify(pub, msg, sig):
            calls.append(1)
            raise MemoryError("memory allocation failed")
        node.verify = failing_verify
        hs, _ = handshake_of(bytes([0x21]) * 32)
        lk = MemLink()
        lk.feed(hs)
        reason = await asyncio.wait_for(stream.run(node, lk), 3)
        assert calls and reason == "handshake" and lk.closed
        assert node.hs_fail.get("no_memory") == 1 and node.stats["oom"] == 1
        assert node.rx_out == 0 and node.links.count(None) == len(node.links)
        # a link's own small buffer the heap cannot give
        node.verify = real_verify

        def no_heap(n):
            raise MemoryError("memory allocation failed")
        stream.bytearray = no_heap
        try:
            lk2 = MemLink()
            reason = await asyncio.wait_for(stream.run(node, lk2), 3)
        finally:
            del stream.bytearray
        assert reason == "no_memory" and lk2.closed and node.hs_fail.get("no_memory") == 2
        assert node.rx_out == 0
        # the next link comes up normally
        lk3 = MemLink()
        lk3.feed(hs)
        task = asyncio.ensure_future(stream.run(node, lk3))
        await _settle(lambda: node.stats["hs_ok"] == 1)
        lk3.close()
        await asyncio.wait_for(task, 3)
    asyncio.run(go())


def _root_announcement(signer, port=1):
    """The peer's own announcement as the root (one hop, signed)."""
    tmp = bytearray(512)
    n = wire_host.encode_announcement(tmp, signer.public, 1, [(port, signer.public, bytes(64))])
    f = wire.Frame(4)
    f.decode(tmp, n)
    sig = signer.sign(bytes(tmp[f.ann_off:f.hop_off[0]]))
    n = wire_host.encode_announcement(tmp, signer.public, 1, [(port, signer.public, sig)])
    return bytes(tmp[:n])


def test_one_large_buffer_reader_takes_it_back_from_a_queued_announcement():
    # rx_buffers 0: one large buffer for receiving and sending (the ESP32
    # boards). Our announcement (longer than small_frame) is queued to a
    # peer that reads nothing (gate closed: its reader waits for its own
    # large buffer, held by its announcement to us). Our reader must take
    # the buffer back for the peer's announcement, else neither node moves.
    async def go():
        node = make_node(rx_buffers=0, rx_small=1, tx_buffers=1, tx_small=1, small_frame=128)
        r = node.router
        assert node.rxpool.size == 2 and node.rxpool.bufs[1] is node.txpool.bufs[1]
        link = MemLink()
        peer = Signer(bytes([0x6f]) * 32)     # a key above ours: the root
        task, port, _ = await _link_peer(node, link, bytes([0x6f]) * 32)
        sq = node.sq
        link.gate.clear()                    # from now on the peer takes nothing
        r.announce_to(port)                  # queued in the large buffer
        assert sq.count[port] == 1 and sq.lens[port * sq.depth + sq.head[port]] > 128
        assert node.txpool.free() == 1       # the small one only
        ann = _root_announcement(peer)
        assert len(ann) > 128
        rx0 = r.counters.rx[wire.T_ANNOUNCEMENT]
        drops0 = r.counters.drops[D_QUEUE_FULL]
        link.feed(ann)
        await _settle(lambda: r.counters.rx[wire.T_ANNOUNCEMENT] == rx0 + 1)
        assert r.counters.drops[D_QUEUE_FULL] > drops0
        # the peer is our parent now; our announcement was owed and is queued
        # again (rebuilt below the new root) as soon as the buffer came back
        assert r.tree.parent == port
        await _settle(lambda: sq.count[port] == 1)
        assert node.rxpool.free() == 1 and node.txpool.free() == 1
        link.gate.set()
        await _settle(lambda: sq.count[port] == 0)
        sent = [f for f in link.sent if len(f) > 5 and f[5] == wire.T_ANNOUNCEMENT]
        assert sent and bytes(sent[-1][12:44]) == bytes(peer.public)   # rooted at the peer
        assert node.rxpool.free() == node.rxpool.size
        link.close()
        await asyncio.wait_for(task, 3)
    asyncio.run(go())


def test_one_large_buffer_a_frame_part_way_out_keeps_it():
    # a queued frame the link already has the first bytes of cannot be
    # taken back (the rest must follow): the reader waits for it
    pool = BufPool(1, 512, 1, 128)
    rx = BufPool(0, 512, 1, 128, pool)
    sq = SendQueues(2, 3, pool)
    sq.reset(1, 3)

    class R(object):
        def __init__(self):
            self.ann_pending = bytearray(2)
            self.counters = type("C", (), {})()
            self.counters.drops = [0] * len(DROP_NAMES)
    r = R()
    frame = bytearray(300)
    frame[5] = wire.T_ANNOUNCEMENT
    assert sq.put(1, frame, 300, 20)     # the link took 20 bytes: the rest queued
    assert rx.take(300) < 0 and not sq.reclaim(r)
    assert sq.count[1] == 1 and r.ann_pending[1] == 0
    sq.pop(1)
    j = pool.take(300)
    pool.bufs[j][:300] = frame                        # our announcement
    assert j == 1 and sq.put_owned(1, j, 300, 0)     # not started: taken back, owed
    assert rx.take(300) < 0 and sq.reclaim(r)
    assert sq.count[1] == 0 and r.ann_pending[1] == 1 and rx.take(300) == 1
