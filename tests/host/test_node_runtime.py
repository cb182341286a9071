"""The node runtime in-process (CPython asyncio, in-memory links): bounded
send queues and back-pressure, BLE queues smaller than Wi-Fi, the writer
never overwrites a slot on its way out, link up/down reported to the core,
the duplicate-link rule, read-buffer limits, and config parsing."""
import asyncio

import pytest

import host_tools  # noqa: F401  (puts firmware/ and lib/ on sys.path)
from snake import wire, stream, config
from snake.crypto import Signer
from snake.node import FramePool, Node, SendQueue
from snake.profile import Profile
from snake.telemetry import DROP_NAMES

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

    def close(self):
        self.closed = True
        self.inq.put_nowait(b"")


def handshake_of(seed):
    s = Signer(seed)
    buf = bytearray(wire.HANDSHAKE_LEN)
    wire.encode_handshake(buf, s.public, s.sign(wire.handshake_signed(s.public)))
    return bytes(buf), s.public


def make_node(**kw):
    d = {"max_peers": 4, "wifi_queue": 3, "ble_queue": 2, "frame_max": 1024, "max_hops": 8,
         "max_routes": 8, "coord_cache": 4, "sig_cache": 8, "wakeup_filter": 4}
    d.update(kw)
    return Node(Profile(d), Signer(bytes([0x55]) * 32))


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
    pool = FramePool(8, 64)
    q = SendQueue(3, pool)
    src = bytearray(64)
    for i in range(3):
        src[0] = i
        assert q.put(src, 10 + i)
    src[0] = 99
    assert not q.put(src, 5)
    assert q.count == 3 and q.full == 1 and q.high == 3
    assert q.slots[q.head][0] == 0 and q.lens[q.head] == 10
    assert len(pool.free) == 5
    q.pop()
    assert len(pool.free) == 6
    assert q.put(src, 7)
    order = []
    while q.count:
        order.append((q.slots[q.head][0], q.lens[q.head]))
        q.pop()
    assert order == [(1, 11), (2, 12), (99, 7)]
    assert len(pool.free) == 8          # every buffer went back
    # growing keeps slots; the limit is what bounds it
    q.grow(5)
    q.reset(2)
    assert len(q.slots) == 5 and q.limit == 2


def test_send_queues_share_a_fixed_pool():
    pool = FramePool(4, 64)
    a = SendQueue(3, pool)
    b = SendQueue(3, pool)
    src = bytearray(64)
    assert a.put(src, 1) and a.put(src, 1) and a.put(src, 1)
    assert b.put(src, 1)
    assert not b.put(src, 1)            # the pool is empty: refused, counted
    assert pool.empty == 1 and b.full == 1
    a.reset(3)                          # a link going down returns its buffers
    assert len(pool.free) == 3 and b.put(src, 1)


def test_link_up_backpressure_and_down():
    async def go():
        node = make_node()
        r = node.router
        link = MemLink(link_type=3)
        hs, peer = handshake_of(bytes([0x66]) * 32)
        link.feed(hs)
        task = asyncio.ensure_future(stream.run(node, link))
        await _settle(lambda: r.peers() != [])
        port = r.peers()[0]["port"]
        assert r.peers()[0]["key"] == peer.hex() and r.peers()[0]["link"] == "remote"
        q = node.queues[port]
        assert q.limit == 3                # profile wifi_queue
        await _settle(lambda: q.count == 0)
        link.gate.clear()                  # the peer stops reading
        # flood the port: the ring holds `limit` frames (the one the writer
        # is sending stays in its slot until sent), the rest is refused and
        # counted by the core
        d0 = r.counters.drops[D_QUEUE_FULL]
        buf = bytearray(64)
        for i in range(10):
            buf[0:10] = keepalive()
            r._tx(port, buf, 10)
        assert q.count == q.limit
        assert r.counters.drops[D_QUEUE_FULL] > d0
        assert q.full > 0
        link.gate.set()                    # the peer reads again: the ring drains
        await _settle(lambda: q.count == 0)
        assert len(link.sent) == 2 + q.limit, [f[:12] for f in link.sent]
        assert all(f == keepalive() for f in link.sent[2:])
        assert len(link.sent[0]) == wire.HANDSHAKE_LEN and link.sent[1][5] == wire.T_ANNOUNCEMENT
        # frames in reach the core
        rx0 = r.counters.rx[wire.T_KEEPALIVE]
        link.feed(keepalive())
        await _settle(lambda: r.counters.rx[wire.T_KEEPALIVE] == rx0 + 1)
        # EOF: the port goes down in the core
        link.close()
        await asyncio.wait_for(task, 3)
        assert r.peers() == [] and node.links[port] is None
        assert node.stats["links_down"] == 1
    asyncio.run(go())


def test_ble_queue_smaller():
    async def go():
        node = make_node()
        link = MemLink(link_type=4)
        hs, peer = handshake_of(bytes([0x67]) * 32)
        link.feed(hs)
        task = asyncio.ensure_future(stream.run(node, link))
        await _settle(lambda: node.router.peers() != [])
        port = node.router.peers()[0]["port"]
        assert node.queues[port].limit == 2 and node.router.peers()[0]["link"] == "ble"
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
        await _settle(lambda: len(node.router.peers()) == 1)
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
        await _settle(lambda: len(node.router.peers()) == 2)
        # opposite directions at once: both ends keep the link the lower key dialled
        lower_is_us = node.key < peer
        d = MemLink(link_type=1, outbound=lower_is_us)
        d.feed(hs)
        a.outbound = not lower_is_us
        td = asyncio.ensure_future(stream.run(node, d))
        await _settle(lambda: a.closed)
        await asyncio.wait_for(ta, 3)
        links = [x["link"] for x in node.router.peers()]
        assert sorted(links) == ["remote", "wifi"] and not d.closed
        for lk in (c, d):
            lk.close()
        await asyncio.wait_for(asyncio.gather(tc, td), 3)
        assert node.router.peers() == []
    asyncio.run(go())


def test_core_disconnect_closes_link():
    async def go():
        node = make_node()
        hs, peer = handshake_of(bytes([0x69]) * 32)
        link = MemLink()
        link.feed(hs)
        task = asyncio.ensure_future(stream.run(node, link))
        await _settle(lambda: node.router.peers() != [])
        # a malformed announcement fails the sanity check: the core asks the
        # runtime to drop the peer
        bad = bytearray(b"pine" + bytes([0, wire.T_ANNOUNCEMENT, 0, 0, 0, 14]) + b"\x00\x02\x00\x00")
        link.feed(bad)
        await asyncio.wait_for(task, 3)
        assert link.closed and node.router.peers() == []
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
        assert node.rx_out == 0 and len(node.rx_free) == 3
    asyncio.run(go())


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
        # a read buffer the heap cannot give
        node.verify = real_verify
        node.rx_free[:] = []
        big = node.profile.frame_max
        node.profile.frame_max = 1 << 62     # bytearray(2^62) raises MemoryError
        try:
            lk2 = MemLink()
            reason = await asyncio.wait_for(stream.run(node, lk2), 3)
        finally:
            node.profile.frame_max = big
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
