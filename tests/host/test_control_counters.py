"""Control-traffic counters (issue 15): the router's tx_bytes / tx_link /
tx_bytes_link against the bytes the simulator's links carried, counted by
the simulator itself, and their way into telemetry."""
import io
import os
import json

import pytest

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


# -- analyze on simulator output (issue 15: control_bytes_per_node_s and
#    control_bytes_by_type against the bytes the simulator's links carried)

@pytest.mark.slow  # Spark (a JVM)
def test_analyze_control_bytes_match_what_the_simulated_links_carried(tmp_path, monkeypatch):
    import host_tools
    from host_tools.sim import runner
    from host_tools.sim.harness import Mesh as M
    from host_tools.pipeline import analyze
    from host_tools.pipeline.session import get_session

    # the simulator's own count of what each node's links carried, taken at
    # the moment each `counters` record is written
    carried = {}
    orig = M._sample

    def sample(self, cfg, k):
        orig(self, cfg, k)
        step, every = cfg
        if k % every == 0:
            t = TM.t_seconds(self.engine.now)
            carried[t] = dict((n.hex, self.carried(n.name)["bytes"]) for n in self._nodes if n.alive)
    monkeypatch.setattr(M, "_sample", sample)
    out = tmp_path / "sim"
    runner.run(str(out), 150.0, seed=2, pings=20,
               topology=os.path.join(host_tools.REPO_ROOT, "host_tools", "topologies", "sim.txt"))
    recs = [json.loads(line) for line in open(str(out / "telemetry.jsonl"))]
    assert any(r["kind"] == "probe" for r in recs)          # traffic too, not counted below
    spark = get_session(small_input=True)
    s = analyze([str(out)], str(tmp_path / "an"), spark=spark)

    w = s["control_bytes_window"]
    assert w["basis"].startswith("snake_converged+") and w["nodes"] == 26
    t0 = min(r["t"] for r in recs)
    start = t0 + w["start_s"]
    times = {}
    for r in recs:
        if r["kind"] == "counters" and r["t"] >= start - 1e-9:
            times.setdefault(r["node"], []).append(r["t"])
    rates, by_type = {}, {}
    for node, ts in times.items():
        ta, tb = min(ts), max(ts)
        a, b = carried[ta][node], carried[tb][node]
        assert b["traffic"] >= a["traffic"]
        ctl = dict((k, (b[k] - a[k]) / (tb - ta)) for k in b if k != "traffic")
        rates[node] = sum(ctl.values())
        for k, v in ctl.items():
            by_type.setdefault(k, []).append(v)
    assert len(rates) == 26
    mean = sum(rates.values()) / len(rates)
    assert mean > 0
    assert abs(s["control_bytes_per_node_s"] - mean) <= 1e-6 * mean, (s["control_bytes_per_node_s"], mean)
    busiest = max(rates, key=lambda n: rates[n])
    assert s["control_bytes_busiest"]["node"] == busiest
    got = s["control_bytes_by_type"]
    assert "traffic" not in got
    for k, vals in by_type.items():
        want = sum(vals) / len(vals)
        assert abs(got.get(k, 0.0) - want) <= 1e-6 * max(1.0, want), (k, got, want)
