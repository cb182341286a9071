# A router at full capacity, measured under MicroPython (figures 2a and 3).
#
#   micropython bench/figures/mp_router.py state   [PROFILE_JSON]
#   micropython bench/figures/mp_router.py nexthop [PROFILE_JSON] [ITER] [RUNS]
#
# Runs from any directory (paths are taken from this file's location); also
# runs under CPython, where heap figures are null. Prints one JSON line.
#
# The fixture (fill()) builds a Router with a board profile and fills every
# table through the router's own inputs, as a busy node would see them:
#   ports      max_peers peers up (port_up), link type Wi-Fi
#   tree       one announcement per peer, max_hops hops deep (the deepest the
#              profile stores), all for the same root; the chains share only
#              the root, so every hop signature is a distinct verification
#   routes     max_routes bootstraps from distinct keys, all relayed towards
#              the parent (installed on the path), verified by policy
#   coords     coord_cache traffic frames to us from distinct sources whose
#              coordinates are max_hops deep (cached for tree replies)
#   wakeups    wakeup_filter wakeup broadcasts from distinct origins (verified,
#              remembered, flooded to the other peers)
#   sigcache   filled as a side effect (every distinct signature verified)
# and checks that every table reports count == capacity.
import sys
import gc
import json

try:
    _f = __file__
except NameError:
    _f = "bench/figures/mp_router.py"
_f = _f.replace("\\", "/")
_parts = _f.rsplit("/", 3)
ROOT = _parts[0] if len(_parts) == 4 else "."
sys.path.insert(0, ROOT + "/lib")
sys.path.insert(0, ROOT + "/firmware")

from snake import wire, platform     # noqa: E402
from snakehost import wire_host
from snake.crypto import Signer                 # noqa: E402
from snake.profile import Profile               # noqa: E402
from snake.router import Router                 # noqa: E402
from snake.snek import FULL_KEY                 # noqa: E402
from snake import report                        # noqa: E402

MP = platform.MICROPYTHON

if MP:
    import time
    ticks_us = time.ticks_us
    ticks_diff = time.ticks_diff
else:
    import time

    def ticks_us():
        return time.perf_counter_ns() // 1000

    def ticks_diff(a, b):
        return a - b


def mem_alloc():
    gc.collect()
    if MP:
        return gc.mem_alloc()
    return None


class Lcg:
    """Deterministic small PRNG (same sequence on both interpreters)."""

    def __init__(self, seed):
        self.s = seed & 0x7FFFFFFF

    def next(self, n):
        self.s = (self.s * 1103515245 + 12345) & 0x7FFFFFFF
        return (self.s >> 8) % n


def sign_chain(root_s, seq, path):
    """Announcement frame bytes for hops path = [(signer, port), ...]; path[0]
    is the root. Each hop signs the payload bytes before it."""
    hops = []
    tmp = bytearray(4096)
    f = wire.Frame(64)
    for s, port in path:
        n = wire_host.encode_announcement(tmp, root_s.public, seq, hops + [(port, s.public, b"\0" * 64)])
        f.decode(tmp, n)
        hops.append((port, s.public, s.sign(wire_host.hop_signed(tmp, f, len(hops)))))
    n = wire_host.encode_announcement(tmp, root_s.public, seq, hops)
    return bytes(tmp[:n])


