# Virtual snake (SNEK): routing table, descending entry, bootstrap handling
# and SNEK next-hop selection, as the reference Pinecone router does them
# (docs/PROTOCOL_NOTES.md "Virtual snake", and "Differences from the
# published text" for where the reference and the published rules differ).
#
# next_hop() is on the forwarding hot path: it allocates nothing. Its result
# is left in attributes (nh_port, nh_key, nh_seq) instead of a tuple.
from snake import wire
from snake.tables import Table, key_eq_at
from snake.platform import ticks_diff, copy_into
from snake.telemetry import (D_BOOTSTRAP_ROOT, D_BOOTSTRAP_REPLAY, D_BOOTSTRAP_SELF,
                             D_BAD_SIGNATURE, D_ROUTE_TABLE_FULL, D_LOOP, D_WATERMARK)

BOOTSTRAP_INTERVAL_MS = 5000
BOOTSTRAP_SOON_MS = 500          # earliest "bootstrap soon" after the last one
# After a change of our place in the snake (root, root sequence, parent or
# descending entry) the next bootstraps follow at these intervals before the
# regular 5 s (a snakemesh choice, see Router.snake_changed).
BOOTSTRAP_RAMP_MS = (1000, 1000, 2000, 2000, 3000, 4000)
MAINTAIN_INTERVAL_MS = 1000
ROUTE_EXPIRY_MS = 10000
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


