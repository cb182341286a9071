"""Simulator scenarios: parsing, events reaching the routers, telemetry
output validity, and the `snakemesh sim` command."""
import json
import re

import pytest

import host_tools  # noqa: F401
from host_tools import cli
from host_tools.sim import scenario as S
from host_tools.sim import telemetry as TM
from host_tools.sim import runner
from host_tools.sim.harness import Mesh
from snake import report

TOPO = "a b c d e\nb e f @ble\nc f g\ng h @remote\n"

SCEN = """\
# a bit of everything
3    ping-set  5 interval=1 count=2 timeout=3
12   crash     c
16   restart   c
18   link-down a b
21   link-up   a b
22   set-link  g h latency=30 loss=0.5
24   partition a b | c d e f g h
28   heal
30   join      z h a @ble
33   ping-set  z:a a:z count=2
"""


# -- parsing -------------------------------------------------------------------

def test_parse_sorts_and_keeps_file_order_for_ties():
    evs = S.parse("5 heal\n1 crash a\n5 restart a\n0.5 link-down a b\n", ["a", "b"])
    assert [(e.t, e.action) for e in evs] == [(0.5, "link-down"), (1, "crash"), (5, "heal"),
                                             (5, "restart")]


def test_parse_full_scenario():
    evs = S.parse(SCEN, list("abcdefgh"))
    assert len(evs) == 10
    ps = evs[0]
    assert ps.action == "ping-set" and ps.args == ["5"]
    assert ps.opts == {"interval": 1.0, "count": 2.0, "timeout": 3.0}
    part = [e for e in evs if e.action == "partition"][0]
    assert part.args == ["a", "b", "|", "c", "d", "e", "f", "g", "h"]
    assert [e for e in evs if e.action == "set-link"][0].opts == {"latency": 30.0, "loss": 0.5}


@pytest.mark.parametrize("text,msg", [
    ("x crash a", "time 'x' is not a number"),
    ("-1 crash a", "time must be >= 0"),
    ("1", "missing action"),
    ("1 explode a", "unknown action 'explode'"),
    ("1 crash", "crash takes 1 argument"),
    ("1 crash a b", "crash takes 1 argument"),
    ("1 crash zz", "unknown node 'zz'"),
    ("1 link-down a", "link-down takes 2 argument"),
    ("1 link-down a a", "two different nodes"),
    ("1 heal now", "heal takes 0 argument"),
    ("1 ping-set 0", "N must be >= 1"),
    ("1 ping-set a-b", "ping-set takes N or SRC:DST"),
    ("1 ping-set a:zz", "unknown node 'zz'"),
    ("1 ping-set 3 count=1.5", "count must be a positive integer"),
    ("1 ping-set 3 interval=0", "interval and timeout must be > 0"),
    ("1 ping-set 3 speed=2", "takes no option 'speed'"),
    ("1 crash a x=1", "crash takes no option"),
    ("1 set-link a b loss=3", "loss must be within"),
    ("1 join a b", "exists already"),
    ("1 join z b @zigbee", "unknown link type"),
    ("1 partition | a", "needs nodes before"),
    ("1 crash z\n2 join z a", "unknown node 'z'"),        # used before it joins
])
def test_parse_errors_name_the_line(text, msg):
    with pytest.raises(S.ScenarioError) as ei:
        S.parse("# header\n" + text, ["a", "b", "c"], "s.txt")
    assert msg in str(ei.value)
    assert str(ei.value).startswith("s.txt:")


def test_join_then_use_is_fine():
    evs = S.parse("1 join z a\n2 crash z\n3 ping-set z:a", ["a"])
    assert [e.action for e in evs] == ["join", "crash", "ping-set"]


# -- application -----------------------------------------------------------------

def _mesh(**kw):
    m = Mesh(TOPO, seed=4, **kw)
    assert m.converge(40) is not None, m.problems()
    return m


def test_crash_and_restart_reach_routers():
    m = _mesh()
    S.apply(m, S.parse("0 crash c", m.nodes)[0])
    assert m.router("c") is None and not m.node("c").alive
    for nb in ("b", "d", "f"):          # neighbours got port_down at once
        r = m.router(nb)
        assert all(report.peer_key(r, p) != m.key("c") for p in range(1, m.profile.max_peers + 1))
    t = m.converge(40)
    assert t is not None and t > 0, m.problems()
    assert all(report.root_key(m.router(n)) != m.key("c") for n in m.nodes if n != "c")
    old_key = m.key("c")
    S.apply(m, S.parse("0 restart c", m.nodes)[0])
    r = m.router("c")
    assert r is not None and r.key == old_key
    assert report.root_key(r) == old_key                  # fresh state: it is its own root
    assert m.converge(40) is not None, m.problems()
    assert m.port_of("c", "b") and report.peer_key(m.router("b"), m.port_of("b", "c")) == old_key


