# Records of the router's state for the console, telemetry and the simulator
# (peers, routes, tree, occupancy, capacity, evictions, counters, queues).
#
# Cold code: the running node needs it only while a console command or a
# telemetry period builds its reply. snake/runtime/cmds.py imports it (so its qstrs
# are interned at boot, stream.py "Nothing new after boot") and the console
# drops both with the request; Counters.as_dict loads it for one call (load
# below). Tests, the simulator and bench read a router through it
# (report.root_key(r), report.peers(r) ...), not through Router methods. As
# .mpy its bytecode would otherwise stay in the heap for as long as the
# node runs (docs/reports/MEMORY.md).
from snake import platform
from snake.telemetry import LINK_NAMES, BYTES_CARRY, D_ROUTE_TABLE_FULL, D_TOO_DEEP, D_WAKEUP_BUDGET
from snake.wire import TYPE_NAMES

# Drop reasons: index -> name, the telemetry.D_* numbering (tests check
# DROP_NAMES[D_X] == "x"). Every dropped frame increments exactly one.
DROP_NAMES = (
    "malformed",         # codec rejected the frame (WireError)
    "oversize",          # larger than the profile's frame_max
    "unknown_port",      # frame from a port that is not up
    "unknown_type",      # frame type we do not handle
    "hop_limit",         # traffic hop limit exhausted at a relay
    "loop",              # next hop is the port the frame came in on
    "watermark",         # new watermark worse than the frame's
    "no_route",          # traffic reached a dead end not addressed to us
    "queue_full",        # output queue of the next hop full
    "bootstrap_root",    # bootstrap for another root / root sequence
    "bootstrap_replay",  # bootstrap sequence not higher than the route's
    "bootstrap_self",    # our own bootstrap came back
    "bad_signature",     # bootstrap / wakeup / announcement signature failed
    "route_table_full",  # (not counted since such bootstraps are relayed: see capacity routes)
    "wakeup_root",       # wakeup for another root
    "wakeup_dup",        # wakeup repeated or too soon from that origin
    "wakeup_hop_limit",  # wakeup not relayed at hop limit 1
    "sanity",            # announcement failed a sanity check (peer dropped)
    "no_buffer",         # no frame buffer free
    "too_deep",          # announcement deeper than the profile's max_hops
    "no_memory",         # MemoryError while handling the frame
    "wakeup_budget",     # wakeup not verified: over the port's or node's budget, or could change nothing
)

# Node.defence, index -> name (guard.py DF_*): each defence against a hostile
# peer, counted when it acts (node.py "Receiving", "Admission")
DEFENCE_NAMES = ("hs_source_limit", "hs_evicted", "hs_deadline", "hs_backoff", "rx_stall", "rx_slow")


# probe.Prober.stats, index -> name (probe.py _P_*)
PROBE_STATS = ("requests", "replies_sent", "replies_dropped", "trace_expired", "unmatched")

# datagram.Datagrams.stats, index -> name (datagram_cold.py _G_*)
DGRAM_STATS = ("sent", "delivered", "failed_no_route", "failed_timeout", "failed_too_big",
               "failed_no_memory", "failed_busy", "retries", "fragments_sent",
               "fragments_received", "received", "duplicates", "reasm_refused",
               "reasm_too_big", "reasm_expired", "malformed", "acks_sent", "acks_received",
               "acks_unmatched", "acks_dropped", "no_memory")



def counters(c):
    """telemetry.Counters as a dict of names (console `stats`, telemetry)."""
    rx = {}
    tx = {}
    txb = {}
    for i in range(len(TYPE_NAMES)):
        rx[TYPE_NAMES[i]] = c.rx[i]
        tx[TYPE_NAMES[i]] = c.tx[i]
        txb[TYPE_NAMES[i]] = c.tx_bytes_hi[i] * BYTES_CARRY + c.tx_bytes[i]
    txl = {}
    txbl = {}
    for i in range(len(LINK_NAMES)):
        txl[LINK_NAMES[i]] = c.tx_link[i]
        txbl[LINK_NAMES[i]] = c.tx_bytes_link_hi[i] * BYTES_CARRY + c.tx_bytes_link[i]
    drops = {}
    for i in range(len(DROP_NAMES)):
        if c.drops[i]:
            drops[DROP_NAMES[i]] = c.drops[i]
    return {
        "rx": rx, "tx": tx, "drops": drops,
        "tx_bytes": txb, "tx_link": txl, "tx_bytes_link": txbl,
        "verify_done": c.verify_done,
        "verify_skipped": c.verify_skipped,
        "verify_cached": c.verify_cached,
        "delivered": c.delivered,
        "forwarded": c.forwarded,
        "originated": c.originated,
        "relay_shed": c.relay_shed,
    }


def defence(node):
    """The node's defence counters by name, with the router's wakeup
    budget and relay shedding (console `stats`, telemetry `counters`)."""
    d = {}
    for i in range(len(DEFENCE_NAMES)):
        d[DEFENCE_NAMES[i]] = node.defence[i]
    c = node.router.counters
    d["wakeup_budget"] = c.drops[D_WAKEUP_BUDGET]
    d["relay_shed"] = c.relay_shed
    return d