class Fixture:
    """Every input frame of fill(), built before the router exists (so the
    router's heap growth does not include them)."""

    def __init__(self, prof):
        self.prof = prof
        P = prof.max_peers
        H = prof.max_hops
        nkeys = 2 + P * H
        signers = [Signer(bytes([(i * 7 + 3) & 0xFF, i >> 8]) + bytes(30)) for i in range(nkeys)]
        signers.sort(key=lambda s: s.public)
        # own key lowest, root highest: every other key lies between them
        self.me = signers[0]
        self.root = signers[-1]
        mids = signers[1:-1]
        self.others = mids
        rnd = Lcg(12345)
        # shuffle the middle keys into chains (deterministically)
        order = list(range(len(mids)))
        i = len(order) - 1
        while i > 0:
            j = rnd.next(i + 1)
            order[i], order[j] = order[j], order[i]
            i -= 1
        self.seq = 1
        self.peer_keys = []
        self.anns = []
        # Peer 1 (the parent) sends a max_hops-deep chain; every other peer
        # shares a prefix of it and ends in hops of its own, also max_hops
        # deep, with the prefixes chosen so that the distinct hops of all
        # announcements fill the hop pool exactly (neighbours' paths share
        # their way down from the root; docs/reports/CAPACITY.md).
        pool = prof.hop_pool if prof.hop_pool else 2 * H + 2 * P
        rest = pool - H
        own = [0] * (P + 1)
        for p in range(2, P + 1):
            own[p] = 1
        rest -= P - 1
        p = 2
        while rest > 0 and P > 1:
            if own[p] < H:
                own[p] += 1
                rest -= 1
            p = p + 1 if p < P else 2
            if all(own[q] >= H for q in range(2, P + 1)):
                break
        k = 0
        trunk = [(self.root, 1)]
        for h in range(H - 1):
            trunk.append((mids[order[k]], 1 + rnd.next(min(P, 200))))
            k += 1
        for p in range(1, P + 1):
            if p == 1:
                path = list(trunk)
            else:
                keep = H - own[p]
                path = list(trunk[:keep])
                # the branch leaves the trunk here: the last shared hop
                # names another port (so it is a hop of its own too)
                if keep:
                    last = path[-1]
                    path[-1] = (last[0], 201 + p)
                for h in range(own[p] - (1 if keep else 0)):
                    path.append((mids[order[k]], 1 + rnd.next(min(P, 200))))
                    k += 1
            self.peer_keys.append(path[-1][0].public)
            self.anns.append(sign_chain(self.root, self.seq, path))
        # bootstraps: distinct keys above ours, ascending (fill() hands each
        # in on a port other than its next hop, so none loops back)
        rk = self.root.public
        nb = min(prof.max_routes, len(mids))
        self.boots = []
        buf = bytearray(prof.large)
        for i in range(nb):
            s = mids[i]
            bseq = 1700000000000 + i      # Unix ms, as real sequences
            sig = s.sign(wire.bootstrap_signed(bseq, rk, self.seq))
            n = wire.encode_bootstrap(buf, s.public, FULL_KEY, 0, bseq, rk, self.seq, sig)
            self.boots.append((bytearray(s.public), bytes(buf[:n])))
        # wakeups from distinct origins
        self.wakes = []
        nw = min(prof.wakeup_filter, len(mids))
        for i in range(nw):
            s = mids[len(mids) - 1 - i]
            wseq = 1700000005000 + i
            sig = s.sign(wire_host.wakeup_signed(wseq, rk, self.seq))
            n = wire.encode_wakeup(buf, s.public, wseq, rk, self.seq, sig, wire.HOP_LIMIT_WAKEUP)
            self.wakes.append(bytes(buf[:n]))
        # traffic to us from distinct sources with max-depth coordinates
        self.traffic = []
        payload = b"p" * 16
        for i in range(prof.coord_cache):
            src = bytes([0x40, i & 0xFF, i >> 8]) + bytes(29)
            ports = [1 + rnd.next(120) for _ in range(H)]   # one-byte ports
            sc = wire.encode_coords_body(ports)
            n = wire.encode_traffic(buf, b"", sc, self.me.public, src, FULL_KEY, 0, payload, 64)
            self.traffic.append(bytes(buf[:n]))
        self.rxbuf = bytearray(prof.large)
        self.outbuf = bytearray(prof.large)
        self.sent = 0
        self.delivered = 0


def fill(r, fx, now):
    """Drive router r (fresh) to full tables with fixture fx."""
    P = fx.prof.max_peers
    buf = fx.rxbuf
    for p in range(1, P + 1):
        assert r.port_up(p, fx.peer_keys[p - 1], 1, now)
    for p in range(1, P + 1):
        a = fx.anns[p - 1]
        platform.copy_into(buf, 0, a, 0, len(a))
        r.receive(p, buf, len(a), now)
        assert r.up[p], "peer %d dropped: %r" % (p, r.counters.as_dict()["drops"])
    assert report.parent_port(r) == 1, "parent is port %d" % report.parent_port(r)
    for key, b in fx.boots:
        # in from a port it is not relayed to: next-hop step 4 (PROTOCOL_NOTES
        # difference 7) may send it to a peer other than the parent whose
        # announcement names a key just above it
        r.snake.next_hop(key, True, FULL_KEY, 0, now)
        port = 3 if r.snake.nh_port == 2 else 2
        platform.copy_into(buf, 0, b, 0, len(b))
        r.receive(port, buf, len(b), now)
    for w in fx.wakes:
        platform.copy_into(buf, 0, w, 0, len(w))
        r.receive(2, buf, len(w), now)
    for t in fx.traffic:
        platform.copy_into(buf, 0, t, 0, len(t))
        r.receive(2, buf, len(t), now)
    occ = report.occupancy(r)
    for name in occ:
        n, cap = occ[name]
        assert n == cap, "table %s not full: %d of %d (drops %r)" % (
            name, n, cap, r.counters.as_dict()["drops"])
    return occ


