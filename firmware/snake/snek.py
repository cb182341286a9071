# Virtual snake (SNEK): routing table, descending entry, bootstrap handling
# and SNEK next-hop selection, as the reference Pinecone router does them
# (docs/reference/PROTOCOL_NOTES.md "Virtual snake", and "Differences from the
# published text" for where the reference and the published rules differ).
#
# next_hop() is on the forwarding hot path: it allocates nothing. Its result
# is left in attributes (nh_port, nh_key/nh_koff, nh_seq) instead of a tuple.
from array import array
from snake import wire
from snake.tables import Table
from snake.platform import ticks_diff, ticks_add, copy_into, key_cmp, const
from snake.telemetry import (D_BOOTSTRAP_ROOT, D_BOOTSTRAP_REPLAY, D_BOOTSTRAP_SELF,
                             D_BAD_SIGNATURE, D_ROUTE_TABLE_FULL, D_LOOP, D_WATERMARK,
                             D_MALFORMED)

BOOTSTRAP_INTERVAL_MS = 5000     # the seeds' and the reference's interval
BOOTSTRAP_SOON_MS = 500          # earliest "bootstrap soon" after the last one
# When snakemesh bootstraps (ramp after a change, steady interval) is timing
# policy: router.py, BOOTSTRAP_RAMP_MS and BOOTSTRAP_EVERY_MS.
MAINTAIN_INTERVAL_MS = 1000
ROUTE_EXPIRY_MS = 10000
ROUTE_USE_MS = 9000              # from this age on a route is not taken as a new watermark key
ROUTE_STALE_MS = 7000            # a route older than this goes first from a full table
DESC_EXPIRY_MS = 10000

FULL_KEY = b"\xff" * 32


def worse(akey, aseq, bkey, bseq):
    """Watermark a is worse than b: a higher key, or the same key with a
    lower non-zero sequence (reference WorseThan)."""
    if akey > bkey:
        return True
    if akey == bkey and aseq != 0 and aseq < bseq:
        return True
    return False


# Bootstrap (and wakeup) sequences are the originator's Unix ms (~2**40.7
# today; a board without a clock counts from 2000: ~2**39.8). A route keeps
# its sequence in 46 bits, a 16-bit high and a 30-bit low part (6 bytes,
# and reading them allocates nothing: a small int is 31 bits on a 32-bit
# port). A sequence at or above 2**46 ms (the year 4199) is no real one:
# the frame is dropped and counted as malformed (drops `malformed`).
SEQ_LIMIT = 1 << 46
_LO = 0x3FFFFFFF
# A route's refresh time is the ticks' low 16 bits (2 bytes an entry, not
# 4): its age is the 16-bit difference, read as signed, so it is exact
# while the age lies within +-32.7 s. The sweep (expire()) removes every
# route 10 s old at least once a second, and runs before a route is read
# or written whenever the last one is ROUTE_EXPIRY_MS old (a node that
# stalled, or one whose tick stopped), so no entry gets older than that
# between sweeps: see expire().
_AGE_HALF = const(0x8000)
_AGE_MASK = const(0xFFFF)
_AGE_UNSURE_MS = const(22768)   # 32768 - ROUTE_EXPIRY_MS: a sweep this late cannot tell ages
_NO_ROOT = const(3)              # a route's root index: installed under a root no longer known
_ROOT_RING = const(3)            # (two bits with _NO_ROOT)


