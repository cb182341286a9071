# The asyncio node runtime around the sans-I/O router core.
#
# Node owns: the Router, the real clock (snake.platform.ticks_ms), a tick
# task (router.tick every _TICK_MS <= 250 ms), the switch ports' links and
# their bounded send queues, ping/trace (snake.runtime.probe), counters of the
# runtime itself, and the transports (wifi.py, ble.py) and the console.
#
# Frame buffers: two node-wide pools (BufPool), allocated once at boot, so
# the heap a node needs does not grow with its links or its traffic, and no
# kilobyte block is asked of a fragmented heap later. Each pool holds
# buffers of two sizes: profile.large (any frame) and profile.small_frame
# (keepalives, bootstraps, wakeups, traffic, announcements of few hops: most
# frames); a frame takes the smallest free buffer that holds it.
#
# Receiving (node.rxpool: rx_buffers + rx_small buffers): a link reads each
# frame's 10-byte header into its own small buffer, takes a pool buffer that
# fits the length, reads the rest behind the header, hands the frame to the
# router and gives the buffer back. A link holds a buffer only while one
# frame's bytes arrive (they normally come with the header); when none is
# free it waits for one, in turn: a link that finds others waiting queues
# behind them. A peer trickling a frame must not hold a buffer others
# need: while a link waits, a holder that has not delivered its frame
# within _RX_STALL_MS (plus a millisecond per byte) gives the buffer back
# (Node._slow: its partial frame is dropped, counted as rx_stall, and the
# rest of that frame is read past without a buffer); a holder with no one
# waiting may keep it up to RX_HOLD_MS. A link that stalls twice within
# 30 s, or holds a buffer past RX_HOLD_MS, is closed ("slow") and its
# source address refused for 30 s (snake/runtime/guard.py).
#
# Admission (Node.admit, Node._slow): at most max_peers + 2 links at once
# (links still in their handshake count). A handshake is "pending" until
# the peer's 104 bytes are in. One source address holds at most
# two pending handshakes; when every slot is taken, a newcomer
# takes the slot of the source holding the most, else of the oldest
# pending handshake that has stalled (1 s), and the source of the one
# closed is refused for 3 s; with half the slots pending, a handshake gets
# 2 s instead of the full deadline (snake/runtime/guard.py, cold: loaded only
# when it acts); a source backed off (above) is refused. So one
# source that reopens every closed socket holds two slots, not all, and an
# honest peer's handshake (milliseconds) always finds one. Each refusal,
# eviction and deadline is counted (Node.defence, `stats` "defence").
#
# Buffers of the large size (profile.large) take any frame: the larger of
# frame_max and ann_max (the deepest announcement stored). The router
# builds our announcement and the traffic we originate straight into a
# txpool buffer and hands it over (Node._tx_owned: sent or queued as it
# is, never copied), so it keeps no long buffer of its own.
#
# One large buffer (profile rx_buffers 0, the ESP32 boards): the receive
# pool has no large buffer of its own but takes the transmit pool's (on a
# board tx_buffers 1: one buffer of profile.large, 3 KB at depth 30, for
# receiving and sending). A queued frame in it waits for its peer to read,
# and the peer's reader may wait for its own large buffer, queued to us:
# neither would move. So a reader that needs the large buffer takes it
# back from a queued frame that has not started out (Node.reclaim): our
# announcement is owed to that port again (router.ann_pending, resent as
# soon as the reader gives the buffer back: Node.owed), other frames are
# dropped, both counted as queue_full. A frame part-way out keeps it until
# the link took the rest (a BLE link takes it at radio speed; a TCP peer
# that never reads is dead after router.DEAD_MS). While a reader holds it,
# the router builds no announcement (owed) and a long frame that a link
# does not take at once is not queued (queue_full).
#
# Sending (node.txpool: tx_buffers + tx_small buffers): router.tx first
# tries to write the frame out at once (link.try_send: the socket or the
# BLE stack takes it without blocking, nothing is copied or kept); what the
# link cannot take now goes into a pool buffer, queued on the port's ring of
# at most `limit` buffers (SendQueues, every port's ring allocated at boot).
# The router counts a refusal as queue_full: the port's ring holds `limit`
# frames or no buffer of the pool fits. limit = profile.wifi_queue for TCP
# links, profile.ble_queue for Bluetooth (link type 4). One flusher task
# for all ports hands queued frames to their links, oldest first, as they
# take them (looking again every _FLUSH_MS while one is full), and gives a
# buffer back once the link took all of it; a busy port cannot take more
# than its ring's share, and no port needs a task or an object of its own.
import asyncio
import sys
from array import array

