"""Capacity limits seen through the simulator: refused links are counted by
the refusing node's router and reach telemetry as `capacity` (contract 2)."""
import io
import json

from host_tools.sim.harness import Mesh
from host_tools.sim import telemetry as TM
from snake import report


def test_hub_with_full_ports_counts_refused_links_in_capacity_telemetry():
    out = io.StringIO()
    m = Mesh("hub a\nhub b\nhub c\nhub d\n", seed=3,
             profile={"max_peers": 2}, telemetry=TM.Writer(out))
    m.start_sampling(1.0, 1.0)
    m.run(3)
    cap = report.capacity(m.router("hub"))
    assert cap["peers"][0] == 2 and cap["peers"][1] == 2
    assert cap["peers"][2] >= 2          # two of the four links found no port
    recs = [json.loads(x) for x in out.getvalue().splitlines()]
    hub = m.node("hub").hex
    counters = [r for r in recs if r["kind"] == "counters" and r["node"] == hub]
    assert counters and counters[-1]["capacity"]["peers"] == cap["peers"]
    assert set(counters[-1]["capacity"]) >= {"peers", "routes", "depth"}
    assert not TM.validate(counters[-1])
