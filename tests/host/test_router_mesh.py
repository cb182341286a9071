"""Whole meshes of the shipped router core in virtual time (host_tools.sim
harness), on every shared topology: root agreement, snake correctness,
delivery between random pairs, tree routing for replies, reconvergence after
removals, and bounded tables under a bootstrap flood."""
import os
import random

import pytest

import host_tools  # noqa: F401  (puts firmware/ and lib/ on sys.path)
from host_tools.sim.harness import Mesh
from snake import wire
from snake.crypto import Signer
from snake import report

SHARED = os.path.join(host_tools.REPO_ROOT, "host_tools", "topologies")
TOPOLOGIES = ["sim.txt", "line-0050.txt", "rtree-0050.txt", "grid4-0049.txt"]


def topo(name):
    path = os.path.join(SHARED, name)
    if not os.path.exists(path):
        pytest.fail("topology %s missing" % path)
    return path


def mesh(name, seed=1, **kw):
    kw.setdefault("hop_limit", 64)
    return Mesh(topo(name), seed=seed, **kw)


def settle(m, timeout=180):
    """Converge, then hold: soft state can be right for a moment before the
    next bootstrap round; require it to still hold 10 s later."""
    t = m.converge(timeout=timeout)
    assert t is not None, m.problems()
    m.run(10)
    t2 = m.converge(timeout=60)
    assert t2 is not None, m.problems()
    return t + 10 + t2


@pytest.fixture(scope="module", params=TOPOLOGIES)
def converged(request):
    m = mesh(request.param)
    t = settle(m)
    return request.param, m, t


def test_all_nodes_agree_on_the_highest_key_as_root(converged):
    name, m, t = converged
    assert m.tree_converged()
    highest = max(m.key(n) for n in m.nodes)
    for n in m.nodes:
        assert report.root_key(m.router(n)) == highest, n


def test_every_descending_entry_is_the_true_next_lower_key(converged):
    name, m, t = converged
    keys = sorted(m.key(n) for n in m.nodes)
    for n in m.nodes:
        k = m.key(n)
        i = keys.index(k)
        want = keys[i - 1] if i > 0 else None
        assert report.desc_key(m.router(n)) == want, (name, n)


def test_traffic_between_200_random_pairs_is_delivered(converged):
    name, m, t = converged
    m.run(2)
    res = m.ping_pairs(200)
    failed = [(r.src, r.dst, r.reason) for r in res if not r.ok]
    assert len(res) == 200 and not failed, failed[:5]


def test_replies_after_the_first_use_tree_routing(converged):
    name, m, t = converged
    a, b = m.nodes[0], m.nodes[-1]
    rb = m.router(b)
    seen = []
    orig = rb.tx

    def spy(port, buf, n):
        if buf[5] == wire.T_TRAFFIC:
            f = wire.Frame(64)
            f.decode(bytes(buf[:n]), n)
            seen.append(f.dcoords_len > 0)
        return orig(port, buf, n)

    rb.tx = spy
    try:
        r = m.ping(a, b)
    finally:
        rb.tx = orig
    assert r.ok
    # b answered a's first ping with a tree-routed reply (coordinates cached)
    assert seen and seen[0] is True


@pytest.mark.parametrize("name", ["grid4-0049.txt", "sim.txt"])
def test_reconverges_after_a_node_is_removed(name):
    m = mesh(name, seed=3)
    assert m.converge(timeout=180) is not None
    # remove the node with the most links that is not the root
    root = max(m.nodes, key=m.key)
    deg = {}
    for link in m.links():
        for end in (link.a.name, link.b.name):
            deg[end] = deg.get(end, 0) + 1
    victim = max((n for n in m.nodes if n != root), key=lambda n: deg.get(n, 0))
    m.kill(victim)
    settle(m)
    res = m.ping_pairs(100)
    assert all(r.ok for r in res), [(r.src, r.dst, r.reason) for r in res if not r.ok][:5]


def test_reconverges_after_the_root_dies():
    m = mesh("rtree-0050.txt", seed=4)
    assert m.converge(timeout=180) is not None
    root = max(m.nodes, key=m.key)
    m.kill(root)
    settle(m)
    alive = [n for n in m.nodes if n != root]
    # the tree falls apart into components; each agrees on its own highest key
    assert m.tree_converged() and m.snake_correct()
    assert len(alive) == 49


def test_reconverges_after_a_link_is_removed():
    m = mesh("grid4-0049.txt", seed=5)
    assert m.converge(timeout=180) is not None
    root = max(m.nodes, key=m.key)
    link = next(l for l in m.links() if root in (l.a.name, l.b.name))
    m.link_down(link.a.name, link.b.name)
    settle(m)
    res = m.ping_pairs(100)
    assert all(r.ok for r in res)


def test_tables_stay_within_capacity_under_10x_bootstrap_flood_and_snake_recovers():
    # a table small enough for the flood to fill it (most flooded bootstraps
    # would loop back to the flooder and are dropped before they count)
    m = mesh("sim.txt", seed=6, profile={"max_routes": 64})
    assert m.converge(timeout=120) is not None
    victim = m.nodes[5]
    r = m.router(victim)
    cap = r.snake.routes.capacity
    port = next(p for p in range(1, len(r.up)) if r.up[p])
    rnd = random.Random(7)
    root, rseq = report.root_key(r), report.root_seq(r)
    buf = bytearray(512)
    peak = 0
    for i in range(10 * cap):
        s = Signer(rnd.randbytes(32))
        seq = 1000 + i
        sig = s.sign(wire.bootstrap_signed(seq, root, rseq))
        n = wire.encode_bootstrap(buf, s.public, wire.FULL_KEY, 0, seq, root, rseq, sig)
        r.receive(port, bytearray(buf[:n]), n, m._now_ms())
        peak = max(peak, r.snake.routes.count)
        if i % 16 == 0:
            m.run(0.05)
    assert peak <= cap and r.snake.routes.count <= cap
    assert r.snake.routes.evictions > 0 or report.capacity(r)["routes"][2] > 0
    # flood over: the honest snake is correct again within 30 s
    t = m.converge(timeout=30)
    assert t is not None, m.problems()
