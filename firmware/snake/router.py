# The sans-I/O router core.
#
# Events in: port_up / port_down, receive(port, frame, now), tick(now),
# send(dst, payload, now). Frames out through self.tx(port, buf, n); local
# traffic through self.deliver(src_key, payload); link closures requested
# through self.disconnect(port, reason). No sockets, no asyncio, no clock of
# its own: `now` is always passed in (a ticks value in ms).
#
# State is split by concern: tree.py (spanning tree), snek.py (virtual
# snake), this module (ports, forwarding, wakeups, keepalives, telemetry).
from snake import wire
from snake import platform
from array import array
from snake.platform import ticks_diff, copy_into, key_cmp, const
from snake.tables import Table, key_eq_at
from snake.tree import Tree
from snake.snek import Snake, FULL_KEY, BOOTSTRAP_SOON_MS, MAINTAIN_INTERVAL_MS, SEQ_LIMIT
from snake.telemetry import (Counters, LINK_NAMES, BYTES_CARRY, D_MALFORMED, D_OVERSIZE,
                             D_UNKNOWN_PORT, D_UNKNOWN_TYPE, D_HOP_LIMIT, D_LOOP, D_WATERMARK, D_NO_ROUTE,
                             D_QUEUE_FULL, D_BAD_SIGNATURE, D_WAKEUP_ROOT, D_WAKEUP_DUP,
                             D_WAKEUP_HOP_LIMIT, D_SANITY, D_TOO_DEEP, D_NO_MEMORY, D_WAKEUP_BUDGET)

VERSION = "0.1.0"

_KEEPALIVE_MS = const(3000)          # send a keepalive after 3 s with nothing sent
DEAD_MS = 5000               # a peer silent for 5 s is dead
_COORD_LIFETIME_MS = const(60000)    # cached source coordinates live 1 min
_WAKEUP_MIN_GAP_MS = const(30000)    # ignore a wakeup within 30 s of the last from that origin
WAKEUP_INTERVAL_MS = 60000   # the reference's periodic flood (reference timing only)

# ---- control timing policy ---------------------------------------------
# snakemesh choices beyond the seeds, each explained at the method that
# applies it and in docs/reference/PROTOCOL_NOTES.md "snakemesh's own choices" (figures: make bench, figure 6).
# Bootstraps (Router.snake_changed, Router.tick): one soon after a change of
# our place in the snake, then at these intervals, and from then on every
# BOOTSTRAP_EVERY_MS: the seeds' and the reference's 5 s, which expire
# routes and descending entries 10 s after the last bootstrap
# (snek.ROUTE_EXPIRY_MS), so one lost bootstrap expires nothing.
BOOTSTRAP_RAMP_MS = (1000, 1000, 1000, 1000,
                     2000, 2000, 2000, 2000, 2000, 2000, 2000, 2000, 2000, 2000,
                     3000, 4000)
BOOTSTRAP_EVERY_MS = 5000
# Our own wakeup (Router._wakeup_due): flooded once our root has changed and
# stayed for WAKEUP_SETTLE_MS, with hop limit WAKEUP_HOP_LIMIT (the
# reference: 5); no periodic flood. Early bootstraps for other nodes'
# wakeups: Router._wakeup_news.
WAKEUP_SETTLE_MS = 1000
WAKEUP_HOP_LIMIT = 3
WAKEUP_KNOWN_MS = 90000     # a wakeup from an origin heard within this is no news by itself
# Budgets for the wakeups we verify and relay (Router._wakeup_budget): a
# token bucket per port (its index) and one node-wide (index 0): a burst,
# then one every so many ms.
_WK_PORT_BURST = const(4)
_WK_PORT_MS = const(500)
_WK_NODE_BURST = const(8)
_WK_NODE_MS = const(250)

# longest control frame the router builds itself: a bootstrap with every
# varu64 at 10 bytes (header 12, two keys, watermark sequence, sequence,
# root key, root sequence, signature)
CTL_MAX = 12 + 32 + 32 + 10 + 10 + 32 + 10 + 64

# a trace probe's payload (probe.py): "SM", kind TRACE, id, ttl
_TRACE_LEN = const(8)
_TRACE_KIND = const(3)