def test_crash_detected_by_keepalive_only():
    m = _mesh(crash_detect_ms=None)
    m.kill("h")                              # leaf behind g
    m.run(2)
    assert report.peer_key(m.router("g"), m.port_of("g", "h")) == m.key("h")   # not noticed yet
    m.run(6)
    assert m.port_of("g", "h") == 0          # g's dead-peer timer asked to disconnect
    assert m.stats["disconnects"] >= 1
    assert any(e[1] == "g" and e[2] == "peer_dead" for e in m.events)


def test_link_down_up_reach_both_routers():
    m = _mesh()
    pa, pb = m.port_of("a", "b"), m.port_of("b", "a")
    S.apply(m, S.parse("0 link-down a b", m.nodes)[0])
    assert report.peer_key(m.router("a"), pa) is None and report.peer_key(m.router("b"), pb) is None
    # a's only link is gone: it is alone and its own root
    assert m.converge(40) is not None
    assert report.root_key(m.router("a")) == m.key("a")
    assert len(m.components()) == 2
    S.apply(m, S.parse("0 link-up a b", m.nodes)[0])
    m.run(0.1)
    assert report.peer_key(m.router("a"), m.port_of("a", "b")) == m.key("b")
    assert m.converge(40) is not None
    assert len(m.components()) == 1


def test_partition_and_heal():
    m = _mesh()
    S.apply(m, S.parse("0 partition a b c | d e f g h", m.nodes)[0])
    comps = m.components()
    assert sorted(sorted(n.name for n in c) for c in comps) == [["a", "b", "c"],
                                                               ["d", "e", "f", "g", "h"]]
    assert m.converge(60) is not None, m.problems()
    for c in comps:
        top = max(c, key=lambda n: n.key)
        assert all(report.root_key(m.router(n.name)) == top.key for n in c)
    res = m.ping("a", "h", timeout=2)
    assert not res.ok
    S.apply(m, S.parse("0 heal", m.nodes)[0])
    assert m.converge(60) is not None, m.problems()
    assert m.ping("a", "h").ok


def test_join_and_ping_set():
    m = _mesh()
    evs = S.parse("0 join z h a @ble\n0 ping-set z:a a:z count=2 interval=0.5", m.nodes)
    S.schedule(m, [type(e)(m.now + e.t, e.action, e.args, e.opts, e.line, e.source) for e in evs])
    m.run(0.01)
    assert "z" in m.nodes and m.router("z") is not None
    assert m.links()[-1].edge.link == "ble"
    m.run(30)
    assert m.converged(), m.problems()
    done = [r for r in m.results if {r.src, r.dst} == {"a", "z"}]
    assert len(done) == 4


def test_set_link_changes_latency():
    m = _mesh()
    before = m.ping("g", "h")
    m.set_link("g", "h", latency_ms=100)
    after = m.ping("g", "h")
    assert before.ok and after.ok
    assert after.rtt_ms - before.rtt_ms == pytest.approx(2 * (100 - 40), abs=2)


# -- outputs ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("simrun")
    (d / "topo.txt").write_text(TOPO)
    (d / "scen.txt").write_text(SCEN)
    summary = runner.run(str(d / "out"), 40, seed=4, topology=str(d / "topo.txt"),
                         scenario=str(d / "scen.txt"))
    return d / "out", summary


def _records(out):
    with open(out / "telemetry.jsonl") as f:
        return [json.loads(line) for line in f]


def test_telemetry_records_valid(run_dir):
    out, summary = run_dir
    recs = _records(out)
    assert summary["telemetry_records"] == len(recs)
    for r in recs:
        assert TM.validate(r) == [], r
    kinds = set(r["kind"] for r in recs)
    assert kinds == {"topology", "state", "peers", "counters", "probe", "event"}
    # the first record is the topology, with every node named
    truth = json.load(open(out / "truth.json"))
    assert recs[0]["kind"] == "topology" and recs[0]["t"] == 0
    assert set(recs[0]["names"].values()) == set("abcdefgh")
    assert len(recs[0]["edges"]) == 9
    # every record's node is a node key
    keys = set(truth["nodes"].values())
    assert set(r["node"] for r in recs) <= keys
    # state once per second per running node; counters every 5 s
    states = [r for r in recs if r["kind"] == "state"]
    assert set(r["t"] for r in states) == set(float(i) for i in range(1, 41))
    assert set(r["profile"] for r in states) == {truth["params"]["profile"]["name"]}  # contract 3
    per_t = {}
    for r in states:
        per_t.setdefault(r["t"], set()).add(r["node"])
    assert len(per_t[11.0]) == 8 and len(per_t[13.0]) == 7      # c crashed at 12
    assert len(per_t[40.0]) == 9                                 # z joined at 30
    assert set(r["t"] for r in recs if r["kind"] == "counters") == {5.0 * i for i in range(1, 9)}
    ev = [(r["t"], r["event"]) for r in recs if r["kind"] == "event"]
    for t, name in ((12.0, "crash"), (16.0, "restart"), (18.0, "link_down"), (24.0, "partition"),
                    (28.0, "heal"), (30.0, "join")):
        assert (t, name) in ev
    # topology epochs: a new record whenever the usable edge set changed
    topo_t = [r["t"] for r in recs if r["kind"] == "topology"]
    assert 12.0 in topo_t and 18.0 in topo_t and 24.0 in topo_t and 30.0 in topo_t
    # times never go backwards
    ts = [r["t"] for r in recs]
    assert ts == sorted(ts)


