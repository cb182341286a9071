# Router fuzzing (Hardening, item 1): random and mutated frames through
# Router.receive on a node that is part of a small converged setup, on every
# port including ports that are down. Runs under MicroPython and CPython.
#
# The node under test is B of the wire-vector line A - B - C (A is the root,
# key order C < B < A): port 1 is A (its parent), port 2 is C (its child),
# port 3 is a sibling X0 below A, ports 4 and 5 are attacker peers X1, X2
# that never announced anything legitimate, port 6 is down; ports 0, 7, -1
# and 300 do not exist. Seeds for the mutations: every frame of
# tests/data/pinecone_wire_vectors.json (real frames of the reference
# implementation addressed to B, so they are the node's legitimate traffic
# when the real crypto backend is used), the legitimate frames of the
# scripted peers, and the frames the node itself sends. Mutations: bit
# flips, byte edits, truncation, extension, length-field edits, type
# changes, splices, chunk insert/delete, key swaps, long varu64s, hop-limit
# edits, random bodies behind a valid header, and well-formed frames with
# random field values (validly signed by pool keys or not).
#
# Checked throughout: no exception escapes any router call; every table's
# count stays within its capacity and equals its used slots; ports, parent,
# descending entry and routes only ever refer to ports that are up. Checked
# afterwards: the node still routes legitimate traffic (tree state, its
# descending entry, SNEK relaying, tree-routed delivery, origination).
#
# Crypto: under MicroPython a pure-Python ed25519 verify costs ~14 ms, and
# most mutated signed frames reach a verification, so the 100,000-frame run
# here swaps in a fast keyed-hash "signature" backend (FakeCrypto below: a
# forged or mutated signature still fails to verify, so every signature
# branch of the router is taken; only the cryptographic strength is gone).
# tests/host/test_fuzz_router_million.py runs the same engine with the real
# nacl backend (vector signatures then verify) over 1,000,000 frames.
import hashlib

from fwtest import Rng, vectors, unhex, node_key, node_seed, is_micropython
from snake import wire
from snakehost import wire_host
from snake import crypto, crypto_backends
from snake.profile import Profile
from snake.router import Router
from snake.report import DROP_NAMES
from snake import report

FUZZ_FRAMES = 100000

FUZZ_PROFILE = {
    "max_peers": 6, "max_routes": 8, "coord_cache": 4, "sig_cache": 16, "max_hops": 8,
    "frame_max": 1152, "wakeup_filter": 4, "bootstrap_verify": "all",
}
POLICIES = ("all", "on-change", "off")
BAD_PORTS = (0, 6, 7, -1, 300)


# ---------------------------------------------------------------- crypto
def _seed(i):
    return bytes([i & 0xFF]) * 32


def _fake_sig(pub, msg):
    h = hashlib.sha256(b"snakemesh-fuzz-sig")
    h.update(bytes(pub))
    h.update(bytes(msg))
    d = h.digest()
    return d + d


class FakeCrypto:
    """Context manager: while active, snake.crypto signs and verifies with a
    keyed hash (sig = H(pub | msg) twice). Public keys of the vector seeds are
    the vector keys (so the vector frames name the right nodes); other seeds
    get H(seed). Restores the previous backend on exit."""

    def __enter__(self):
        vec = {}
        for name in ("A", "B", "C"):
            vec[bytes(node_seed(name))] = bytes(node_key(name))

        def make(seed):
            seed = bytes(seed)
            pub = vec.get(seed)
            if pub is None:
                pub = hashlib.sha256(b"snakemesh-fuzz-pub" + seed).digest()

            def sign(msg):
                return _fake_sig(pub, msg)
            return pub, sign

        def verify(pub, msg, sig):
            return bytes(sig) == _fake_sig(pub, msg)

        self.prev = crypto.BACKEND
        crypto_backends._loaded["fuzz-fake"] = (make, verify)
        crypto_backends.use_backend("fuzz-fake")
        return self

    def __exit__(self, *exc):
        crypto_backends.use_backend(self.prev)
        return False


