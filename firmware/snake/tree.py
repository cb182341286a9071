# Spanning tree: peers' announcements, parent selection, coordinates.
#
# Every rule of docs/reference/PROTOCOL_NOTES.md "Spanning tree" lives in this module:
#   - sanity checks on received announcements (sanity_check)
#   - re-parenting on news from the parent / from another peer (handle)
#   - parent selection (select_parent)
#   - root refresh every 30 min, expiry after 45 min, 1 s reparent wait (tick)
#   - coordinates and tree distance / tree next hop (next_hop)
# The Router owns ports and I/O; this class only keeps state and asks the
# router to send announcements (router.announce_to(port) / announce_all()).
from snake import wire
from array import array
from snake.platform import ticks_diff, copy_into, key_cmp, const
from snake.tables import key_eq_at, keys_eq_at, HopPool, NONE, lower_bound

_ROOT_INTERVAL_MS = const(30 * 60 * 1000)   # root re-announces with seq+1
_ANN_EXPIRY_MS = const(45 * 60 * 1000)      # a peer's announcement expires
_REPARENT_WAIT_MS = const(1000)             # after bad news: wait before selecting
_RESEQ_EARLY_MS = const(4000)               # a new root's early seq+1 (choice I)

# sanity check failures (also telemetry event details)
S_OK = None


