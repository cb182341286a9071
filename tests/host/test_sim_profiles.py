"""Heterogeneous meshes in the simulator: --hub-profile / --node-profile,
the Barabasi-Albert generator, probe hop limits from the sender's profile,
the snake/stretch figures of truth.json, and the speed-ups that must not
change a run (shared signature checks, peer-list sampling)."""
import json
import collections

import pytest

import host_tools  # noqa: F401
from host_tools import cli
from host_tools.sim import keys as SK
from host_tools.sim import probes as P
from host_tools.sim import runner
from host_tools.sim import telemetry as TM
from host_tools.sim import topology as T
from host_tools.sim.harness import Mesh, MeshError, VerifyMemo, load_profile
from snake import report

STAR = "h a\nh b\nh c\nc d\n"


def _tiny(tmp_path, **kw):
    """A profile file: UNIX with max_peers 2 (name TINY)."""
    d = load_profile("UNIX").as_dict()
    d.update(name="TINY", max_peers=2)
    d.update(kw)
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps(d))
    return str(p)


# -- generator -------------------------------------------------------------------

def test_ba_generator_is_scale_free_connected_and_seeded():
    t = T.generate("ba:300:2", seed=4)
    assert len(t.names) == 300 and len(t.edges) == (300 - 2) * 2
    assert t.is_connected()
    deg = collections.Counter()
    for e in t.edges:
        deg[e.a] += 1
        deg[e.b] += 1
    assert min(deg.values()) >= 2
    assert max(deg.values()) >= 20            # hubs: a grid or rgg has nothing like it
    same = T.generate("ba:300:2", seed=4)
    assert t.to_text() == same.to_text()
    assert t.to_text() != T.generate("ba:300:2", seed=5).to_text()


@pytest.mark.parametrize("spec", ["ba:10", "ba:2:2", "ba:10:0", "ba:x:1", "ba:10:1:3"])
def test_ba_generator_bad_specs(spec):
    with pytest.raises(T.TopologyError):
        T.generate(spec)


# -- per-node profiles -----------------------------------------------------------

def test_hub_profile_goes_to_nodes_with_more_links_than_base_max_peers(tmp_path):
    m = Mesh(STAR, seed=1, profile=_tiny(tmp_path), hub_profile="UNIX")
    assert m.router("h").profile.name == "UNIX"          # 3 links > 2
    assert m.router("h").profile.max_peers == 16
    for n in "abcd":
        assert m.router(n).profile.name == "TINY"        # c has exactly 2: not a hub
    assert set(m.node_profiles) == {"h"}
    t = m.converge(timeout=30)
    assert t is not None, m.problems()
    assert all(m.port_of("h", x) for x in "abc")


def test_without_hub_profile_the_hub_loses_a_link(tmp_path):
    m = Mesh(STAR, seed=1, profile=_tiny(tmp_path), strict=False)
    m.run(5)
    assert sum(1 for x in "abc" if m.port_of("h", x)) == 2      # one link refused: no port
    assert m.stats["port_full"] >= 1


def test_node_profile_wins_over_hub_rule_and_unknown_nodes_are_errors(tmp_path):
    tiny = _tiny(tmp_path)
    m = Mesh(STAR, seed=1, profile="UNIX", hub_profile=tiny,
             node_profiles={"h": "UNIX", "d": "ESP32_GENERIC"})
    assert m.router("h").profile.name == "UNIX"
    assert m.router("d").profile.name == "ESP32_GENERIC"
    assert m.router("a").profile.name == "UNIX"
    with pytest.raises(MeshError, match="no node named 'zz'"):
        Mesh(STAR, node_profiles={"zz": "UNIX"})
    with pytest.raises(MeshError, match="no board profile 'NOPE'"):
        Mesh(STAR, hub_profile="NOPE")
    with pytest.raises(MeshError, match="no such profile file"):
        Mesh(STAR, node_profiles={"a": str(tmp_path / "missing.json")})


def test_send_queue_of_a_direction_is_the_senders_profile():
    m = Mesh("a b\n", seed=1, profile="UNIX", node_profiles={"b": "ESP32_GENERIC"})
    m.run(1)
    link = m.links()[0]
    assert link.ep_ab.qcap == load_profile("UNIX").wifi_queue
    assert link.ep_ba.qcap == load_profile("ESP32_GENERIC").wifi_queue


# -- probe hop limit ---------------------------------------------------------------

LINE14 = " ".join("n%02d" % i for i in range(14)) + "\n"


