"""Simulator topologies: the shared file format, the @ link-option
extension, and the grid / random-geometric generators."""
import os

import networkx as nx
import pytest

import host_tools  # noqa: F401
from host_tools.sim import topology as T
from host_tools.sim.keys import node_seed
from host_tools.sim.links import link_params, LINK_DEFAULTS

SHARED = os.path.join(host_tools.REPO_ROOT, "host_tools", "topologies")   # the shipped topologies


def _independent_parse(path):
    """Edge set read the way host_tools/topologies/README.md describes it."""
    nodes, edges = set(), set()
    with open(path) as f:
        for line in f:
            chain = line.split()
            nodes.update(chain)
            for a, b in zip(chain, chain[1:]):
                if a != b:
                    edges.add(frozenset((a, b)))
    return nodes, edges


@pytest.mark.parametrize("fname,nodes,edges", [
    ("sim.txt", 26, None),
    ("line-0050.txt", 50, 49),
    ("rtree-0050.txt", 50, 49),
    ("grid4-0049.txt", 49, 84),
])
def test_shared_files_parse(fname, nodes, edges):
    path = os.path.join(SHARED, fname)
    if not os.path.exists(path):
        pytest.fail("topology %s missing from the checkout" % path)
    topo = T.load(path)
    want_nodes, want_edges = _independent_parse(path)
    assert len(topo.names) == nodes == len(want_nodes)
    assert set(topo.names) == want_nodes
    got = set(frozenset((e.a, e.b)) for e in topo.edges)
    assert got == want_edges
    assert len(topo.edges) == len(want_edges)     # duplicates dropped
    if edges is not None:
        assert len(topo.edges) == edges
    assert all(e.link == "wifi" for e in topo.edges)
    assert topo.is_connected()


