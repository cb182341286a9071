"""Ground truth and probes.

Ground truth is computed from the simulator's own view of the mesh, never
from what routers believe: the reachable components are the alive nodes
joined by usable links (physically up, not cut by a partition, not refused
by a full port table); in each component the spanning-tree root must be
the highest key, everybody must agree on it and on its sequence number, and
every node's descending snake entry must be the next-lower key of the
component (the lowest key has none).

Probes are pings between nodes: the request payload is ``b"SIMP" + id``
(u32 big-endian), the reply ``b"SIMR" + id``. The harness answers requests
in the destination's deliver callback and records, per probe, the path the
request took (observed by the engine as it carries traffic frames).
"""
import struct

from host_tools.sim.keys import hexkey
from snake import report

REQ = b"SIMP"
REP = b"SIMR"
_ID = struct.Struct(">I")


def request_payload(pid):
    return REQ + _ID.pack(pid & 0xFFFFFFFF)


def reply_payload(pid):
    return REP + _ID.pack(pid & 0xFFFFFFFF)


def parse_payload(payload):
    """(kind, id) for a probe payload ("req"/"rep"), else (None, None)."""
    if len(payload) == 8:
        head = bytes(payload[:4])
        if head == REQ:
            return "req", _ID.unpack_from(payload, 4)[0]
        if head == REP:
            return "rep", _ID.unpack_from(payload, 4)[0]
    return None, None


class Probe:
    """One ping. `path` is the list of NodeStates the request visited
    (source first); `hops` = len(path) - 1 once the request arrived."""

    __slots__ = ("id", "src", "dst", "t_sent", "path", "reached", "done", "ok",
                 "rtt_us", "reason", "reply_from", "shortest")

    def __init__(self, pid, src, dst, t_sent, shortest=None):
        self.id = pid
        self.shortest = shortest    # shortest path (hops) on the usable links when sent
        self.src = src
        self.dst = dst
        self.t_sent = t_sent
        self.path = [src]
        self.reached = False
        self.done = False
        self.ok = False
        self.rtt_us = None
        self.reason = None
        self.reply_from = None


class ProbeResult:
    """What `Mesh.ping` returns (and what truth.json lists)."""

    __slots__ = ("id", "src", "dst", "dst_key", "ok", "rtt_ms", "hops", "path",
                 "path_keys", "t", "reason", "shortest")

    def __init__(self, probe, t_sent_s):
        self.id = probe.id
        self.src = probe.src.name
        self.dst = probe.dst.name
        self.dst_key = probe.dst.key
        self.ok = probe.ok
        self.rtt_ms = round(probe.rtt_us / 1000.0, 3) if probe.rtt_us is not None else None
        self.hops = len(probe.path) - 1 if probe.reached else None
        self.path = [n.name for n in probe.path]
        self.path_keys = [n.key for n in probe.path]
        self.t = t_sent_s
        self.reason = probe.reason
        self.shortest = probe.shortest

    @property
    def stretch(self):
        """hops / shortest path when the request arrived, else None."""
        if self.hops is None or not self.shortest:
            return None
        return self.hops / float(self.shortest)

    def as_dict(self):
        return {"id": self.id, "t": self.t, "src": self.src, "dst": self.dst, "ok": self.ok,
                "rtt_ms": self.rtt_ms, "hops": self.hops, "path": self.path,
                "reason": self.reason, "shortest": self.shortest}

    def telemetry_fields(self):
        return {"probe": "ping", "id": self.id, "src": hexkey(self.path_keys[0]),
                "dst": hexkey(self.dst_key), "ok": self.ok, "rtt_ms": self.rtt_ms, "hops": self.hops,
                "path": [hexkey(k) for k in self.path_keys]}

    def __repr__(self):
        return ("ProbeResult(%s->%s ok=%s rtt_ms=%s hops=%s path=%s%s)"
                % (self.src, self.dst, self.ok, self.rtt_ms, self.hops, self.path,
                   " reason=" + self.reason if self.reason else ""))


# -- ground truth --------------------------------------------------------------