def test_probes_use_the_senders_traffic_hop_limit(tmp_path):
    # 13 hops: more than the protocol's 10, within UNIX's 64
    m = Mesh(LINE14, seed=1)
    assert m.converge(timeout=60) is not None, m.problems()
    r = m.ping("n00", "n13")
    assert r.ok and r.hops == 13, r
    # n00 originates with hop limit 15: relays count it down and use it up at
    # 10 (the reference's range, PROTOCOL_NOTES choice A), so it crosses 4
    # relays; its request dies on the way; n13's request arrives (255) but
    # n00's reply (15) does not
    short = _tiny(tmp_path, max_peers=16, traffic_hop_limit=15)
    m = Mesh(LINE14, seed=1, node_profiles={"n00": short})
    assert m.converge(timeout=60) is not None, m.problems()
    r = m.ping("n00", "n13")
    assert not r.ok and r.reason == "timeout", r
    r = m.ping("n13", "n00")
    assert not r.ok and r.reason == "reply lost", r
    assert m.ping("n00", "n05").ok
    assert not m.ping("n00", "n06").ok


def test_default_hop_limit_crosses_a_line_of_90_rooted_in_the_middle():
    # A first message goes by SNEK, which can climb to the root and come down
    # again: up to ~2 x the tree's depth. Ninety boards in a line with the
    # root in the middle (depth 45, within UNIX's max_hops 64) are 89 hops
    # end to end: a hop limit of 64 would not reach.
    names = ["n%02d" % i for i in range(90)]
    top = max(names, key=lambda x: SK.make_signer(1, x).public)
    names.remove(top)
    names.insert(45, top)
    m = Mesh(" ".join(names) + "\n", seed=1)
    assert m.converge(timeout=120) is not None, m.problems()
    assert max(len(report.coords(m.node(x).router)) for x in names) == 45
    r = m.ping(names[0], names[-1])
    assert r.ok and r.hops == 89, r
    assert m.ping(names[-1], names[0]).ok


def test_explicit_hop_limit_applies_to_every_sender():
    # 18 is used up at 10 after 7 relays: 8 hops reach, 9 do not
    m = Mesh(LINE14, seed=1, hop_limit=18)
    assert m.converge(timeout=60) is not None, m.problems()
    assert not m.ping("n00", "n13").ok
    assert m.ping("n00", "n08").ok
    assert not m.ping("n00", "n09").ok


# -- truth: snake ratio, stretch -------------------------------------------------

def test_shortest_hops_and_first_message_stretch():
    m = Mesh("a b c d\na e d\n", seed=1)
    n = m.node
    assert P.shortest_hops(n("a"), n("d")) == 2
    assert P.shortest_hops(n("a"), n("a")) == 0
    m.link_down("a", "e")
    assert P.shortest_hops(n("a"), n("d")) == 3
    m.kill("c")
    assert P.shortest_hops(n("a"), n("d")) is None

    class R:
        def __init__(self, i, src, dst, hops, shortest):
            self.id, self.src, self.dst, self.hops, self.shortest = i, src, dst, hops, shortest
        stretch = P.ProbeResult.stretch
    rs = [R(1, "a", "b", 3, 2), R(2, "a", "b", 2, 2), R(3, "b", "c", None, 1), R(4, "c", "d", 2, 2)]
    mean, measured, pairs = P.first_message_stretch(rs)
    assert (measured, pairs) == (2, 3)
    assert mean == pytest.approx((1.5 + 1.0) / 2)


def test_snake_ratio_and_held_convergence_in_truth(tmp_path):
    out = tmp_path / "o"
    s = runner.run(str(out), 40, seed=3, generate="grid:4x4", pings=5,
                   scenario=_write(tmp_path / "s.txt", "25 crash 1_1\n"))
    truth = json.load(open(out / "truth.json"))
    conv = truth["convergence"]
    assert s["snake_correct_ratio_final"] == 1.0
    assert conv["snake_first"] is not None and conv["snake_first"] < 25
    # the crash breaks the snake; it holds again from a time after it
    assert conv["snake_held_from"] is not None and conv["snake_held_from"] > 25
    assert s["snake_converged_s"] == conv["snake_held_from"]
    assert any(not t["converged"] for t in conv["snake_transitions"])
    assert s["first_message_pairs"] >= 1 and s["first_message_stretch"] >= 1.0
    for p in truth["probes"]:
        assert p["shortest"] >= 1
    m = Mesh("a b c\n", seed=1)
    m.converge(timeout=30)
    assert m.snake_correct_ratio() == 1.0
    sn = m.router("a").snake                             # one wrong entry of three
    sn.desc_valid = True
    sn.desc_key[:] = b"\x00" * 32
    assert m.snake_correct_ratio() == pytest.approx(2 / 3.0)
    assert not m.snake_correct()