from snake import platform, wire
from snake.platform import ticks_ms, ticks_diff, copy_into, const
from snake import crypto
from snake.router import Router
from snake.telemetry import D_QUEUE_FULL
from snake.runtime import probe
from snake.runtime import stream     # at boot, not at the first link (stream.py: nothing new after boot)

_TICK_MS = const(100)
LINK_BLE = 4
HANDSHAKE_TIMEOUT_MS = 10000
_EXTRA_HANDSHAKES = const(2)
RX_HOLD_MS = 5000        # a link holding a receive buffer this long is closed ("slow")
_RX_STALL_MS = const(300)       # ... gives it back this soon (plus 1 ms per byte) while a link waits
_N_DEFENCE = const(6)           # Node.defence (snake/runtime/guard.py DF_*)
_FLUSH_MS = const(10)            # the flusher looks again this soon while a link is full
_MESH_RETRY_MS = const(10000)    # building the datagram layer again after it ran out of memory


class BufPool:
    """Preallocated frame buffers in two sizes, handed out by index (bufs[i],
    mvs[i] its memoryview); taking and giving allocate nothing. With
    `shared` (another pool) the large buffers are shared's own: the same
    bytearrays, one free stack, one event (a board's one large buffer,
    "One large buffer" above)."""

    def __init__(self, large, large_size, small, small_size, shared=None, views=True):
        if small_size >= large_size:
            large += small
            small = 0
            shared = None
        self.small_size = small_size
        self.large_size = large_size
        self.nsmall = small
        self.bufs = [bytearray(small_size) for _ in range(small)]
        # free indexes, one stack per size (bytearrays: no list resizing);
        # the large stack holds numbers among the large (index - nsmall)
        self.fs = bytearray(range(small))
        self.ns = small
        self.empty = 0        # times a frame found no buffer that fits
        if shared is None:
            self.lp = self    # the pool whose large stack and event we use
            i = 0
            while i < large:
                self.bufs.append(bytearray(large_size))
                i += 1
            self.fl = bytearray(range(large))
            self.nl = large
            self.ev = None    # asyncio.Event for waiters (wait())
        else:
            self.lp = shared
            for b in shared.bufs[shared.nsmall:]:
                self.bufs.append(b)
        self.size = len(self.bufs)
        # views: the receive pool reads frames into mvs[i][k:n]; the
        # transmit pool's buffers are only handed over whole (no views)
        self.mvs = [memoryview(b) for b in self.bufs] if views else None

    def free(self):
        return self.ns + self.lp.nl

    def take(self, n):
        """Index of a free buffer of at least n bytes, or -1."""
        if n <= self.small_size and self.ns:
            self.ns -= 1
            return self.fs[self.ns]
        lp = self.lp
        if lp.nl and n <= self.large_size:
            lp.nl -= 1
            return self.nsmall + lp.fl[lp.nl]
        self.empty += 1
        return -1

    def give(self, i):
        lp = self.lp
        if i < self.nsmall:
            self.fs[self.ns] = i
            self.ns += 1
        else:
            lp.fl[lp.nl] = i - self.nsmall
            lp.nl += 1
        ev = lp.ev
        if ev is not None:
            ev.set()

    async def wait(self):
        """Until a buffer comes back (then take again: another may be first)."""
        lp = self.lp
        ev = lp.ev
        if ev is None:
            ev = lp.ev = asyncio.Event()
        ev.clear()
        await ev.wait()