class Snake:
    def __init__(self, router, profile):
        self.r = router
        cap = profile.max_routes
        self.routes = Table(cap, victim=self._victim)
        self.r_src = bytearray(cap)     # port the bootstrap came from
        self.r_dst = bytearray(cap)     # port we forwarded it to (0: dead end)
        self.r_last = [0] * cap         # ticks when last refreshed
        # root key per route: a reference to the router's bytes object of
        # the root current at install time (shared, never copied)
        self.r_root = [b""] * cap
        self.r_root_seq = [0] * cap
        self.r_seq = [0] * cap          # bootstrap sequence = watermark sequence
        # descending entry (next-lower key in the snake)
        self.desc_valid = False
        self.desc_key = bytearray(32)
        self.desc_port = 0
        self.desc_last = 0
        self.desc_root = bytearray(32)
        self.desc_root_seq = 0
        self.desc_seq = 0
        # next-hop results
        self.nh_port = 0
        self.nh_key = None              # reference to a key object (not copied)
        self.nh_seq = 0
        # scratch keys for the frame being handled
        self.k_dst = bytearray(32)
        self.k_wm = bytearray(32)
        self.k_root = bytearray(32)
        self.bs_seq = 0                 # our last bootstrap sequence
        self.last_bootstrap = 0
        self.last_maintain = 0
        self._new_key = None            # key being inserted (for the victim rule)
        self.evicted_live = 0           # unexpired entries evicted for lack of room
        self.now = 0

    # ---- table eviction ----------------------------------------------------
    def _victim(self, table):
        """Eviction rule for a full routing table: an expired entry first;
        otherwise the entry whose key is farthest from our own key in
        keyspace (|entry - own| as 256-bit integers), but only if the new key
        is closer than it (else the insert is refused and counted)."""
        now = self.now
        i = 0
        while i < table.capacity:
            if table.used[i] and ticks_diff(now, self.r_last[i]) >= ROUTE_EXPIRY_MS:
                return i
            i += 1
        own = int.from_bytes(self.r.key, "big")
        worst = -1
        worst_d = -1
        i = 0
        while i < table.capacity:
            if table.used[i]:
                d = abs(int.from_bytes(table.keys[i], "big") - own)
                if d > worst_d:
                    worst_d = d
                    worst = i
            i += 1
        if self._new_key is not None:
            if abs(int.from_bytes(self._new_key, "big") - own) >= worst_d:
                return -1
        if worst >= 0:
            self.evicted_live += 1
        return worst

    # ---- next hop ------------------------------------------------------------
    def next_hop(self, dst, bootstrap, wm_key, wm_seq, now):
        """SNEK next hop for `dst` (bytearray(32)); the frame's watermark is
        (wm_key, wm_seq). Result: self.nh_port (0 = local), and the watermark
        to write into the frame: (self.nh_key, self.nh_seq)."""
        r = self.r
        tree = r.tree
        own = r.key
        ports = r.up
        np = len(ports)
        # 1. start with ourselves
        best_key = own
        best_port = 0
        best_seq = 0
        # 2. traffic for us is handled locally
        if not bootstrap and dst == own:
            self.nh_port = 0
            self.nh_key = own
            self.nh_seq = 0
            return 0
        # 3. via the parent, towards the root
        parent = tree.parent
        if parent and tree.ann_valid[parent]:
            root = tree.ann_root[parent]
            # 3.1 bootstraps start towards the root. PROTOCOL_NOTES.md difference 2:
            # only at the originator (best key still equals the destination,
            # i.e. our own key), otherwise a relay could never be the dead end.
            if bootstrap and best_key == dst:
                best_key = root
                best_port = parent
                best_seq = 0
            # 3.2 destination above us: worst case, up to the root
            elif best_key < dst < root:
                best_key = root
                best_port = parent
                best_seq = 0
            # 3.3 our ancestors
            keys = tree.ancestors()
            n = tree.par_n
            i = 0
            while i < n:
                a = keys[i]
                if not bootstrap and a == dst and best_key != dst:
                    best_key = a
                    best_port = parent
                    best_seq = 0
                elif dst < a < best_key:
                    best_key = a
                    best_port = parent
                    best_seq = 0
                i += 1
        # 4. our peers' ancestors (exact match of the destination only)
        if not bootstrap:
            p = 1
            d0 = dst[0]
            while p < np:
                if ports[p] and tree.ann_valid[p] and best_key != dst:
                    raw = tree.ann_raw[p]
                    offs = tree.ann_hk[p]
                    n = tree.ann_nhops[p]
                    i = 0
                    while i < n:
                        o = offs[i]
                        if raw[o] == d0 and key_eq_at(dst, raw, o):
                            best_key = dst
                            best_port = p
                            best_seq = 0
                            break
                        i += 1
                p += 1
        # 5. the best key is a direct peer: use the direct link
        pkeys = r.port_key
        p = 1
        while p < np:
            if ports[p] and pkeys[p] == best_key:
                best_key = pkeys[p]
                best_port = p
                best_seq = 0
            p += 1
        # 6. routing table entries (transitive paths)
        t = self.routes
        used = t.used
        rkeys = t.keys
        i = 0
        while i < t.capacity:
            if used[i] and self.r_src[i] != 0 and ticks_diff(now, self.r_last[i]) < ROUTE_EXPIRY_MS:
                ek = rkeys[i]
                es = self.r_seq[i]
                # skip entries whose watermark (key, seq) is beyond the frame's
                if ek > wm_key or (ek == wm_key and es < wm_seq):
                    i += 1
                    continue
                if not bootstrap and ek == dst and best_key != dst:
                    best_key = ek
                    best_port = self.r_src[i]
                    best_seq = es
                elif dst < ek < best_key:
                    best_key = ek
                    best_port = self.r_src[i]
                    best_seq = es
            i += 1
        # 7. prefer the faster link type to the chosen peer
        if best_port:
            links = r.port_link
            p = 1
            while p < np:
                if ports[p] and p != best_port and pkeys[p] == best_key:
                    if links[p] < links[best_port]:
                        best_port = p
                    elif links[p] == links[best_port] and tree.ann_valid[p] and tree.ann_valid[best_port] \
                            and tree.ann_seq[p] == tree.ann_seq[best_port] \
                            and tree.ann_order[best_port] > tree.ann_order[p]:
                        best_port = p
                p += 1
        # PROTOCOL_NOTES.md difference 1: the reference always returns
        # (best key, best sequence), also when the sequence is 0.
        self.nh_port = best_port
        self.nh_key = best_key
        self.nh_seq = best_seq
        return best_port

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
        # replay check (PROTOCOL_NOTES.md difference 4: only against an entry for
        # the same root; an entry for another root is replaced)
        if slot >= 0 and self.r_root[slot] == self.k_root and self.r_root_seq[slot] == f.root_seq \
                and f.seq <= self.r_seq[slot]:
            c.drops[D_BOOTSTRAP_REPLAY] += 1
            return -1
        # where would it go next? (loop and watermark checks are cheap too)
        copy_into(self.k_wm, 0, buf, f.wm_off, 32)
        nh = self.next_hop(bkey, True, self.k_wm, f.wm_seq, now)
        dead_end = nh == 0
        if not dead_end:
            if nh == port:
                c.drops[D_LOOP] += 1
                return -1
            if worse(self.nh_key, self.nh_seq, self.k_wm, f.wm_seq):
                c.drops[D_WATERMARK] += 1
                return -1
        desc_change = dead_end and self._desc_would_change(bkey, port)
        # signature, by policy (docs/PROTOCOL_NOTES.md choice C):
        #   all: always; on-change: when the route is new or its source port
        #   or root changes, or the descending entry would change; off: never
        policy = r.verify_policy
        need = True
        if policy == "off":
            need = False
        elif policy == "on-change":
            need = (slot < 0 or self.r_src[slot] != port or self.r_root[slot] != self.k_root
                    or self.r_root_seq[slot] != f.root_seq or desc_change)
        if need:
            so = f.sig_off
            ok = r.verify(bytes(bkey), bytes(buf[f.signed_off:f.signed_off + f.signed_len]),
                          bytes(buf[so:so + 64]))
            if not ok:
                c.drops[D_BAD_SIGNATURE] += 1
                return -1
        else:
            c.verify_skipped += 1
        # install / refresh the route (every node on the path installs it)
        if slot < 0:
            self._new_key = bkey
            slot = self.routes.insert(bkey)
            self._new_key = None
            if slot < 0:
                c.drops[D_ROUTE_TABLE_FULL] += 1
                return -1
        self.r_src[slot] = port
        self.r_dst[slot] = nh
        self.r_last[slot] = now
        self.r_root[slot] = r.root_obj   # == k_root (checked above), shared
        self.r_root_seq[slot] = f.root_seq
        # PROTOCOL_NOTES.md difference 3: the route's watermark is (bootstrapping
        # key, bootstrap sequence): r_seq is that sequence
        self.r_seq[slot] = f.seq
        if dead_end:
            if desc_change or (self.desc_valid and self.desc_key == bkey):
                self._set_desc(bkey, port, now, f.root_seq, f.seq)
            return 0
        self.fwd_len = wire.set_watermark(buf, n, f, self.nh_key, 0, self.nh_seq)
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
        self.fwd_len = wire.encode_bootstrap(buf, own, self.nh_key, self.nh_seq, seq, root, rseq, sig)
        return nh

    # ---- maintenance ----------------------------------------------------
    def maintain(self, now):
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
        t = self.routes
        i = 0
        while i < t.capacity:
            if t.used[i] and ticks_diff(now, self.r_last[i]) >= ROUTE_EXPIRY_MS:
                t.remove(i)
            i += 1

    def port_down(self, port):
        t = self.routes
        i = 0
        while i < t.capacity:
            if t.used[i] and (self.r_src[i] == port or self.r_dst[i] == port):
                t.remove(i)
            i += 1
        if self.desc_valid and self.desc_port == port:
            self.desc_valid = False
            self.r.snake_changed()
            self.r.event("desc_changed", None)