def components(nodes):
    """Reachable components: lists of alive NodeStates joined by usable
    links; each list in node order, components in order of first node."""
    seen = set()
    comps = []
    for n in nodes:
        if not n.alive or n.index in seen:
            continue
        comp = [n]
        seen.add(n.index)
        i = 0
        while i < len(comp):
            for link in comp[i].links:
                if link.up and not link.cut and not link.blocked:
                    m = link.b if link.a is comp[i] else link.a
                    if m.alive and m.index not in seen:
                        seen.add(m.index)
                        comp.append(m)
            i += 1
        comp.sort(key=lambda x: x.index)
        comps.append(comp)
    return comps


def usable(link):
    """The link carries frames when connected: up, not cut, not refused."""
    return link.up and not link.cut and not link.blocked


def shortest_hops(src, dst):
    """Hops of a shortest path from NodeState src to dst over usable links
    between alive nodes (breadth-first), None when unreachable."""
    if src is dst:
        return 0
    if not (src.alive and dst.alive):
        return None
    dist = {src.index: 0}
    frontier = [src]
    d = 0
    while frontier:
        d += 1
        nxt = []
        for n in frontier:
            for link in n.links:
                if link.up and not link.cut and not link.blocked:
                    m = link.b if link.a is n else link.a
                    if m.alive and m.index not in dist:
                        if m is dst:
                            return d
                        dist[m.index] = d
                        nxt.append(m)
        frontier = nxt
    return None


def first_message_stretch(results):
    """Mean stretch (hops / shortest path on the usable links when sent) of
    the first probe of every (src, dst) pair, over the pairs whose first
    probe arrived; with the number of such pairs and of pairs in all:
    (mean or None, pairs measured, pairs). Later probes of a pair may use the
    tree coordinates the first exchange cached; the first one finds its way
    by key (SNEK), the path a new conversation takes."""
    first = {}
    for r in results:
        k = (r.src, r.dst)
        if k not in first or r.id < first[k].id:
            first[k] = r
    vals = [r.stretch for r in first.values() if r.stretch is not None]
    return (sum(vals) / len(vals) if vals else None), len(vals), len(first)


def snake_correct_count(comp):
    """Nodes of one component whose descending entry is the next-lower key
    of the component (the lowest: none)."""
    order = sorted(comp, key=lambda n: n.key)
    ok = 0
    prev = None
    for n in order:
        got = report.desc_key(n.router)
        if prev is None:
            ok += got is None
        else:
            ok += got is not None and bytes(got) == prev.key
        prev = n
    return ok


def tree_problems(comp, limit=10):
    """Nodes of one component that disagree with the true root."""
    top = max(comp, key=lambda n: n.key)
    out = []
    seqs = {}
    for n in comp:
        rk = report.root_key(n.router)
        if rk != top.key:
            out.append("%s: root %s, expected %s (%s)" % (n.name, _short(rk), _short(top.key), top.name))
        else:
            seqs.setdefault(report.root_seq(n.router), []).append(n.name)
        if len(out) >= limit:
            break
    if not out and len(seqs) > 1:
        out.append("root sequence disagreement: %s"
                   % ", ".join("%s: %d nodes" % (s, len(v)) for s, v in sorted(seqs.items())))
    return out


def snake_problems(comp, limit=10):
    """Nodes of one component whose descending entry is not the next-lower key."""
    order = sorted(comp, key=lambda n: n.key)
    out = []
    prev = None
    for n in order:
        want = prev.key if prev is not None else None
        got = report.desc_key(n.router)
        if got is not None:
            got = bytes(got)
        if got != want:
            out.append("%s: desc %s, expected %s" % (n.name, _short(got),
                                                      prev.name if prev is not None else "none"))
            if len(out) >= limit:
                break
        prev = n
    return out


def tree_ok(comp):
    top = max(comp, key=lambda n: n.key).key
    seq = None
    for n in comp:
        r = n.router
        if report.root_key(r) != top:
            return False
        s = report.root_seq(r)
        if seq is None:
            seq = s
        elif s != seq:
            return False
    return True


def snake_ok(comp):
    order = sorted(comp, key=lambda n: n.key)
    prev = None
    for n in order:
        got = report.desc_key(n.router)
        if prev is None:
            if got is not None:
                return False
        elif got is None or bytes(got) != prev.key:
            return False
        prev = n
    return True


def _short(k):
    if k is None:
        return "none"
    return hexkey(bytes(k))[:8]
