"""Topologies for the virtual-time simulator.

The topology file format (host_tools/topologies/README.md): each line is a
chain of node names separated by spaces; consecutive names are linked;
duplicate edges and self-links are ignored; a token starting with ``#``
starts a comment to the end of the line.

snakemesh extension (backwards compatible with the shared files): tokens that
start with ``@`` are options for every edge of their line, never node names:

    a b c @ble                 # a-b and b-c are Bluetooth LE links
    c d @remote @latency=40    # one remote link with 40 ms one-way latency
    d e @wifi @loss=0.05 @bw=250000

``@local``, ``@wifi``, ``@bonjour``, ``@remote``, ``@ble`` and ``@espnow`` set the link
type (default wifi); ``@latency=MS``, ``@bw=BYTES_PER_S`` (0 = unlimited)
and ``@loss=P`` (0..1) override that type's defaults. Blank lines and lines
whose first character is ``#`` are ignored. When an edge appears more than
once, its first occurrence (and its options) wins.

Generators: ``grid(w, h)`` (4-neighbour), ``random_geometric(n, radius,
seed)`` (unit square, always connected) and ``barabasi_albert(n, m, seed)``
(scale-free: a few hubs with many links).
"""
import math
import random

from host_tools.sim.links import LINK_TYPES, LINK_IDS, DEFAULT_LINK


class TopologyError(ValueError):
    """A topology file or generator argument is unusable (message says why)."""


class Edge:
    """One undirected edge: names a, b; link type name; per-edge overrides
    (None = the link type's default)."""

    __slots__ = ("a", "b", "link", "latency_ms", "bw", "loss")

    def __init__(self, a, b, link=DEFAULT_LINK, latency_ms=None, bw=None, loss=None):
        self.a = a
        self.b = b
        self.link = link
        self.latency_ms = latency_ms
        self.bw = bw
        self.loss = loss

    def options(self):
        """The ``@`` tokens that reproduce this edge's settings."""
        out = []
        if self.link != DEFAULT_LINK:
            out.append("@" + self.link)
        if self.latency_ms is not None:
            out.append("@latency=" + _num(self.latency_ms))
        if self.bw is not None:
            out.append("@bw=" + _num(self.bw))
        if self.loss is not None:
            out.append("@loss=" + _num(self.loss))
        return out

    def __repr__(self):
        return "Edge(%r, %r, %r)" % (self.a, self.b, self.link)


def _num(x):
    if isinstance(x, float) and x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


class Topology:
    """Node names (in order of first appearance) and undirected edges."""

    def __init__(self):
        self.names = []
        self._index = {}
        self.edges = []
        self._pairs = {}

    # -- building ------------------------------------------------------
    def add_node(self, name):
        if not isinstance(name, str) or not name or name != name.strip() or " " in name:
            raise TopologyError("bad node name %r" % (name,))
        if name.startswith("@") or name.startswith("#"):
            raise TopologyError("node name must not start with @ or #: %r" % name)
        if name not in self._index:
            self._index[name] = len(self.names)
            self.names.append(name)
        return self._index[name]

    def add_edge(self, a, b, link=DEFAULT_LINK, latency_ms=None, bw=None, loss=None):
        """Add edge a-b; returns the Edge, or None for a self-link or a
        duplicate (the first occurrence wins)."""
        if link not in LINK_IDS:
            raise TopologyError("unknown link type %r (one of %s)"
                                % (link, ", ".join(LINK_TYPES)))
        self.add_node(a)
        self.add_node(b)
        if a == b:
            return None
        pair = (a, b) if a < b else (b, a)
        if pair in self._pairs:
            return None
        e = Edge(a, b, link, latency_ms, bw, loss)
        self._pairs[pair] = e
        self.edges.append(e)
        return e

    def edge(self, a, b):
        return self._pairs.get((a, b) if a < b else (b, a))

    def __contains__(self, name):
        return name in self._index

    def __len__(self):
        return len(self.names)

    # -- analysis ------------------------------------------------------
    def adjacency(self):
        adj = {n: [] for n in self.names}
        for e in self.edges:
            adj[e.a].append(e.b)
            adj[e.b].append(e.a)
        return adj

    def components(self):
        """Connected components as lists of names (each in topology order),
        largest first, ties by first name's position."""
        adj = self.adjacency()
        seen = set()
        comps = []
        for n in self.names:
            if n in seen:
                continue
            comp = [n]
            seen.add(n)
            i = 0
            while i < len(comp):
                for m in adj[comp[i]]:
                    if m not in seen:
                        seen.add(m)
                        comp.append(m)
                i += 1
            comps.append(sorted(comp, key=self._index.__getitem__))
        comps.sort(key=lambda c: (-len(c), self._index[c[0]]))
        return comps

    def is_connected(self):
        return len(self.names) <= 1 or len(self.components()) == 1

    def max_degree(self):
        adj = self.adjacency()
        return max((len(v) for v in adj.values()), default=0)

    # -- text ----------------------------------------------------------
    def to_text(self):
        """The shared format: one edge per line (with ``@`` options where an
        edge differs from the default), then isolated nodes on their own."""
        lines = []
        linked = set()
        for e in self.edges:
            lines.append(" ".join([e.a, e.b] + e.options()))
            linked.add(e.a)
            linked.add(e.b)
        for n in self.names:
            if n not in linked:
                lines.append(n)
        return "\n".join(lines) + "\n"


