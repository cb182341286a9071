# Spanning tree: peers' announcements, parent selection, coordinates.
#
# Every rule of docs/PROTOCOL_NOTES.md "Spanning tree" lives in this module:
#   - sanity checks on received announcements (sanity_check)
#   - re-parenting on news from the parent / from another peer (handle)
#   - parent selection (select_parent)
#   - root refresh every 30 min, expiry after 45 min, 1 s reparent wait (tick)
#   - coordinates and tree distance / tree next hop (next_hop)
# The Router owns ports and I/O; this class only keeps state and asks the
# router to send announcements (router.announce_to(port) / announce_all()).
from snake import wire
from array import array
from snake.platform import ticks_diff, copy_into
from snake.tables import key_eq_at, keys_eq_at

ROOT_INTERVAL_MS = 30 * 60 * 1000   # root re-announces with seq+1
ANN_EXPIRY_MS = 45 * 60 * 1000      # a peer's announcement expires
REPARENT_WAIT_MS = 1000             # after bad news: wait before selecting

# sanity check failures (also telemetry event details)
S_OK = None


class Tree:
    def __init__(self, router, profile):
        self.r = router
        P = profile.max_peers + 1
        H = profile.max_hops
        self.max_hops = H
        amax = profile.frame_max
        # port 0 is the local router: its slots stay empty
        self.ann_valid = bytearray(P)
        self.ann_root = [bytearray(32 if i else 0) for i in range(P)]
        self.ann_seq = [0] * P
        self.ann_time = [0] * P
        self.ann_order = [0] * P
        # the whole announcement frame as received (re-signed for our peers
        # when that peer becomes our parent)
        self.ann_raw = [bytearray(amax if i else 0) for i in range(P)]
        self.ann_len = [0] * P
        self.ann_nhops = [0] * P
        # offsets of the hop keys inside ann_raw (compared in place)
        self.ann_hk = [array("H", [0] * (H if i else 0)) for i in range(P)]
        # ports of all hops, encoded: our coordinates if this peer is the
        # parent. 3 bytes per hop covers port numbers below 2^21.
        self.cmax = 3 * H
        self.ann_coords = [bytearray(self.cmax if i else 1) for i in range(P)]
        self.ann_clen = [0] * P      # byte length of all hop ports
        self.ann_pclen = [0] * P     # byte length without the last hop: peer's coords
        # ancestors via the parent as preallocated keys: SNEK compares them
        # with < on every frame, so only the parent's are kept as objects
        self.par_keys = [bytearray(32) for _ in range(H)]
        self.par_n = 0
        self.par_of = -1             # (port, order) the ancestors were loaded from
        self.order = 0               # global receive order
        self.parent = 0              # 0: we are the root
        self.seq = 1                 # our root sequence (when root)
        self.root_sent = 0           # when we last announced as root
        self.wait = False            # 1 s reparent wait active
        self.wait_until = 0
        self.sig = None              # our hop signature over the parent's announcement
        self.root_sig = None         # our hop signature as root (key | seq)
        self.f = wire.Frame(H)       # scratch view for stored announcements
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

    def coords_buf(self):
        """(buffer, length) of our encoded coordinates, via attributes."""
        if self.parent:
            return self.ann_coords[self.parent], self.ann_clen[self.parent]
        return self.ann_coords[0], 0

    def depth(self):
        """Our depth in the tree (number of ports in our coordinates)."""
        if self.parent and self.ann_valid[self.parent]:
            return self.ann_nhops[self.parent]
        return 0

    def contains(self, port, key):
        raw = self.ann_raw[port]
        offs = self.ann_hk[port]
        i = 0
        n = self.ann_nhops[port]
        while i < n:
            if key_eq_at(key, raw, offs[i]):
                return True
            i += 1
        return False

    def ancestors(self):
        """Keys of our ancestors (the parent's announcement hops), loaded
        into preallocated objects when the parent or its announcement
        changes; sets self.par_n."""
        p = self.parent
        if p == 0 or not self.ann_valid[p]:
            self.par_n = 0
            return self.par_keys
        if self.par_of != self.ann_order[p]:
            raw = self.ann_raw[p]
            offs = self.ann_hk[p]
            n = self.ann_nhops[p]
            i = 0
            while i < n:
                copy_into(self.par_keys[i], 0, raw, offs[i], 32)
                i += 1
            self.par_n = n
            self.par_of = self.ann_order[p]
        return self.par_keys

    def expired(self, port, now):
        return ticks_diff(now, self.ann_time[port]) >= ANN_EXPIRY_MS

    # ---- receive --------------------------------------------------------
    def sanity_check(self, port, buf, f):
        """Returns None if the announcement is acceptable, else a reason."""
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
        # every hop signature must verify (cache: a known prefix costs nothing)
        i = 0
        while i < n:
            ko = f.hop_key_off[i]
            so = f.hop_sig_off[i]
            if not self.r.verify(bytes(buf[ko:ko + 32]), bytes(buf[f.ann_off:f.hop_off[i]]),
                                 bytes(buf[so:so + 64])):
                return "bad_signature"
            i += 1
        return None

    def store(self, port, buf, n, f, now):
        copy_into(self.ann_raw[port], 0, buf, 0, n)
        self.ann_len[port] = n
        copy_into(self.ann_root[port], 0, buf, f.root_off, 32)
        self.ann_seq[port] = f.root_seq
        self.ann_time[port] = now
        self.order += 1
        self.ann_order[port] = self.order
        nh = f.nhops
        self.ann_nhops[port] = nh
        offs = self.ann_hk[port]
        coords = self.ann_coords[port]
        off = 0
        i = 0
        while i < nh:
            offs[i] = f.hop_key_off[i]
            if i == nh - 1:
                self.ann_pclen[port] = off
            off = wire.encode_varu64(coords, off, f.hop_port[i])
            i += 1
        self.ann_clen[port] = off
        self.ann_valid[port] = 1

    def fits(self, f):
        """The announcement's coordinates fit our fixed storage."""
        total = 0
        i = 0
        while i < f.nhops:
            total += wire.varu64_len(f.hop_port[i])
            i += 1
        return total <= self.cmax

    def handle(self, port, buf, n, f, now):
        """Apply the re-parenting rules (docs/PROTOCOL_NOTES.md) to an announcement that
        passed the sanity checks."""
        key = self.r.key
        first = not self.ann_valid[port]
        prev_root = self._prev_root
        prev_seq = 0
        if not first:
            copy_into(prev_root, 0, self.ann_root[port], 0, 32)
            prev_seq = self.ann_seq[port]
        else:
            copy_into(prev_root, 0, b"\x00" * 32, 0, 32)
        was_weaker_before = (not first) and prev_root < self.root_key()
        self.store(port, buf, n, f, now)
        if first:
            self.r.on_first_announcement(port)
        new_root = self.ann_root[port]
        new_seq = self.ann_seq[port]

        if port == self.parent:
            if self.wait:
                return  # store only
            if self.contains(port, key) or new_root < prev_root or (
                    new_root == prev_root and new_seq == prev_seq):
                # bad news: our parent lost its way to the root (or looped)
                self.become_root(now, wait=True)
                return
            if new_root > prev_root or new_seq > prev_seq:
                self.sig = None  # re-sign the new announcement
                self.changed = True
                self.r.announce_all()
            return

        # from another peer
        if self.wait:
            return
        if self.contains(port, key):
            return
        our_root = self.root_key()
        if new_root > our_root:
            self.set_parent(port)
            return
        if new_root < our_root:
            # Reference behaviour (PROTOCOL_NOTES.md difference 6): a weaker root
            # heard from this peer for the first time gets no immediate
            # reply; we answer when the peer repeats it.
            if was_weaker_before:
                self.r.announce_to(port)
            return
        self.select_parent(now)

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
                    and not self.contains(p, key):
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
        self.ann_valid[port] = 0
        self.ann_nhops[port] = 0
        if was and port == self.parent:
            self.select_parent(now)

    def tick(self, now):
        if self.wait and ticks_diff(now, self.wait_until) >= REPARENT_WAIT_MS:
            self.wait = False
            self.select_parent(now)
        if self.parent and self.expired(self.parent, now):
            self.select_parent(now)
        if self.parent == 0 and ticks_diff(now, self.root_sent) >= ROOT_INTERVAL_MS:
            self.seq += 1
            self.root_sig = None
            self.root_sent = now
            self.r.announce_all()

    # ---- building our announcement for one peer -------------------------
    def build(self, buf, port):
        """Our current announcement, signed for `port`, into buf; returns
        the frame length."""
        r = self.r
        if self.parent == 0:
            if self.root_sig is None:
                signed = bytearray(32 + wire.varu64_len(self.seq))
                copy_into(signed, 0, r.key, 0, 32)
                wire.encode_varu64(signed, 32, self.seq)
                self.root_sig = r.sign(bytes(signed))
            return wire.encode_announcement(buf, r.key, self.seq, [(port, r.key, self.root_sig)])
        p = self.parent
        raw = self.ann_raw[p]
        f = self.f
        f.decode(raw, self.ann_len[p])
        if self.sig is None:
            self.sig = r.sign(wire.announcement_signed(raw, f))
        return wire.extend_announcement(buf, raw, f, port, r.key, self.sig)

    # ---- tree routing -----------------------------------------------------
    def next_hop(self, buf, doff, dlen, from_port):
        """Tree next hop towards the encoded coordinates buf[doff:doff+dlen]:
        a peer strictly closer than us (ties: earliest received
        announcement); 0 when none. Sets self.dist to our own distance."""
        p = self.parent   # (no tuple from coords_buf(): hot path, no allocation)
        if p:
            ours = wire.coords_distance(self.ann_coords[p], 0, self.ann_clen[p], buf, doff, dlen)
        else:
            ours = wire.coords_distance(self.ann_coords[0], 0, 0, buf, doff, dlen)
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
                d = wire.coords_distance(self.ann_coords[p], 0, self.ann_pclen[p], buf, doff, dlen)
                if d < best_d or (d == best_d and best and self.ann_order[p] < self.ann_order[best]):
                    best = p
                    best_d = d
            p += 1
        return best