# ---------------------------------------------------------------- builders
def build_announcement(root, root_seq, hops):
    """hops: list of (port, signer or None, key); a None signer gets a
    random-looking (invalid) signature."""
    tmp = bytearray(2048)
    done = []
    for port, s, key in hops:
        n = wire_host.encode_announcement(tmp, root, root_seq, done + [(port, key, b"\x00" * 64)])
        f = wire.Frame(16)
        f.decode(tmp, n)
        if s is not None:
            sig = s.sign(bytes(tmp[f.ann_off:f.hop_off[len(done)]]))
        else:
            sig = hashlib.sha256(bytes(key)).digest() * 2
        done.append((port, key, sig))
    n = wire_host.encode_announcement(tmp, root, root_seq, done)
    return bytes(tmp[:n])


def build_bootstrap(s, seq, root, root_seq, wm_key, wm_seq, good=True):
    sig = s.sign(wire.bootstrap_signed(seq, root, root_seq)) if good else b"\x5a" * 64
    buf = bytearray(512)
    n = wire.encode_bootstrap(buf, s.public, wm_key, wm_seq, seq, root, root_seq, sig)
    return bytes(buf[:n])


def build_wakeup(s, seq, root, root_seq, hop_limit, good=True):
    sig = s.sign(wire.bootstrap_signed(seq, root, root_seq)) if good else b"\xa5" * 64
    buf = bytearray(512)
    n = wire.encode_wakeup(buf, s.public, seq, root, root_seq, sig, hop_limit)
    return bytes(buf[:n])


def build_traffic(dst, src, payload, dcoords=b"", scoords=b"", wm_key=wire.FULL_KEY, wm_seq=0,
                  hop_limit=10):
    buf = bytearray(2048)
    n = wire.encode_traffic(buf, dcoords, scoords, dst, src, wm_key, wm_seq, payload, hop_limit)
    return bytes(buf[:n])


def keepalive():
    b = bytearray(10)
    wire.encode_keepalive(b)
    return bytes(b)