# the router's state as values (tests, the simulator, bench): these were
# Router methods; here they cost the running node no heap (docs/reports/MEMORY.md)
def root_key(r):
    return bytes(r.tree.root_key())


def root_seq(r):
    return r.tree.root_seq()


def parent_port(r):
    return r.tree.parent


def coords(r):
    return r.tree.coords()


def desc_key(r):
    s = r.snake
    return bytes(s.desc_key) if s.desc_valid else None


def peer_key(r, port):
    return bytes(r.port_key[port]) if r.up[port] else None


def peers(r):
    out = []
    t = r.tree
    p = 1
    while p < len(r.up):
        if r.up[p]:
            coords = None
            if t.ann_valid[p]:
                coords = t.coords(p)
            out.append({
                "port": p,
                "key": platform.hexstr(r.port_key[p]),
                "link": LINK_NAMES[r.port_link[p]] if r.port_link[p] < len(LINK_NAMES) else str(r.port_link[p]),
                "root": platform.hexstr(t.ann_root[p]) if t.ann_valid[p] else None,
                "root_seq": t.ann_seq[p] if t.ann_valid[p] else None,
                "coords": coords,
            })
        p += 1
    return out


def routes(r, now):
    s = r.snake
    t = s.routes
    out = []
    i = 0
    while i < t.capacity:
        if t.used(i):
            key = platform.hexstr(t.key(i))
            root, root_seq = s.route_root(i)
            out.append({
                "key": key, "src_port": s.src(i), "dst_port": s.dst(i),
                "root": platform.hexstr(root), "root_seq": root_seq,
                "wm_key": key, "wm_seq": s.seq(i),
                "age_ms": s.age(i, now),
            })
        i += 1
    return out


def ancestors(r):
    t = r.tree
    if not t.parent:
        return []
    return [platform.hexstr(t.hop_key(t.parent, i)) for i in range(t.depth())]


def occupancy(r):
    return {
        "peers": [sum(r.up), len(r.up) - 1],
        "routes": [r.snake.routes.count, r.snake.routes.capacity],
        "coords": [r.ccache.count, r.ccache.capacity],
        "sigcache": [r.sigcache.count, r.sigcache.capacity],
        "wakeups": [r.wakeups.count, r.wakeups.capacity],
        "hops": [r.tree.pool.count, r.tree.pool.capacity],
    }


def capacity(r):
    """The tables that bound the mesh a node can be part of:
    {table: [used, capacity, refused]} with `refused` cumulative since
    boot (telemetry `counters` and console `status`, see docs/reports/CAPACITY.md):
      peers   ports up / max_peers / links refused for want of a port
      routes  route entries / max_routes / bootstraps refused plus live
              entries evicted for lack of room
      depth   our tree depth / max_hops / announcements dropped as too deep
      hops    announcement hops stored for all peers (shared pool) /
              hop_pool / peers' announcements forgotten for want of room"""
    sn = r.snake
    d = r.counters.drops
    return {
        "peers": [sum(r.up), len(r.up) - 1, r.peers_refused],
        "routes": [sn.routes.count, sn.routes.capacity,
                   d[D_ROUTE_TABLE_FULL] + sn.routes_refused + sn.evicted_live],
        "depth": [r.tree.depth(), r.tree.max_hops, d[D_TOO_DEEP]],
        "hops": [r.tree.pool.count, r.tree.pool.capacity, r.tree.evicted],
    }


def evictions(r):
    return {
        "routes": r.snake.routes.evictions,
        "coords": r.ccache.evictions,
        "sigcache": r.sigcache.evictions,
        "wakeups": r.wakeups.evictions,
    }


def snapshot(r):
    t = r.tree
    coords = t.coords()
    s = r.snake
    return {
        "key": platform.hexstr(r.key),
        "root": platform.hexstr(t.root_key()),
        "root_seq": t.root_seq(),
        "parent": platform.hexstr(r.port_key[t.parent]) if t.parent else None,
        "coords": coords,
        "depth": len(coords),
        "desc": platform.hexstr(s.desc_key) if s.desc_valid else None,
        "peers": sum(r.up),
        "routes": s.routes.count,
    }


def datagrams(dg):
    """datagram.Datagrams' counters by name, and what is in flight."""
    d = {}
    for i in range(len(DGRAM_STATS)):
        d[DGRAM_STATS[i]] = dg.stats[i]
    d["pending"] = dg.pending()
    d["reassembling"] = dg.reassemblies()
    return d


def probes(pr):
    """probe.Prober's counters by name (console `stats`)."""
    d = {}
    for i in range(len(PROBE_STATS)):
        d[PROBE_STATS[i]] = pr.stats[i]
    return d


def queues(node):
    """Per live link: send-queue length, limit, high-water mark, refusals."""
    out = []
    sq = node.sq
    p = 1
    while p < len(node.links):
        if node.links[p] is not None:
            out.append({"port": p, "len": sq.count[p], "limit": sq.limit[p], "high": sq.high[p],
                        "full": sq.full[p]})
        p += 1
    return out