def parse(text, source="<topology>"):
    """Parse the shared topology format (plus the ``@`` extension)."""
    topo = Topology()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        names = []
        opts = {"link": DEFAULT_LINK, "latency_ms": None, "bw": None, "loss": None}
        for tok in line.split():
            if tok.startswith("#"):
                break          # a comment to the end of the line
            if tok.startswith("@"):
                _parse_option(tok, opts, source, lineno)
            else:
                names.append(tok)
        if not names:
            raise TopologyError("%s:%d: options without node names" % (source, lineno))
        try:
            for n in names:
                topo.add_node(n)
            for i in range(len(names) - 1):
                topo.add_edge(names[i], names[i + 1], **opts)
        except TopologyError as e:
            raise TopologyError("%s:%d: %s" % (source, lineno, e))
    if not topo.names:
        raise TopologyError("%s: no nodes" % source)
    return topo


def _parse_option(tok, opts, source, lineno):
    body = tok[1:]
    if "=" not in body:
        if body not in LINK_IDS:
            raise TopologyError("%s:%d: unknown link type %s (one of %s)"
                                % (source, lineno, tok, ", ".join(LINK_TYPES)))
        opts["link"] = body
        return
    k, _, v = body.partition("=")
    try:
        x = float(v)
    except ValueError:
        raise TopologyError("%s:%d: %s: %r is not a number" % (source, lineno, tok, v))
    if not math.isfinite(x) or x < 0:
        raise TopologyError("%s:%d: %s must be a finite number >= 0" % (source, lineno, tok))
    if k == "latency":
        opts["latency_ms"] = x
    elif k == "bw":
        opts["bw"] = int(x)
    elif k == "loss":
        if x > 1:
            raise TopologyError("%s:%d: loss must be within 0..1" % (source, lineno))
        opts["loss"] = x
    else:
        raise TopologyError("%s:%d: unknown option %s (latency, bw, loss)" % (source, lineno, tok))


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise TopologyError("cannot read topology %s: %s" % (path, e.strerror or e))
    except UnicodeDecodeError:
        raise TopologyError("topology %s is not UTF-8 text" % path)
    return parse(text, path)


# -- generators ------------------------------------------------------------

def grid(w, h, link=DEFAULT_LINK):
    """w x h 4-neighbour grid; node names ``x_y`` (column, row)."""
    if not (isinstance(w, int) and isinstance(h, int)) or w < 1 or h < 1:
        raise TopologyError("grid size must be positive integers, got %rx%r" % (w, h))
    topo = Topology()
    for y in range(h):
        for x in range(w):
            topo.add_node("%d_%d" % (x, y))
    for y in range(h):
        for x in range(w):
            if x + 1 < w:
                topo.add_edge("%d_%d" % (x, y), "%d_%d" % (x + 1, y), link)
            if y + 1 < h:
                topo.add_edge("%d_%d" % (x, y), "%d_%d" % (x, y + 1), link)
    return topo


def default_radius(n, mean_degree=8.0):
    """Radius giving about `mean_degree` neighbours per node in the unit square."""
    return math.sqrt(mean_degree / (math.pi * max(n, 1)))


def random_geometric(n, radius=None, seed=0, link=DEFAULT_LINK):
    """n points uniform in the unit square, linked when within `radius`
    (default: mean degree ~8). Always connected: each component other than
    the largest is joined to the rest by its shortest edge to a node outside
    it (deterministic). Node names ``n0000``..; ``.positions`` holds (x, y)."""
    if not isinstance(n, int) or n < 1:
        raise TopologyError("random_geometric needs n >= 1, got %r" % (n,))
    if radius is None:
        radius = default_radius(n)
    if not radius > 0:
        raise TopologyError("random_geometric radius must be > 0")
    rng = random.Random("rgg:%d:%r:%s" % (n, radius, seed))
    width = max(4, len(str(n - 1)))
    names = ["n%0*d" % (width, i) for i in range(n)]
    pts = [(rng.random(), rng.random()) for _ in range(n)]
    topo = Topology()
    for name in names:
        topo.add_node(name)
    cell = radius
    cells = {}
    for i, (x, y) in enumerate(pts):
        cells.setdefault((int(x / cell), int(y / cell)), []).append(i)
    r2 = radius * radius
    for i, (x, y) in enumerate(pts):
        cx, cy = int(x / cell), int(y / cell)
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                for j in cells.get((cx + dx, cy + dy), ()):
                    if j > i:
                        ddx = pts[j][0] - x
                        ddy = pts[j][1] - y
                        if ddx * ddx + ddy * ddy <= r2:
                            topo.add_edge(names[i], names[j], link)
    # Join components: repeatedly link the smallest-indexed component that is
    # not the largest to its nearest outside node.
    while True:
        comps = topo.components()
        if len(comps) <= 1:
            break
        main = set(comps[0])
        comp = comps[-1]
        best = None
        for a in comp:
            ia = topo._index[a]
            for b in main:
                ib = topo._index[b]
                d = (pts[ia][0] - pts[ib][0]) ** 2 + (pts[ia][1] - pts[ib][1]) ** 2
                cand = (d, min(ia, ib), max(ia, ib))
                if best is None or cand < best:
                    best = cand
        topo.add_edge(names[best[1]], names[best[2]], link)
    topo.positions = {names[i]: pts[i] for i in range(n)}
    return topo


