"""bench/run_report.py: the checking run with read-only taps gives the run
`snakemesh sim` gives for the same options (so its trace explains that run),
and it names where the lost pings were dropped and which boards refused
routes (docs/LOG.md 2026-12-06)."""
import json

import run_report     # bench/ is on sys.path (tests/conftest.py)
from host_tools import cli


def test_traced_run_is_the_plain_run_and_explains_its_losses(tmp_path, capsys):
    topo = tmp_path / "t.txt"
    plain = tmp_path / "plain"
    args = ["--profile", "ESP32_GENERIC", "--profile-set", "max_routes=10", "--duration", "40",
            "--pings", "10", "--seed", "3"]
    assert cli.main(["sim", "--generate", "rgg:60", "--out", str(plain), "-q", "--no-telemetry"]
                    + args) == 0
    topo.write_text((plain / "topology.txt").read_text())
    assert cli.main(["sim", "--topology", str(topo), "--out", str(plain), "-q", "--no-telemetry"]
                    + args) == 0
    traced = tmp_path / "traced"
    assert run_report.main(["run", "--topology", str(topo), "--out", str(traced)] + args) == 0
    capsys.readouterr()
    a = json.loads((plain / "truth.json").read_text())
    b = json.loads((traced / "truth.json").read_text())
    for k in ("summary", "probes", "convergence", "capacity_warnings", "router_events"):
        assert a[k] == b[k], k
    s = a["summary"]
    assert s["probes_ok"] < s["probes"]            # 10 routes on rgg:60: pings are lost
    assert run_report.main(["show", str(traced), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert len(r["lost"]) == s["probes"] - s["probes_ok"]
    # each lost ping that was dropped by a router is named with the reason
    dropped = [x for x in r["lost"] if x["drops"]]
    assert dropped and all(d["why"] in ("no_route", "loop", "watermark", "queue_full", "hop_limit")
                           for x in dropped for d in x["drops"])
    # a request is dropped where its path ends
    assert all(d["node"] == x["end"] == x["path"][-1] for x in dropped for d in x["drops"]
               if d["kind"] == "req")
    refusing = set(w["name"] for w in a["capacity_warnings"] if w["table"] == "routes" and w["refused"])
    assert r["routes_refusing_boards"] == len(refusing) > 0
    assert sum(r["refusals_per_10s"].values()) == r["routes_refused"]
    assert r["wrong_at_end"] or r["snake_correct_ratio_final"] == 1.0
