# A mixed mesh carries reference traffic as far as the reference would:
# reference nodes originate traffic with hop limit 10 and never count it
# down (router/packetconn.go; hop limiting off), so snakemesh relays must
# not count it down either (docs/reference/PROTOCOL_NOTES.md choice A). The issue's
# case: a line G0 - S1..S12 - G13 of reference-timing G nodes and snakemesh
# S relays, simulated with the real router core.
from host_tools.sim.harness import Mesh
from host_tools.sim.keys import make_signer
from host_tools.sim.reftiming import ReferenceTimingRouter, mixed
from snake.router import Router
from snake.telemetry import D_HOP_LIMIT

SEED = 3
RELAYS = 12


def _line():
    names = ["G0"] + ["S%d" % i for i in range(1, RELAYS + 1)] + ["G%d" % (RELAYS + 1)]
    topo = "".join("%s %s\n" % (a, b) for a, b in zip(names, names[1:]))
    return names, topo


def test_reference_traffic_crosses_twelve_snakemesh_relays():
    names, topo = _line()
    g_end = names[-1]
    ref = set(bytes(make_signer(SEED, n).public) for n in ("G0", g_end))
    m = Mesh(topo, seed=SEED, router_class=mixed(lambda key: key in ref))
    g0 = m.router("G0")
    assert isinstance(g0, ReferenceTimingRouter) and isinstance(m.router(g_end), ReferenceTimingRouter)
    assert all(type(m.router(n)) is Router for n in names[1:-1])
    assert g0.traffic_hop_limit == 10 and not g0.hop_limiting
    assert m.converge(timeout=60) is not None, m.problems()
    m.run(5)
    # G0's traffic (hop limit 10) crosses all 12 relays, both ways, to the
    # far reference node and to the far relay
    pairs = [("G0", g_end), (g_end, "G0"), ("G0", names[-2]), (names[-2], "G0"),
             ("G0", "S10"), ("S11", "G0")]
    res = m.ping_pairs(pairs=pairs * 5)
    assert all(r.ok for r in res), [(r.src, r.dst, r.reason) for r in res if not r.ok]
    assert m.send("G0", g_end, b"across twelve relays")
    m.run(1)
    assert ("G0", b"across twelve relays") in m.inbox(g_end)
    assert sum(m.router(n).counters.drops[D_HOP_LIMIT] for n in names) == 0
    assert min(m.router(n).counters.forwarded for n in names[1:-1]) > 0
