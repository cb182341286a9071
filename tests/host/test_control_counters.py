"""Control-traffic counters (issue 15): the router's tx_bytes / tx_link /
tx_bytes_link against the bytes the simulator's links carried, counted by
the simulator itself, and their way into telemetry."""
import io
import json

from host_tools.sim.harness import Mesh
from host_tools.sim import telemetry as TM

TOPO = "a b c d\nb e @ble\nc e\nd f @ble\n"


def test_router_byte_counters_match_what_the_simulated_links_carried():
    m = Mesh(TOPO, seed=3)
    assert m.converge(timeout=60) is not None
    m.ping_pairs(pairs=[("a", "f"), ("e", "d")])
    m.run(20)
    total = 0
    for name in m.nodes:
        d = m.router(name).counters.as_dict()
        link = m.carried(name)
        assert d["tx_bytes"] == link["bytes"], name
        assert d["tx"] == link["frames"], name
        assert d["tx_bytes_link"] == link["link_bytes"], name
        assert sum(d["tx_link"].values()) == sum(d["tx"].values())
        total += sum(link["bytes"].values())
    assert total == m.stats["bytes"] > 0
    # both link types carried something, and traffic was counted apart
    assert sum(m.carried("b")["link_bytes"][k] for k in ("wifi", "ble")) == \
        sum(m.carried("b")["link_bytes"].values())
    assert m.carried("e")["link_bytes"]["ble"] > 0 and m.carried("e")["link_bytes"]["wifi"] > 0
    assert sum(m.carried(n)["bytes"]["traffic"] for n in m.nodes) > 0


def test_counters_records_carry_the_byte_counters():
    out = io.StringIO()
    w = TM.Writer(out)
    m = Mesh(TOPO, seed=3, telemetry=w)
    m.start_sampling(state_s=1.0, counters_s=5.0)
    m.run(20)
    recs = [json.loads(line) for line in out.getvalue().splitlines()]
    last = {}
    for r in recs:
        if r["kind"] == "counters":
            assert TM.validate(r) == [], r
            last[r["node"]] = r
    assert len(last) == len(m.nodes)
    for name in m.nodes:
        r = last[m.node(name).hex]
        assert set(r["tx_bytes"]) == set(r["tx"]) == {
            "keepalive", "announcement", "bootstrap", "traffic", "wakeup"}
        assert set(r["tx_link"]) == set(r["tx_bytes_link"]) == set(TM.LINK_NAMES)
        assert sum(r["tx_bytes"].values()) == sum(r["tx_bytes_link"].values()) > 0
        # sampled at t=20 s, and nothing sent since then
        assert r["tx_bytes"] == m.carried(name)["bytes"]