class Tree:
    def __init__(self, router, profile):
        self.r = router
        self.between_off = 0     # peer_key_between: offset of its key in pool.keys
        P = profile.max_peers + 1
        H = profile.max_hops
        self.max_hops = H
        # Peers' announcements are stored as paths of nodes in one shared
        # hop pool (tables.HopPool): hop i of peer p is node
        # ann_path[p * H + i]. Announcements of neighbours share their
        # prefix from the root down, so a pool of ~2 x max_hops nodes holds
        # what max_peers raw frames of max_hops hops would (measured:
        # docs/reports/CAPACITY.md). Port 0 is the local router: its slots stay empty.
        cap = profile.hop_pool if profile.hop_pool else 2 * H + 2 * profile.max_peers
        self.pool = HopPool(cap)
        self.ann_valid = bytearray(P)
        self.ann_seen = bytearray(P)     # an announcement arrived since port_up
        self.ann_root = [bytearray(32 if i else 0) for i in range(P)]
        self.ann_seq = [0] * P
        self.ann_time = array("i", [0] * P)
        self.ann_order = [0] * P
        self.ann_nhops = bytearray(P)
        self.ann_mine = bytearray(P)     # the announcement names our own key
        self.ann_path = array("H", [NONE] * (P * H))
        # Coordinates are the ports of these hops (pool.port): a peer's are
        # its path's but the last hop, ours are the parent's whole path.
        self.dports = array("H", [0] * H)  # scratch: destination coordinates
        self.evicted = 0                 # announcements forgotten for want of pool room
        # the parent's hops sorted by key (SNEK next hop, step 3.3)
        self.par_sorted = array("H", [0] * H)
        self.par_n = 0
        self.par_of = -1             # parent order the sorted ancestors were built from
        self.known = array("H", [NONE] * H)  # scratch: pool nodes of the frame's hops
        self.known_n = 0
        self.order = 0               # global receive order
        self.parent = 0              # 0: we are the root
        self.seq = 1                 # our root sequence (when root)
        self.root_sent = 0           # when we last announced as root
        # a new root's early re-announcement (PROTOCOL_NOTES.md choice I):
        # its delay, 0 for none (the reference's timing); the delay still
        # due, 0 once it is done (then every 30 min)
        self.reseq_early = _RESEQ_EARLY_MS
        self.reseq_due = _RESEQ_EARLY_MS
        self.wait = False            # 1 s reparent wait active
        self.wait_until = 0
        self.sig = None              # our hop signature over the parent's announcement
        self.root_sig = None         # our hop signature as root (key | seq)
        self._prev_root = bytearray(32)  # scratch: the peer's previous root
        self.changed = False         # root/parent changed since last check

    # ---- queries --------------------------------------------------------
    def root_key(self):
        """Current root key (bytearray of the parent's announcement or ours)."""
        if self.parent:
            return self.ann_root[self.parent]
        return self.r.key

    def root_seq(self):
        if self.parent:
            return self.ann_seq[self.parent]
        return self.seq

    def coords(self, port=0):
        """Coordinates as a list of ports (introspection; allocates): ours
        for port 0, else the peer's."""
        if port == 0:
            p = self.parent
            n = self.ann_nhops[p] if p and self.ann_valid[p] else 0
        else:
            p = port
            n = self.ann_nhops[p] - 1 if self.ann_valid[p] else 0
        base = p * self.max_hops
        return [self.pool.port[self.ann_path[base + i]] for i in range(n)]

    def depth(self):
        """Our depth in the tree (number of ports in our coordinates)."""
        if self.parent and self.ann_valid[self.parent]:
            return self.ann_nhops[self.parent]
        return 0

    def contains(self, port, key):
        """The stored announcement of `port` names `key`."""
        pool = self.pool
        base = port * self.max_hops
        i = 0
        n = self.ann_nhops[port]
        while i < n:
            if key_cmp(pool.keys, self.ann_path[base + i] << 5, key, 0) == 0:
                return True
            i += 1
        return False

    def hop_key(self, port, i):
        """Key of hop i of port's announcement as bytes (introspection)."""
        x = self.ann_path[port * self.max_hops + i]
        return bytes(self.pool.keys[x << 5:(x << 5) + 32])

    def ancestors(self):
        """The parent's hops (pool nodes) sorted by key, rebuilt when the
        parent or its announcement changes; sets self.par_n."""
        p = self.parent
        if p == 0 or not self.ann_valid[p]:
            self.par_n = 0
            return self.par_sorted
        if self.par_of != self.ann_order[p]:
            keys = self.pool.keys
            sk = self.par_sorted
            base = p * self.max_hops
            n = self.ann_nhops[p]
            i = 0
            while i < n:
                x = self.ann_path[base + i]
                j = i
                while j > 0 and key_cmp(keys, sk[j - 1] << 5, keys, x << 5) > 0:
                    sk[j] = sk[j - 1]
                    j -= 1
                sk[j] = x
                i += 1
            self.par_n = n
            self.par_of = self.ann_order[p]
        return self.par_sorted

    def peer_with_key(self, buf, off):
        """Lowest port whose stored announcement names the key
        buf[off:off+32] (SNEK next hop, step 4), or 0."""
        pool = self.pool
        np = len(self.r.up)
        best = 0
        x = pool.first_key(buf, off)
        while x != NONE:
            p = self._port_of(x, best if best else np)
            if p:
                best = p
            x = pool.next_key(x, buf, off)
        return best

    def _port_of(self, x, lim):
        """Lowest port below lim whose stored announcement holds pool node
        x (at its depth), or 0."""
        ports = self.r.up
        valid = self.ann_valid
        nhops = self.ann_nhops
        path = self.ann_path
        d = self.pool.depth[x]
        H = self.max_hops
        p = 1
        while p < lim:
            if ports[p] and valid[p] and nhops[p] > d and path[p * H + d] == x:
                return p
            p += 1
        return 0

    def peer_key_between(self, dst, bbuf, boff):
        """Port of the peer whose stored announcement (its ancestors and
        itself) names the smallest key strictly between dst and the key
        bbuf[boff:boff+32], the lowest port among equals (SNEK next hop,
        step 4: PROTOCOL_NOTES.md difference 7), or 0; the key is then
        pool.keys[between_off:between_off + 32]. The pool keeps its hops in
        key order, so this walks up from dst: O(log pool) key comparisons
        and a look at each port per candidate hop, not every hop of every
        announcement (the forwarding hot path: traffic asks it too)."""
        pool = self.pool
        pk = pool.keys
        order = pool.order
        n = pool.count
        np = len(self.r.up)
        best = 0
        i = lower_bound(pk, order, n, dst, 0)
        while i < n:
            x = order[i]
            ko = x << 5
            if best:
                if key_cmp(pk, ko, pk, self.between_off) != 0:
                    break               # past the smallest key found
            else:
                c = key_cmp(pk, ko, dst, 0)
                if c == 0:
                    i += 1
                    continue            # not strictly above dst
                if key_cmp(pk, ko, bbuf, boff) >= 0:
                    break               # not below the best key
            p = self._port_of(x, best if best else np)
            if p:
                best = p                # a lower port among equal keys
                self.between_off = ko
            i += 1
        return best

    def expired(self, port, now):
        return ticks_diff(now, self.ann_time[port]) >= _ANN_EXPIRY_MS

    # ---- receive --------------------------------------------------------
    def fits(self, f):
        """The announcement can be stored: every hop port fits 16 bits (the
        reference's switch has 256 ports) and its depth max_hops."""
        if f.nhops > self.max_hops:
            return False
        i = 0
        while i < f.nhops:
            if f.hop_port[i] > 0xFFFF:
                return False
            i += 1
        return True

    def sanity_check(self, port, buf, f):
        """Returns None if the announcement is acceptable, else a reason.
        Hops already in the pool (same parent node, port, key and signature:
        a byte-identical prefix) were verified when they were stored; only
        the new ones are verified. Leaves the known prefix in self.known."""
        n = f.nhops
        if n < 1:
            return "no_hops"
        root_off = f.root_off
        # first hop key = root key
        if not keys_eq_at(buf, f.hop_key_off[0], buf, root_off):
            return "first_hop_not_root"
        # last hop key = the sending peer's key
        if not key_eq_at(self.r.port_key[port], buf, f.hop_key_off[n - 1]):
            return "last_hop_not_peer"
        i = 0
        while i < n:
            if f.hop_port[i] == 0:
                return "hop_port_zero"
            j = i + 1
            while j < n:
                if keys_eq_at(buf, f.hop_key_off[i], buf, f.hop_key_off[j]):
                    return "duplicate_key"
                j += 1
            i += 1
        # the same root must not go backwards in sequence
        if self.ann_valid[port] and key_eq_at(self.ann_root[port], buf, root_off):
            if f.root_seq < self.ann_seq[port]:
                return "sequence_backwards"
        # every hop signature must verify
        pool = self.pool
        known = self.known
        par = NONE
        i = 0
        while i < n:
            x = pool.lookup(par, i, f.hop_port[i], buf, f.hop_key_off[i], f.hop_sig_off[i])
            if x == NONE:
                break
            known[i] = x
            par = x
            i += 1
        self.known_n = i
        while i < n:
            ko = f.hop_key_off[i]
            so = f.hop_sig_off[i]
            if not self.r.verify(bytes(buf[ko:ko + 32]), bytes(buf[f.ann_off:f.hop_off[i]]),
                                 bytes(buf[so:so + 64])):
                return "bad_signature"
            i += 1
        return None

    def _release(self, port):
        """Forget port's stored path (its pool nodes lose a reference)."""
        if not self.ann_valid[port]:
            return
        self.ann_valid[port] = 0
        pool = self.pool
        base = port * self.max_hops
        i = self.ann_nhops[port] - 1
        while i >= 0:
            pool.decref(self.ann_path[base + i])
            i -= 1
        self.ann_nhops[port] = 0

    def _evict_for(self, port, need):
        """Make `need` pool nodes free by forgetting other peers'
        announcements: never the parent's, deepest first (the least
        useful for tree routing and the last a parent would be chosen
        from); each forgotten one counts in `evicted`."""
        pool = self.pool
        while pool.free() < need:
            victim = 0
            p = 1
            while p < len(self.ann_valid):
                if p != port and p != self.parent and self.ann_valid[p]:
                    if not victim or self.ann_nhops[p] > self.ann_nhops[victim] or (
                            self.ann_nhops[p] == self.ann_nhops[victim]
                            and self.ann_order[p] > self.ann_order[victim]):
                        victim = p
                p += 1
            if not victim:
                return False
            self._release(victim)
            self.evicted += 1
        return True

    def store(self, port, buf, n, f, now):
        """Store port's announcement (checked by sanity_check just before)
        as a path in the pool; False (nothing stored, the previous one
        forgotten) when the pool cannot hold it."""
        pool = self.pool
        nh = f.nhops
        known = self.known
        kn = self.known_n
        # take the known prefix before letting go of the old path (they
        # may share nodes), then make room for the new hops
        i = 0
        while i < kn:
            pool.incref(known[i])
            i += 1
        self._release(port)
        if pool.free() < nh - kn and not self._evict_for(port, nh - kn):
            i = 0
            while i < kn:
                pool.decref(known[i])
                i += 1
            return False
        H = self.max_hops
        base = port * H
        path = self.ann_path
        par = known[kn - 1] if kn else NONE
        i = 0
        while i < nh:
            if i < kn:
                x = known[i]
            else:
                x = pool.add(par, i, f.hop_port[i], buf, f.hop_key_off[i], f.hop_sig_off[i])
                pool.incref(x)
            path[base + i] = x
            par = x
            i += 1
        copy_into(self.ann_root[port], 0, buf, f.root_off, 32)
        self.ann_seq[port] = f.root_seq
        self.ann_time[port] = now
        self.order += 1
        self.ann_order[port] = self.order
        self.ann_nhops[port] = nh
        mine = 0
        key = self.r.key
        i = 0
        while i < nh and not mine:
            if key_eq_at(key, buf, f.hop_key_off[i]):
                mine = 1
            i += 1
        self.ann_mine[port] = mine
        self.ann_valid[port] = 1
        self.ann_seen[port] = 1
        return True

    def drop_announcement(self, port, now):
        """port's latest announcement could not be stored (too deep for
        this node): the older one it replaces is no longer true either."""
        was_parent = port == self.parent and self.ann_valid[port]
        self._release(port)
        self.par_of = -1
        if was_parent:
            self.select_parent(now)

    def handle(self, port, buf, n, f, now):
        """Apply the re-parenting rules (docs/reference/PROTOCOL_NOTES.md) to an
        announcement that passed the sanity checks. Returns False when it could not be stored."""
        key = self.r.key
        first = not self.ann_seen[port]
        prev_root = self._prev_root
        prev_seq = 0
        had = self.ann_valid[port]
        if had:
            copy_into(prev_root, 0, self.ann_root[port], 0, 32)
            prev_seq = self.ann_seq[port]
        else:
            copy_into(prev_root, 0, b"\x00" * 32, 0, 32)
        was_weaker_before = had and prev_root < self.root_key()
        if not self.store(port, buf, n, f, now):
            if port == self.parent:
                self.par_of = -1
                self.select_parent(now)
            return False
        if first:
            # PROTOCOL_NOTES.md difference 5: our own wakeup to a new peer only
            self.r._send_wakeup(port)
        new_root = self.ann_root[port]
        new_seq = self.ann_seq[port]

        if port == self.parent:
            if self.wait:
                return True  # store only
            if self.ann_mine[port] or new_root < prev_root or (
                    new_root == prev_root and new_seq == prev_seq):
                # bad news: our parent lost its way to the root (or looped)
                self.become_root(now, wait=True)
                return True
            if new_root > prev_root or new_seq > prev_seq:
                self.sig = None  # re-sign the new announcement
                self.changed = True
                self.r.announce_all()
            return True

        # from another peer
        if self.wait:
            return True
        if self.ann_mine[port]:
            return True
        our_root = self.root_key()
        if new_root > our_root:
            self.set_parent(port)
            return True
        if new_root < our_root:
            # Reference behaviour (PROTOCOL_NOTES.md difference 6): a weaker root
            # heard from this peer for the first time gets no immediate
            # reply; we answer when the peer repeats it.
            if was_weaker_before:
                self.r.announce_to(port)
            return True
        self.select_parent(now)
        return True

    # ---- decisions ------------------------------------------------------
    def set_parent(self, port):
        if self.parent != port:
            self.parent = port
            self.sig = None
            self.changed = True
            self.r.announce_all()

    def become_root(self, now, wait=False):
        was_root = self.parent == 0
        self.parent = 0
        self.sig = None
        self.root_sent = now
        if wait:
            self.wait = True
            self.wait_until = now
        if not was_root:
            self.changed = True
            self.reseq_due = self.reseq_early
        self.r.announce_all()

    def select_parent(self, now):
        """Highest root key, then highest sequence, then earliest received;
        among peers whose announcement is not expired and does not contain
        our key. Our own root counts as the starting candidate."""
        key = self.r.key
        best = 0
        best_root = key
        best_seq = self.seq
        best_order = 0
        ports = self.r.up
        p = 1
        while p < len(ports):
            if ports[p] and self.ann_valid[p] and not self.expired(p, now) \
                    and not self.ann_mine[p]:
                root = self.ann_root[p]
                seq = self.ann_seq[p]
                take = False
                if root > best_root:
                    take = True
                elif root == best_root and best != 0:
                    # (a peer naming our own key as root contains our key
                    # and was skipped above, so best != 0 here)
                    if seq > best_seq or (seq == best_seq and self.ann_order[p] < best_order):
                        take = True
                if take:
                    best = p
                    best_root = root
                    best_seq = seq
                    best_order = self.ann_order[p]
            p += 1
        if best:
            if best != self.parent:
                self.set_parent(best)
            return
        if self.parent != 0:
            self.become_root(now)

    def port_down(self, port, now):
        was = self.ann_valid[port]
        self._release(port)
        self.ann_seen[port] = 0
        if was and port == self.parent:
            self.par_of = -1
            self.select_parent(now)

    def tick(self, now):
        if self.wait and ticks_diff(now, self.wait_until) >= _REPARENT_WAIT_MS:
            self.wait = False
            self.select_parent(now)
        if self.parent and self.expired(self.parent, now):
            self.select_parent(now)
        if self.parent == 0 and ticks_diff(now, self.root_sent) >= (
                self.reseq_due or _ROOT_INTERVAL_MS):
            # A new root's tree is no breadth-first tree: a node keeps the
            # peer that first brought the root's sequence, while links were
            # still coming up and queues were full of the start's
            # announcements. A new sequence soon after lets every node
            # choose again by first arrival over the links that are up, so
            # a new root re-announces once early, then every 30 min.
            self.seq += 1
            self.root_sig = None
            self.root_sent = now
            self.reseq_due = 0
            self.r.announce_all()

    # ---- building our announcement for one peer -------------------------
    def build(self, buf, port):
        """Our current announcement, signed for `port`, into buf; returns
        the frame length. As a child: the parent's announcement rebuilt
        from the pool (the bytes it sent, ports in minimal varu64 as the
        reference encodes them), plus our hop."""
        r = self.r
        if self.parent == 0:
            if self.root_sig is None:
                signed = bytearray(32 + wire.varu64_len(self.seq))
                copy_into(signed, 0, r.key, 0, 32)
                wire.encode_varu64(signed, 32, self.seq)
                self.root_sig = r.sign(bytes(signed))
            i = wire.announcement_start(buf, r.key, self.seq)
            i = wire.announcement_hop(buf, i, port, r.key, 0, self.root_sig, 0)
            return wire.announcement_end(buf, i)
        p = self.parent
        pool = self.pool
        i = wire.announcement_start(buf, self.ann_root[p], self.ann_seq[p])
        base = p * self.max_hops
        h = 0
        nh = self.ann_nhops[p]
        while h < nh:
            x = self.ann_path[base + h]
            i = wire.announcement_hop(buf, i, pool.port[x], pool.keys, x << 5, pool.sigs, x << 6)
            h += 1
        if self.sig is None:
            self.sig = r.sign(bytes(buf[12:i]))
        i = wire.announcement_hop(buf, i, port, r.key, 0, self.sig, 0)
        return wire.announcement_end(buf, i)

    # ---- tree routing -----------------------------------------------------
    def _dst_ports(self, buf, doff, dlen):
        """Decode the destination coordinates into self.dports (the first
        max_hops ports; a port above 16 bits, which no stored hop has, as 0)
        and return how many ports there are in all. Allocates nothing."""
        dp = self.dports
        H = self.max_hops
        end = doff + dlen
        i = doff
        k = 0
        while i < end:
            v = 0
            while True:
                b = buf[i]
                i += 1
                if v <= 0xFFFF:
                    v = (v << 7) | (b & 0x7F)
                if b < 0x80:
                    break
            if k < H:
                dp[k] = v if v <= 0xFFFF else 0
            k += 1
        return k

    def _dist(self, p, n, nd):
        """Tree distance between the first n hop ports of port p's path and
        the nd destination ports in self.dports."""
        dp = self.dports
        m = nd if nd < self.max_hops else self.max_hops
        if n < m:
            m = n
        base = p * self.max_hops
        path = self.ann_path
        pport = self.pool.port
        k = 0
        while k < m and pport[path[base + k]] == dp[k]:
            k += 1
        return n + nd - 2 * k

    def next_hop(self, buf, doff, dlen, from_port):
        """Tree next hop towards the encoded coordinates buf[doff:doff+dlen]:
        a peer strictly closer than us (ties: earliest received
        announcement); 0 when none. Sets self.dist to our own distance."""
        nd = self._dst_ports(buf, doff, dlen)
        p = self.parent
        if p and self.ann_valid[p]:
            ours = self._dist(p, self.ann_nhops[p], nd)
        else:
            ours = nd
        self.dist = ours
        if ours == 0:
            return 0
        root = self.root_key()
        rseq = self.root_seq()
        ports = self.r.up
        best = 0
        best_d = ours
        p = 1
        while p < len(ports):
            if ports[p] and p != from_port and self.ann_valid[p] \
                    and self.ann_seq[p] == rseq and self.ann_root[p] == root:
                d = self._dist(p, self.ann_nhops[p] - 1, nd)
                if d < best_d or (d == best_d and best and self.ann_order[p] < self.ann_order[best]):
                    best = p
                    best_d = d
            p += 1
        return best
