"""Simulator engine: event ordering, links (FIFO, bandwidth, queue, loss),
ports, ticks, probes, and determinism (same seed -> identical bytes)."""
import os
import subprocess
import sys

import pytest

import host_tools
from host_tools.sim.engine import Engine
from host_tools.sim.harness import Mesh, MeshError
from host_tools.sim.links import Endpoint
from host_tools.sim import runner

from snake.router import Router
from snake import report

SCEN = """
2 ping-set 4 interval=1 count=2
12 crash c
16 restart c
18 link-down a b
21 link-up a b
"""


# -- engine ------------------------------------------------------------------

def test_events_run_in_time_then_schedule_order():
    e = Engine(seed=1)
    seen = []
    rec = lambda a, b: seen.append((e.now, a))
    e.at(30, rec, "late")
    e.at(10, rec, "first@10")
    e.at(10, rec, "second@10")
    e.after(10, rec, "third@10")
    e.at(20, lambda a, b: e.after(0, rec, "scheduled-during-run"), None)
    assert e.run_until(15) is False
    assert seen == [(10, "first@10"), (10, "second@10"), (10, "third@10")]
    assert e.now == 15                          # clock moves to the target
    e.run_until(100)
    assert seen[3:] == [(20, "scheduled-during-run"), (30, "late")]
    assert e.now == 100
    e.at(5, rec, "past")                        # never before now
    e.run_until(100)
    assert seen[-1] == (100, "past")


def test_run_until_stop_predicate():
    e = Engine()
    hits = []
    for t in (1, 2, 3, 4):
        e.at(t, lambda a, b: hits.append(a), t)
    assert e.run_until(10, stop=lambda: len(hits) == 2) is True
    assert hits == [1, 2] and e.now == 2 and e.pending() == 2


def test_engine_rng_is_seeded():
    assert [Engine(5).rng.random() for _ in range(2)] == [Engine(5).rng.random()] * 2
    assert Engine(5).rng.random() != Engine(6).rng.random()


# -- links ---------------------------------------------------------------------

def test_endpoint_fifo_serialisation_and_queue():
    ep = Endpoint(None, None, None, 1, latency_us=5000, bw=1000, loss=0.0, qcap=3)
    # 100 bytes at 1000 B/s = 100 ms on the wire, then 5 ms latency
    a1 = ep.schedule(0, 100)
    a2 = ep.schedule(0, 10)          # waits for the first: never overtakes it
    a3 = ep.schedule(50000, 100)
    assert a1 == 105000
    assert a2 == 115000
    assert a3 == 215000
    assert a1 < a2 < a3
    assert ep.schedule(50000, 1) == -1          # 3 frames queued: full
    assert ep.schedule(100000, 1) > a3          # first one left the queue
    free = Endpoint(None, None, None, 1, latency_us=7, bw=0, loss=0.0, qcap=1)
    assert [free.schedule(0, 1000) for _ in range(5)] == [7] * 5   # unlimited bandwidth


# -- harness model -------------------------------------------------------------

class TickLog(Router):
    """The real router, recording the times it was ticked."""
    log = None

    def tick(self, now):
        TickLog.log.setdefault(self.key, []).append(now)
        Router.tick(self, now)


def test_ticks_every_250ms_and_staggered():
    TickLog.log = {}
    m = Mesh("a b c d e", seed=3, router_class=TickLog)
    m.run(3)
    assert len(TickLog.log) == 5
    phases = set()
    for key, times in TickLog.log.items():
        assert len(times) == 12
        gaps = set(b - a for a, b in zip(times, times[1:]))
        assert gaps == {250}
        phases.add(times[0] % 250)
    assert len(phases) > 1                      # not all nodes tick together


def test_tick_base_wraps_ticks():
    TickLog.log = {}
    m = Mesh("a b", seed=3, router_class=TickLog, tick_base_ms=(1 << 30) - 1000)
    m.run(2)
    times = next(iter(TickLog.log.values()))
    assert max(times) > (1 << 30) - 1000 and min(times) < 1000   # wrapped past 2**30