class SendQueues:
    """The send queues of every port, allocated once at boot: per port a ring
    of at most limit[p] (<= depth) pool buffer indexes with their lengths;
    off[p] = bytes of the head frame already taken by the link. One flusher
    task (Node._flush) drains them; ev is set whenever a frame is queued."""

    def __init__(self, ports, depth, pool):
        self.pool = pool
        self.depth = depth
        self.slots = bytearray(ports * depth)
        self.lens = array("H", bytearray(2 * ports * depth))   # frame lengths (<= 65535)
        self.head = bytearray(ports)
        self.count = bytearray(ports)
        self.limit = bytearray(ports)
        self.off = array("H", bytearray(2 * ports))
        self.high = bytearray(ports)   # highest fill seen
        self.full = [0] * ports        # frames refused (ring full or pool empty)
        self.cont = bytearray(ports)   # the head frame is the rest of one part-way out
        self.ev = asyncio.Event()

    def reset(self, p, limit):
        """Empty port p's ring (its buffers back to the pool); new limit."""
        while self.count[p]:
            self.pop(p)
        self.head[p] = 0
        self.off[p] = 0
        self.cont[p] = 0
        self.limit[p] = limit if limit < self.depth else self.depth

    def put(self, p, buf, n, off=0):
        """Queue a copy of buf[off:n] on port p; False (counted) when it cannot."""
        if self.count[p] >= self.limit[p]:
            self.full[p] += 1
            return False
        m = n - off
        pool = self.pool
        j = pool.take(m)
        if j < 0:
            self.full[p] += 1
            return False
        b = pool.bufs[j]
        if off == 0 and len(buf) == len(b):
            b[:] = buf      # same-size buffers: one native copy, no allocation
        else:
            copy_into(b, 0, buf, off, m)
        if not self.put_owned(p, j, m, 0):
            return False
        if off:
            self.cont[p] = 1   # the link took the first off bytes (only ever the head)
        return True

    def put_owned(self, p, j, n, off):
        """Queue pool buffer j (n bytes, the first off already taken by the
        link) on port p as it is; False (counted, j given back) when the
        ring is full."""
        c = self.count[p]
        lim = self.limit[p]
        if c >= lim:
            self.full[p] += 1
            self.pool.give(j)
            return False
        i = self.head[p] + c
        if i >= lim:
            i -= lim
        i += p * self.depth
        self.slots[i] = j
        self.lens[i] = n
        if c == 0:
            self.off[p] = off
        c += 1
        self.count[p] = c
        if c > self.high[p]:
            self.high[p] = c
        self.ev.set()
        return True

    def pop(self, p):
        c = self.count[p]
        if c:
            h = self.head[p]
            self.pool.give(self.slots[p * self.depth + h])
            h += 1
            if h >= self.limit[p]:
                h = 0
            self.head[p] = h
            self.count[p] = c - 1
            self.off[p] = 0
            self.cont[p] = 0

    def reclaim(self, r):
        """Give back one large buffer a queued frame holds that has not
        started out: a reader needs it ("One large buffer" above). Our
        announcement is owed to its port again (r.ann_pending: the router
        sends it again), any other frame is dropped; both counted as
        queue_full. True when a buffer came back."""
        pool = self.pool
        d = self.depth
        p = 1
        while p < len(self.count):
            c = self.count[p]
            lim = self.limit[p]
            # the head frame stays when part of it is out (the link has
            # its first bytes: the rest must follow)
            k = 1 if self.off[p] or self.cont[p] else 0
            while k < c:
                i = self.head[p] + k
                if i >= lim:
                    i -= lim
                j = self.slots[p * d + i]
                if j >= pool.nsmall:
                    # later frames move up one place (order kept)
                    while k + 1 < c:
                        i2 = i + 1 if i + 1 < lim else 0
                        self.slots[p * d + i] = self.slots[p * d + i2]
                        self.lens[p * d + i] = self.lens[p * d + i2]
                        i = i2
                        k += 1
                    self.count[p] = c - 1
                    if pool.bufs[j][5] == 1:      # wire.T_ANNOUNCEMENT
                        r.ann_pending[p] = 1
                    r.counters.drops[D_QUEUE_FULL] += 1
                    pool.give(j)
                    return True
                k += 1
            p += 1
        return False

    def drain(self, p, link):
        """Give port p's queued frames to the link, oldest first, as far as
        it takes them now. True when the ring is empty (or the link failed:
        the ring is emptied), False when the link is full for now."""
        bufs = self.pool.bufs
        base = p * self.depth
        while self.count[p]:
            i = base + self.head[p]
            n = self.lens[i]
            off = self.off[p]
            k = link.try_send(bufs[self.slots[i]], n, off)
            if k < 0:
                self.reset(p, self.limit[p])
                return True
            off += k
            if off < n:
                self.off[p] = off
                return False
            self.pop(p)
        return True


