"""Small versions of issue 14's large-mesh acceptance runs (the large ones
are `make bench` figure 9, bench/sim_accept.py; figures in docs/reports/CAPACITY.md):
same runner, same figures as `snakemesh sim` (truth.json summary), seed 1,
75 virtual s, 50 random ping pairs x 2 at 62 s.

- ESP32_GENERIC as shipped, on meshes its tables hold (320 routes: the
  busiest node of ~250 boards needs ~0.6 x N; depth <= 30);
- ESP32_GENERIC on larger and deeper meshes, with GATEWAY hubs where a
  node has more links than an ESP32 takes;
- an overloaded all-ESP32_GENERIC mesh (rgg:800: more routes than 320 at
  the busiest nodes, ~0.55 x N; more links than 7 at some; rgg:400 fits
  the routes): it says so in capacity_warnings. Its delivery target (>= 99 %) is not met
  (docs/reports/CAPACITY.md "Where it stands": the busiest nodes refuse most
  routes, so the snake stays wrong for many keys); that test is marked
  xfail strict so that it shows when it starts to pass;
- a line of boards deeper than ESP32_GENERIC's max_hops (30): it says so
  (`depth` in capacity_warnings)."""
import json

import pytest

import host_tools  # noqa: F401
from host_tools.sim import runner

PINGS = "ping-set 50 count=2 interval=1 timeout=5"


def _run(tmp_path, generate, duration, ping_t, hub=None, profile="ESP32_GENERIC", seed=1):
    scen = tmp_path / "scenario.txt"
    scen.write_text("%g %s\n" % (ping_t, PINGS))
    out = tmp_path / "out"
    s = runner.run(str(out), duration, seed=seed, generate=generate, profile=profile,
                   hub_profile=hub, scenario=str(scen), telemetry=False)
    with open(out / "truth.json") as f:
        truth = json.load(f)
    return s, truth


def _explain(s):
    return {k: s[k] for k in ("snake_correct_ratio_final", "snake_converged_s", "delivery_ratio",
                              "probes_ok", "probes", "profiles", "capacity_warnings")}


def _converges_and_delivers(s):
    assert s["snake_correct_ratio_final"] == 1.0, _explain(s)
    assert s["snake_converged_s"] is not None and s["snake_converged_s"] <= 60, _explain(s)
    assert s["probes"] == 100 and s["delivery_ratio"] >= 0.99, _explain(s)


@pytest.mark.parametrize("generate", ["rgg:50", "grid:6x6"])
def test_esp32_generic_mesh_within_its_tables_converges_and_delivers(tmp_path, generate):
    s, truth = _run(tmp_path, generate, 75, 62)
    assert s["profiles"] == {"ESP32_GENERIC": s["nodes"]}
    _converges_and_delivers(s)


@pytest.mark.parametrize("generate,hub", [
    # radius 0.1927: a mean degree of ~7, ESP32_GENERIC's max_peers (the
    # default radius gives ~8, and more than a quarter of the nodes hubs)
    ("rgg:60:0.1927", "GATEWAY"),
    ("ba:60:2", "GATEWAY"),
    ("grid:8x8", None),
])
def test_esp32_on_larger_meshes_with_hubs_converges_and_delivers(tmp_path, generate, hub):
    s, truth = _run(tmp_path, generate, 75, 62, hub=hub, profile="ESP32_GENERIC")
    if hub:
        assert s["profiles"].get(hub, 0) >= 1, s["profiles"]     # the graph has hubs
    assert s["profiles"].get("ESP32_GENERIC", 0) >= s["nodes"] * 0.75, s["profiles"]
    _converges_and_delivers(s)


@pytest.fixture(scope="module")
def overloaded(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("overload"), "rgg:800", 135, 122)


@pytest.mark.slow  # an 800-node overloaded mesh for 135 virtual s (a shared fixture)
def test_overloaded_esp32_mesh_says_so(overloaded):
    s, truth = overloaded
    assert s["profiles"] == {"ESP32_GENERIC": 800}
    assert s["capacity_warnings"], _explain(s)
    tables = {w["table"] for w in truth["capacity_warnings"]}
    assert {"peers", "routes"} <= tables, tables


def test_esp32_mesh_deeper_than_its_max_hops_says_so(tmp_path):
    # a line of 70 boards: wherever the root is (the highest key), one end
    # is at least 35 hops from it, deeper than max_hops 30
    s, truth = _run(tmp_path, "grid:1x70", 40, 30)
    assert s["profiles"] == {"ESP32_GENERIC": 70}
    tables = {w["table"] for w in truth["capacity_warnings"]}
    assert "depth" in tables, tables


@pytest.mark.xfail(strict=True, reason="issue 14 overload target not met: the busiest ESP32_GENERIC nodes "
                                       "refuse routes (320), the snake stays wrong for some keys "
                                       "(docs/reports/CAPACITY.md)")
@pytest.mark.slow  # the same overloaded mesh
def test_overloaded_esp32_mesh_keeps_delivering(overloaded):
    s, truth = overloaded
    assert s["delivery_ratio"] >= 0.99, _explain(s)