def test_ports_lowest_free_first_and_reused():
    m = Mesh("hub a\nhub b\nhub c\nhub d", seed=2, start_spread_ms=0)
    m.run(1)
    ports = {x: m.port_of("hub", x) for x in "abcd"}
    assert sorted(ports.values()) == [1, 2, 3, 4]
    r = m.router("hub")
    for x, p in ports.items():
        assert report.peer_key(r, p) == m.key(x)
        assert report.peer_key(m.router(x), m.port_of(x, "hub")) == m.key("hub")
    freed = ports["b"]
    m.link_down("hub", "b")
    assert m.port_of("hub", "b") == 0
    assert report.peer_key(r, freed) is None            # port_down reached the hub's router
    m.link_up("hub", "b")
    m.run(1)
    assert m.port_of("hub", "b") == freed       # lowest free number again


def test_port_table_full_blocks_link():
    m = Mesh("hub a\nhub b\nhub c", seed=2, profile={"max_peers": 2})
    m.run(1)
    connected = [x for x in "abc" if m.port_of("hub", x)]
    assert len(connected) == 2
    assert m.stats["port_full"] >= 1
    # the blocked link is left out of the ground truth: the rest converges
    assert m.converge(30) is not None
    assert len(m.components()) == 2


def test_loss_one_cuts_the_link():
    m = Mesh("a b @loss=1\nb c", seed=1)
    m.run(15)
    assert m.stats["lost"] > 0
    assert report.root_key(m.router("a")) == m.key("a")   # never heard anything
    assert m.stats["disconnects"] >= 1               # dead-peer timer fired


def test_ping_path_hops_and_rtt_on_a_line():
    m = Mesh("a b c d", seed=1, link_defaults={"bw": 0})
    assert m.converge(30) is not None, m.problems()
    res = m.ping("a", "d")
    assert res.ok, res
    assert res.path == ["a", "b", "c", "d"] and res.hops == 3
    assert res.path_keys[0] == m.key("a") and res.path_keys[-1] == m.key("d")
    # 3 hops each way at 5 ms, no serialisation delay (bw=0)
    assert res.rtt_ms == pytest.approx(30.0, abs=1.0)
    back = m.ping("d", "a")
    assert back.ok and back.path == ["d", "c", "b", "a"]


def test_ping_to_crashed_node_fails_with_partial_path():
    m = Mesh("a b c", seed=1)
    assert m.converge(30) is not None
    m.kill("c")
    res = m.ping("a", "c", timeout=2)
    assert not res.ok and res.hops is None and res.rtt_ms is None
    assert res.path[0] == "a" and "c" not in res.path
    assert m.ping("c", "a").reason == "source down"


def test_send_and_inbox():
    m = Mesh("a b c", seed=1)
    assert m.converge(30) is not None
    assert m.send("a", "c", b"hello")
    m.run(1)
    assert m.inbox("c") == [("a", b"hello")]


def test_mesh_input_errors():
    m = Mesh("a b", seed=1)
    with pytest.raises(MeshError):
        m.ping("a", "zz")
    with pytest.raises(MeshError):
        m.link_down("a", "a")
    with pytest.raises(MeshError):
        Mesh("a b", profile="NO_SUCH_BOARD")
    with pytest.raises(MeshError):
        Mesh("a b", link_defaults={"jitter": 3})
    with pytest.raises(MeshError):
        m.partition(["a"], ["a"])


class Exploding(Router):
    def tick(self, now):
        raise RuntimeError("boom")


def test_router_exceptions_strict_and_lenient():
    with pytest.raises(RuntimeError):
        Mesh("a b", router_class=Exploding).run(1)
    m = Mesh("a b", router_class=Exploding, strict=False)
    m.run(1)
    assert m.stats["router_exceptions"] == 8     # 2 nodes x 4 ticks, run continues
    assert any(e[2] == "router_exception" and "boom" in e[3] for e in m.events)


