"""Acknowledged datagrams under faults, in the virtual-time simulator
(issue 25): every node runs the datagram layer (snake/datagram.py) as the
node runtime drives it. On a 49-node grid, random pairs send acked
datagrams (one fragment and 3 KB in four fragments) every 0.2 s for 3
virtual minutes while nodes crash and restart, links flap and a group is
partitioned off and healed. Required: once the senders' retry budget has
passed, every acked datagram ended delivered or failed (none pending),
none was delivered twice, and most (>= 80 %) were delivered (the faults
take their share). Also: the scenario action `dgram-set` of `snakemesh
sim` parses and runs.
"""
import os
import random

from host_tools.sim import scenario as SC
from host_tools.sim.harness import Mesh

import host_tools

TOPO = os.path.join(host_tools.REPO_ROOT, "host_tools", "topologies", "grid4-0049.txt")


def test_acked_datagrams_end_delivered_or_failed_never_twice_under_faults():
    m = Mesh(TOPO, seed=5, hop_limit=64, crash_detect_ms=None)
    assert m.converge(timeout=180) is not None, m.problems()
    rng = random.Random("dgram-faults")
    names = m.nodes
    start = m.now
    crashed = []
    cut = None
    t = start
    k = 0
    while t < start + 180:
        sec = t - start
        if sec % 30 == 0 and sec < 170:
            for n in crashed:
                m.restart(n)
            crashed = rng.sample([n for n in names if m.node(n).alive], 4)
            for n in crashed:
                m.kill(n)
        if abs(sec - 60) < 1e-9:
            cut = rng.sample(m.links(), 3)
            for l in cut:
                m.link_down(l.a.name, l.b.name)
        if abs(sec - 75) < 1e-9:
            for l in cut:
                m.link_up(l.a.name, l.b.name)
        if abs(sec - 100) < 1e-9:
            m.partition(names[:10])
        if abs(sec - 130) < 1e-9:
            m.heal()
        a, b = rng.sample(names, 2)
        if m.node(a).alive:
            m.send_datagram(a, b, 3000 if k % 4 == 0 else 40, service=1, ack=True)
        k += 1
        m.run(0.2)
        t = m.now
    for n in crashed:
        m.restart(n)
    m.run(40)                     # longer than a sender keeps retrying (~22 s)
    s = m.datagram_summary()
    print(s)
    assert s["pending"] == 0, s
    assert s["delivered_twice"] == 0, s
    total = s["delivered"] + sum(s["failed"].values())
    assert total == len(m._dg_pending_recs) and s["sent"] == 0
    assert all(r["state"] in ("delivered", "failed") for r in m._dg_pending_recs)
    assert all(r["reason"] for r in m._dg_pending_recs if r["state"] == "failed")
    assert s["delivered"] >= 0.8 * total, s
    assert s["ack_rtt_ms_p50"] is not None and s["ack_rtt_ms_p50"] <= s["ack_rtt_ms_p95"]


def test_dgram_set_scenario_action_runs():
    events = SC.parse("1 dgram-set a:c count=3 interval=0.5 size=2000\n2 dgram-set 1 ack=0\n",
                      ["a", "b", "c"])
    assert [e.action for e in events] == ["dgram-set", "dgram-set"]
    for bad in ("1 dgram-set a:c size=4\n", "1 dgram-set a:c service=70000\n", "1 dgram-set x\n"):
        try:
            SC.parse(bad, ["a", "b", "c"])
        except SC.ScenarioError as e:
            assert "dgram-set" in str(e)
        else:
            raise AssertionError("accepted: " + bad)
    topo = os.path.join(host_tools.REPO_ROOT, "host_tools", "topologies", "grid4-0049.txt")
    m = Mesh(topo, seed=2)
    assert m.converge(timeout=120) is not None
    SC.schedule(m, SC.parse("%g dgram-set 5 count=4 interval=0.5 size=2000\n" % (m.now + 1), m.nodes))
    m.run(40)
    s = m.datagram_summary()
    assert s["delivered"] == 20 and s["pending"] == 0 and not s["failed"], s