def test_chain_duplicates_and_self_links():
    topo = T.parse("a b c a\nb a\nc c d\n\n# a comment line\n  e  \n")
    assert topo.names == ["a", "b", "c", "d", "e"]
    pairs = [(e.a, e.b) for e in topo.edges]
    assert pairs == [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
    assert not topo.is_connected()             # e is isolated
    assert [len(c) for c in topo.components()] == [4, 1]


def test_link_type_suffix_applies_to_whole_line():
    topo = T.parse("a b c @ble\nc d @remote @latency=40\nd e @wifi @loss=0.25 @bw=1000\ne f\n"
                   "a b @local\n")
    by = {(e.a, e.b): e for e in topo.edges}
    assert by[("a", "b")].link == "ble"        # first occurrence wins over the later @local
    assert by[("b", "c")].link == "ble"
    assert by[("c", "d")].link == "remote"
    assert by[("c", "d")].latency_ms == 40
    assert by[("d", "e")].loss == 0.25 and by[("d", "e")].bw == 1000
    assert by[("e", "f")].link == "wifi"
    # defaults per type, overrides per edge
    assert link_params(by[("a", "b")]) == (20000, LINK_DEFAULTS["ble"]["bw"], 0.0)
    assert link_params(by[("c", "d")])[0] == 40000
    assert link_params(by[("e", "f")]) == (5000, LINK_DEFAULTS["wifi"]["bw"], 0.0)
    assert link_params(by[("e", "f")], {"wifi": {"latency_ms": 2}})[0] == 2000
    assert link_params(by[("a", "b")], {"loss": 0.5})[2] == 0.5


def test_to_text_round_trip():
    text = "a b c @ble\nc d @remote @latency=40\nd e @loss=0.1\nz\n"
    topo = T.parse(text)
    again = T.parse(topo.to_text())
    assert again.names == topo.names
    assert [(e.a, e.b, e.link, e.latency_ms, e.bw, e.loss) for e in again.edges] == \
           [(e.a, e.b, e.link, e.latency_ms, e.bw, e.loss) for e in topo.edges]
    # a default-only topology is written in the plain shared format
    assert T.parse("a b c").to_text() == "a b\nb c\n"


@pytest.mark.parametrize("text,msg", [
    ("a b @zigbee", "unknown link type"),
    ("a b @latency=x", "not a number"),
    ("a b @loss=2", "loss must be within"),
    ("a b @latency=-1", ">= 0"),
    ("a b @speed=3", "unknown option"),
    ("@ble", "without node names"),
    ("", "no nodes"),
    ("# only a comment", "no nodes"),
])
def test_bad_topology_text(text, msg):
    with pytest.raises(T.TopologyError) as ei:
        T.parse(text, "t.txt")
    assert msg in str(ei.value)


def test_load_missing_file(tmp_path):
    with pytest.raises(T.TopologyError) as ei:
        T.load(str(tmp_path / "nope.txt"))
    assert "cannot read topology" in str(ei.value)
    bad = tmp_path / "bin.txt"
    bad.write_bytes(b"\xff\xfe\x00a b")
    with pytest.raises(T.TopologyError):
        T.load(str(bad))


def test_grid_generator_matches_shared_grid():
    g = T.grid(7, 7)
    assert len(g.names) == 49 and len(g.edges) == 84
    assert g.is_connected()
    mine = nx.Graph([(e.a, e.b) for e in g.edges])
    path = os.path.join(SHARED, "grid4-0049.txt")
    if os.path.exists(path):
        shared = nx.Graph([(e.a, e.b) for e in T.load(path).edges])
        assert nx.is_isomorphic(mine, shared)
    assert sorted(d for _, d in mine.degree()) == [2] * 4 + [3] * 20 + [4] * 25
    assert T.grid(1, 1).names == ["0_0"] and T.grid(1, 1).edges == []
    with pytest.raises(T.TopologyError):
        T.grid(0, 3)


@pytest.mark.parametrize("n,radius,seed", [
    (200, None, 1), (200, None, 2), (300, 0.03, 5),     # 0.03: many components to join
    (50, 0.01, 3), (1, None, 0), (2, 0.001, 9),
])
def test_random_geometric_connected(n, radius, seed):
    topo = T.random_geometric(n, radius, seed)
    assert len(topo.names) == n
    assert topo.is_connected()
    g = nx.Graph()
    g.add_nodes_from(topo.names)
    g.add_edges_from((e.a, e.b) for e in topo.edges)
    assert nx.is_connected(g)
    # every edge within the radius except the few that join components
    r = radius if radius is not None else T.default_radius(n)
    pos = topo.positions
    long_edges = [e for e in topo.edges
                  if (pos[e.a][0] - pos[e.b][0]) ** 2 + (pos[e.a][1] - pos[e.b][1]) ** 2 > r * r]
    unjoined = nx.Graph()
    unjoined.add_nodes_from(topo.names)
    unjoined.add_edges_from((e.a, e.b) for e in topo.edges if e not in long_edges)
    assert len(long_edges) == nx.number_connected_components(unjoined) - 1


def test_random_geometric_deterministic_and_degree():
    a = T.random_geometric(1000, None, 7)
    b = T.random_geometric(1000, None, 7)
    c = T.random_geometric(1000, None, 8)
    assert a.to_text() == b.to_text()
    assert a.to_text() != c.to_text()
    mean = 2.0 * len(a.edges) / len(a.names)
    assert 6.0 < mean < 9.0                       # default radius aims at ~8
    assert a.is_connected()


def test_community_generator_shape():
    a = T.generate("community:250:5", seed=1)
    assert a.to_text() == T.generate("community:250:5", seed=1).to_text()
    assert a.to_text() != T.generate("community:250:5", seed=2).to_text()
    assert len(a.names) == 250 and a.is_connected()
    assert [len(c) for c in a.communities] == [50] * 5
    where = {x: k for k, c in enumerate(a.communities) for x in c}
    between = [e for e in a.edges if where[e.a] != where[e.b]]
    # a Barabasi-Albert graph inside each (2 x 50 - 4 links), 2 + 1 links
    # from each community to others (the same pair drawn twice counts once)
    assert len(a.edges) - len(between) == 5 * 96
    assert 10 <= len(between) <= 15
    deg = a.adjacency()
    assert max(len(v) for v in deg.values()) > 16     # hubs with more links than ports
    assert len(T.generate("community:10:2", seed=1).names) == 10
    for bad in ("community:250", "community:7:2", "community:10:0", "community:x:2"):
        with pytest.raises(T.TopologyError):
            T.generate(bad)


def test_generate_specs():
    assert len(T.generate("grid:3x4").names) == 12
    assert len(T.generate("rgg:40", seed=3).names) == 40
    assert len(T.generate("rgg:40:0.5", seed=3).edges) > len(T.generate("rgg:40:0.1", seed=3).edges)
    for bad in ("grid:3", "grid:ax2", "rgg:", "rgg:x", "ring:5", "rgg:10:0.1:9", "grid:0x3"):
        with pytest.raises(T.TopologyError):
            T.generate(bad)


def test_node_seeds_are_per_name_and_seed():
    assert node_seed(1, "a") == node_seed(1, "a")
    assert node_seed(1, "a") != node_seed(1, "b")
    assert node_seed(1, "a") != node_seed(2, "a")
    import hashlib
    assert node_seed("x", "n1") == hashlib.sha256(b"x:n1").digest()