def make_router(fx, now):
    r = Router(fx.prof, fx.me, now)

    def tx(port, b, n):
        platform.copy_into(fx.outbuf, 0, b, 0, n)
        fx.sent += 1
        return True

    def deliver(src, payload):
        fx.delivered += 1
    r.tx = tx
    r.deliver = deliver
    return r


def load_profile(path):
    if path is None:
        path = ROOT + "/boards/ESP32_GENERIC/profile.json"
    return Profile.load(path)


def cmd_state(prof_path):
    prof = load_profile(prof_path)
    fx = Fixture(prof)
    # crypto tables and the lazily built parts of every module exist before
    # the first measurement: build one throwaway router and fill it
    r = make_router(fx, 0)
    fill(r, fx, 0)
    r = None
    fx.sent = 0
    a0 = mem_alloc()
    r = make_router(fx, 0)
    a1 = mem_alloc()
    occ = fill(r, fx, 0)
    a2 = mem_alloc()
    out = {"interpreter": sys.implementation.name, "profile": prof.name,
           "capacities": {"max_peers": prof.max_peers, "max_hops": prof.max_hops,
                          "max_routes": prof.max_routes, "coord_cache": prof.coord_cache,
                          "sig_cache": prof.sig_cache, "wakeup_filter": prof.wakeup_filter,
                          "frame_max": prof.frame_max, "ann_max": prof.ann_max},
           "occupancy": occ,
           "verify_done": r.counters.verify_done, "verify_cached": r.counters.verify_cached,
           "heap_empty": None, "heap_full": None, "heap_fill_growth": None}
    if a0 is not None:
        out["heap_empty"] = a1 - a0
        out["heap_full"] = a2 - a0
        out["heap_fill_growth"] = a2 - a1
        if hasattr(gc, "mem_free"):
            out["heap_total"] = gc.mem_alloc() + gc.mem_free()
        out["breakdown"] = breakdown(prof, r)
    print(json.dumps(out))


def breakdown(prof, r):
    """Heap of the router's main parts, each built on its own (empty)."""
    from snake.tree import Tree
    from snake.snek import Snake
    from snake.crypto import SigCache
    from snake.tables import Table
    from snake.telemetry import Counters
    from array import array
    H = prof.max_hops
    parts = (
        ("tree", lambda: Tree(r, prof)),
        ("snake", lambda: Snake(r, prof)),
        ("sigcache", lambda: SigCache(prof.sig_cache)),
        ("coord_cache", lambda: (Table(prof.coord_cache),
                                 bytearray(prof.coord_cache * (H + (H >> 2))),
                                 array("H", [0] * prof.coord_cache),
                                 array("i", [0] * prof.coord_cache))),
        ("wakeup_filter", lambda: (Table(prof.wakeup_filter),
                                   array("i", [0] * prof.wakeup_filter),
                                   array("i", [0] * prof.wakeup_filter),
                                   array("i", [0] * prof.wakeup_filter))),
        ("frame_view", lambda: wire.Frame(H)),
        ("frame_buffer", lambda: bytearray(len(r.buf))),
        ("counters", lambda: Counters()),
    )
    out = {}
    keep = []
    b0 = mem_alloc()
    for name, make in parts:
        keep.append(make())   # all kept: increments never include freed memory
        b1 = mem_alloc()
        out[name] = b1 - b0
        b0 = b1
    return out