class Node:
    def __init__(self, profile, signer, config=None, meter=None):
        self.profile = profile
        self.meter = meter       # platform.Meter: heap per part at boot (console `mem`)
        self.key = bytes(signer.public)
        self.started = ticks_ms()
        # our handshake first (signed once at boot)
        self.hs = bytearray(wire.HANDSHAKE_LEN)
        wire.encode_handshake(self.hs, self.key, signer.sign(wire.handshake_signed(self.key)))
        self._mark("crypto")
        P = profile.max_peers + 1
        # buffers that take any frame are profile.large: frame_max, or the
        # deepest announcement stored (ann_max) when that is longer
        self.txpool = BufPool(profile.tx_buffers, profile.large, profile.tx_small, profile.small_frame,
                              None, False)
        depth = profile.wifi_queue if profile.wifi_queue > profile.ble_queue else profile.ble_queue
        self.sq = SendQueues(P, depth, self.txpool)
        self.flusher = None
        self._mark("tx_pool")
        r = Router(profile, signer, self.started, self.txpool)
        self._mark("router")
        self.router = r
        r.tx = self._tx
        r.tx_owned = self._tx_owned
        r.disconnect = self._disconnect
        r.deliver = self._deliver
        r.expired = self._expired
        r.on_event = self._event
        r.tx_queued = self.sq.count      # wakeup relays go only where nothing is queued
        self.links = [None] * P
        # rx_buffers 0: the receive pool has no large buffer of its own, it
        # takes the transmit pool's ("One large buffer" above)
        self.rxpool = BufPool(profile.rx_buffers, profile.large, profile.rx_small, profile.small_frame,
                              None if profile.rx_buffers else self.txpool)
        self._mark("rx_pool")
        # ticks a port took an rx buffer plus 1 ms per byte of its frame (0: none held)
        self.rx_since = [0] * P
        self.rx_drop = bytearray(P)      # 1: the port's buffer was taken back (stream.run)
        self.rx_wait = 0         # links waiting for a receive buffer
        self.tasks = [None] * P
        self.rx_out = 0          # links admitted and not ended (stream.run), handshakes included
        R = self.rx_max = profile.max_peers + _EXTRA_HANDSHAKES
        # pending handshakes (Node.admit): link, start ticks, source address
        self.hs_link = [None] * R
        self.hs_t = [0] * R
        self.hs_n = 0
        self.guard = None        # snake/runtime/guard.py while a defence is at work (Node._guard)
        # sources with receive stalls: strikes, when the last one was, and
        # until when the source is backed off (0: not backed off). Strikes
        # go by source, so a link that reconnects keeps them
        # (as many as there are slots: every source holding one fits)
        self.bo_src = [None] * R
        self.bo_until = [0] * R
        self.bo_strikes = bytearray(R)
        self.bo_t = [0] * R
        self.bo_n = 0            # sources backed off now
        self.defence = [0] * _N_DEFENCE
        self.hop_limit = getattr(profile, "traffic_hop_limit", wire.HOP_LIMIT_TRAFFIC)
        hs_ms = getattr(config, "hs_timeout_ms", None) if config is not None else None
        self.hs_timeout_ms = hs_ms or HANDSHAKE_TIMEOUT_MS
        self.probes = probe.Prober(self)
        # runtime counters (fixed keys; the console's `stats` shows them)
        self.stats = {"links_up": 0, "links_down": 0, "hs_ok": 0, "duplicate": 0,
                      "no_port": 0, "framing": 0, "core_disconnect": 0, "app_rx": 0,
                      "dials": 0, "dial_fail": 0, "accepts": 0, "oom": 0, "slow": 0, "torn": 0}
        self.hs_fail = {}
        self.listeners = {}      # name -> "host:port" (for status/boot)
        self.warnings = []       # start-up problems (boot line)
        self.console = None      # set by the console (events -> telemetry)
        self.on_app = None       # optional fn(src, payload) for other payloads
        # application datagrams (snake/datagram.py, held by
        # snake/runtime/dglink.py's Link; snake/runtime/app.py's Mesh on top
        # for applications): built on first use (datagrams(), mesh()), so a
        # node that never carries a datagram holds neither their code nor
        # their tables
        self.dg = None
        self.dgl = None
        self.app = None
        self.mesh_fail = None    # ticks of the last build that ran out of memory
        self.log_fn = None
        self.ticker = None
        self.telesink = None     # the task sending telemetry to a sink (telemetry_to_sink)
        self.tele = None         # what snake/runtime/telesink.py keeps between periods
        self.wifi = None         # snake.runtime.wifi.Wifi, when started
        self.ble = None          # snake.runtime.ble.BleManager, when started
        self.espnow = None       # snake.runtime.espnow_port.EspNowManager, when started
        self._mark("node")

    # ---- helpers ------------------------------------------------------
    def _mark(self, part):
        if self.meter is not None:
            self.meter.mark(part)

    def log(self, msg):
        if self.log_fn is not None:
            self.log_fn(msg)

    def oom(self):
        """A MemoryError was caught and survived (counted in stats)."""
        self.stats["oom"] += 1
        import gc
        gc.collect()

    def warn(self, msg):
        """A start-up problem the node runs on with (shown in the boot line)."""
        self.warnings.append(msg)
        self.log(msg)

    def stat(self, name, n=1):
        self.stats[name] = self.stats.get(name, 0) + n

    def hs_failed(self, reason, link):
        """A handshake failed or a link was refused (link None: counted, not
        logged: refusals come as fast as a hostile peer reconnects)."""
        self.hs_fail[reason] = self.hs_fail.get(reason, 0) + 1
        if link is not None:
            self.log("handshake failed (%s) on %s" % (reason, link.name))

    def verify(self, pub, msg, sig):
        return crypto.verify(pub, msg, sig)

    def now(self):
        return ticks_ms()

    def uptime_s(self):
        return ticks_diff(ticks_ms(), self.started) // 1000

    # ---- admission (called by stream.run) -----------------------------
    def admit(self, link):
        """A new link may start its handshake: registered as pending (True)
        or refused (False, counted). Admission above: with nothing pending,
        no source backed off and a free slot, at once; else
        snake/runtime/guard.py decides."""
        if self.hs_n or self.bo_n or self.rx_out >= self.rx_max:
            return self._guard().admit(self, link)
        self.hs_link[0] = link
        self.hs_t[0] = ticks_ms()
        self.hs_n = 1
        self.rx_out += 1      # counted here, not when its task starts: an eviction may come first
        return True

    def hs_done(self, link):
        """The link's handshake read is over (done, failed or evicted)."""
        i = 0
        while i < len(self.hs_link):
            if self.hs_link[i] is link:
                self.hs_link[i] = None
                self.hs_n -= 1
                return
            i += 1

    def _guard(self):
        """snake/runtime/guard.py (platform.cold): loaded when a defence
        acts and kept while the node is under pressure (Node._slow lets go
        of it when calm), then it leaves the heap again."""
        g = self.guard
        if g is None:
            g = self.guard = platform.cold("snake.runtime.guard")
        return g

    # ---- links (called by stream.run) --------------------------------
    def find_link(self, key, link_type):
        """Port of the live link to `key` with that link type, or 0."""
        r = self.router
        p = 1
        while p < len(self.links):
            lk = self.links[p]
            if lk is not None and lk.link_type == link_type and r.port_key[p] == key:
                return p
            p += 1
        return 0

    def has_link(self, key, link_type=None):
        r = self.router
        p = 1
        while p < len(self.links):
            lk = self.links[p]
            if lk is not None and r.port_key[p] == key and (link_type is None or lk.link_type == link_type):
                return True
            p += 1
        return False

    def _keep_new(self, old, new, peer_key):
        # Duplicate link to the same key and link type: keep the older one,
        # except when the two were dialled from opposite ends at once: then
        # both ends keep the link dialled by the lower key, so they agree.
        o_out = getattr(old, "outbound", None)
        n_out = getattr(new, "outbound", None)
        if o_out is None or n_out is None or o_out == n_out:
            return False
        lower_is_us = self.key < peer_key
        # the new link was dialled by the lower key?
        return n_out == lower_is_us

    def link_up(self, link, peer_key):
        """A handshake completed: give the link a port (0 = refused)."""
        r = self.router
        peer_key = bytes(peer_key)
        if peer_key == self.key:
            self.hs_failed("self", link)
            return 0
        old = self.find_link(peer_key, link.link_type)
        if old:
            if not self._keep_new(self.links[old], link, peer_key):
                self.stat("duplicate")
                self.log("duplicate link to %s on %s closed" % (_short(peer_key), link.name))
                return 0
            self.stat("duplicate")
            self._disconnect(old, "duplicate")
            r.port_down(old, ticks_ms())
        port = r.free_port()
        if not port or self.links[port] is not None:
            self.stat("no_port")
            r.peer_refused()
            self.log("no free port for %s" % link.name)
            return 0
        # radio links (BLE 4, ESP-NOW 5) get the short queue
        limit = self.profile.ble_queue if link.link_type >= LINK_BLE else self.profile.wifi_queue
        self.sq.reset(port, limit)
        self.links[port] = link
        try:
            self.tasks[port] = asyncio.current_task()
        except RuntimeError:
            self.tasks[port] = None
        now = ticks_ms()
        if not r.port_up(port, peer_key, link.link_type, now):
            self.links[port] = None
            self.tasks[port] = None
            self.stat("no_port")
            return 0
        self.stats["hs_ok"] += 1
        self.stats["links_up"] += 1
        self.log("peer up: port %d %s via %s" % (port, _short(peer_key), link.name))
        self.after_receive()
        return port

    def link_down(self, port, link=None, reason="eof"):
        if port < 1 or port >= len(self.links):
            return
        if link is not None and self.links[port] is not link:
            return   # already taken down (router disconnect, duplicate)
        self._release(port)
        self.log("peer down: port %d (%s)" % (port, reason))
        self.router.port_down(port, ticks_ms())

    def _release(self, port):
        """Forget the port's link and task, return its queued buffers."""
        self.links[port] = None
        self.tasks[port] = None
        self.sq.reset(port, self.sq.limit[port])
        self.stats["links_down"] += 1

    def start_link(self, link):
        """Serve a connected link in its own task (handshake, frames)."""
        return asyncio.create_task(stream.run(self, link))

    # ---- router outputs ---------------------------------------------
    def _tx(self, port, buf, n):
        if port < 1 or port >= len(self.links):
            return False
        lk = self.links[port]
        if lk is None:
            return False
        sq = self.sq
        k = 0
        if sq.count[port] == 0:
            # nothing queued before it: the link may take it right now
            k = lk.try_send(buf, n, 0)
            if k == n:
                return True
            if k < 0:
                return False     # the link failed (closed; the reader ends it)
        if sq.put(port, buf, n, k):
            return True
        if k:
            # the link has the frame's first k bytes and the rest has no
            # room (pool or ring full): its stream would carry a torn frame,
            # the peer would lose framing. Close it (the reader ends it)
            self.stats["torn"] += 1
            lk.close()
        return False

    def _tx_owned(self, port, j, n):
        """Send txpool buffer j (n bytes, built there by the router: our
        announcement, traffic we originate); on success it belongs to the
        link or the port's ring (no copy), else it is given back to the pool."""
        lk = self.links[port] if 0 < port < len(self.links) else None
        if lk is None:
            self.txpool.give(j)
            return False
        sq = self.sq
        k = 0
        if sq.count[port] == 0:
            k = lk.try_send(self.txpool.bufs[j], n, 0)
            if k == n or k < 0:
                self.txpool.give(j)
                return k == n
        return sq.put_owned(port, j, n, k)

    def _disconnect(self, port, reason):
        link = self.links[port]
        if link is None:
            return
        self.stats["core_disconnect"] += 1
        task = self.tasks[port]
        self._release(port)
        self.log("link closed: port %d (%s)" % (port, reason))
        link.close()
        if task is not None:
            try:
                cur = asyncio.current_task()
            except RuntimeError:
                cur = None
            if task is not cur:
                task.cancel()

    def _deliver(self, src, payload):
        if self.probes.on_deliver(src, payload):
            return
        if len(payload) > 1 and payload[0] == 0x53 and payload[1] == 0x44:
            # "SD": a datagram (docs/reference/DATAGRAMS.md)
            dg = self.dg
            if dg is None and self.datagrams() is not None:
                dg = self.dg
            if dg is not None and dg.receive(src, payload, ticks_ms()):
                return
        self.stats["app_rx"] += 1
        if self.on_app is not None:
            self.on_app(src, payload)

    def _expired(self, buf, f):
        self.probes.on_expired(buf, f)

    def _event(self, kind, detail):
        c = self.console
        if c is not None:
            c.on_event(kind, detail)

    def after_receive(self):
        if self.probes.p_count:
            self.probes.flush()
        dg = self.dg
        if dg is not None and dg.a_n:
            dg.flush(ticks_ms())

    def datagrams(self):
        """The datagram layer (a snake.runtime.dglink.Link: the console's
        send/recv use it), built on first use; None when the heap cannot
        hold it (counted in stats oom) or the profile has no room for a
        send (dgram_pending 0)."""
        ln = self.dgl
        if ln is None and self.profile.dgram_pending:
            # after a build that ran out of memory, not again for a while:
            # every incoming datagram would otherwise cost a collection
            t = self.mesh_fail
            if t is not None and ticks_diff(ticks_ms(), t) < _MESH_RETRY_MS:
                return None
            try:
                from snake.runtime import dglink
                ln = dglink.Link(self)
            except MemoryError:
                self.mesh_fail = ticks_ms()
                self.oom()
                return None
            self.dgl = ln
            self.dg = ln.dg
        return ln

    def mesh(self):
        """The application datagram API (snake.runtime.app.Mesh) over
        datagrams(), built when first asked; None when the heap cannot hold
        it (counted in stats oom) or there is no datagram layer."""
        m = self.app
        if m is None and self.datagrams() is not None:
            try:
                from snake.runtime import app
                m = app.bind(self)
            except MemoryError:
                self.oom()
                return None
            self.app = m
        return m

    def reclaim(self):
        """A reader needs a large buffer and none is free: with one large
        buffer for both pools, take it back from a queued frame that has not
        started out (SendQueues.reclaim). True when one came back."""
        if self.rxpool.lp is self.rxpool:
            return False
        return self.sq.reclaim(self.router)

    def owed(self):
        """A reader gave the large buffer back: with one large buffer for
        both pools, send now the announcements owed for want of it (the
        router built none while the reader held it, or the reader took one
        back), not at the next tick."""
        if self.rxpool.lp is self.rxpool:
            return
        r = self.router
        p = 1
        while p < len(r.up):
            if r.up[p] and r.ann_pending[p]:
                r.announce_to(p)
            p += 1

    # ---- tasks ------------------------------------------------------------
    async def _tick(self):
        r = self.router
        while True:
            try:
                now = ticks_ms()
                r.tick(now)
                dg = self.dg
                if dg is not None:
                    dg.tick(now)
                self.after_receive()
                self._slow(now)
            except MemoryError:
                self.oom()
            await stream.sleep_ms(_TICK_MS)

    def _slow(self, now):
        # receive buffers: while a link waits for one, a holder past its
        # stall deadline gives its buffer back (its reader is cancelled
        # with rx_drop set: stream.run drops the partial frame and reads
        # past the rest); past RX_HOLD_MS a holder is closed. Receiving
        # above.
        since = self.rx_since
        p = 1
        while p < len(since):
            t = since[p]
            if t and self.links[p] is not None:
                d = ticks_diff(now, t)      # ms since it took it, less 1 ms a byte
                if d > RX_HOLD_MS:
                    since[p] = 0
                    self._guard().close_slow(self, p, now)
                elif self.rx_wait and d > _RX_STALL_MS and not self.rx_drop[p]:
                    task = self.tasks[p]
                    if task is not None:
                        self.rx_drop[p] = 1
                        task.cancel()
            p += 1
        # pending handshakes: past the deadline, closed (stream.handshake
        # counts a timeout); with half the slots pending, the short deadline
        if self.hs_n:
            hl = self.hs_link
            i = 0
            while i < len(hl):
                lk = hl[i]
                if lk is not None and ticks_diff(now, self.hs_t[i]) > self.hs_timeout_ms:
                    lk.late = True
                    lk.close()
                i += 1
        if self.hs_n * 2 >= len(self.hs_link):
            self._guard().hs_deadline(self, now)
        elif self.guard is not None and not self.hs_n and not self.rx_wait:
            # calm: once no source is backed off, the cold code leaves the heap
            if self.bo_n:
                self.guard.expire(self, now)
            if not self.bo_n:
                self.guard = None

    async def _flush(self):
        # the one writer of every port: hands queued frames to their links
        # as they take them; while a link is full, looks again every _FLUSH_MS
        sq = self.sq
        links = self.links
        while True:
            blocked = False
            p = 1
            while p < len(links):
                if sq.count[p]:
                    lk = links[p]
                    if lk is None:
                        sq.reset(p, sq.limit[p])
                    elif not sq.drain(p, lk):
                        blocked = True
                p += 1
            if blocked:
                await stream.sleep_ms(_FLUSH_MS)
            else:
                sq.ev.clear()
                await sq.ev.wait()

    async def telemetry_to_sink(self, sink, period_ms):
        # every period, the telemetry records go to the sink as datagrams;
        # the code that builds and sends them is cold (snake/runtime/telesink.py)
        while True:
            await stream.sleep_ms(period_ms)
            m = None
            try:
                m = platform.cold("snake.runtime.telesink")
                m.period(self, sink)
            except MemoryError:
                self.oom()
            m = None

    def start(self):
        """Start the tick and flusher tasks (the transports and console start their own)."""
        if self.ticker is None:
            self.ticker = asyncio.create_task(self._tick())
        if self.flusher is None:
            self.flusher = asyncio.create_task(self._flush())
        return self.ticker