# -- determinism ---------------------------------------------------------------

def _run_to(out, seed=4, scen=None):
    return runner.run(str(out), 25, seed=seed, topology=str(out.parent / "topo.txt"),
                      scenario=scen, pings=0)


@pytest.fixture
def small_world(tmp_path):
    (tmp_path / "topo.txt").write_text("a b c d e\nb e f @ble\nc f g\ng h @remote\n")
    (tmp_path / "scen.txt").write_text(SCEN)
    return tmp_path


def test_same_seed_identical_bytes(small_world):
    scen = str(small_world / "scen.txt")
    s1 = _run_to(small_world / "r1", scen=scen)
    s2 = _run_to(small_world / "r2", scen=scen)
    s3 = _run_to(small_world / "r3", seed=5, scen=scen)
    for f in ("telemetry.jsonl", "truth.json", "topology.txt"):
        b1 = (small_world / "r1" / f).read_bytes()
        assert b1 == (small_world / "r2" / f).read_bytes(), f
    assert (small_world / "r1" / "telemetry.jsonl").read_bytes() != \
           (small_world / "r3" / "telemetry.jsonl").read_bytes()
    assert s1["telemetry_records"] == s2["telemetry_records"] > 100
    assert s1["probes"] == 8


def test_identical_bytes_across_processes(small_world):
    """Another interpreter with another hash seed gives the same bytes (no
    dependence on set/dict-of-str ordering, wall clock or os.urandom)."""
    scen = str(small_world / "scen.txt")
    _run_to(small_world / "here", scen=scen)
    code = ("import sys; sys.path.insert(0, %r); import host_tools; "
            "from host_tools.sim import runner; "
            "runner.run(%r, 25, seed=4, topology=%r, scenario=%r, pings=0)"
            % (host_tools.REPO_ROOT, str(small_world / "there"),
               str(small_world / "topo.txt"), scen))
    env = dict(os.environ, PYTHONHASHSEED="12345")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    for f in ("telemetry.jsonl", "truth.json"):
        assert (small_world / "here" / f).read_bytes() == (small_world / "there" / f).read_bytes(), f


def test_espnow_links_resend_their_loss_instead_of_dropping_frames():
    # ESP-NOW: the port resends lost messages (espnow_port.py), so loss
    # costs time, not frames; the same loss on a Wi-Fi edge drops frames
    m = Mesh("a b c @espnow @loss=0.3", seed=3)
    assert m.converge(60) is not None, m.problems()
    res = [m.ping("a", "c", timeout=10) for _ in range(20)]
    assert all(r.ok for r in res)
    assert m.stats["lost"] == 0 and m.stats["resent"] > 0
    lossless = Mesh("a b c @espnow", seed=3)
    assert lossless.converge(60) is not None
    base = [lossless.ping("a", "c").rtt_ms for _ in range(20)]
    assert sum(r.rtt_ms for r in res) / 20 > sum(base) / 20 + 50      # resend timeouts show
    w = Mesh("a b c @wifi @loss=0.3", seed=3)
    w.run(30)
    assert w.stats["lost"] > 0
    # the link type reaches the peers records
    assert {p["link"] for p in report.peers(m.router("b"))} == {"espnow"}


def test_espnow_is_a_link_type_of_its_own_in_tables_and_drawings():
    # one list of link names (the firmware's); the CLI's tables and the
    # report's topology drawing tell ESP-NOW apart from Wi-Fi and BLE
    from snake.telemetry import LINK_NAMES
    from host_tools import render
    from host_tools.pipeline import topo_svg
    assert LINK_NAMES[5] == "espnow"
    assert render.link_label("espnow") == "ESP-NOW"
    styles = {topo_svg._link_style(k) for k in ("wifi", "ble", "espnow")}
    assert len(styles) == 3 and topo_svg._link_style("espnow") != topo_svg.OTHER_LINK
    assert "ESP-NOW link" in topo_svg.legend_html()