class Snake:
    def __init__(self, router, profile):
        self.r = router
        cap = profile.max_routes
        # Route entries: key in the sorted table, fields in flat arrays by
        # slot (43 bytes an entry on a plain ESP32, nothing boxed).
        self.routes = Table(cap, victim=self._victim, on_evict=self._on_evict)
        # the ports and the root of a route in one item (src(), dst(),
        # root_ix(), set_ports()): the port its bootstrap came from, the
        # port we forwarded it to (0: dead end), r_pw bits each, and the
        # root (key, sequence) it was installed under in two bits above
        # them, an index into a ring of recent roots (exact: equal index
        # <=> equal root key and root sequence; _NO_ROOT once that ring
        # slot is reused). One byte an entry up to 7 peers (ESP32_GENERIC),
        # two up to 127, four above.
        pw = 1
        while (1 << pw) <= profile.max_peers:
            pw += 1
        self.r_pw = pw
        b = 2 * pw + 2
        self.r_port = (bytearray(cap) if b <= 8 else
                       array("H", bytearray(2 * cap)) if b <= 16 else array("i", bytearray(4 * cap)))
        self.r_last = array("H", bytearray(2 * cap))   # ticks & 0xFFFF when last refreshed (age())
        self.ring_key = [b""] * _ROOT_RING
        self.ring_seq = [0] * _ROOT_RING
        self.ring_next = 0
        # bootstrap sequence = watermark sequence, as seq >> 30 (16 bits)
        # and seq & (2**30 - 1): a Unix-ms sequence is a boxed 32-byte long
        # int on a 32-bit board, two array items are 6 bytes and reading
        # them allocates nothing (SEQ_LIMIT)
        self.r_seq_hi = array("H", bytearray(2 * cap))
        self.r_seq_lo = array("i", bytearray(4 * cap))
        # Route hints (a snakemesh overload policy, docs/reports/CAPACITY.md): for
        # a key the full table has no room for, 9 bytes instead of ~50: the
        # first 4 key bytes, the port its bootstrap came from, when. Direct-
        # mapped (a newer key takes a busy slot). See fallback().
        hc = 1
        while hc < profile.route_hints:
            hc <<= 1
        self.hint_mask = hc - 1 if profile.route_hints else -1
        hc = hc if profile.route_hints else 0
        self.hint_pfx = bytearray(4 * hc)
        self.hint_port = bytearray(hc)
        self.hint_last = array("i", [0] * hc)
        self.hints_used = 0             # frames forwarded by a hint
        # descending entry (next-lower key in the snake)
        self.desc_valid = False
        self.desc_key = bytearray(32)
        self.desc_port = 0
        self.desc_last = 0
        self.desc_root = bytearray(32)
        self.desc_root_seq = 0
        self.desc_seq = 0
        # next-hop results: the watermark key is nh_key[nh_koff:nh_koff+32]
        # (a reference into whichever buffer holds it, never copied)
        self.nh_port = 0
        self.nh_key = None
        self.nh_koff = 0
        self.nh_seq = 0
        self.nh_slot = -1               # route slot of the result, -1: none
        # scratch keys for the frame being handled (the router's: a frame
        # is either traffic or a bootstrap, never both at once)
        self.k_dst = router.k_dst
        self.k_wm = router.k_wm
        self.k_root = bytearray(32)
        self.bs_seq = 0                 # our last bootstrap sequence
        self.last_bootstrap = 0
        self.last_maintain = 0
        self._new_key = None            # key being inserted (for the victim rule)
        self.evicted_live = 0           # unexpired entries evicted for lack of room
        self.routes_refused = 0         # bootstraps relayed without a route: no room
        self.now = 0

    # ---- route fields ------------------------------------------------------------
    def seq(self, slot):
        return (self.r_seq_hi[slot] << 30) | self.r_seq_lo[slot]

    def _set_seq(self, slot, v):
        # v < SEQ_LIMIT (checked where a frame's sequence comes in)
        self.r_seq_hi[slot] = v >> 30
        self.r_seq_lo[slot] = v & _LO

    def src(self, slot):
        """Port the route's bootstrap came from."""
        return self.r_port[slot] & ((1 << self.r_pw) - 1)

    def dst(self, slot):
        """Port we forwarded the route's bootstrap to (0: a dead end)."""
        return (self.r_port[slot] >> self.r_pw) & ((1 << self.r_pw) - 1)

    def root_ix(self, slot):
        """Index of the route's root in the ring (root_index()), or _NO_ROOT."""
        return self.r_port[slot] >> (self.r_pw << 1)

    def set_ports(self, slot, src, dst, rix):
        pw = self.r_pw
        self.r_port[slot] = src | (dst << pw) | (rix << (pw << 1))

    def age(self, slot, now):
        """ms since the route in `slot` was last refreshed (exact within
        +-32.7 s, which expire() keeps every entry within)."""
        return (((now & _AGE_MASK) - self.r_last[slot] + _AGE_HALF) & _AGE_MASK) - _AGE_HALF

    def _seq_lt(self, slot, v):
        """route slot's sequence < v (v an int), without building the
        route's sequence as an int"""
        hi = self.r_seq_hi[slot]
        vh = v >> 30
        if hi != vh:
            return hi < vh
        return self.r_seq_lo[slot] < (v & _LO)

    def root_index(self, root, root_seq):
        """Ring index for (root key object, root sequence); makes room by
        reusing the oldest slot (routes still naming it lose their root)."""
        i = 0
        while i < _ROOT_RING:
            if self.ring_seq[i] == root_seq and self.ring_key[i] == root:
                return i
            i += 1
        i = self.ring_next
        self.ring_next = (i + 1) % _ROOT_RING
        t = self.routes
        rp = self.r_port
        sh = self.r_pw << 1
        low = (1 << sh) - 1
        s = 0
        while s < t.capacity:
            v = rp[s]
            if v >> sh == i:
                rp[s] = (v & low) | (_NO_ROOT << sh)
            s += 1
        self.ring_key[i] = bytes(root)
        self.ring_seq[i] = root_seq
        return i

    def route_root(self, slot):
        """(root key bytes or None, root sequence) a route was installed under."""
        i = self.root_ix(slot)
        if i == _NO_ROOT:
            return None, 0
        return self.ring_key[i], self.ring_seq[i]

    def set_route(self, slot, src, dst, now, root, root_seq, seq):
        if ticks_diff(now, self.last_maintain) >= ROUTE_EXPIRY_MS:
            self.expire(now)
        self.set_ports(slot, src, dst, self.root_index(root, root_seq))
        self.r_last[slot] = now & _AGE_MASK
        self._set_seq(slot, seq)

    # ---- route hints ----------------------------------------------------------
    def _hint_slot(self, buf, off):
        return ((buf[off] << 8) | buf[off + 1]) & self.hint_mask

    def set_hint(self, buf, off, port, now):
        """Remember that the bootstrap of key buf[off:off+32] came from port."""
        if self.hint_mask < 0:
            return
        i = self._hint_slot(buf, off)
        o = i << 2
        pf = self.hint_pfx
        pf[o] = buf[off]
        pf[o + 1] = buf[off + 1]
        pf[o + 2] = buf[off + 2]
        pf[o + 3] = buf[off + 3]
        self.hint_port[i] = port
        self.hint_last[i] = now

    def hint(self, buf, off, now):
        """Port a live hint names for key buf[off:off+32], or 0."""
        if self.hint_mask < 0:
            return 0
        i = self._hint_slot(buf, off)
        p = self.hint_port[i]
        if p == 0 or ticks_diff(now, self.hint_last[i]) >= ROUTE_EXPIRY_MS:
            return 0
        o = i << 2
        pf = self.hint_pfx
        if pf[o] != buf[off] or pf[o + 1] != buf[off + 1] or pf[o + 2] != buf[off + 2] \
                or pf[o + 3] != buf[off + 3]:
            return 0
        if not self.r.up[p]:
            return 0
        return p

    def fallback(self, dst, wm_key, in_port, dead_end, now):
        """Snakemesh overload policy (docs/reports/CAPACITY.md; beyond the seeds,
        which assume every route fits): the frame would be dropped here (a
        dead end that is not ours, a loop, or a watermark worse than the
        frame's), and the key its watermark names, the key an upstream
        node was routing it towards, is one whose route did not fit our
        table. Had it fitted, the seeds' rules would have chosen it: it is
        the watermark's key, so it lies above the destination, and nothing
        we know lies between. So send the frame where that key's bootstrap
        came from, with its watermark unchanged (exactly what that route
        would have written). Returns the port, or 0 to drop as before."""
        if self.hint_mask < 0:
            return 0
        if dead_end:
            # a dead end is ours unless the watermark's key lies between
            # the destination and our own key (or is the destination)
            c = key_cmp(wm_key, 0, self.r.key, 0)
            if c >= 0 and key_cmp(wm_key, 0, dst, 0) != 0:
                return 0
        p = self.hint(wm_key, 0, now)
        if p == 0 or p == in_port:
            return 0
        self.hints_used += 1
        return p

    # ---- table eviction ----------------------------------------------------
    def _victim(self, table):
        """Eviction rule for a full routing table (a snakemesh policy: the
        seeds assume room for every route; docs/reports/CAPACITY.md): the
        oldest entry not refreshed for ROUTE_STALE_MS (an expired one
        first: it is older); otherwise the entry whose key is farthest
        from our own key in keyspace (|entry - own| as 256-bit integers:
        the smallest or the largest key), but only if the new key is
        closer than it (else the insert is refused, counted, and the key
        becomes a hint). A key's bootstrap refreshes its route every 5 s
        at most once the ramp is over (PROTOCOL_NOTES.md choice E); one not
        refreshed for 7 s mostly took another path (bootstrap paths move,
        choice H), and its entry holds a place a live path needs. The keys
        next to ours decide where bootstraps end, so they stay."""
        worst = self._stale_slot()
        if worst >= 0:
            return worst
        worst, worst_d = self._farthest()
        if self._new_key is not None and self._distance(self._new_key) >= worst_d:
            return -1
        if worst >= 0:
            self.evicted_live += 1
        return worst

    def _would_refuse(self, key):
        """The full routing table would refuse `key` now (_victim's rule,
        without its side effects)."""
        t = self.routes
        if t.count < t.capacity or self._stale_slot() >= 0:
            return False
        return self._distance(key) >= self._farthest()[1]

    def _stale_slot(self):
        """The routing-table slot whose entry was refreshed longest ago,
        if that is ROUTE_STALE_MS or more (expired ones included), else -1."""
        t = self.routes
        n16 = self.now & _AGE_MASK     # (now itself + _AGE_HALF may not be a small int)
        last = self.r_last
        order = t.order
        best = -1
        age = ROUTE_STALE_MS - 1
        pos = t.count
        while pos > 0:
            pos -= 1
            i = order[pos]
            a = ((n16 - last[i] + _AGE_HALF) & _AGE_MASK) - _AGE_HALF
            # of equal ages the lowest slot, as a walk over the slots takes it
            if a > age or (a == age and i < best):
                age = a
                best = i
        return best

    def _distance(self, key):
        """|key - own key| as 256-bit integers."""
        return abs(int.from_bytes(key, "big") - int.from_bytes(self.r.key, "big"))

    def _farthest(self):
        """(slot, distance) of the entry farthest from our own key: the
        smallest or the largest key of the sorted table."""
        t = self.routes
        worst = -1
        worst_d = -1
        for pos in (0, t.count - 1):
            s = t.order[pos]
            d = self._distance(t.key(s))
            if d > worst_d:
                worst_d = d
                worst = s
        return worst, worst_d

    def _on_evict(self, slot):
        # a live entry evicted for room lives on as a hint
        a = self.age(slot, self.now)
        if a < ROUTE_EXPIRY_MS:
            self.set_hint(self.routes.keys, slot << 5, self.src(slot), ticks_add(self.now, -a))

    # ---- next hop ------------------------------------------------------------
    def next_hop(self, dst, bootstrap, wm_key, wm_seq, now):
        """SNEK next hop for `dst` (bytearray(32)); the frame's watermark is
        (wm_key, wm_seq). Result: self.nh_port (0 = local), and the watermark
        to write into the frame: (self.nh_key[self.nh_koff:], self.nh_seq).

        The seeds' rules, steps 1-7, in order. Steps 3.3 and 6 ask for "the
        smallest key above the destination" (or the destination itself)
        among the ancestors / route entries: both are kept sorted, so the
        loops of the seed text are binary searches here with the same
        result (keys are unique in each; the candidate that survives a
        scan in any order is: an exact match if one qualifies, else the
        smallest qualifying key between destination and best key)."""
        r = self.r
        if ticks_diff(now, self.last_maintain) >= ROUTE_EXPIRY_MS:
            self.expire(now)            # route ages must be exact (expire())
        tree = r.tree
        own = r.key
        ports = r.up
        np = len(ports)
        # 1. start with ourselves
        bbuf = own
        boff = 0
        best_port = 0
        best_seq = 0
        self.nh_slot = -1
        # 2. traffic for us is handled locally
        if not bootstrap and dst == own:
            self.nh_port = 0
            self.nh_key = own
            self.nh_koff = 0
            self.nh_seq = 0
            return 0
        exact = False                    # best key == dst
        # 3. via the parent, towards the root
        parent = tree.parent
        if parent and tree.ann_valid[parent]:
            root = tree.ann_root[parent]
            # 3.1 bootstraps start towards the root. PROTOCOL_NOTES.md difference 2:
            # only at the originator (best key still equals the destination,
            # i.e. our own key), otherwise a relay could never be the dead end.
            if bootstrap and own == dst:
                bbuf = root
                best_port = parent
            # 3.2 destination above us: worst case, up to the root
            elif own < dst < root:
                bbuf = root
                best_port = parent
            # 3.3 our ancestors: an exact match (not for bootstraps), else
            # the smallest ancestor key between the destination and the
            # best key
            sk = tree.ancestors()
            n = tree.par_n
            if n:
                pk = tree.pool.keys
                lo = 0
                hi = n
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if key_cmp(pk, sk[mid] << 5, dst, 0) < 0:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo < n and key_cmp(pk, sk[lo] << 5, dst, 0) == 0:
                    if not bootstrap:
                        # (best key cannot be dst here: own == dst is
                        # handled in step 2, the root only if dst < root)
                        bbuf = pk
                        boff = sk[lo] << 5
                        best_port = parent
                        exact = True
                    lo += 1
                if not exact and lo < n and key_cmp(pk, sk[lo] << 5, bbuf, boff) < 0:
                    bbuf = pk
                    boff = sk[lo] << 5
                    best_port = parent
        # 4. our peers' ancestors (exact match of the destination only):
        # the lowest port whose announcement names it
        if not bootstrap and not exact:
            p = tree.peer_with_key(dst, 0)
            if p:
                bbuf = dst
                boff = 0
                best_port = p
                exact = True
        # 4, ordered (PROTOCOL_NOTES.md difference 7): the reference also
        # takes any key of a peer's announcement (its ancestors and the
        # peer itself, the last hop) strictly between the destination and
        # the best key, via that peer, as in 3.3, for bootstraps and
        # traffic; the seed text has the exact match only. Without it a
        # bootstrap sees only its path's ancestors and routes, and on a
        # mesh with hubs it dead-ends short of its true successor for
        # minutes (docs/reports/CAPACITY.md); traffic still takes the reference's
        # paths (make bench figure 6, first-message stretch). A
        # binary search in the hop pool's key order (Tree.peer_key_between).
        if not exact:
            p = tree.peer_key_between(dst, bbuf, boff)
            if p:
                bbuf = tree.pool.keys
                boff = tree.between_off
                best_port = p
        # 5. the best key is a direct peer: use the direct link
        pkeys = r.port_key
        b0 = bbuf[boff]
        p = 1
        while p < np:
            if ports[p]:
                pk = pkeys[p]
                if pk[0] == b0 and key_cmp(pk, 0, bbuf, boff) == 0:
                    bbuf = pk
                    boff = 0
                    best_port = p
                    b0 = pk[0]
            p += 1
        # 6. routing table entries (transitive paths): skip expired entries,
        # entries from the local port, and entries whose watermark (key,
        # seq) is beyond the frame's; then an exact match (not for
        # bootstraps), else the smallest key between destination and best
        if not exact:
            t = self.routes
            keys = t.keys
            order = t.order
            cnt = t.count
            pos = t.lower(dst, 0)
            rp = self.r_port
            pm = (1 << self.r_pw) - 1
            last = self.r_last
            n16 = now & _AGE_MASK
            while pos < cnt:
                s = order[pos]
                ko = s << 5
                c = key_cmp(keys, ko, dst, 0)
                if c > 0 and key_cmp(keys, ko, bbuf, boff) >= 0:
                    break                   # at or above the best key: done
                w = key_cmp(keys, ko, wm_key, 0)
                if w > 0:
                    break                   # beyond the watermark, as all after it
                pos += 1
                p = rp[s] & pm              # the port the route's bootstrap came from
                if p == 0:
                    continue
                age = ((n16 - last[s] + _AGE_HALF) & _AGE_MASK) - _AGE_HALF
                if age >= ROUTE_EXPIRY_MS:
                    continue
                if w == 0:
                    if self._seq_lt(s, wm_seq):
                        continue
                elif age >= ROUTE_USE_MS:
                    # a new watermark key needs an entry with life left:
                    # the relays towards that key hold older entries
                    # (installed earlier by its bootstrap) and a frame
                    # sent along a route about to expire meets an
                    # expired one a few hops on and is dropped there
                    # (loop / watermark); the frame's own watermark key
                    # (w == 0) keeps its full ROUTE_EXPIRY_MS
                    continue
                if c == 0:
                    if bootstrap:
                        continue            # not dst < key: look further up
                    exact = True
                bbuf = keys
                boff = ko
                best_port = p
                self.nh_slot = s
                break
        if self.nh_slot >= 0:
            best_seq = self.seq(self.nh_slot)
        # 7. prefer the faster link type to the chosen peer
        if best_port:
            links = r.port_link
            b0 = bbuf[boff]
            p = 1
            while p < np:
                if ports[p] and p != best_port:
                    pk = pkeys[p]
                    if pk[0] == b0 and key_cmp(pk, 0, bbuf, boff) == 0:
                        if links[p] < links[best_port]:
                            best_port = p
                        elif links[p] == links[best_port] and tree.ann_valid[p] \
                                and tree.ann_valid[best_port] \
                                and tree.ann_seq[p] == tree.ann_seq[best_port] \
                                and tree.ann_order[best_port] > tree.ann_order[p]:
                            best_port = p
                p += 1
        # PROTOCOL_NOTES.md difference 1: the reference always returns
        # (best key, best sequence), also when the sequence is 0.
        self.nh_port = best_port
        self.nh_key = bbuf
        self.nh_koff = boff
        self.nh_seq = best_seq
        return best_port

    def nh_worse(self, wm_key, wm_seq):
        """The next-hop watermark (nh_key, nh_seq) is worse than (wm_key,
        wm_seq): a higher key, or the same key with a lower non-zero
        sequence (reference WorseThan), compared in place."""
        c = key_cmp(self.nh_key, self.nh_koff, wm_key, 0)
        if c > 0:
            return True
        if c == 0 and self.nh_seq != 0 and self.nh_seq < wm_seq:
            return True
        return False

    # ---- bootstraps -----------------------------------------------------
    def handle_bootstrap(self, port, buf, n, f, now):
        """A bootstrap arrived on `port`. Installs the route, updates the
        descending entry at a dead end, or returns the next-hop port to
        forward to (after rewriting the watermark). Returns (via
        self.fwd_len) the new frame length; the return value is the port to
        forward to, 0 when consumed, -1 when dropped."""
        r = self.r
        c = r.counters
        tree = r.tree
        self.now = now
        if f.seq >= SEQ_LIMIT:
            # a sequence at or beyond 2**46 ms (Unix time in the year 4199)
            # does not fit the route's 46 bits: not a real one
            c.drops[D_MALFORMED] += 1
            return -1
        if ticks_diff(now, self.last_maintain) >= ROUTE_EXPIRY_MS:
            self.expire(now)            # before a slot is looked up (expire())
        copy_into(self.k_dst, 0, buf, f.dst_off, 32)
        bkey = self.k_dst
        # cheap checks before the signature: root must match ours
        copy_into(self.k_root, 0, buf, f.root_off, 32)
        if self.k_root != tree.root_key() or f.root_seq != tree.root_seq():
            c.drops[D_BOOTSTRAP_ROOT] += 1
            return -1
        if bkey == r.key:
            c.drops[D_BOOTSTRAP_SELF] += 1
            return -1
        slot = self.routes.find(bkey)
        # the root the bootstrap carries is our current one (checked above)
        rix = self.root_index(self.k_root, f.root_seq)
        # replay check (PROTOCOL_NOTES.md difference 4: only against an entry for
        # the same root; an entry for another root is replaced)
        if slot >= 0 and self.root_ix(slot) == rix and not self._seq_lt(slot, f.seq):
            c.drops[D_BOOTSTRAP_REPLAY] += 1
            return -1
        # where would it go next? (loop and watermark checks are cheap too)
        copy_into(self.k_wm, 0, buf, f.wm_off, 32)
        nh = self.next_hop(bkey, True, self.k_wm, f.wm_seq, now)
        keep_wm = False
        if nh == 0 or nh == port or self.nh_worse(self.k_wm, f.wm_seq):
            hp = self.fallback(bkey, self.k_wm, port, nh == 0, now)
            if hp:
                nh = hp
                keep_wm = True
        dead_end = nh == 0
        if not dead_end and not keep_wm:
            if nh == port:
                c.drops[D_LOOP] += 1
                return -1
            if self.nh_worse(self.k_wm, f.wm_seq):
                c.drops[D_WATERMARK] += 1
                return -1
        desc_change = dead_end and self._desc_would_change(bkey, port)
        # signature, by policy (docs/reference/PROTOCOL_NOTES.md choice C):
        #   all: always; on-change: when the route is new or its source port
        #   or root changes, or the descending entry would change; off: never
        policy = r.verify_policy
        need = True
        if policy == "off":
            need = False
        elif policy == "on-change":
            need = (slot < 0 or self.src(slot) != port or self.root_ix(slot) != rix
                    or desc_change)
            if need and slot < 0 and not desc_change and self._would_refuse(bkey):
                # Overload (docs/reports/CAPACITY.md): the full table would refuse
                # this key, so nothing of ours changes but a route hint; the
                # bootstrap goes on unverified and a node that stores its
                # route verifies it. An overloaded board met every refused
                # key's bootstrap again every 5 s and spent its CPU on them
                # (3.5x the verifications with 160 routes in the heap test).
                need = False
        if need:
            so = f.sig_off
            ok = r.verify(bytes(bkey), bytes(buf[f.signed_off:f.signed_off + f.signed_len]),
                          bytes(buf[so:so + 64]))
            if not ok:
                c.drops[D_BAD_SIGNATURE] += 1
                return -1
        else:
            c.verify_skipped += 1
        # the watermark goes into the frame before the route is installed:
        # nh_key points into the routing table when a route entry was
        # chosen, and a full table's insert may evict that very entry and
        # write the bootstrapping key into its slot
        if not dead_end:
            if keep_wm:
                self.fwd_len = n
            else:
                self.fwd_len = wire.set_watermark(buf, n, f, self.nh_key, self.nh_koff, self.nh_seq)
        # install / refresh the route (every node on the path installs it)
        if slot < 0:
            self._new_key = bkey
            slot = self.routes.insert(bkey)
            self._new_key = None
            if slot < 0:
                # Snakemesh overload policy (docs/reports/CAPACITY.md; the seeds
                # assume room for every route): the table is full of keys
                # that matter more to us than this one. The bootstrap still
                # goes on to its dead end, so its origin's place in the
                # snake is found, and a hint remembers where it came from
                # (fallback()). Dropping it, as a table-full node did
                # before, left the origin's successor wrong for good.
                self.routes_refused += 1
                self.set_hint(bkey, 0, port, now)
        if slot >= 0:
            self.set_ports(slot, port, nh, rix)
            self.r_last[slot] = now & _AGE_MASK
            # PROTOCOL_NOTES.md difference 3: the route's watermark is
            # (bootstrapping key, bootstrap sequence): the entry's sequence
            # is that sequence
            self._set_seq(slot, f.seq)
        if dead_end:
            if desc_change or (self.desc_valid and self.desc_key == bkey):
                self._set_desc(bkey, port, now, f.root_seq, f.seq)
            return 0
        return nh

    def _desc_would_change(self, bkey, port):
        """Descending update rules at a dead end: the bootstrapping key must
        be below ours; take it when we have no (valid) descending entry, when
        it is closer than the current one, or when it is the current one
        arriving over a different port."""
        own = self.r.key
        if not (bkey < own):
            return False
        if not self.desc_valid:
            return True
        if self.desc_key == bkey:
            return self.desc_port != port
        return self.desc_key < bkey

    def _set_desc(self, bkey, port, now, root_seq, seq):
        changed = not self.desc_valid or self.desc_key != bkey
        copy_into(self.desc_key, 0, bkey, 0, 32)
        self.desc_port = port
        self.desc_last = now
        copy_into(self.desc_root, 0, self.k_root, 0, 32)
        self.desc_root_seq = root_seq
        self.desc_seq = seq
        self.desc_valid = True
        if changed:
            self.r.snake_changed()
            self.r.event("desc_changed", bkey)

    def originate_bootstrap(self, buf, now):
        """Build our bootstrap into buf; returns (via attributes) the port
        and the length, or 0 when there is nowhere to send it (root, no
        parent announcement)."""
        r = self.r
        tree = r.tree
        if tree.parent == 0 or not tree.ann_valid[tree.parent]:
            return 0
        seq = r.wall_ms()
        if seq <= self.bs_seq:
            seq = self.bs_seq + 1
        self.bs_seq = seq
        root = tree.root_key()
        rseq = tree.root_seq()
        sig = r.sign(wire.bootstrap_signed(seq, root, rseq))
        own = r.key
        nh = self.next_hop(own, True, FULL_KEY, 0, now)
        if nh == 0:
            return 0
        o = self.nh_koff
        wm = bytes(self.nh_key[o:o + 32])
        self.fwd_len = wire.encode_bootstrap(buf, own, wm, self.nh_seq, seq, root, rseq, sig)
        return nh

    # ---- maintenance ----------------------------------------------------
    def maintain(self, now):
        """Once a second (Router.tick): the descending entry's and the
        routes' expiry."""
        tree = self.r.tree
        if self.desc_valid:
            if ticks_diff(now, self.desc_last) >= DESC_EXPIRY_MS:
                self.desc_valid = False
                self.r.snake_changed()
                self.r.event("desc_changed", None)
            elif self.desc_root != tree.root_key() or self.desc_root_seq != tree.root_seq():
                self.desc_valid = False
                self.r.snake_changed()
                self.r.event("desc_changed", None)
        self.expire(now)

    def expire(self, now):
        """Remove the routes not refreshed for ROUTE_EXPIRY_MS. A route's
        refresh time is 16 bits of ticks (age()), so this sweep also keeps
        every age readable: it runs every second from Router.tick, and
        before a route is looked up or written (next_hop, handle_bootstrap,
        set_route) whenever the last sweep is ROUTE_EXPIRY_MS old. So a
        route is refreshed less than ROUTE_EXPIRY_MS after a sweep, and
        at the next sweep, `gap` later, it is less than gap + 10 s old:
        exact within 32.7 s. A sweep later than _AGE_UNSURE_MS (a node
        that stalled that long) cannot read ages, and needs not: every
        route is then at least gap - ROUTE_EXPIRY_MS > 10 s old, expired,
        and all go (counted in routes.changes as a change)."""
        gap = ticks_diff(now, self.last_maintain)
        self.last_maintain = now
        t = self.routes
        if gap >= _AGE_UNSURE_MS or gap < 0:
            if t.count:
                t.clear()
                t.changes += 1
            return
        order = t.order
        last = self.r_last
        n16 = now & _AGE_MASK
        pos = t.count
        while pos > 0:
            pos -= 1
            s = order[pos]
            if ((n16 - last[s] + _AGE_HALF) & _AGE_MASK) - _AGE_HALF >= ROUTE_EXPIRY_MS:
                t.remove(s)

    def port_down(self, port):
        t = self.routes
        order = t.order
        pos = t.count
        while pos > 0:
            pos -= 1
            s = order[pos]
            if self.src(s) == port or self.dst(s) == port:
                t.remove(s)
        if self.desc_valid and self.desc_port == port:
            self.desc_valid = False
            self.r.snake_changed()
            self.r.event("desc_changed", None)

