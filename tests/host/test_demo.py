"""`make demo` is `snakemesh demo`: run it end to end (process mesh of 8
unix-port nodes over the mixed BLE/Wi-Fi demo topology and a gateway node
their telemetry reaches over the mesh, then the Spark pipeline on the
gateway's capture and the report), so CI shows it completes on its machine."""
import json
import os
import subprocess
import sys


def test_demo_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    r = subprocess.run([sys.executable, "-m", "host_tools.cli", "demo", "--out", str(out),
                        "--duration", "5", "--pings", "8", "--traces", "3"],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    for line in ("nodes up", "root agreed", "snake complete", "ping ", "verdict: ", "report: "):
        assert line in r.stdout, (line, r.stdout[-3000:])
    # it says what it is doing in every phase, ratios as percentages
    for line in ("--- 1/4 process mesh: 8 firmware nodes", "waiting for every node to agree on the root",
                 "pinging 8 random pairs", "pings answered: 8 of 8 (100%)",
                 "sending 4 datagrams with an end-to-end ack", "datagrams delivered: 4 of 4 (100%)",
                 "application datagrams delivered 100% of 4", "tracing 3 more pairs",
                 "recording telemetry for 5 s", "stopping the 8 nodes",
                 "and a gateway node that alpha joins", "every node sends its telemetry there over the mesh",
                 "records from 9 node(s)", "Spark pipeline (local mode): the gateway's capture",
                 "--- 2/4 Spark pipeline", "--- 3/4 mesh health",
                 "snake neighbours right at the end: 100%", "ping delivery 100% of 8 pings",
                 "--- 4/4 report"):
        assert line in r.stdout, (line, r.stdout[-3000:])
    report = out / "analysis" / "report" / "index.html"
    assert report.is_file() and report.stat().st_size > 1000
    pngs = list((out / "analysis" / "report").glob("*.png"))
    assert len(pngs) >= 3 and all(p.stat().st_size > 2000 for p in pngs)
    for svg in ("tree.svg", "snake.svg"):
        assert (out / "analysis" / "report" / svg).stat().st_size > 2000
    summary = json.loads((out / "analysis" / "summary.json").read_text())
    assert summary["nodes"] == 9            # the 8 and the gateway
    # the nodes' records reached the report through the gateway: its capture
    # has every node, and the analysis read it (the consoles gave only probes)
    heard = json.loads((out / "gateway" / "nodes.json").read_text())
    assert len(heard) == 9 and all(v["records"] >= 2 for v in heard.values())
    assert summary["records"] >= sum(v["records"] for v in heard.values())
    assert summary["rejected_records"] == 0
    assert summary["ping_delivery_ratio"] == 1.0
    assert summary["datagrams"] == 4 and summary["app_delivery_ratio"] == 1.0
    assert 0 <= summary["ack_latency_ms_p50"] <= summary["ack_latency_ms_p95"]
    assert summary["tree_converged_s"] is not None and summary["snake_converged_s"] is not None