# ---------------------------------------------------------------- the rig
class Rig:
    """Node B with scripted peers, a mutation engine and the invariants."""

    def __init__(self, seed, rng=None):
        # rng: any object with next() (32 bits), below(n) and bytes(n); the
        # default is fwtest.Rng, identical on both interpreters
        self.rng = rng if rng is not None else Rng(seed)
        self.A = crypto.Signer(node_seed("A"))
        self.B = crypto.Signer(node_seed("B"))
        self.C = crypto.Signer(node_seed("C"))
        self.X = [crypto.Signer(_seed(0x40 + i)) for i in range(12)]
        # the sibling on port 3 (X[0]) must not sit between C and B in
        # keyspace: C's bootstraps would then end at it, as the reference's
        # next hop has them (PROTOCOL_NOTES.md difference 7), not at B, and
        # the checks expect B to be C's successor. Which keys the seeds give
        # depends on the crypto backend, so pick the first that fits.
        c, b, a = self.C.public, self.B.public, self.A.public
        n = 0x40 + len(self.X)
        while c < self.X[0].public < b or self.X[0].public > a:
            assert n < 0x100, "no sibling key outside (C, B) and below A"
            self.X[0] = crypto.Signer(_seed(n))
            n += 1
        self.signers = [self.A, self.B, self.C] + self.X
        self.profile = Profile(FUZZ_PROFILE)
        self.fmax = self.profile.frame_max
        self.now = 0
        self.r = Router(self.profile, self.B, 0)
        self.clock = 1700000000000
        self.r.wall_ms = self._wall
        self.r.tx = self._tx
        self.r.deliver = self._deliver
        self.r.disconnect = self._disconnect
        self.sent = []            # (port, frame) of recent frames the node sent
        self.sent_total = 0
        self.delivered = []       # (src, payload), cleared by the caller
        self.disconnects = 0
        self.dropped_peer = False
        self.peak_routes = 0
        self.lossy = True         # the runtime's send queue is sometimes full
        self.buf = bytearray(self.fmax)      # the runtime's receive buffer
        self.big = bytearray(4096)           # for frames above frame_max
        self.seq = 2000000000000             # our scripted peers' sequences
        self.frames = 0
        self.rootk = self.A.public
        # peers: port -> (signer, link type, its legitimate announcement or None)
        self.peers = {
            1: (self.A, 1, build_announcement(self.rootk, 1, [(1, self.A, self.A.public)])),
            2: (self.C, 4, build_announcement(self.rootk, 1, [
                (1, self.A, self.A.public), (2, self.B, self.B.public), (1, self.C, self.C.public)])),
            3: (self.X[0], 1, build_announcement(self.rootk, 1, [
                (3, self.A, self.A.public), (1, self.X[0], self.X[0].public)])),
            4: (self.X[1], 3, None),
            5: (self.X[2], 4, None),
        }
        self.pool_keys = [s.public for s in self.signers] + [wire.FULL_KEY, b"\x00" * 32]
        self.junk = bytes(Rng(seed ^ 0x5bd1e995).bytes(4096))   # pool for random bytes
        self.corpus = [unhex(f["hex"]) for f in vectors()["frames"]]
        for p in sorted(self.peers):
            if self.peers[p][2] is not None:
                self.corpus.append(self.peers[p][2])
        self.corpus.append(build_traffic(self.A.public, self.C.public, b"ping", scoords=b"\x01\x02",
                                         wm_key=self.A.public))
        self.corpus.append(build_traffic(self.B.public, self.A.public, b"tree", dcoords=b"\x01"))
        self.corpus.append(build_bootstrap(self.C, self.next_seq(), self.rootk, 1, self.B.public, 0))
        self.corpus.append(build_wakeup(self.A, self.next_seq(), self.rootk, 1, 5))
        self.by_type = [[], [], [], [], []]
        for fr in self.corpus:
            self.by_type[fr[5]].append(fr)
        self.bring_up()

    # -- outputs
    def _wall(self):
        self.clock += 1
        return self.clock

    def _tx(self, port, buf, n):
        self.sent_total += 1
        if len(self.sent) < 16:
            self.sent.append((port, bytes(buf[:n])))
        else:
            self.sent[self.sent_total % 16] = (port, bytes(buf[:n]))
        # now and then the runtime's queue is full
        return not self.lossy or self.rng.below(64) != 0

    def _deliver(self, src, payload):
        if len(self.delivered) < 64:
            self.delivered.append((bytes(src), bytes(payload)))

    def _disconnect(self, port, reason):
        self.disconnects += 1
        self.dropped_peer = True

    def next_seq(self):
        self.seq += 1
        return self.seq

    # -- driving the node
    def call(self, what, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            raise AssertionError("router %s raised %r after %d frames (args %r)"
                                 % (what, e, self.frames, args))

    def feed(self, port, frame):
        n = len(frame)
        buf = self.buf if n <= self.fmax else self.big
        buf[0:n] = frame
        try:
            self.r.receive(port, buf, n, self.now)
        except Exception as e:
            raise AssertionError("receive raised %r on frame #%d port %d: %s"
                                 % (e, self.frames, port, _hex(frame)))

    def bring_up(self):
        """(Re)connect every scripted peer whose port is down and replay its
        legitimate announcement, as a reconnecting peer would."""
        r = self.r
        for p in sorted(self.peers):
            s, link, ann = self.peers[p]
            if not r.up[p]:
                self.call("port_up", r.port_up, p, s.public, link, self.now)
                if ann is not None:
                    self.feed(p, ann)

    def keepalives(self):
        ka = keepalive()
        for p in sorted(self.peers):
            if self.r.up[p]:
                self.feed(p, ka)

    def advance(self, ms):
        self.now += ms
        self.call("tick", self.r.tick, self.now)

    # -- frame generation
    def junk_bytes(self, n):
        o = self.rng.below(len(self.junk) - n + 1) if n < len(self.junk) else 0
        return self.junk[o:o + n]

    def pick_seed(self):
        rng = self.rng
        if self.sent and rng.below(5) == 0:
            return self.sent[rng.below(len(self.sent))][1]
        # every frame type equally often (the corpus has many announcements)
        group = self.by_type[rng.below(len(self.by_type))]
        return group[rng.below(len(group))]

    def mutate(self, frame):
        rng = self.rng
        b = bytearray(frame)
        ops = 1 + rng.below(3)
        while ops:
            ops -= 1
            n = len(b)
            op = rng.below(12)
            if op <= 2 and n:                   # bit flips (most common)
                k = 1 + rng.below(4)
                while k:
                    k -= 1
                    i = rng.below(n)
                    b[i] ^= 1 << rng.below(8)
            elif op == 3 and n:                 # interesting byte values
                b[rng.below(n)] = (0, 1, 0x7F, 0x80, 0xFF, 0x81)[rng.below(6)]
            elif op == 4:                       # truncate
                b = b[:rng.below(n + 1)]
            elif op == 5:                       # extend
                b = b + self.junk_bytes(1 + rng.below(48))
            elif op == 6 and n >= 12:           # length fields
                which = rng.below(3)
                off = (8, 10, 12)[which]
                if off + 1 < n:
                    v = (b[off] << 8) | b[off + 1]
                    v = (v + (-1, 1, 32, -32)[rng.below(4)]) & 0xFFFF if rng.below(2) else rng.below(65536)
                    b[off] = v >> 8
                    b[off + 1] = v & 0xFF
            elif op == 7 and n > 5:             # type change
                b[5] = rng.below(7)
            elif op == 8:                       # splice with another frame
                other = self.pick_seed()
                cut_a = rng.below(n + 1)
                cut_b = rng.below(len(other) + 1)
                b = b[:cut_a] + bytearray(other[cut_b:])
            elif op == 9 and n:                 # insert or delete a chunk
                i = rng.below(n)
                if rng.below(2):
                    b = b[:i] + self.junk_bytes(1 + rng.below(16)) + b[i:]
                else:
                    b = b[:i] + b[i + 1 + rng.below(16):]
            elif op == 10 and n >= 44:          # key swap
                key = self.pool_keys[rng.below(len(self.pool_keys))]
                i = 12 + rng.below(n - 43)
                b[i:i + 32] = key
            elif op == 11 and n > 8:            # long varu64 / hop limit
                if rng.below(2):
                    b[7] = rng.below(256)
                else:
                    i = rng.below(n)
                    k = 1 + rng.below(10)
                    run = bytearray(k)
                    j = 0
                    while j < k - 1:
                        run[j] = 0x80 | rng.below(128)
                        j += 1
                    run[k - 1] = rng.below(128)
                    b = b[:i] + run + b[i + 1:]
        # usually make the header length agree, so the body gets parsed
        if len(b) >= 10 and rng.below(10) < 7:
            n = len(b)
            b[8] = (n >> 8) & 0xFF
            b[9] = n & 0xFF
        return b

    def random_frame(self):
        rng = self.rng
        body = self.junk_bytes(rng.below(300))
        n = 10 + len(body)
        b = bytearray(b"pine\x00") + bytearray((rng.below(6), 0, rng.below(256), n >> 8, n & 0xFF))
        return b + body

    def pick_key(self):
        rng = self.rng
        if rng.below(6) == 0:
            return self.junk_bytes(32)
        return self.pool_keys[rng.below(len(self.pool_keys))]

    def pick_signer(self):
        return self.signers[self.rng.below(len(self.signers))]

    def pick_int(self):
        rng = self.rng
        c = rng.below(6)
        if c == 0:
            return 0
        if c == 1:
            return 1
        if c == 2:
            return rng.below(300)
        if c == 3:
            return self.next_seq()
        if c == 4:
            return (1 << 63) + rng.below(1000)
        return rng.next()

    def pick_coords(self):
        rng = self.rng
        k = rng.below(4)
        ports = []
        while k:
            k -= 1
            ports.append((1, 2, 3, 0, 127, 128, 300, 70000)[rng.below(8)])
        return wire.encode_coords_body(ports)

    def valid_random_frame(self):
        """A well-formed frame with random field values."""
        rng = self.rng
        r = self.r
        t = rng.below(5)
        root = report.root_key(r) if rng.below(4) else self.pick_key()
        rseq = report.root_seq(r) if rng.below(4) else self.pick_int()
        if t == 0:
            return keepalive()
        if t == 1:
            hops = []
            k = 1 + rng.below(3)
            while k:
                k -= 1
                s = self.pick_signer()
                port = (1, 2, 3, 0, 200)[rng.below(5)]
                if rng.below(8) == 0:
                    hops.append((port, None, self.pick_key()))
                else:
                    hops.append((port, s, s.public))
            if rng.below(3):
                # make the last hop the sender of the port it will be fed to
                p = 1 + rng.below(5)
                s = self.peers[p][0]
                hops.append((1 + rng.below(3), s, s.public))
            return build_announcement(root, rseq, hops)
        if t == 2:
            s = self.pick_signer()
            return build_bootstrap(s, self.pick_int(), root, rseq, self.pick_key(), self.pick_int(),
                                   rng.below(5) != 0)
        if t == 3:
            dc = self.pick_coords() if rng.below(2) else b""
            return build_traffic(self.pick_key(), self.pick_key(), self.junk_bytes(rng.below(40)),
                                 dc, self.pick_coords(), self.pick_key(), self.pick_int(),
                                 rng.below(256))
        s = self.pick_signer()
        return build_wakeup(s, self.pick_int(), root, rseq, rng.below(8), rng.below(5) != 0)

    def burst_frame(self):
        """Flood phase: validly signed bootstraps from many keys (and some
        traffic), so the routing table fills up and evicts."""
        rng = self.rng
        r = self.r
        if rng.below(4) == 0:
            return build_traffic(self.pick_key(), self.pick_key(), b"burst", b"",
                                 self.pick_coords(), self.pick_key(), self.pick_int(), 10)
        s = self.pick_signer()
        wm = self.pool_keys[rng.below(len(self.pool_keys))]
        return build_bootstrap(s, self.next_seq(), report.root_key(r), report.root_seq(r), wm, 0)

    def next_frame(self):
        rng = self.rng
        c = rng.below(20)
        if c < 14:
            return self.mutate(self.pick_seed())
        if c < 16:
            return self.random_frame()
        if c < 19:
            return self.valid_random_frame()
        # an unmodified seed (e.g. a replay) or a frame above frame_max
        if rng.below(4) == 0:
            return self.mutate(self.pick_seed()) + self.junk_bytes(self.fmax)
        return bytearray(self.pick_seed())

    def pick_port(self):
        rng = self.rng
        c = rng.below(20)
        if c < 13:
            return 1 + rng.below(3)
        if c < 17:
            return 4 + rng.below(2)
        return BAD_PORTS[rng.below(len(BAD_PORTS))]

    # -- the run
    def run(self, count, check_every=1000):
        r = self.r
        rng = self.rng
        routes = r.snake.routes
        i = 0
        while i < count:
            if i % 5000 < 500:
                frame = self.burst_frame()
                port = 1 + rng.below(5)
            else:
                frame = self.next_frame()
                port = self.pick_port()
            self.frames += 1
            self.feed(port, frame)
            i += 1
            k = routes.count
            if k > self.peak_routes:
                self.peak_routes = k
                assert k <= routes.capacity, ("routes over capacity", k)
            if self.dropped_peer:
                # the peer reconnects at once (a real one would after a few
                # seconds): keeps the fuzz reaching beyond the sanity checks
                self.dropped_peer = False
                self.bring_up()
            self.now += 1
            if i % 100 == 0:
                self.advance(0)
            if i % check_every == 0:
                self.check()
                self.keepalives()
                self.bring_up()
                if i % (10 * check_every) == 0:
                    r.verify_policy = POLICIES[(i // (10 * check_every)) % 3]
                if i % (3 * check_every) == 0:
                    # C's periodic bootstrap (the honest snake keeps running)
                    self.feed(2, build_bootstrap(self.C, self.next_seq(), report.root_key(r), report.root_seq(r),
                                                 self.B.public, 0))
        self.check()

    def check(self):
        """Invariants that must hold after any sequence of frames."""
        r = self.r
        tables = (("routes", r.snake.routes), ("coords", r.ccache), ("wakeups", r.wakeups))
        for name, t in tables:
            assert t.count <= t.capacity, (name, t.count, t.capacity)
            # the index holds every slot once: the used ones in key order,
            # then the free ones
            assert sorted(t.order) == list(range(t.capacity)), (name, "order", list(t.order))
            j = 0
            while j < t.capacity:
                s = t.order[j]
                assert t.used(s) == (j < t.count), (name, "used", j, s)
                if 0 < j < t.count:
                    assert t.key(t.order[j - 1]) < t.key(s), (name, "unsorted", j)
                j += 1
        assert 0 <= r.sigcache.count <= r.sigcache.capacity
        assert len(r.up) == self.profile.max_peers + 1
        tree = r.tree
        if tree.parent:
            assert r.up[tree.parent] and tree.ann_valid[tree.parent], ("parent", tree.parent)
        p = 1
        refs = 0
        while p < len(r.up):
            if tree.ann_valid[p]:
                assert r.up[p], ("announcement kept for a down port", p)
                refs += tree.ann_nhops[p]
                h = 0
                while h < tree.ann_nhops[p]:
                    x = tree.ann_path[p * tree.max_hops + h]
                    assert tree.pool.live[x] and tree.pool.ref[x] > 0, ("dead hop in a path", p, h)
                    assert tree.pool.depth[x] == h, ("hop at the wrong depth", p, h)
                    h += 1
            p += 1
        # the hop pool holds exactly the stored paths' nodes
        pool = tree.pool
        live = 0
        total = 0
        x = 0
        while x < pool.capacity:
            if pool.live[x]:
                live += 1
                total += pool.ref[x]
                assert pool.ref[x] > 0, ("unreferenced live hop", x)
            x += 1
        assert live == pool.count and total == refs, ("hop pool", live, pool.count, total, refs)
        sn = r.snake
        if sn.desc_valid:
            assert r.up[sn.desc_port], ("descending entry on a down port", sn.desc_port)
        j = 0
        while j < sn.routes.capacity:
            if sn.routes.used(j):
                assert r.up[sn.src(j)], ("route from a down port", sn.src(j))
                assert sn.dst(j) == 0 or r.up[sn.dst(j)], ("route to a down port", sn.dst(j))
            j += 1

    def heal_and_check_routing(self):
        """After the fuzz: the honest peers reconnect and carry on; the node
        must route their traffic as before."""
        r = self.r
        p = 1
        while p < len(r.up):
            if r.up[p]:
                self.call("port_down", r.port_down, p, self.now)
            p += 1
        r.verify_policy = "all"
        self.lossy = False
        self.bring_up()
        # 11 s of honest life: keepalives, ticks; stale soft state expires
        k = 0
        while k < 44:
            self.advance(250)
            if k % 8 == 0:
                self.keepalives()
            k += 1
        self.bring_up()
        assert report.root_key(r) == self.rootk and report.root_seq(r) == 1
        assert report.parent_port(r) == 1
        assert report.coords(r) == [1]
        # C bootstraps: we are the dead end, C becomes our descending entry
        self.feed(2, build_bootstrap(self.C, self.next_seq(), self.rootk, 1, self.B.public, 0))
        assert report.desc_key(r) == self.C.public, "descending entry not restored"
        # C's SNEK traffic to the root is relayed to A on port 1
        self.sent = []
        self.sent_total = 0
        self.feed(2, build_traffic(self.A.public, self.C.public, b"after-fuzz", scoords=b"\x01\x02",
                                   wm_key=self.A.public))
        out = [fr for (port, fr) in self.sent if port == 1 and fr[5] == wire.T_TRAFFIC]
        assert out, "SNEK traffic from C to A not relayed after the fuzz"
        f = wire.Frame(16)
        f.decode(out[-1], len(out[-1]))
        assert bytes(out[-1][f.dst_off:f.dst_off + 32]) == self.A.public
        assert bytes(out[-1][f.payload_off:f.payload_off + f.payload_len]) == b"after-fuzz"
        # tree-routed traffic from A to our coordinates is delivered to us
        self.delivered = []
        self.feed(1, build_traffic(self.B.public, self.A.public, b"tree-after", dcoords=b"\x01"))
        assert self.delivered == [(self.A.public, b"tree-after")], self.delivered
        # and we can originate traffic to C (its coordinates are cached)
        self.sent = []
        assert r.send(self.C.public, b"to-c", self.now)
        assert [p for (p, fr) in self.sent if fr[5] == wire.T_TRAFFIC] == [2]


def _hex(b):
    import binascii
    return binascii.hexlify(bytes(b)).decode()


def summary(rig, seconds):
    r = rig.r
    c = r.counters
    drops = {}
    i = 0
    while i < len(DROP_NAMES):
        if c.drops[i]:
            drops[DROP_NAMES[i]] = c.drops[i]
        i += 1
    return {"frames": rig.frames, "seconds": seconds,
            "frames_per_s": int(rig.frames / seconds) if seconds > 0 else None,
            "rx": list(c.rx), "drops": drops, "delivered": c.delivered,
            "forwarded": c.forwarded, "disconnects": rig.disconnects,
            "verify_done": c.verify_done, "verify_cached": c.verify_cached,
            "evictions": report.evictions(r)}


def check_coverage(rig):
    """The run must have exercised the router, not just the decoder."""
    c = rig.r.counters
    t = 0
    while t < 5:
        assert c.rx[t] > 0, ("no frame of type %d got past the decoder" % t)
        t += 1
    names = ("malformed", "unknown_port", "unknown_type", "oversize", "sanity",
             "bad_signature", "bootstrap_root", "bootstrap_replay", "wakeup_root", "wakeup_dup",
             "loop", "watermark", "no_route")
    for name in names:
        assert c.drops[DROP_NAMES.index(name)] > 0, ("drop reason never hit: " + name)
    assert rig.disconnects > 0
    assert rig.r.snake.routes.evictions > 0 or c.drops[DROP_NAMES.index("route_table_full")] > 0
    assert rig.peak_routes == rig.r.snake.routes.capacity
    assert c.delivered > 0 and c.forwarded > 0


def run_fuzz(count, seed, rng=None):
    import time
    rig = Rig(seed, rng)
    t0 = time.time()
    rig.run(count)
    dt = time.time() - t0
    check_coverage(rig)
    rig.heal_and_check_routing()
    rig.check()
    return rig, dt


def test_router_survives_100k_fuzzed_frames_and_keeps_routing():
    with FakeCrypto():
        rig, dt = run_fuzz(FUZZ_FRAMES, 0x5EED)
    s = summary(rig, dt)
    print("fuzz_router", "micropython" if is_micropython() else "cpython", s)
    assert rig.frames >= FUZZ_FRAMES


def test_fake_crypto_rejects_what_it_did_not_sign():
    # the stand-in backend must still make the router's signature checks bite
    with FakeCrypto():
        s = crypto.Signer(_seed(0x41))
        sig = s.sign(b"msg")
        assert crypto.verify(s.public, b"msg", sig)
        assert not crypto.verify(s.public, b"msh", sig)
        bad = bytearray(sig)
        bad[3] ^= 1
        assert not crypto.verify(s.public, b"msg", bytes(bad))
        assert crypto.Signer(node_seed("B")).public == node_key("B")
    assert crypto.BACKEND != "fuzz-fake"