def test_truth_and_probe_records_agree(run_dir):
    out, summary = run_dir
    recs = _records(out)
    truth = json.load(open(out / "truth.json"))
    probes = [r for r in recs if r["kind"] == "probe"]
    assert len(probes) == len(truth["probes"]) == summary["probes"] == 14
    names = truth["nodes"]
    for rec, tp in zip(probes, truth["probes"]):
        assert rec["id"] == tp["id"]
        assert rec["src"] == names[tp["src"]] and rec["dst"] == names[tp["dst"]]
        assert rec["path"] == tp["path_keys"] == [names[n] for n in tp["path"]]
        assert rec["ok"] == tp["ok"]
        if tp["ok"]:
            assert rec["hops"] == len(tp["path"]) - 1 and rec["rtt_ms"] > 0
            assert tp["path"][0] == tp["src"] and tp["path"][-1] == tp["dst"]
    assert truth["params"]["seed"] == 4 and truth["params"]["duration_s"] == 40
    conv = truth["convergence"]
    assert conv["first"] is not None and conv["first"] < 12
    assert [e["event"] for e in conv["events"]] == ["crash", "restart", "link_down", "link_up",
                                                    "set_link", "partition", "heal", "join"]
    assert summary["first_convergence_s"] == conv["first"]
    assert (out / "topology.txt").read_text() == "a b\nb c\nc d\nd e\nb e @ble\ne f @ble\nc f\nf g\ng h @remote\n"


def test_cli_sim_runs_and_summarises(tmp_path, capsys):
    (tmp_path / "t.txt").write_text(TOPO)
    rc = cli.main(["sim", "--topology", str(tmp_path / "t.txt"), "--duration", "20", "--seed", "2",
                   "--out", str(tmp_path / "o"), "--pings", "3", "-q"])
    out = capsys.readouterr()
    assert rc == 0
    assert out.out.startswith("sim: 8 nodes, 20 s virtual: converged at ")
    assert re.search(r"delivery [0-9.]+% \([0-9]+/9\), wall ", out.out), out.out
    for f in ("telemetry.jsonl", "topology.txt", "truth.json"):
        assert (tmp_path / "o" / f).stat().st_size > 0


def test_cli_generate_and_profile(tmp_path, capsys):
    rc = cli.main(["sim", "--generate", "grid:3x3", "--duration", "5", "--out", str(tmp_path / "g"),
                   "--profile", "ESP32_GENERIC", "--profile-set", "max_routes=8", "--pings", "0", "-q"])
    assert rc == 0
    truth = json.load(open(tmp_path / "g" / "truth.json"))
    assert truth["params"]["profile"]["name"] == "ESP32_GENERIC"
    assert truth["params"]["profile"]["max_routes"] == 8
    assert len(truth["nodes"]) == 9
    assert "no probes" in capsys.readouterr().out


@pytest.mark.parametrize("args,msg", [
    (["--topology", "/nonexistent/t.txt"], "cannot read topology"),
    (["--generate", "ring:4"], "bad generator"),
    (["--generate", "grid:2x2", "--scenario", "/nonexistent/s.txt"], "cannot read scenario"),
    (["--generate", "grid:2x2", "--profile", "NOPE"], "no board profile"),
    (["--generate", "grid:2x2", "--profile-set", "max_peers=0"], "max_peers must be"),
    (["--generate", "grid:2x2", "--crash-detect-ms", "soon"], "--crash-detect-ms"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, args, msg):
    rc = cli.main(["sim", "--duration", "1", "--out", str(tmp_path / "x")] + args)
    err = capsys.readouterr().err
    assert rc != 0
    assert msg in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_bad_scenario_line(tmp_path, capsys):
    (tmp_path / "s.txt").write_text("1 crash nobody\n")
    rc = cli.main(["sim", "--generate", "grid:2x2", "--duration", "1", "--out", str(tmp_path / "x"),
                   "--scenario", str(tmp_path / "s.txt")])
    err = capsys.readouterr().err
    assert rc != 0 and "s.txt:1: unknown node 'nobody'" in err
