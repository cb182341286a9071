"""The capacity planner (`snakemesh plan`), profile maps (`--profile-map`)
and the whole-run verdict on meshes that end in several components (what
`analyze` and the simulator's truth must agree on). The heavy runs (rgg:1000,
ba:500:2) are in docs/reports/CAPACITY.md "Planning a mesh", not here."""
import json

import pytest

import host_tools  # noqa: F401
from host_tools import cli
from host_tools.pipeline import convergence, topology
from host_tools.sim import planner as PL
from host_tools.sim import profiles as PR
from host_tools.sim import topology as T
from host_tools.sim.harness import Mesh, MeshError, load_profile

LINE12 = " ".join("n%02d" % i for i in range(12)) + "\n"


def _shallow(tmp_path, max_hops=4):
    """UNIX with a shallow tree (name SHALLOW): depth binds first."""
    d = load_profile("UNIX").as_dict()
    d.update(name="SHALLOW", max_hops=max_hops)
    p = tmp_path / "shallow.json"
    p.write_text(json.dumps(d))
    return str(p)


# -- profile maps ------------------------------------------------------------------

def test_profile_map_lines_root_and_bad_lines():
    m, root = PR.parse_profile_map("# plan\na GATEWAY root\nb ESP32_SPIRAM  # busy\n\n", "p.txt")
    assert m == {"a": "GATEWAY", "b": "ESP32_SPIRAM"} and root == "a"
    assert PR.parse_profile_map(PR.format_profile_map(m, root, ["x"]))== (m, root)
    for bad, msg in (("a", "p.txt:1: expected"), ("a B extra", "p.txt:1: expected"),
                     ("a X\na Y", "p.txt:2: node a given twice"),
                     ("a X root\nb X root", "p.txt:2: a second root")):
        with pytest.raises(PR.ProfileSpecError, match=msg):
            PR.parse_profile_map(bad, "p.txt")


def test_root_node_holds_the_highest_key_on_every_seed():
    for seed in (1, 2, 3):
        m = Mesh(LINE12, seed=seed, profile="UNIX", root_node="n03")
        keys = dict((n, m.key(n)) for n in m.nodes)
        assert max(keys, key=keys.get) == "n03"
        plain = Mesh(LINE12, seed=seed, profile="UNIX")
        assert plain.key("n07") == m.key("n07") or plain.key("n07")[0] != 0xff
    with pytest.raises(MeshError, match="root 'zz' is no node"):
        Mesh(LINE12, root_node="zz")


def test_process_mesh_puts_the_maps_root_at_the_top_as_the_simulator(tmp_path):
    from host_tools.procmesh.mesh import ProcessMesh
    topo = tmp_path / "line.txt"
    topo.write_text(LINE12)
    m = ProcessMesh(str(topo), str(tmp_path / "out"), seed=4, profile="UNIX",
                    node_profiles={"n03": "GATEWAY"}, root_node="n03")
    sim = Mesh(LINE12, seed=4, profile="UNIX", node_profiles={"n03": "GATEWAY"}, root_node="n03")
    assert all(m.keys[n] == sim.key(n) for n in m.names)
    assert max(m.keys, key=lambda n: m.keys[n]) == "n03"