def _short(key):
    import binascii
    return binascii.hexlify(bytes(key[0:4])).decode()


# ------------------------------------------------------------------ boot
# Booting (config, profile, building the node, starting Wi-Fi, BLE and the
# console) is snake/runtime/boot.py, cold code (platform.cold): held for the
# boot and dropped once the node runs, so the running node's heap does not
# hold that code.
def main(argv=None, heap0=None):
    """Entry point of firmware/main.py (heap0: gc.mem_alloc() before the
    firmware was imported, the start of console `mem`'s code figure)."""
    boot = None
    try:
        boot = platform.cold("snake.runtime.boot")
        args = boot.prepare(argv, heap0)
        if type(args) is int:
            return args
        run = _run(boot, args)
        boot = args = None
        try:
            asyncio.run(run)
        except KeyboardInterrupt:
            pass
        return 0
    except MemoryError:
        boot = args = run = None
        platform.unload("snake.runtime.config")
        try:
            return platform.cold("snake.runtime.boot").out_of_memory()
        except MemoryError:
            print("snakemesh: error: out of memory while booting")
            return 3


async def _run(boot, args):
    console, meter = await boot.start(args)
    boot = args = None
    if meter is not None:
        meter.mark("code")      # the boot code left the heap again (mark collects first): net of it
        platform.Meter.mark = None      # the last mark: its code leaves the heap too
    await console.run()
    # stdin closed: keep routing (a board without a host, a detached node)
    while True:
        await stream.sleep_ms(3600000)