def barabasi_albert(n, m, seed=0, link=DEFAULT_LINK):
    """Scale-free graph (networkx's Barabasi-Albert model): n nodes, each new
    node linked to m existing ones chosen with probability proportional to
    their degree, so early nodes become hubs. Connected; deterministic for
    (n, m, seed). Node names ``n0000``.. in the model's order (the first
    ones are the hubs)."""
    if not isinstance(n, int) or not isinstance(m, int) or m < 1 or n <= m:
        raise TopologyError("barabasi_albert needs 1 <= M < N, got N=%r M=%r" % (n, m))
    import networkx as nx
    rng = random.Random("ba:%d:%d:%s" % (n, m, seed))
    g = nx.barabasi_albert_graph(n, m, seed=rng)
    width = max(4, len(str(n - 1)))
    names = ["n%0*d" % (width, i) for i in range(n)]
    topo = Topology()
    for name in names:
        topo.add_node(name)
    for a, b in sorted((min(a, b), max(a, b)) for a, b in g.edges()):
        topo.add_edge(names[a], names[b], link)
    return topo


def community(n, c, seed=0, m=2, link=DEFAULT_LINK):
    """Community-style mesh: n nodes in c communities of (nearly) equal
    size, each a Barabasi-Albert graph with m links per new node (a
    neighbourhood around a few well-linked hubs, which may have more links
    than a board has ports), the communities on a ring, each joined to the
    next by two links between random members and to one random other
    community by one more. Connected; deterministic for (n, c, seed). Node
    names ``n0000``.. by community (``.communities`` lists each one's names,
    its first names are its hubs)."""
    if not isinstance(n, int) or not isinstance(c, int) or c < 1 or n < c * (m + 2):
        raise TopologyError("community needs C >= 1 and N >= C x %d, got N=%r C=%r" % (m + 2, n, c))
    import networkx as nx
    rng = random.Random("community:%d:%d:%d:%s" % (n, c, m, seed))
    width = max(4, len(str(n - 1)))
    names = ["n%0*d" % (width, i) for i in range(n)]
    topo = Topology()
    for name in names:
        topo.add_node(name)
    groups = []
    start = 0
    for k in range(c):
        size = n // c + (1 if k < n % c else 0)
        groups.append(list(range(start, start + size)))
        start += size
    edges = set()
    for g in groups:
        sub = nx.barabasi_albert_graph(len(g), m, seed=rng)
        for a, b in sub.edges():
            edges.add((min(g[a], g[b]), max(g[a], g[b])))
    if c > 1:
        for k in range(c):
            nxt = groups[(k + 1) % c]
            for _ in range(2 if c > 2 or k == 0 else 0):
                a, b = rng.choice(groups[k]), rng.choice(nxt)
                edges.add((min(a, b), max(a, b)))
            others = [j for j in range(c) if j not in (k, (k + 1) % c, (k - 1) % c)]
            if others:
                a, b = rng.choice(groups[k]), rng.choice(groups[rng.choice(others)])
                edges.add((min(a, b), max(a, b)))
    for a, b in sorted(edges):
        topo.add_edge(names[a], names[b], link)
    topo.communities = [[names[i] for i in g] for g in groups]
    return topo


GENERATORS = "grid:WxH, rgg:N[:RADIUS], ba:N:M or community:N:C"


def generate(spec, seed=0):
    """Topology from a generator spec: ``grid:WxH``, ``rgg:N``,
    ``rgg:N:RADIUS``, ``ba:N:M`` or ``community:N:C``."""
    kind, _, rest = spec.partition(":")
    try:
        if kind == "grid":
            w, _, h = rest.lower().partition("x")
            return grid(int(w), int(h))
        if kind == "rgg":
            parts = rest.split(":")
            n = int(parts[0])
            radius = float(parts[1]) if len(parts) > 1 and parts[1] else None
            if len(parts) > 2:
                raise ValueError
            return random_geometric(n, radius, seed)
        if kind == "ba":
            n, m = rest.split(":")
            return barabasi_albert(int(n), int(m), seed)
        if kind == "community":
            n, c = rest.split(":")
            return community(int(n), int(c), seed)
    except TopologyError:
        raise
    except ValueError:
        pass
    raise TopologyError("bad generator %r (use %s)" % (spec, GENERATORS))