BURST = 64   # = the number of destinations: a burst covers each once


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def cmd_nexthop(prof_path, iters, runs):
    prof = load_profile(prof_path)
    fx = Fixture(prof)
    now = 0
    r = make_router(fx, now)
    fill(r, fx, now)
    sn = r.snake
    tree = r.tree
    rnd = Lcg(777)
    # SNEK destinations: half are keys with a route, half random keys
    # between ours and the root's (no exact match: every step scans fully)
    nd = 64
    dsts = []
    keys = []
    i = 0
    while len(dsts) < nd:
        if i % 2 == 0 and i // 2 < len(fx.boots):
            k = bytes(fx.boots[i // 2][0])
        else:
            k = bytes([0x80 + rnd.next(0x70)] + [rnd.next(256) for _ in range(31)])
        dsts.append(bytearray(k))
        keys.append(k)
        i += 1
    # tree destinations: coordinates max_hops deep that share a prefix of
    # random length with one peer's coordinates
    H = prof.max_hops
    cbuf = bytearray(nd * 3 * H)
    coffs = [0] * nd
    clens = [0] * nd
    off = 0
    for j in range(nd):
        p = 1 + rnd.next(prof.max_peers)
        pc = tree.coords(p)
        keep = rnd.next(len(pc) + 1)
        ports = pc[:keep]
        while len(ports) < H:
            ports.append(1 + rnd.next(200))
        body = wire.encode_coords_body(ports)
        platform.copy_into(cbuf, off, body, 0, len(body))
        coffs[j] = off
        clens[j] = len(body)
        off += len(body)
    table = {}
    for k in keys:
        table[k] = len(table)
    mask = nd - 1
    # sanity: the decisions are real (some destinations go somewhere)
    hops = 0
    for j in range(nd):
        if sn.next_hop(dsts[j], False, FULL_KEY, 0, now):
            hops += 1
    thops = 0
    for j in range(nd):
        if tree.next_hop(cbuf, coffs[j], clens[j], 0):
            thops += 1

    def t_snek(n):
        nh = sn.next_hop
        d = dsts
        fk = FULL_KEY
        t0 = ticks_us()
        for i in range(n):
            nh(d[i & mask], False, fk, 0, now)
        return ticks_diff(ticks_us(), t0)

    def t_tree(n):
        nh = tree.next_hop
        cb = cbuf
        co = coffs
        cl = clens
        t0 = ticks_us()
        for i in range(n):
            j = i & mask
            nh(cb, co[j], cl[j], 0)
        return ticks_diff(ticks_us(), t0)

    def t_dict(n):
        get = table.get
        k = keys
        t0 = ticks_us()
        for i in range(n):
            get(k[i & mask])
        return ticks_diff(ticks_us(), t0)

    def t_empty(n):
        k = keys
        t0 = ticks_us()
        for i in range(n):
            k[i & mask]
        return ticks_diff(ticks_us(), t0)

    # the decisions themselves allocate nothing (hot path rule)
    alloc = {}
    for name, fn in (("snek", t_snek), ("tree", t_tree)):
        fn(10)
        b0 = mem_alloc()
        fn(iters)
        b1 = mem_alloc()
        alloc[name] = None if b0 is None else b1 - b0
    res = {"snek": [], "tree": [], "dict": [], "loop": []}
    a0 = mem_alloc()
    # Each run times `iters` calls as bursts of BURST calls (1-2 ms,
    # shorter than a scheduler time slice) and keeps its fastest
    # burst, so preemption by other processes on a shared machine does not
    # count; the four kinds are interleaved burst by burst.
    nb = max(1, iters // BURST)
    for _ in range(runs):
        best = {"snek": None, "tree": None, "dict": None, "loop": None}
        for _ in range(nb):
            for name, fn, n in (("snek", t_snek, BURST), ("tree", t_tree, BURST),
                                ("dict", t_dict, BURST * 20), ("loop", t_empty, BURST * 20)):
                v = fn(n) / n
                if best[name] is None or v < best[name]:
                    best[name] = v
        for name in best:
            res[name].append(best[name])
    a1 = mem_alloc()
    out = {"interpreter": sys.implementation.name, "profile": prof.name,
           "iterations": iters, "runs": runs, "burst": BURST, "destinations": nd,
           "snek_with_next_hop": hops, "tree_with_next_hop": thops,
           "occupancy": report.occupancy(r), "alloc_bytes_per_run": alloc}
    for k in res:
        out[k + "_us"] = _median(res[k])
        out[k + "_us_all"] = [round(x, 4) for x in res[k]]
    if a0 is not None:
        out["alloc_during_timing"] = a1 - a0
    print(json.dumps(out))


def main(argv):
    if not argv:
        print("usage: mp_router.py state|nexthop [PROFILE_JSON] [ITER] [RUNS]")
        sys.exit(2)
    prof = argv[1] if len(argv) > 1 and argv[1] != "-" else None
    if argv[0] == "state":
        cmd_state(prof)
    elif argv[0] == "nexthop":
        iters = int(argv[2]) if len(argv) > 2 else 2000
        runs = int(argv[3]) if len(argv) > 3 else 7
        cmd_nexthop(prof, iters, runs)
    else:
        print("unknown command " + argv[0])
        sys.exit(2)


main(sys.argv[1:])