def test_sim_takes_a_profile_map_and_records_the_root(tmp_path, capsys):
    pm = tmp_path / "profiles.txt"
    pm.write_text("n05 GATEWAY root\nn00 ESP32_SPIRAM\n")
    topo = tmp_path / "line.txt"
    topo.write_text(LINE12)
    out = tmp_path / "run"
    rc = cli.main(["sim", "--topology", str(topo), "--profile", "UNIX", "--profile-map", str(pm),
                   "--duration", "20", "--pings", "2", "--out", str(out), "-q", "--no-telemetry"])
    assert rc == 0
    truth = json.loads((out / "truth.json").read_text())
    assert truth["params"]["root_node"] == "n05"
    assert truth["params"]["node_profiles"] == {"n00": "ESP32_SPIRAM", "n05": "GATEWAY"}
    assert max(truth["nodes"], key=truth["nodes"].get) == "n05"
    assert truth["summary"]["converged_at_end"] is True
    pm.write_text("n05 GATEWAY root\nbroken\n")
    rc = cli.main(["sim", "--topology", str(topo), "--profile-map", str(pm), "--duration", "5",
                   "--out", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 5 and "profiles.txt:2: expected" in err and len(err.strip().splitlines()) == 1


# -- the planner -------------------------------------------------------------------------

def test_centre_of_a_line_and_the_depth_bound(tmp_path):
    topo = T.parse(LINE12)
    root, ecc, dist = PL.centre(topo)
    assert (root, ecc) == ("n05", 6)            # n05 and n06 both 6: the lower total distance, then name
    ladder = [load_profile(_shallow(tmp_path, 4)), load_profile("UNIX")]
    PL.depth_bound(dist, ladder, root)          # UNIX's 64 holds 6 + margin
    with pytest.raises(PL.NoAssignment, match="no assignment: node n11 is 6 hops from the best root n05"):
        PL.depth_bound(dist, [load_profile(_shallow(tmp_path, 7))], root)


def test_plan_upgrades_the_nodes_deeper_than_the_base_holds(tmp_path, capsys):
    topo = tmp_path / "line.txt"
    topo.write_text(LINE12)
    out = tmp_path / "plan"
    rc = cli.main(["plan", "--topology", str(topo), "--profile", _shallow(tmp_path, 4),
                   "--upgrade", "UNIX", "--out", str(out), "--draws", "1", "--duration", "20", "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    m, root = PR.load_profile_map(str(out / "profiles.txt"))
    assert root == "n05"
    # the nodes more than 4 hops from n05 find no parent within SHALLOW's
    # depth (a line has no other path), and the root
    assert set(m) == {"n00", "n10", "n11", "n05"}
    assert set(m.values()) == {"UNIX"}
    plan = json.loads((out / "plan.json").read_text())
    assert plan["needs"]["n11"]["depth"] == 5 and plan["binding"]["n11"] == "depth"
    assert plan["needs"]["n09"]["depth"] == 4 and "n09" not in plan["binding"]
    assert plan["runs"][0]["outside_root_tree"] == 3
    assert "12 nodes: 8 SHALLOW, 4 UNIX; 4 upgraded" in text and "depth binds on SHALLOW" in text
    # and the mesh it plans works as planned on keys drawn afresh
    rc = cli.main(["sim", "--topology", str(out / "topology.txt"), "--profile", _shallow(tmp_path, 4),
                   "--profile-map", str(out / "profiles.txt"), "--duration", "30", "--pings", "3",
                   "--seed", "7", "--out", str(tmp_path / "run"), "-q", "--no-telemetry"])
    assert rc == 0
    truth = json.loads((tmp_path / "run" / "truth.json").read_text())
    s = truth["summary"]
    assert s["converged_at_end"] and s["delivery_ratio"] == 1.0
    # SHALLOW nodes drop their deeper neighbours' announcements (counted
    # as depth; harmless: those are not their parents); no other table
    assert {w["table"] for w in truth["capacity_warnings"]} <= {"depth"}, truth["capacity_warnings"]


def test_plan_without_an_assignment_says_so_in_one_line(tmp_path, capsys):
    topo = tmp_path / "line.txt"
    topo.write_text(LINE12)
    rc = cli.main(["plan", "--topology", str(topo), "--profile", _shallow(tmp_path, 4),
                   "--upgrade", _shallow(tmp_path, 5), "--out", str(tmp_path / "p"), "-q"])
    cap = capsys.readouterr()
    assert rc == 7
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and "no assignment: node n11 is 6 hops" in lines[0]
    assert "max_hops >= 8" in lines[0]
    assert not (tmp_path / "p" / "profiles.txt").exists()


def test_assign_names_the_profile_that_would_hold_a_node():
    nd = PL.Need()
    nd.routes, nd.depth, nd.hops = 1000, 10, 20
    ladder = [load_profile("ESP32_GENERIC"), load_profile("ESP32_SPIRAM")]
    assert PL.assign({"a": nd}, ladder) == ({"a": "ESP32_SPIRAM"}, {"a": "routes"})
    with pytest.raises(PL.NoAssignment, match="node a needs 1000 routes.*max_routes >= 1250"):
        PL.assign({"a": nd}, ladder, margin=1.25)       # 1000 x 1.25 > 1024


def test_fresh_draw_misses_names_the_nodes_that_overflow_in_one_draw_only():
    base = load_profile("ESP32_GENERIC")
    cap = base.max_routes

    def need(*draws):
        nd = PL.Need()
        nd.draw_routes = list(draws)
        nd.routes = max(draws)
        return nd
    needs = {"steady": need(cap + 50, cap + 10, cap + 1),   # over in every draw: planned either way
             "moves1": need(cap + 1, 40, cap),              # over in draw 1 only
             "moves3": need(10, 20, 3 * cap),               # over in draw 3 only
             "light": need(cap, cap, cap),                  # fits exactly
             "root": need(5 * cap, 1, 1)}
    assert PL.fresh_draw_misses(needs, base, root="root") == [["moves1"], [], ["moves3"]]
    # the margin counts: x1.25 puts "light" over in every draw, and moves1's cap in draw 3
    assert PL.fresh_draw_misses(needs, base, margin=1.25, root="root") == [[], [], ["moves3"]]
    # without the root excluded its one-draw overflow is counted too
    assert PL.fresh_draw_misses(needs, base) == [["moves1", "root"], [], ["moves3"]]
    # one draw: nothing to compare
    assert PL.fresh_draw_misses({"a": need(cap + 1)}, base) == []


# -- the whole-run verdict where links did not all come up -------------------------------------

def _row(value, correct, since):
    return {"final": {"value": value, "correct": correct}, "tree_since": since, "snake_since": since,
            "own_rows": 5}


def test_tree_agreement_at_the_end_is_per_component_of_the_links_that_came_up():
    # a-b-c and d-e: d's link to c was refused; each part has its own root
    nodes = ["a", "b", "c", "d", "e"]
    edges = {("a", "b"), ("b", "c"), ("d", "e")}
    ep = topology.Epoch(0, None, edges)
    comps = [topology.components(nodes, edges)]
    whole = {"a": _row("r1/1", True, 3.0), "b": _row("r1/1", True, 4.0), "c": _row("r1/1", True, 2.0),
             "d": _row("r2/1", True, 5.0), "e": _row("r2/1", True, 1.0)}
    by_scope = {-1: whole, 0: dict(whole)}
    run, per_epoch, _pn, _down = convergence.rollup(by_scope, nodes, [ep], comps, 0.0, 60.0)
    assert run["tree_converged_s"] == 5.0 and run["snake_converged_s"] == 5.0
    assert run["components_at_end"] == 2
    assert per_epoch[0]["tree_converged_s"] == 5.0
    whole["e"] = _row("r1/1", True, 1.0)         # e follows the other part's root: not agreed
    run, _pe, _pn, _down = convergence.rollup({-1: whole, 0: dict(whole)}, nodes, [ep], comps, 0.0, 60.0)
    assert run["tree_converged_s"] is None


# -- a modified base: plan --profile-set, as sim --profile-set ---------------------------------

def test_plan_takes_base_overrides_as_sim_does(tmp_path, capsys):
    # a 12-node line with every key's bootstrap walking it: the middle nodes
    # hold 7-8 routes, the ends 1-3. UNIX holds them all (512); with
    # max_routes=6 on the base the four middle ones must be upgraded
    topo = tmp_path / "line.txt"
    topo.write_text(LINE12)
    args = ["plan", "--topology", str(topo), "--profile", "UNIX", "--upgrade", "GATEWAY",
            "--draws", "1", "--duration", "20", "-q"]
    assert cli.main(args + ["--out", str(tmp_path / "plain")]) == 0
    m, root = PR.load_profile_map(str(tmp_path / "plain" / "profiles.txt"))
    assert (m, root) == ({"n05": "GATEWAY"}, "n05")
    capsys.readouterr()
    out = tmp_path / "small"
    assert cli.main(args + ["--out", str(out), "--profile-set", "max_routes=6"]) == 0
    text = capsys.readouterr().out
    m, root = PR.load_profile_map(str(out / "profiles.txt"))
    plan = json.loads((out / "plan.json").read_text())
    assert root == "n05" and set(m) == {"n03", "n04", "n05", "n06"}, plan["needs"]
    assert all(plan["needs"][n]["routes"] > 6 for n in ("n03", "n04", "n06"))
    assert all(plan["needs"][n]["routes"] <= 6 for n in plan["needs"] if n not in m)
    assert plan["base_settings"] == {"max_routes": 6} and plan["base"] == "UNIX"
    assert "base UNIX with max_routes=6" in (out / "profiles.txt").read_text()
    assert "give sim the same (--profile-set max_routes=6)" in text
    assert "routes binds on UNIX" in text
    # the same overrides through the shared parser; bad ones in one line
    assert PR.parse_profile_set(["max_routes=6", "bootstrap_verify=on-change"]) == {
        "max_routes": 6, "bootstrap_verify": "on-change"}
    assert PR.with_settings("UNIX", {"max_routes": 6}).max_routes == 6
    assert PR.with_settings("UNIX", {}).max_routes == load_profile("UNIX").max_routes
    for bad, rc, msg in ((["--profile-set", "max_routes"], 2, "--profile-set takes KEY=VALUE"),
                         (["--profile-set", "max_peers=0"], 5, "max_peers must be")):
        assert cli.main(args + ["--out", str(tmp_path / "bad")] + bad) == rc
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, err


# -- a budget: plan --max-upgrades -------------------------------------------------------------

def _need(*draws):
    nd = PL.Need()
    nd.draw_routes = list(draws)
    nd.routes = max(draws)
    return nd


def test_fresh_need_shrinks_a_nodes_draws_towards_its_distance():
    needs = {"r": _need(50, 50), "a": _need(200, 0), "b": _need(60, 40), "c": _need(10, 10)}
    dist = {"r": 0, "a": 1, "b": 1, "c": 2}
    got = PL.fresh_need(needs, dist, root="r", prior=4)
    # a and b: mean 100 and 50 at distance 1 (mean 75): (2 x 100 + 4 x 75) / 6, (2 x 50 + 300) / 6
    assert got == pytest.approx({"a": 500 / 6.0, "b": 400 / 6.0, "c": 10.0})
    assert "r" not in got
    # with no prior the mean, not the largest draw: a's 200 in one draw counts half
    assert PL.fresh_need(needs, dist, root="r", prior=0)["a"] == 100.0


def test_fill_spends_the_budget_after_the_required_upgrades():
    ladder = [load_profile("ESP32_GENERIC"), load_profile("ESP32_SPIRAM"), load_profile("GATEWAY")]
    cap = ladder[0].max_routes
    needs = {"root": _need(10), "over": _need(cap + 5), "busy": _need(cap - 1),
             "near": _need(cap // 2), "far": _need(cap // 2), "idle": _need(1)}
    dist = {"root": 0, "over": 3, "busy": 3, "near": 1, "far": 5, "idle": 5}
    asg, why = PL.assign(needs, ladder, "root", ladder[2])
    assert asg == {"root": "GATEWAY", "over": "ESP32_SPIRAM"}
    added = PL.fill(asg, why, needs, ladder, 4, dist, "root")
    assert added == ["busy", "near"]        # near beats far (same draws) by its place
    assert asg["busy"] == asg["near"] == "ESP32_SPIRAM" and why["near"] == "fresh-draw"
    assert len(asg) == 4
    assert PL.fill(asg, why, needs, ladder, 3, dist, "root") == []      # no room: nothing


def test_plan_max_upgrades_fills_the_budget(tmp_path, capsys):
    # the line of the test above with max_routes=6: n03, n04, n06 and the
    # root n05 are required; a budget of 6 adds n07 (6 routes, 2 hops from
    # the root) and n02 (5, 3 hops), in that order
    topo = tmp_path / "line.txt"
    topo.write_text(LINE12)
    args = ["plan", "--topology", str(topo), "--profile", "UNIX", "--upgrade", "GATEWAY",
            "--draws", "1", "--duration", "20", "-q", "--profile-set", "max_routes=6"]
    out = tmp_path / "b6"
    assert cli.main(args + ["--out", str(out), "--max-upgrades", "6"]) == 0
    text = capsys.readouterr().out
    m, root = PR.load_profile_map(str(out / "profiles.txt"))
    plan = json.loads((out / "plan.json").read_text())
    assert set(m) == {"n02", "n03", "n04", "n05", "n06", "n07"}
    assert plan["filled"] == ["n07", "n02"] and plan["required_upgrades"] == 4
    assert plan["binding"]["n07"] == "fresh-draw" and plan["max_upgrades"] == 6
    assert "budget 6: 4 required by the measured needs, 2 more" in text
    assert "likeliest to overflow UNIX in a fresh draw: n02" in text
    # a share of the nodes, rounded down; one the needs exceed
    assert cli.main(args + ["--out", str(tmp_path / "b10"), "--max-upgrades", "10%"]) == 0
    text = capsys.readouterr().out
    plan = json.loads((tmp_path / "b10" / "plan.json").read_text())
    assert plan["max_upgrades"] == 1 and len(plan["assignment"]) == 4 and plan["filled"] == []
    assert "over budget: the measured needs require 4 upgrades, --max-upgrades allows 1" in text
    for bad in ("ten", "-1", "120%"):
        assert cli.main(args + ["--out", str(tmp_path / "bad"), "--max-upgrades", bad]) == 2
        err = capsys.readouterr().err
        assert "--max-upgrades takes a count or a share like 10%" in err, err
