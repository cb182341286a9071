"""The gateway's capture against `monitor` over the consoles, for the same
run (issue 26): a process mesh of the demo topology plus `snakemesh
gateway`; every node's records are in the capture within 60 s; `analyze`
on the capture gives the node count and the verdict that `analyze` on the
consoles' records (what `monitor` writes: every node's console, the
gateway's included) gives. Then a node is killed: `analyze` on the
capture lists it as silent (last seen, for how long) and the verdict names
it."""
import json
import os
import re
import subprocess
import sys
import threading
import time

from host_tools.commands.demo import DEMO_TOPOLOGY, GatewayProc
from host_tools.console_client import ConsoleClient
from host_tools.procmesh.mesh import ProcessMesh


def _analyze(inputs, out, *extra):
    r = subprocess.run([sys.executable, "-m", "host_tools.cli", "analyze"] + inputs +
                       ["--out", out, "--report"] + list(extra),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    nodes = int(re.search(r"^nodes (\d+),", r.stdout, re.M).group(1))
    verdict = re.search(r"^verdict: (\w+)(.*)$", r.stdout, re.M)
    return nodes, verdict.group(1), verdict.group(2), r.stdout


def _capture_nodes(d):
    seen = set()
    for name in os.listdir(d):
        if name.startswith("telemetry-"):
            with open(os.path.join(d, name)) as f:
                seen.update(json.loads(l)["node"] for l in f if l.strip())
    return seen


def test_capture_gives_what_monitor_gives_and_names_the_silent(tmp_path):
    gw = GatewayProc(str(tmp_path / "gw")).start()
    console = re.search(r"^console (/dev/\S+)$", open(gw.log).read(), re.M).group(1)
    args = dict((n, ["--telemetry", "2"]) for n in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot",
                                                      "golf", "hotel"))
    args["alpha"] += ["--connect", "127.0.0.1:%d" % gw.port]
    m = ProcessMesh(DEMO_TOPOLOGY, str(tmp_path / "mesh"), seed=5, node_args=args)
    m.outside = [bytes.fromhex(gw.key)]
    consoles = str(tmp_path / "consoles.jsonl")
    try:
        m.start()
        t0 = time.monotonic()
        keys = set(m.hexkey(n) for n in m.names)
        while not keys <= _capture_nodes(gw.dir):
            assert time.monotonic() - t0 < 60, "not every node in the capture within 60 s"
            time.sleep(1)
        m.wait_converged(timeout=120)
        # monitor over every console for the same 30 s: the mesh's nodes and the gateway's
        gw_recs = []
        cc = ConsoleClient(console, timeout=5).open()

        def read():
            for rec in cc.records(duration=30):
                gw_recs.append(rec)
        th = threading.Thread(target=read)
        th.start()
        m.record(30, interval=2)
        th.join(40)
        cc.close()
        m.stop()
        # what monitor writes: the records the consoles said (the process
        # mesh adds a `topology` record of its own processes, which knows
        # no gateway: monitor writes none)
        with open(os.path.join(str(tmp_path / "mesh"), "telemetry.jsonl")) as f:
            mesh_lines = [l for l in f if json.loads(l).get("kind") != "topology"]
        with open(consoles, "w") as f:
            f.writelines(mesh_lines)
            for r in gw_recs:
                if isinstance(r, dict) and "v" in r:
                    f.write(json.dumps(r) + "\n")
        assert gw_recs, "the gateway's console said nothing"
    finally:
        m.stop()
        gw.stop()
    n_mon, v_mon, why_mon, _ = _analyze([consoles], str(tmp_path / "a_mon"))
    n_gw, v_gw, why_gw, out = _analyze([gw.dir], str(tmp_path / "a_gw"))
    assert n_mon == n_gw == len(keys) + 1
    assert v_gw == v_mon, (why_gw, why_mon)
    assert "silent:" not in out


def test_a_node_not_heard_from_is_listed_and_named(tmp_path):
    gw = GatewayProc(str(tmp_path / "gw")).start()
    args = dict((n, ["--telemetry", "2"]) for n in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot",
                                                      "golf", "hotel"))
    args["alpha"] += ["--connect", "127.0.0.1:%d" % gw.port]
    m = ProcessMesh(DEMO_TOPOLOGY, str(tmp_path / "mesh"), seed=5, node_args=args)
    m.outside = [bytes.fromhex(gw.key)]
    try:
        m.start()
        keys = set(m.hexkey(n) for n in m.names)
        t0 = time.monotonic()
        while not keys <= _capture_nodes(gw.dir):
            assert time.monotonic() - t0 < 60
            time.sleep(1)
        m.kill("hotel")               # a leaf on a BLE spur: the rest of the mesh stays whole
        time.sleep(25)
    finally:
        m.stop()
        gw.stop()
    n, v, why, out = _analyze([gw.dir], str(tmp_path / "a"), "--silent-after", "10")
    hotel = m.hexkey("hotel")
    lines = [l for l in out.splitlines() if l.startswith("silent: ")]
    assert len(lines) == 1 and lines[0].startswith("silent: %s" % hotel[:6]), out
    s = float(re.search(r"not heard from for (\d+) s", lines[0]).group(1))
    assert 15 <= s <= 40, lines[0]
    assert "last seen 20" in lines[0]
    # the report's verdict (every reason, not only the worst the line shows)
    from host_tools.pipeline import health
    a = str(tmp_path / "a")
    summary = json.load(open(os.path.join(a, "summary.json")))
    level, reasons = health.verdict(summary, health.load_nodes(a))
    assert level == v in ("degraded", "broken")
    lost = [r for r in reasons if r["code"] == "lost"]
    assert lost and lost[0]["nodes"] == [hotel], reasons
    # the node by its short key (the shortest unique prefix, 8+ digits) and how long
    assert re.search(r"1 silent \(%s[0-9a-f]* for \d+ s\)" % hotel[:6], lost[0]["text"]), lost[0]["text"]
