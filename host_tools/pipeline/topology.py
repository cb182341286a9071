"""Topology for the pipeline: where it comes from, how it changes over time,
and the small per-node tables derived from it on the driver.

The topology is a dimension table (nodes and links, thousands of rows at
most), not the telemetry itself, so it is collected to the driver and the
derived tables (components, the true descending key, shortest paths from the
probes' sources) are built there and handed back to Spark as small
broadcastable DataFrames.

Rule (documented in docs/guides/PIPELINE.md):
1. `--topology FILE` (shared format: each line a chain of names): one static
   graph for the whole run. Names map to keys through the `names` of the
   telemetry's `topology` records when there are any, else names are keys.
2. Otherwise `topology` records: each distinct edge set starts an epoch at
   the record's `t`; the first applies from the start of the data. Records
   with the same `t` are merged; a record repeating the current edge set does
   not start a new epoch.
3. Otherwise the union of every link seen in `peers` records (static).
4. Otherwise no topology: all nodes are taken as one component, and stretch
   is unknown.
Nodes that appear in telemetry but not in the topology are isolated.
"""
from collections import deque

from host_tools.errors import InputError


class Epoch(object):
    def __init__(self, index, start, edges, links=None):
        self.index = index
        self.start = start          # None for the first epoch (from the start of the data)
        self.edges = edges          # set of (a, b) with a < b
        self.links = links or {}    # (a, b) -> link name


def read_topology_file(path, links=None):
    """Parse the shared topology format into (names, set of (a, b) name
    pairs). `@` options (the simulator's and mesh's extension: `@ble`,
    `@latency=...`) are not names; a bare `@LINK` names the link type of the
    line's edges, stored in `links` {(a, b): link} when given."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError("%s: cannot read topology (%s)" % (path, e.strerror or e))
    if b"\x00" in data:
        raise InputError("%s: binary data, not a topology file" % path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("%s: not a text topology file (invalid UTF-8)" % path)
    edges = set()
    names = set()
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        toks = line.split()
        chain = [x for x in toks if not x.startswith("@")]
        link = None
        for x in toks:
            if x.startswith("@") and "=" not in x and len(x) > 1:
                link = x[1:]
        names.update(chain)
        for a, b in zip(chain, chain[1:]):
            if a != b:
                e = (a, b) if a < b else (b, a)
                edges.add(e)
                if links is not None:
                    links[e] = link or "wifi"
    if not names:
        raise InputError("%s: topology file has no nodes" % path)
    return names, edges


def _norm(a, b):
    return (a, b) if a < b else (b, a)


def epochs_from_records(records):
    """records: list of (t, edges, names) from `topology` records, any order.
    Returns (epochs, names) with names merged hex->name."""
    names = {}
    by_t = {}
    for t, edges, nm in records:
        if nm:
            for k, v in nm.items():
                if k is not None and v is not None:
                    names[k.lower()] = v
        cur = by_t.setdefault(t, {})
        for e in edges or ():
            if not e or len(e) < 2 or e[0] is None or e[1] is None:
                continue
            a, b = e[0].lower(), e[1].lower()
            if a == b:
                continue
            cur[_norm(a, b)] = e[2] if len(e) > 2 else None
    epochs = []
    prev = None
    for t in sorted(by_t):
        es = set(by_t[t])
        if prev is not None and es == prev:
            continue
        epochs.append(Epoch(len(epochs), None if not epochs else t, es, by_t[t]))
        prev = es
    return epochs, names


def epoch_from_file(path, names_hex_to_name):
    name_links = {}
    names, edges = read_topology_file(path, name_links)
    to_key = {}
    for k, v in names_hex_to_name.items():
        to_key[v] = k
    if to_key:
        missing = sorted(n for n in names if n not in to_key)
        if missing:
            raise InputError("%s: %d topology name(s) have no key in the telemetry's topology names (e.g. %s)"
                             % (path, len(missing), missing[0]))
        key = lambda n: to_key[n]  # noqa: E731
    else:
        key = lambda n: n.lower()  # noqa: E731
    links = {}
    for (a, b), link in name_links.items():
        links[_norm(key(a), key(b))] = link
    mapped = set(links)
    nodes = set(key(n) for n in names)
    return Epoch(0, None, mapped, links), nodes


def epoch_from_peer_links(pairs):
    """pairs: (node, peer) or (node, peer, link) from `peers` records."""
    links = {}
    for p in pairs:
        a, b = p[0], p[1]
        if a and b and a != b:
            e = _norm(a, b)
            link = p[2] if len(p) > 2 else None
            if link or e not in links:
                links[e] = link
    return Epoch(0, None, set(links), links)


def adjacency(nodes, edges):
    adj = dict((n, []) for n in nodes)
    for a, b in edges:
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    for n in adj:
        adj[n].sort()
    return adj


def components(nodes, edges):
    """node -> component id (the component's lowest key)."""
    adj = adjacency(nodes, edges)
    comp = {}
    for start in sorted(adj):
        if start in comp:
            continue
        seen = [start]
        comp[start] = None
        q = deque([start])
        while q:
            x = q.popleft()
            for y in adj[x]:
                if y not in comp:
                    comp[y] = None
                    seen.append(y)
                    q.append(y)
        cid = min(seen)
        for x in seen:
            comp[x] = cid
    return comp


def expected_desc(comp):
    """node -> the next-lower key in its component (None for the lowest)."""
    groups = {}
    for n, c in comp.items():
        groups.setdefault(c, []).append(n)
    out = {}
    for members in groups.values():
        members.sort()
        prev = None
        for n in members:
            out[n] = prev
            prev = n
    return out


def bfs_lengths(adj, src):
    dist = {src: 0}
    q = deque([src])
    while q:
        x = q.popleft()
        for y in adj.get(x, ()):
            if y not in dist:
                dist[y] = dist[x] + 1
                q.append(y)
    return dist


def depths_from(adj, root):
    return bfs_lengths(adj, root) if root in adj else {}