def _write(p, text):
    p.write_text(text)
    return str(p)


# -- runner / CLI ---------------------------------------------------------------

def test_cli_hub_and_node_profiles_reach_truth_and_telemetry(tmp_path, capsys):
    tiny = _tiny(tmp_path)
    (tmp_path / "t.txt").write_text(STAR)
    rc = cli.main(["sim", "--topology", str(tmp_path / "t.txt"), "--duration", "20",
                   "--out", str(tmp_path / "o"), "--profile", tiny, "--hub-profile", "UNIX",
                   "--node-profile", "d=ESP32_GENERIC", "--pings", "3", "-q"])
    assert rc == 0, capsys.readouterr().err
    truth = json.load(open(tmp_path / "o" / "truth.json"))
    pr = truth["params"]
    assert pr["profile"]["name"] == "TINY" and pr["hub_profile"] == "UNIX"
    assert pr["node_profiles"] == {"d": "ESP32_GENERIC", "h": "UNIX"}
    assert set(pr["profiles"]) == {"ESP32_GENERIC", "UNIX"}
    assert pr["hop_limit"] is None
    assert truth["summary"]["profiles"] == {"ESP32_GENERIC": 1, "TINY": 3, "UNIX": 1}
    names = {v: k for k, v in truth["nodes"].items()}
    seen = {}
    for line in open(tmp_path / "o" / "telemetry.jsonl"):
        rec = json.loads(line)
        if rec["kind"] == "state":
            seen[names[rec["node"]]] = rec["profile"]
    assert seen == {"h": "UNIX", "a": "TINY", "b": "TINY", "c": "TINY", "d": "ESP32_GENERIC"}


@pytest.mark.parametrize("args,msg", [
    (["--hub-profile", "NOPE"], "no board profile 'NOPE'"),
    (["--node-profile", "zz=UNIX"], "no node named 'zz'"),
    (["--node-profile", "0_0"], "--node-profile takes NAME=PROFILE"),
    (["--node-profile", "0_0=UNIX", "--node-profile", "0_0=ESP32_GENERIC"], "given twice"),
    (["--node-profile", "0_0=/nonexistent/p.json"], "no such profile file"),
    (["--generate", "ba:5:9"], "1 <= M < N"),
])
def test_cli_profile_errors_are_one_line(tmp_path, capsys, args, msg):
    rc = cli.main(["sim", "--generate", "grid:2x2", "--duration", "1",
                   "--out", str(tmp_path / "x")] + args)
    err = capsys.readouterr().err
    assert rc != 0
    assert msg in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


# -- speed-ups that must not change a run -----------------------------------------

def test_verify_memo_answers_like_verify_and_stays_bounded():
    from snake import crypto
    s = crypto.Signer(b"\x07" * 32)
    memo = VerifyMemo(crypto.verify, size=4)
    msgs = [b"m%d" % i for i in range(10)]
    sigs = [s.sign(m) for m in msgs]
    for rounds in range(2):
        for m, g in zip(msgs, sigs):
            assert memo(s.public, m, g) is True
            assert memo(s.public, m + b"x", g) is False          # same signature, other message
            assert memo(bytes(32), m, g) is False                 # other key
        assert len(memo.new) <= 4 and len(memo.old) <= 4
    assert memo(s.public, bytearray(msgs[0]), memoryview(sigs[0])) is True
    assert memo(s.public[:31], msgs[0], sigs[0]) is False
    assert memo(None, msgs[0], sigs[0]) is False
    hits_before = memo.backend
    memo(s.public, msgs[-1], sigs[-1])                            # recent: from memory
    assert memo.backend == hits_before


@pytest.mark.parametrize("what", ["verify_memo", "peers_every_sample"])
def test_speedups_leave_the_run_byte_identical(what):
    outs = []
    for on in (False, True):
        buf = []

        class F:
            def write(self, x):
                buf.append(x)

            def flush(self):
                pass
        kw = {"verify_memo": on} if what == "verify_memo" else {}
        m = Mesh("a b c d e\nb d\ne f g\n", seed=5, telemetry=TM.Writer(F()), **kw)
        if what == "peers_every_sample":
            m.peers_every_sample = on
        m.start_sampling(0.5, 2.0)
        m.run(8)
        m.kill("c")
        m.run(4)
        m.restart("c")
        m.link_down("e", "f")
        m.run(6)
        m.link_up("e", "f")
        m.ping_pairs(4)
        m.run(10)
        outs.append("".join(buf))
    assert outs[0] == outs[1]
    assert outs[0].count('"kind":"peers"') >= 10