class Router:
    def __init__(self, profile, signer, now, txpool=None):
        self.profile = profile
        self.signer = signer
        self.key = bytes(signer.public)
        P = profile.max_peers + 1
        H = profile.max_hops
        self.up = bytearray(P)
        self.ann_pending = bytearray(P)   # our announcement to this port is owed
        self.port_key = [bytearray(32) for _ in range(P)]
        self.port_link = [0] * P
        self.last_rx = [0] * P
        self.last_tx = [0] * P
        self.counters = Counters()
        from snake.crypto import SigCache
        self.sigcache = SigCache(profile.sig_cache)
        self.verify_policy = profile.bootstrap_verify
        self.hop_limiting = profile.hop_limiting
        self.traffic_hop_limit = profile.traffic_hop_limit
        self.frame_max = profile.frame_max
        self.ann_max = profile.ann_max
        # coordinate cache: source key -> encoded coordinates (tree replies)
        self.ccache = Table(profile.coord_cache, victim=self._cc_victim)
        # bytes of coordinates per entry: a port below 128 is one byte (an
        # ESP32 has 8 ports), a gateway's up to 255 two; coordinates that do
        # not fit are not cached (the reply then goes by SNEK, as a first one)
        self.cc_max = H + (H >> 2)
        self.cc_coords = bytearray(profile.coord_cache * self.cc_max)
        self.cc_len = array("H", [0] * profile.coord_cache)
        self.cc_time = array("i", [0] * profile.coord_cache)
        # wakeup filter: origin key -> last sequence and time
        self.wakeups = Table(profile.wakeup_filter, victim=self._wf_victim)
        # last sequence per origin as (hi, lo) halves (Unix ms: no boxed ints)
        self.wf_seq_hi = array("i", [0] * profile.wakeup_filter)
        self.wf_seq_lo = array("i", [0] * profile.wakeup_filter)
        self.wf_time = array("i", [0] * profile.wakeup_filter)
        self.wk_seq = 0
        # wakeup budgets (token buckets, index 0 node-wide) and the
        # runtime's frames queued per port (a bytearray: a frame for a port
        # with none goes out now; None: every port is idle)
        self.wk_tokens = bytearray([_WK_PORT_BURST] * P)
        self.wk_tokens[0] = _WK_NODE_BURST
        self.wk_refill = array("i", [now] * P)
        self.tx_queued = None
        self.f = wire.Frame(H)
        # Our own control frames are built in self.buf: keepalives,
        # bootstraps, wakeups (at most CTL_MAX bytes). Our tree announcement
        # (up to profile.ann_max, 3 KB at depth 30) and traffic we
        # originate (up to frame_max) are built straight into a buffer of
        # the runtime's transmit pool (txpool: take/give/bufs,
        # node.BufPool) and handed over with self.tx_owned(port, index, n):
        # the router keeps no buffer for long frames and nothing is copied.
        # Without a pool (simulator, tests) self.buf takes every frame.
        self.txpool = txpool
        self.tx_owned = None
        self._held = -1               # pool buffer send() has not handed over
        self.buf = bytearray(CTL_MAX if txpool is not None else profile.large)
        self.k_dst = bytearray(32)
        self.k_wm = bytearray(32)
        self.k_wk = bytearray(32)     # scratch: origin of a wakeup
        self.tree = Tree(self, profile)
        self.snake = Snake(self, profile)
        self.last_root = bytearray(32)
        copy_into(self.last_root, 0, self.key, 0, 32)
        self.last_root_seq = 1
        self.last_parent = 0
        # (no write-only attributes: 59 names keep the router's attribute
        # table at 59 entries, not 73)
        self.now = now
        self.tree.root_sent = now
        self.snake.last_bootstrap = now
        self.snake.last_maintain = now
        self.last_wakeup = now
        self.wk_root = bytearray(32)  # the root our last own flood carried
        copy_into(self.wk_root, 0, self.key, 0, 32)
        self.root_at = now            # when our root key last changed
        # timing policy, per instance so that a simulation can mix policies
        # (host_tools/sim/reftiming.py): periodic own wakeups (0 = none,
        # flood on a root change instead)
        self.wakeup_every = 0
        self.wakeup_hops = WAKEUP_HOP_LIMIT
        self.bs_interval = BOOTSTRAP_EVERY_MS
        self.bs_ramp_ms = BOOTSTRAP_RAMP_MS
        self.bootstrap_soon = False
        self.bs_ramp = len(BOOTSTRAP_RAMP_MS)   # index into the ramp; at its end: bs_interval
        self.peers_refused = 0    # links refused for want of a free port (peer_refused)
        # outputs: set by the runtime / simulator / tests
        self.tx = _no_tx
        self.deliver = None
        self.disconnect = None
        self.on_event = None
        self.expired = None       # traffic hop limit ran out here (trace probes)
        self.wall_ms = platform.wall_ms

    # ---- crypto helpers (control plane) -------------------------------
    def verify(self, pub, msg, sig):
        c = self.sigcache
        hits = c.hits
        ok = c.verify(pub, msg, sig)
        if c.hits != hits:
            self.counters.verify_cached += 1
        else:
            self.counters.verify_done += 1
        return ok

    def sign(self, msg):
        return self.signer.sign(msg)

    def event(self, kind, detail):
        if self.on_event is not None:
            if detail is not None and not isinstance(detail, str):
                detail = platform.hexstr(detail)
            self.on_event(kind, detail)

    # ---- ports --------------------------------------------------------
    def port_up(self, port, peer_key, link_type, now):
        if port < 1 or port >= len(self.up) or self.up[port]:
            return False
        self.now = now
        copy_into(self.port_key[port], 0, peer_key, 0, 32)
        self.port_link[port] = link_type
        self.last_rx[port] = now
        self.last_tx[port] = now
        self.up[port] = 1
        self.event("peer_up", peer_key)
        self.announce_to(port)
        return True

    def port_down(self, port, now):
        if port < 1 or port >= len(self.up) or not self.up[port]:
            return
        self.now = now
        self.up[port] = 0
        self.ann_pending[port] = 0
        self.tree.port_down(port, now)
        self.snake.port_down(port)
        self.event("peer_down", self.port_key[port])
        self._tree_changed(now)

    def _kill(self, port, reason):
        if self.disconnect is not None:
            self.disconnect(port, reason)
        self.port_down(port, self.now)

    def peer_refused(self):
        """The runtime (or simulator) refused a link because every port was
        taken: counted in capacity()["peers"]."""
        self.peers_refused += 1

    def free_port(self):
        """Lowest port number not in use, or 0 when all are taken."""
        p = 1
        while p < len(self.up):
            if not self.up[p]:
                return p
            p += 1
        return 0

    # ---- output ---------------------------------------------------------
    def _tx(self, port, buf, n):
        if self.tx(port, buf, n):
            self._sent(port, buf, n)
            return True
        self.counters.drops[D_QUEUE_FULL] += 1
        return False

    def _tx_pooled(self, port, j, buf, n):
        """Hand transmit-pool buffer j (buf, n bytes) to the runtime: it
        sends it or queues the buffer itself, else gives it back (ring
        full, link gone; counted as queue_full like _tx)."""
        if self.tx_owned(port, j, n):
            self._sent(port, buf, n)
            return True
        self.counters.drops[D_QUEUE_FULL] += 1
        return False

    def _sent(self, port, buf, n):
        # frames and bytes per frame type and per link type: small-int
        # arithmetic on preallocated lists, nothing allocated
        c = self.counters
        t = buf[5]
        c.tx[t] += 1
        v = c.tx_bytes[t] + n
        if v >= BYTES_CARRY:
            v -= BYTES_CARRY
            c.tx_bytes_hi[t] += 1
        c.tx_bytes[t] = v
        lk = self.port_link[port]
        if lk < len(LINK_NAMES):
            c.tx_link[lk] += 1
            v = c.tx_bytes_link[lk] + n
            if v >= BYTES_CARRY:
                v -= BYTES_CARRY
                c.tx_bytes_link_hi[lk] += 1
            c.tx_bytes_link[lk] = v
        self.last_tx[port] = self.now

    def announce_to(self, port):
        self.ann_pending[port] = 0
        pool = self.txpool
        j = -1
        buf = self.buf
        if pool is not None:
            # bound of its length: our depth + 1 hops
            # (more than the pool's largest: the build below says too deep)
            t = self.tree
            need = wire.ann_max(t.ann_nhops[t.parent] + 1 if t.parent else 1)
            j = pool.take(need if need < pool.large_size else pool.large_size)
            if j < 0:
                # every transmit buffer for long frames holds a queued frame
                self.counters.drops[D_QUEUE_FULL] += 1
                self.ann_pending[port] = 1
                return
            buf = pool.bufs[j]
        try:
            n = self.tree.build(buf, port)
        except wire.WireError:
            # our announcement (parent's + our hop) does not fit ann_max:
            # the tree is deeper than this profile carries; count, go on
            if j >= 0:
                pool.give(j)
            self.counters.drops[D_TOO_DEEP] += 1
            return
        if j >= 0:
            ok = self._tx_pooled(port, j, buf, n)
        else:
            ok = self._tx(port, buf, n)
        if not ok:
            # the send queue or the node's buffers for long frames are full
            # (a board keeps one): unlike a bootstrap, an announcement is
            # not repeated on a timer, so a lost one would leave the peer
            # with our old place in the tree. Sent again at the next tick,
            # rebuilt from the state then.
            self.ann_pending[port] = 1

    def announce_all(self):
        p = 1
        while p < len(self.up):
            if self.up[p]:
                self.announce_to(p)
            p += 1

    # ---- input ----------------------------------------------------------
    def receive(self, port, buf, n, now):
        self.now = now
        c = self.counters
        if port < 1 or port >= len(self.up) or not self.up[port]:
            c.drops[D_UNKNOWN_PORT] += 1
            return
        self.last_rx[port] = now
        if n > self.frame_max and (buf[5] != wire.T_ANNOUNCEMENT or n > self.ann_max):
            # frame_max bounds every frame but a tree announcement, whose
            # bound follows from the depth stored (profile.ann_max)
            c.drops[D_OVERSIZE] += 1
            return
        f = self.f
        try:
            f.decode(buf, n)
        except wire.WireError as e:
            if e.reason == "type":
                c.drops[D_UNKNOWN_TYPE] += 1
                return
            if e.reason == "too_many_hops":
                # deeper than this profile can store: not an attack, so the
                # peer stays up, but its announcement is unusable to us
                self._too_deep(port, now)
                return
            c.drops[D_MALFORMED] += 1
            if n > 5 and buf[5] == wire.T_ANNOUNCEMENT:
                # a malformed announcement fails the "well formed" sanity check
                c.drops[D_SANITY] += 1
                self.event("sanity_fail", "malformed:" + e.reason)
                self._kill(port, "sanity")
            return
        t = f.type
        c.rx[t] += 1
        try:
            if t == wire.T_TRAFFIC:
                self._traffic(port, buf, n, f, now)
            elif t == wire.T_BOOTSTRAP:
                nh = self.snake.handle_bootstrap(port, buf, n, f, now)
                if nh > 0:
                    self._tx(nh, buf, self.snake.fwd_len)
            elif t == wire.T_ANNOUNCEMENT:
                self._announcement(port, buf, n, f, now)
            elif t == wire.T_WAKEUP:
                self._wakeup(port, buf, n, f, now)
            # keepalive: nothing but the last_rx update above
        except wire.WireError:
            # a rewrite that would not fit the receive buffer (watermark
            # sequence or coordinates growing past it): drop, never crash
            c.drops[D_OVERSIZE] += 1
        except MemoryError:
            # no heap for a signature check or a reply: drop this frame
            # (counted), keep the peer; nothing was half-applied that the
            # next announcement/bootstrap round does not redo
            c.drops[D_NO_MEMORY] += 1

    def _announcement(self, port, buf, n, f, now):
        if not self.tree.fits(f):
            self._too_deep(port, now)
            return
        reason = self.tree.sanity_check(port, buf, f)
        if reason is not None:
            self.counters.drops[D_SANITY] += 1
            if reason == "bad_signature":
                self.counters.drops[D_BAD_SIGNATURE] += 1
            self.event("sanity_fail", reason)
            self._kill(port, "sanity:" + reason)
            return
        if not self.tree.handle(port, buf, n, f, now):
            # the hop pool cannot hold it even after forgetting every other
            # peer's announcement but the parent's: deeper than we store
            self.counters.drops[D_TOO_DEEP] += 1
        self._tree_changed(now)

    def _too_deep(self, port, now):
        # An announcement deeper than this profile stores (max_hops, frame
        # size or hop pool). The peer stays up; the announcement it replaces
        # is no longer true, so it is forgotten too (if it was the parent's,
        # parent selection runs again). Counted in capacity()["depth"].
        self.counters.drops[D_TOO_DEEP] += 1
        self.tree.drop_announcement(port, now)
        self._tree_changed(now)

    def snake_changed(self):
        """Our neighbourhood in the snake has changed: the root, its
        sequence or our parent changed (every descending entry and route
        set up under the old tree is being replaced), or our descending
        entry was set to another key or lost. Bootstrap soon - as the
        reference does at these points (_bootstrapSoon on a new parent and
        in _setDescendingNode) - and then, a snakemesh choice, at the
        BOOTSTRAP_RAMP_MS intervals (1 s four times, 2 s ten times, then 3
        and 4 s: about 35 s) before the steady BOOTSTRAP_EVERY_MS (5 s, the
        seeds' interval).

        Why the ramp: after such a change the snake is rebuilt in rounds. A
        bootstrap only reaches its true successor once the keys between
        have installed routes along its path, and those routes come from
        other nodes' bootstraps, so one wrong entry is fixed only after a
        chain of other nodes' next bootstraps (on a large random graph the
        low keys wait for chains of a dozen rounds). At one round per 5 s a
        rebuild takes tens of seconds, and every crash or flap re-roots
        whole subtrees twice; rounds at 1-2 s while the change is fresh
        rebuild it in a few seconds, then the reference's 5 s (make bench
        figure 6 measures it on shared graphs).

        Why 5 s in steady state, not more: every relay on the path expires
        our route, and our successor its descending entry, 10 s after the
        last bootstrap (the seeds' rule), so at 5 s one lost bootstrap
        expires nothing. A longer steady interval saves control bytes, but
        then one bootstrap lost to a path still settling elsewhere (a
        relay's route rerouted or evicted) lets routes and a descending
        entry expire, and their repair costs more rounds than the bytes
        saved (docs/LOG.md, "The late expiries").
        Only when we send our own bootstraps differs from the reference
        (each still signed, with a higher sequence), so peers running it
        see nothing unusual."""
        self.bootstrap_soon = True
        self.bs_ramp = 0

    def _tree_changed(self, now):
        tree = self.tree
        root = tree.root_key()
        rseq = tree.root_seq()
        if root != self.last_root:
            copy_into(self.last_root, 0, root, 0, 32)
            self.last_root_seq = rseq
            self.ccache.clear()  # coordinates are only valid under one root
            self.root_at = now
            self.event("root_changed", root)
            self.snake_changed()
        elif rseq != self.last_root_seq:
            self.last_root_seq = rseq
            self.snake_changed()
        if tree.parent != self.last_parent:
            self.last_parent = tree.parent
            self.event("parent_changed", self.port_key[tree.parent] if tree.parent else None)
            self.snake_changed()
        tree.changed = False

    # ---- traffic --------------------------------------------------------
    def _traffic(self, port, buf, n, f, now):
        c = self.counters
        tree = self.tree
        from_tree = False
        if f.dcoords_len:
            nh = tree.next_hop(buf, f.dcoords_off, f.dcoords_len, port)
            if nh:
                self._relay(port, nh, buf, n, f)
                return
            if tree.dist == 0 and key_eq_at(self.key, buf, f.dst_off):
                self._deliver(buf, f)
                return
            # no tree next hop: clear the coordinates and fall back to SNEK
            n = wire.to_snek(buf, n, f, FULL_KEY, 0, 0)
            from_tree = True
        copy_into(self.k_dst, 0, buf, f.dst_off, 32)
        copy_into(self.k_wm, 0, buf, f.wm_off, 32)
        sn = self.snake
        nh = sn.next_hop(self.k_dst, False, self.k_wm, f.wm_seq, now)
        if nh == 0 and self.k_dst == self.key:
            self._deliver(buf, f)
            return
        if nh == 0 or (nh == port and not from_tree) or sn.nh_worse(self.k_wm, f.wm_seq):
            # about to drop: a route hint for the watermark's key may carry
            # it on, watermark unchanged (snek.Snake.fallback)
            hp = sn.fallback(self.k_dst, self.k_wm, port, nh == 0, now)
            if hp:
                self._relay(port, hp, buf, n, f)
                return
        if nh == 0:
            c.drops[D_NO_ROUTE] += 1
            return
        # Deviation from the reference (which drops here too): a frame that
        # arrived by tree routing and only now falls back to SNEK may go back
        # the way it came. Its tree hop was taken towards stale cached
        # coordinates (the destination moved in the tree; caches live 1 min),
        # and from here on the fresh watermark guards against loops (the
        # previous hop drops it if it would come back again). Dropping it
        # loses pings for a minute after every tree change
        # (tests/host/test_faults_sim.py).
        if nh == port and not from_tree:
            c.drops[D_LOOP] += 1
            return
        if sn.nh_worse(self.k_wm, f.wm_seq):
            c.drops[D_WATERMARK] += 1
            return
        n = wire.set_watermark(buf, n, f, sn.nh_key, sn.nh_koff, sn.nh_seq)
        self._relay(port, nh, buf, n, f)

    def _relay(self, port, nh, buf, n, f):
        c = self.counters
        if self.hop_limiting:
            # PROTOCOL_NOTES.md choice A. The hop limit has two ranges:
            # above the reference's 10 it is snakemesh's own budget, counted
            # down by every relay and used up at 10; at 10 or below it is
            # the reference's (it originates 10 and its relays, hop
            # limiting off, never count it down), left as it is, so that a
            # mixed mesh carries reference traffic as far as the reference
            # does. Trace probes are counted down in both ranges and end at
            # 1 (router.expired answers them).
            hl = f.hop_limit
            po = f.payload_off
            if (f.payload_len == _TRACE_LEN and buf[po] == 0x53 and buf[po + 1] == 0x4D
                    and buf[po + 2] == _TRACE_KIND):
                if hl <= 1:
                    c.drops[D_HOP_LIMIT] += 1
                    if self.expired is not None:
                        self.expired(buf, f)
                    return
                wire.set_hop_limit(buf, hl - 1)
            elif hl > wire.HOP_LIMIT_TRAFFIC:
                if hl - 1 <= wire.HOP_LIMIT_TRAFFIC:
                    c.drops[D_HOP_LIMIT] += 1
                    return
                wire.set_hop_limit(buf, hl - 1)
        if self._tx(nh, buf, n):
            c.forwarded += 1

    def _deliver(self, buf, f):
        c = self.counters
        c.delivered += 1
        # remember the sender's coordinates for replies by tree routing
        slot = -1
        if f.scoords_len <= self.cc_max:
            slot = self.ccache.insert_at(buf, f.src_off)
        if slot >= 0:
            copy_into(self.cc_coords, slot * self.cc_max, buf, f.scoords_off, f.scoords_len)
            self.cc_len[slot] = f.scoords_len
            self.cc_time[slot] = self.now
        if self.deliver is not None:
            so = f.src_off
            po = f.payload_off
            self.deliver(bytes(buf[so:so + 32]), bytes(buf[po:po + f.payload_len]))

    def _cc_victim(self, table):
        # the oldest entry (an expired one is always among the oldest)
        # (of equal ages the lowest slot)
        best = -1
        order = table.order
        pos = 0
        while pos < table.count:
            i = order[pos]
            if best < 0 or ticks_diff(self.cc_time[best], self.cc_time[i]) > 0 \
                    or (i < best and self.cc_time[best] == self.cc_time[i]):
                best = i
            pos += 1
        return best

    def send(self, dst, payload, now, hop_limit=0, body=None):
        """Originate application traffic to key `dst`. Tree routing when we
        have the destination's coordinates cached, else SNEK. hop_limit 0
        means the profile's traffic_hop_limit: snakemesh relays count a
        hop limit above 10 down and drop the frame at 10, so it must cover
        the longest SNEK path; 10 or less is left alone as the reference's
        (it originates 10 and its relays leave it untouched; _relay).
        body: more payload after `payload` (a datagram's data after its
        header, joined in the frame: no copy of its own)."""
        self.now = now
        if hop_limit <= 0:
            hop_limit = self.traffic_hop_limit
        c = self.counters
        scoords = wire.encode_coords_body(self.tree.coords())   # our coordinates as a wire body
        dc = None
        slot = self.ccache.find(dst)
        if slot >= 0 and ticks_diff(now, self.cc_time[slot]) < _COORD_LIFETIME_MS:
            co = slot * self.cc_max
            dc = bytes(self.cc_coords[co:co + self.cc_len[slot]])
        pool = self.txpool
        if pool is None:
            return self._send(self.buf, dc, scoords, dst, payload, hop_limit, now, body)
        # a transmit buffer that holds the frame either way (tree: both
        # coordinates; SNEK: the watermark, its sequence up to 10 bytes)
        need = (16 + (len(dc) if dc else 0) + len(scoords) + 3 * 32 + 10 + len(payload)
                + (len(body) if body is not None else 0))
        j = pool.take(need if need < self.frame_max else self.frame_max)
        if j < 0:
            c.drops[D_QUEUE_FULL] += 1
            return False
        self._held = j
        try:
            return self._send(pool.bufs[j], dc, scoords, dst, payload, hop_limit, now, body)
        finally:
            if self._held >= 0:
                pool.give(self._held)
                self._held = -1

    def _out(self, port, buf, n):
        """Send a frame send() built: a pool buffer is handed over."""
        j = self._held
        if j < 0:
            return self._tx(port, buf, n)
        self._held = -1
        return self._tx_pooled(port, j, buf, n)

    def _send(self, buf, dc, scoords, dst, payload, hop_limit, now, body):
        c = self.counters
        f = self.f
        if dc is not None:
            n = wire.encode_traffic(buf, dc, scoords, dst, self.key, FULL_KEY, 0, payload, hop_limit, body)
            if n > self.frame_max:
                raise wire.WireError("oversize")
            f.decode(buf, n)
            nh = self.tree.next_hop(buf, f.dcoords_off, f.dcoords_len, 0)
            if nh:
                if self._out(nh, buf, n):
                    c.originated += 1
                    return True
                return False
        n = wire.encode_traffic(buf, b"", scoords, dst, self.key, FULL_KEY, 0, payload, hop_limit, body)
        if n > self.frame_max:
            raise wire.WireError("oversize")
        f.decode(buf, n)
        copy_into(self.k_dst, 0, dst, 0, 32)
        sn = self.snake
        nh = sn.next_hop(self.k_dst, False, FULL_KEY, 0, now)
        if nh == 0:
            if self.k_dst == self.key:
                c.originated += 1
                self._deliver(buf, f)
                return True
            c.drops[D_NO_ROUTE] += 1
            return False
        n = wire.set_watermark(buf, n, f, sn.nh_key, sn.nh_koff, sn.nh_seq)
        if n > self.frame_max:
            raise wire.WireError("oversize")
        if self._out(nh, buf, n):
            c.originated += 1
            return True
        return False

    # ---- wakeup broadcasts ----------------------------------------------
    def _send_wakeup(self, port):
        seq = self.wall_ms()
        if seq <= self.wk_seq:
            seq = self.wk_seq + 1
        self.wk_seq = seq
        root = self.tree.root_key()
        rseq = self.tree.root_seq()
        sig = self.sign(wire.bootstrap_signed(seq, root, rseq))
        n = wire.encode_wakeup(self.buf, self.key, seq, root, rseq, sig, self.wakeup_hops)
        if port:
            self._tx(port, self.buf, n)
            return
        p = 1
        while p < len(self.up):
            if self.up[p]:
                self._tx(p, self.buf, n)
            p += 1

    def _wakeup(self, port, buf, n, f, now):
        c = self.counters
        tree = self.tree
        # PROTOCOL_NOTES.md difference 5: every cheap check before the signature
        if not key_eq_at(tree.root_key(), buf, f.root_off) or f.root_seq != tree.root_seq():
            c.drops[D_WAKEUP_ROOT] += 1
            return
        if key_eq_at(self.key, buf, f.src_off):
            c.drops[D_WAKEUP_DUP] += 1
            return
        if f.seq >= SEQ_LIMIT:
            c.drops[D_MALFORMED] += 1     # not a real Unix-ms sequence (snek.SEQ_LIMIT)
            return
        slot = self.wakeups.find_at(buf, f.src_off)
        if slot >= 0 and (not self._wf_older(slot, f.seq)
                          or ticks_diff(now, self.wf_time[slot]) < _WAKEUP_MIN_GAP_MS):
            c.drops[D_WAKEUP_DUP] += 1
            return
        # Wakeups are advisory: a signature check is spent only on one that
        # can change something (an early bootstrap not already due, or a
        # relay a link takes now) and within the port's and the node's
        # budget; a storm from fresh keys costs a few checks a second
        if (not self._wakeup_useful(port, f.hop_limit) or not self._wakeup_budget(port, _WK_PORT_BURST, _WK_PORT_MS, now)
                or not self._wakeup_budget(0, _WK_NODE_BURST, _WK_NODE_MS, now)):
            c.drops[D_WAKEUP_BUDGET] += 1
            return
        so = f.src_off
        sg = f.sig_off
        if not self.verify(bytes(buf[so:so + 32]), bytes(buf[f.signed_off:f.signed_off + f.signed_len]),
                           bytes(buf[sg:sg + 64])):
            c.drops[D_BAD_SIGNATURE] += 1
            return
        # news unless this origin's last wakeup reached us recently (a
        # reference node floods every 60 s; snakemesh only on a change)
        known = slot >= 0 and ticks_diff(now, self.wf_time[slot]) < WAKEUP_KNOWN_MS
        if slot < 0:
            slot = self.wakeups.insert_at(buf, so)
        if slot >= 0:
            self.wf_seq_hi[slot] = f.seq >> 30
            self.wf_seq_lo[slot] = f.seq & 0x3FFFFFFF
            self.wf_time[slot] = now
        if self._wakeup_news(buf, so, known, now):
            self.bootstrap_soon = True
        if f.hop_limit <= 1:
            # accepted (filter, news) but not relayed, as the reference does
            c.drops[D_WAKEUP_HOP_LIMIT] += 1
            return
        wire.set_hop_limit(buf, f.hop_limit - 1)
        # relayed only to a link with nothing queued: never ahead of traffic
        q = self.tx_queued
        p = 1
        while p < len(self.up):
            if self.up[p] and p != port:
                if q is None or not q[p]:
                    self._tx(p, buf, n)
                else:
                    c.relay_shed += 1
            p += 1

    def _wakeup_useful(self, port, hl):
        """Could an accepted wakeup (hop limit hl) change anything now: an
        early bootstrap not already due, or a relay that a link would take
        now?"""
        if not self.bootstrap_soon:
            return True
        if hl <= 1:
            return False      # not relayed (below)
        q = self.tx_queued
        p = 1
        while p < len(self.up):
            if self.up[p] and p != port and (q is None or not q[p]):
                return True
            p += 1
        return False

    def _wakeup_budget(self, i, burst, every, now):
        """Take one wakeup from token bucket i (0: the node's, else a
        port's; `burst` tokens, one back every `every` ms): False when empty."""
        t = self.wk_tokens[i]
        d = ticks_diff(now, self.wk_refill[i])
        if d >= every:
            t += d // every
            if t >= burst:
                t = burst
                self.wk_refill[i] = now
            else:
                self.wk_refill[i] += (d // every) * every
        elif d < 0:
            self.wk_refill[i] = now
        if t == 0:
            return False
        self.wk_tokens[i] = t - 1
        return True

    def _wf_older(self, slot, seq):
        """The wakeup filter's sequence for slot is below seq."""
        hi = self.wf_seq_hi[slot]
        vh = seq >> 30
        if hi != vh:
            return hi < vh
        return self.wf_seq_lo[slot] < (seq & 0x3FFFFFFF)

    def _wakeup_news(self, buf, off, known, now):
        """Does an accepted wakeup from the key at buf[off:off+32] call for
        an early bootstrap of ours? The reference bootstraps soon after
        every accepted wakeup; snakemesh (a choice beyond the seeds) only
        when the wakeup can change where our bootstrap should go:

        - its origin is not in our wakeup filter (`known` false): a node we
          have not heard from, or not for long enough to forget it, joined
          or came back; bootstrap soon, as the reference does (during a
          mesh's first seconds this is what makes the snake converge fast);
        - a known origin: only when it sits above us and at or below the
          lowest key above ours that we know (next_hop's first watermark:
          the root, an ancestor or a route). Our bootstrap travels to our
          successor in the snake; only such a node can be our new successor
          (or our successor come back without its descending entry). For
          any other origin our bootstrap would go where it goes anyway.

        So a reference node's periodic wakeup (every 60 s) costs its
        neighbourhood no extra bootstraps once they know it."""
        if not known:
            return True
        k = self.k_wk
        copy_into(k, 0, buf, off, 32)
        if not (self.key < k):
            return False
        sn = self.snake
        if not sn.next_hop(self.key, True, FULL_KEY, 0, now):
            return False      # root, or no parent yet: we do not bootstrap
        return key_cmp(sn.nh_key, sn.nh_koff, k, 0) >= 0

    def _wf_victim(self, table):
        # the oldest (of equal ages the lowest slot)
        best = -1
        order = table.order
        pos = 0
        while pos < table.count:
            i = order[pos]
            if best < 0 or ticks_diff(self.wf_time[best], self.wf_time[i]) > 0 \
                    or (i < best and self.wf_time[best] == self.wf_time[i]):
                best = i
            pos += 1
        return best

    # ---- timers -----------------------------------------------------------
    def tick(self, now):
        self.now = now
        tree = self.tree
        tree.tick(now)
        self._tree_changed(now)
        # keepalives, dead peers, announcements the tx path refused
        p = 1
        while p < len(self.up):
            if self.up[p] and self.ann_pending[p]:
                self.announce_to(p)
            if self.up[p]:
                if ticks_diff(now, self.last_rx[p]) >= DEAD_MS:
                    self.event("peer_dead", self.port_key[p])
                    self._kill(p, "dead")
                elif ticks_diff(now, self.last_tx[p]) >= _KEEPALIVE_MS:
                    n = wire.encode_keepalive(self.buf)
                    self._tx(p, self.buf, n)
            p += 1
        sn = self.snake
        if ticks_diff(now, sn.last_maintain) >= MAINTAIN_INTERVAL_MS:
            sn.maintain(now)            # (sets sn.last_maintain)
        since = ticks_diff(now, sn.last_bootstrap)
        ramp = self.bs_ramp
        steps = self.bs_ramp_ms
        if ramp < len(steps):
            interval = steps[ramp]
        else:
            interval = self.bs_interval
        if since >= interval or (self.bootstrap_soon and since >= BOOTSTRAP_SOON_MS):
            if not self.bootstrap_soon and ramp < len(steps):
                self.bs_ramp = ramp + 1
            sn.last_bootstrap = now
            self.bootstrap_soon = False
            nh = sn.originate_bootstrap(self.buf, now)
            if nh:
                self._tx(nh, self.buf, sn.fwd_len)
        if self._wakeup_due(now):
            self.last_wakeup = now
            copy_into(self.wk_root, 0, self.last_root, 0, 32)
            self._send_wakeup(0)

    def _wakeup_due(self, now):
        """Flood our own wakeup now? A snakemesh choice: once our root has
        changed and stayed for WAKEUP_SETTLE_MS (we joined a mesh, came
        back, or a partition healed), not every 60 s as the reference does.

        A wakeup only helps when we are news to the nodes around us: it
        makes our predecessor in the snake bootstrap soon, so that we get
        our descending entry in well under a bootstrap interval
        (Router._wakeup_news). While our root stays the same nothing about
        us is new, and the snake keeps itself right with bootstraps alone.
        The reference's periodic flood is the largest part of the control
        bytes in steady state (make bench, figure 6). The wakeup a new peer gets from us
        (PROTOCOL_NOTES.md difference 5) stays. Waiting for the root to
        settle spares the floods of the first seconds of a mesh, when roots
        change several times and nodes on another root drop a wakeup anyway.

        Our wakeups carry hop limit WAKEUP_HOP_LIMIT (3; the reference 5):
        a flood's cost grows with the neighbourhood it covers, and when a
        whole mesh starts every node floods once. Hop limit 3 converges
        as fast as 5 with fewer bytes sent, and faster than no flood at all
        (docs/reports/CAPACITY.md "Wakeup hop limit")."""
        if self.wakeup_every:
            return ticks_diff(now, self.last_wakeup) >= self.wakeup_every
        return (self.wk_root != self.last_root
                and ticks_diff(now, self.root_at) >= WAKEUP_SETTLE_MS)


# The router's state as values and records (the console, telemetry, the
# simulator, tests): snake/report.py, cold code (report.root_key(r),
# report.peers(r) ...); no method of the router holds its bytecode.


def _no_tx(port, buf, n):
    return False