# -- process mesh: the same options -------------------------------------------------

@pytest.mark.slow  # node processes
def test_process_mesh_gives_hub_and_node_profiles(tmp_path):
    from host_tools.errors import InputError
    from host_tools.procmesh.mesh import ProcessMesh
    tiny = _tiny(tmp_path)
    topo = tmp_path / "star.txt"
    topo.write_text(STAR)
    with pytest.raises(InputError, match="no node named 'zz'"):
        ProcessMesh(str(topo), str(tmp_path / "x"), profile=tiny, node_profiles={"zz": "UNIX"})
    m = ProcessMesh(str(topo), str(tmp_path / "out"), seed=2, profile=tiny, hub_profile="UNIX",
                    node_profiles={"d": "ESP32_GENERIC"})
    assert m.profile_of("h") == "UNIX" and m.profile_of("d") == "ESP32_GENERIC"
    assert m.profile_of("a") == tiny
    with m:
        boards = {n: m.request(n, "version").get("board") for n in m.names}
        assert boards == {"h": "UNIX", "a": "TINY", "b": "TINY", "c": "TINY",
                          "d": "ESP32_GENERIC"}
        m.wait_converged(timeout=90)
        assert m.ping("a", "d").get("received") == 1


def test_capacity_warnings_from_the_simulators_readings(tmp_path):
    tiny = _tiny(tmp_path)
    m = Mesh(STAR, seed=1, profile=tiny, strict=False)
    m.track_capacity(1.0)
    m.run(10)
    w = m.capacity_warnings()
    hub = [x for x in w if x["name"] == "h" and x["table"] == "peers"]
    assert hub and hub[0]["refused"] >= 1 and hub[0]["used"] == hub[0]["capacity"] == 2
    assert hub[0]["node"] == m.node("h").hex
    # with a hub profile nothing is refused and no table is full
    m = Mesh(STAR, seed=1, profile=tiny, hub_profile="UNIX")
    m.track_capacity(1.0)
    m.run(10)
    assert [x for x in m.capacity_warnings() if x["table"] == "peers" and x["refused"]] == []
    assert Mesh(STAR).capacity_warnings() is None             # not tracked
    # the runner writes them to truth.json and counts them in the summary
    (tmp_path / "t.txt").write_text(STAR)
    s = runner.run(str(tmp_path / "o"), 10, topology=str(tmp_path / "t.txt"), profile=tiny,
                   pings=0)
    truth = json.load(open(tmp_path / "o" / "truth.json"))
    assert s["capacity_warnings"] == len(truth["capacity_warnings"]) >= 1
    assert {"h"} <= {x["name"] for x in truth["capacity_warnings"]}
    assert "capacity warnings on" in runner.summary_line(dict(s, wall_s=0.0))


def test_joining_nodes_follow_the_hub_rule_and_node_profiles(tmp_path):
    tiny = _tiny(tmp_path)
    m = Mesh("a b c d\n", seed=1, profile=tiny, hub_profile="UNIX",
             node_profiles={"y": "ESP32_GENERIC"}, joins=["y"])
    z = m.join("z", ["a", "b", "c"])                 # 3 links > TINY's 2
    assert z.profile.name == "UNIX" and m.router("z").profile.name == "UNIX"
    assert m.join("w", ["d"]).profile.name == "TINY"
    assert m.join("y", ["a", "b", "c"]).profile.name == "ESP32_GENERIC"
    with pytest.raises(MeshError, match="no node named 'q'"):
        Mesh("a b\n", node_profiles={"q": "UNIX"}, joins=["y"])
    # the runner knows a scenario's joiners
    (tmp_path / "t.txt").write_text("a b c d\n")
    (tmp_path / "s.txt").write_text("2 join z a b c\n")
    rc = cli.main(["sim", "--topology", str(tmp_path / "t.txt"), "--scenario", str(tmp_path / "s.txt"),
                   "--duration", "5", "--out", str(tmp_path / "o"), "--profile", tiny,
                   "--node-profile", "z=ESP32_GENERIC", "--pings", "0", "-q"])
    assert rc == 0
    truth = json.load(open(tmp_path / "o" / "truth.json"))
    assert truth["params"]["node_profiles"] == {"z": "ESP32_GENERIC"}
    assert truth["summary"]["profiles"] == {"ESP32_GENERIC": 1, "TINY": 4}
