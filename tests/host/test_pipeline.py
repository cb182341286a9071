"""Spark pipeline end to end: synthetic telemetry with a known ground truth ->
`analyze` -> summary.json / Parquet tables == the truth, computed here
independently with networkx from the records and the generator's paths.

One SparkSession is shared by the module; each scenario runs `analyze` once
(module-scoped fixtures) and several tests check its outputs:
A  sim.txt, links from `peers` records, lost pings, malformed lines, folder input
B  line-0050 cut in the middle and healed (topology records, 3 epochs), glob input
C  grid4-0049 with a `--topology` override, a node that never converges, via the CLI
S  the real simulator (`snakemesh sim`) on sim.txt with a crash, a restart, a partition
   and a heal, checked against networkx on its recorded paths and its own truth.json
"""
import contextlib
import glob
import io
import json
import os
import random
import subprocess
import sys

import networkx as nx
import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import telemetry_synth as ts  # noqa: E402

from host_tools import cli  # noqa: E402
from host_tools.errors import InputError  # noqa: E402

# the topologies shipped in the package (a clean clone has them; nothing outside the checkout)
from host_tools.topofiles import TOPOLOGY_DIR as TOPO  # noqa: E402

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def spark():
    from host_tools.pipeline.session import get_session
    s = get_session(small_input=True)
    yield s
    s.stop()


def approx(a, b, tol=1e-9):
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


# -- independent ground truth from the records ---------------------------------------

def topology_epochs(records, override=None):
    """[(start or None, graph on keys)], following the documented rule."""
    if override is not None:
        return [(None, override)]
    topo = {}
    for r in records:
        if r["kind"] == "topology":
            topo.setdefault(r["t"], set()).update((min(a, b), max(a, b)) for a, b, _l in r["edges"])
    if topo:
        out, prev = [], None
        for t in sorted(topo):
            if topo[t] != prev:
                g = nx.Graph()
                g.add_edges_from(topo[t])
                out.append((None if not out else t, g))
                prev = topo[t]
        return out
    g = nx.Graph()
    for r in records:
        if r["kind"] == "peers":
            for p in r["peers"]:
                g.add_edge(r["node"], p["key"])
    return [(None, g)]


def replay(records, override=None):
    epochs = topology_epochs(records, override)
    nodes = sorted(set(r["node"] for r in records) | set(n for _s, g in epochs for n in g.nodes()))
    starts = [s for s, _g in epochs[1:]]

    def ep(t):
        return sum(1 for s in starts if s <= t)

    exp, comp = [], []
    for _s, g in epochs:
        h = g.copy()
        h.add_nodes_from(nodes)
        e, c = {}, {}
        for members in nx.connected_components(h):
            prev = None
            for m in sorted(members):
                e[m] = prev
                c[m] = min(members)
                prev = m
        exp.append(e)
        comp.append(c)
    states = dict((n, []) for n in nodes)
    for r in records:
        if r["kind"] == "state":
            states[r["node"]].append((r["t"], (r["root"], r["root_seq"]), r["desc"]))
    for n in nodes:
        states[n].sort(key=lambda x: x[0])

    def rows(n, lo=None, hi=None):
        """(t, value, correct) rows of node n in [lo, hi), with the carried-in
        state at lo (and at every epoch start inside the window)."""
        st = states[n]
        cuts = [s for s in starts if (lo is None or s >= lo) and (hi is None or s < hi)]
        out = []
        for c in cuts:
            before = [x for x in st if x[0] <= c]
            if before:
                out.append((c, before[-1][1], before[-1][2]))
        for x in st:
            if (lo is None or x[0] >= lo) and (hi is None or x[0] < hi):
                out.append(x)
        out.sort(key=lambda x: x[0])
        return [(t, v, d == exp[ep(t)][n]) for t, v, d in out]

    def final_run_start(rs, pred):
        since = None
        for t, v, c in reversed(rs):
            if not pred(v, c):
                break
            since = t
        return since

    def tree_since(rs):
        final = rs[-1][1]
        return final_run_start(rs, lambda v, c: v == final)

    def snake_since(rs):
        return final_run_start(rs, lambda v, c: c) if rs[-1][2] else None

    t_start = min(r["t"] for r in records)
    t_end = max(r["t"] for r in records)
    bounds = [t_start] + starts + [None]

    def down(i):
        """no link in epoch i and no state record of its own in it"""
        lo, hi = bounds[i], bounds[i + 1]
        g = epochs[i][1]
        return set(n for n in nodes if (n not in g or g.degree(n) == 0)
                   and not any(x[0] >= lo and (hi is None or x[0] < hi) for x in states[n]))

    alive = [n for n in nodes if n not in down(len(epochs) - 1)]
    all_rows = dict((n, rows(n)) for n in nodes)
    truth = {"nodes": len(nodes)}
    if all(all_rows[n] for n in alive) and len(set(all_rows[n][-1][1] for n in alive)) == 1:
        truth["tree_converged_s"] = max(tree_since(all_rows[n]) for n in alive) - t_start
    else:
        truth["tree_converged_s"] = None
    sn = [snake_since(all_rows[n]) if all_rows[n] else None for n in alive]
    truth["snake_converged_s"] = None if None in sn else max(sn) - t_start
    truth["snake_correct_ratio_final"] = sum(1 for n in alive if all_rows[n] and all_rows[n][-1][2]) / float(len(alive))
    per_epoch = []
    for i in range(len(epochs)):
        lo, hi = bounds[i], bounds[i + 1]
        rs = dict((n, rows(n, lo if i else None, hi)) for n in nodes)
        live = [n for n in nodes if n not in down(i)]
        groups = {}
        for n in live:
            groups.setdefault(comp[i][n], []).append(n)
        tt = []
        for members in groups.values():
            if all(rs[m] for m in members) and len(set(rs[m][-1][1] for m in members)) == 1:
                tt.append(max(tree_since(rs[m]) for m in members))
            else:
                tt.append(None)
        ss = [snake_since(rs[n]) if rs[n] else None for n in live]
        per_epoch.append({
            "tree_converged_s": None if None in tt else max(max(tt), lo) - lo,
            "snake_converged_s": None if None in ss else max(max(ss), lo) - lo,
            "components": len(groups)})
    truth["epochs"] = per_epoch
    # probes
    stretch = {}
    pings = pings_ok = 0
    for r in records:
        if r["kind"] != "probe":
            continue
        if r["probe"] == "ping":
            pings += 1
            pings_ok += 1 if r["ok"] else 0
        if r["ok"] and r["hops"] is not None:
            g = epochs[ep(r["t"])][1]
            if r["src"] in g and r["dst"] in g and nx.has_path(g, r["src"], r["dst"]):
                stretch[str(r["id"])] = r["hops"] / float(nx.shortest_path_length(g, r["src"], r["dst"]))
    truth["stretch"] = stretch
    truth["ping_delivery_ratio"] = pings_ok / float(pings) if pings else None
    truth["t_end"] = t_end
    return truth


def check_against_truth(summary, out, records, gen_truth, override=None):
    rt = replay(records, override)
    # convergence: pipeline == replay (networkx on the records) == generator schedule
    for k in ("tree_converged_s", "snake_converged_s", "snake_correct_ratio_final"):
        assert approx(summary[k], rt[k], 1e-6), (k, summary[k], rt[k])
        assert approx(summary[k], gen_truth[k], 1e-6), (k, summary[k], gen_truth[k])
    assert summary["nodes"] == rt["nodes"] == gen_truth["nodes"]
    assert len(summary["epochs"]) == len(rt["epochs"])
    for got, want in zip(summary["epochs"], rt["epochs"]):
        assert got["components"] == want["components"]
        for k in ("tree_converged_s", "snake_converged_s"):
            assert approx(got[k], want[k], 1e-6), (k, got, want)
    # stretch per probe and its statistics
    pr = pd.read_parquet(os.path.join(out, "probes"))
    got = dict((str(i), s) for i, s in zip(pr["id"], pr["stretch"]) if s == s and s is not None)
    assert set(got) == set(rt["stretch"])
    for pid, s in rt["stretch"].items():
        assert approx(got[pid], s), pid
        if override is None:
            assert approx(s, gen_truth["stretch"][int(pid)]), pid
            assert len(gen_truth["paths"][int(pid)]) - 1 == int(pr[pr["id"] == pid]["hops"].iloc[0])
    vals = np.array(sorted(rt["stretch"].values()))
    assert summary["stretch_probes"] == len(vals) > 20
    assert approx(summary["stretch_mean"], float(vals.mean()))
    assert approx(summary["stretch_p50"], float(np.percentile(vals, 50)))
    assert approx(summary["stretch_p95"], float(np.percentile(vals, 95)))
    assert approx(summary["stretch_max"], float(vals.max()))
    assert summary["stretch_mean"] > 1.0  # the generator takes detours
    # delivery, counters
    assert approx(summary["ping_delivery_ratio"], rt["ping_delivery_ratio"])
    assert approx(summary["ping_delivery_ratio"], gen_truth["ping_delivery_ratio"])
    assert summary["pings"] == gen_truth["pings"] and summary["pings_ok"] == gen_truth["pings_ok"]
    assert summary["drops_by_reason"] == gen_truth["drops_by_reason"]
    assert summary["evictions"] == gen_truth["evictions"] > 0
    assert summary["evictions_by_table"] == gen_truth["evictions_by_table"]
    assert summary["verify_done"] == gen_truth["verify_done"]
    assert summary["verify_skipped"] == gen_truth["verify_skipped"]
    assert approx(summary["table_occupancy_max"], gen_truth["table_occupancy_max"])
    # per-node parent changes
    nodes = pd.read_parquet(os.path.join(out, "nodes.parquet")).set_index("node")
    for n, k in gen_truth["parent_changes"].items():
        assert nodes.at[n, "parent_changes"] == k, n
    return rt


def run_analyze(spark, inputs, out, **kw):
    from host_tools.pipeline import analyze
    return analyze(inputs, out, spark=spark, **kw)


# -- scenario A: small irregular mesh, lost pings, malformed lines, folder input -----

@pytest.fixture(scope="module")
def scen_a(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("scen_a")
    g = ts.load_topology(os.path.join(TOPO, "sim.txt"))
    # no `topology` records: the links come from the `peers` records
    recs, truth = ts.generate(g, 1, ts.Scenario(duration=40.0, ping_loss=0.1, emit_topology=False,
                                                peers_interval=5.0))
    bad, reasons = ts.corrupt(recs, random.Random(7))
    os.makedirs(str(d / "in" / "sub"))
    n1, n2 = int(len(recs) * 0.4), int(len(recs) * 0.8)
    # folder input: two JSONL files, one nested, with malformed lines inside
    # the second, and a console capture (REPL noise, replies, `@sm ` records)
    ts.write_jsonl(str(d / "in" / "a.jsonl"), recs[:n1])
    with open(str(d / "in" / "console.log"), "w") as f:
        f.write("MicroPython v1.29.0 on 2025-01-01; linux [GCC 12] version\n>>> import main\n")
        for i, r in enumerate(recs[n2:]):
            f.write("@sm " + json.dumps(r) + "\n")
            if i % 100 == 0:
                f.write('@sm {"re": "status", "ok": true, "id": %d}\n' % i)
        f.write("Traceback? no, just a log line\n")
    mixed = [json.dumps(r) for r in recs[n1:n2]]
    rng = random.Random(3)
    for line in bad:
        mixed.insert(rng.randint(0, len(mixed)), line)
    with open(str(d / "in" / "sub" / "b.jsonl"), "w") as f:
        f.write("\n".join(mixed) + "\n\n")
    s = run_analyze(spark, [str(d / "in")], str(d / "out"))
    return s, str(d / "out"), recs, truth, reasons


def test_a_headline_figures_equal_ground_truth(scen_a):
    s, out, recs, truth, _r = scen_a
    assert s["records"] == len(recs)
    assert s["tree_converged_s"] is not None and s["snake_converged_s"] is not None
    assert s["snake_correct_ratio_final"] == 1.0
    assert 0.8 < s["ping_delivery_ratio"] < 1.0
    assert s["topology_source"] == "peers" and s["input_files"] == 3 and s["console_files"] == 1
    replies = (len(recs) - int(len(recs) * 0.8) + 99) // 100
    assert s["ignored_console_lines"] == {"console_noise": 3, "console_reply": replies}
    check_against_truth(s, out, recs, truth)


def test_a_summary_json_has_required_fields(scen_a):
    s, out, _recs, _t, _r = scen_a
    with open(os.path.join(out, "summary.json")) as f:
        on_disk = json.load(f)
    for k in ("nodes", "records", "rejected_records", "tree_converged_s", "snake_converged_s",
              "snake_correct_ratio_final", "ping_delivery_ratio", "stretch_mean", "stretch_p95",
              "table_occupancy_max", "evictions"):
        assert k in on_disk and on_disk[k] == s[k], k
    assert on_disk["complete"] is True
    assert not [p for p in os.listdir(os.path.dirname(out)) if ".partial-" in p]


def test_a_malformed_lines_are_counted_and_set_aside(scen_a):
    s, out, _recs, _t, reasons = scen_a
    assert s["rejected_records"] == sum(reasons.values()) > 0
    assert s["rejected_by_reason"] == reasons
    lines = []
    for p in glob.glob(os.path.join(out, "rejects", "*.json")):
        with open(p) as f:
            lines.extend(json.loads(x) for x in f if x.strip())
    assert len(lines) == s["rejected_records"]
    got = {}
    for x in lines:
        got[x["reason"]] = got.get(x["reason"], 0) + 1
        assert x["line"] and x["source"].endswith("b.jsonl")
    assert got == reasons


def test_a_tables_and_time_series(scen_a):
    s, out, recs, _t, _r = scen_a
    # every valid record once in telemetry/, partitioned by day and kind; no rejects there
    kinds = sorted(set(r["kind"] for r in recs))
    parts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "telemetry", "day=*", "kind=*")))
    assert parts == ["kind=" + k for k in kinds]
    assert glob.glob(os.path.join(out, "telemetry", "day=1970-01-01"))
    assert glob.glob(os.path.join(out, "probes", "day=1970-01-01", "*.parquet"))
    tele = pd.read_parquet(os.path.join(out, "telemetry"))
    assert len(tele) == len(recs) == s["records"]
    for k in kinds:
        assert (tele["kind"] == k).sum() == sum(1 for r in recs if r["kind"] == k), k
    assert tele["reason"].isna().all() and tele["raw"].isna().all()
    assert sorted(tele[tele["kind"] == "state"]["t"]) == sorted(r["t"] for r in recs if r["kind"] == "state")
    probes = tele[tele["kind"] == "probe"]
    assert sum(len(p) for p in probes["path"] if p is not None) == \
        sum(len(r["path"]) for r in recs if r["kind"] == "probe" and r["path"])
    conv = pd.read_parquet(os.path.join(out, "convergence.parquet")).sort_values("t_s")
    # the series agrees with the held times: false just before, true ever after
    for flag, key in (("tree_agreed", "tree_converged_s"), ("snake_all_correct", "snake_converged_s")):
        after = conv[conv["t_s"] > s[key]]
        before = conv[conv["t_s"] <= s[key]]
        assert len(after) and after[flag].all()
        assert len(before) and not before[flag].iloc[-1]
    assert conv["snake_correct_ratio"].iloc[0] < 1.0


def test_a_anomalies(scen_a):
    _s, out, _recs, truth, _r = scen_a
    an = pd.read_parquet(os.path.join(out, "anomalies.parquet"))
    flagged = set(zip(an["node"], an["anomaly"]))
    assert (truth["flap_parent_node"], "flapping_parent") in flagged
    assert (truth["sanity_node"], "sanity_fail") in flagged
    assert not any(a == "snake_not_converged" for _n, a in flagged)


def test_a_report_renders(scen_a):
    from host_tools.pipeline.report import PLOTS, SVGS, render
    import matplotlib.image as mpimg
    _s, out, _recs, _t, _r = scen_a
    index = render(out)
    with open(index) as f:
        page = f.read()
    drawn = [png for png in PLOTS if os.path.isfile(os.path.join(out, "report", png))]
    assert {"convergence.png", "delivery.png", "stretch.png"} <= set(drawn)
    for png in drawn:
        p = os.path.join(out, "report", png)
        assert "src='%s'" % png in page
        assert os.path.getsize(p) > 10000, png
        img = mpimg.imread(p)
        assert img.shape[0] > 200 and img.shape[1] > 300
        assert float(img[..., :3].std()) > 0.05, png  # not a blank canvas
    for svg in SVGS:
        assert os.path.getsize(os.path.join(out, "report", svg)) > 10000, svg
    assert "id='verdict'" in page and "id='nodes'" in page
    assert "all figures from summary.json" in page
    assert "n/a" not in page.split("all figures from summary.json")[1].split("</table>")[0]


# -- scenario B: a line cut in the middle and healed; glob input ---------------------

@pytest.fixture(scope="module")
def scen_b(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("scen_b")
    g = ts.load_topology(os.path.join(TOPO, "line-0050.txt"))
    cut = ts.middle_cut(g)
    sc = ts.Scenario(duration=75.0, partition=(26.0, 46.0, cut), ping_interval=2.0, trace_interval=4.0,
                     flap_desc=True, restart=False)
    recs, truth = ts.generate(g, 2, sc)
    by_node = {}
    for r in recs:
        by_node.setdefault(r["node"], []).append(r)
    for i, (n, rs) in enumerate(sorted(by_node.items())):  # one file per node, like `monitor`
        ts.write_jsonl(str(d / ("node-%02d.jsonl" % i)), rs)
    s = run_analyze(spark, [str(d / "node-*.jsonl")], str(d / "out"), bucket=2.0)
    return s, str(d / "out"), recs, truth


def test_b_partition_and_heal_equal_ground_truth(scen_b):
    s, out, recs, truth = scen_b
    assert s["input_files"] == 50 and s["rejected_records"] == 0
    rt = check_against_truth(s, out, recs, truth)
    assert len(s["epochs"]) == 3
    assert [e["components"] for e in s["epochs"]] == [1, 2, 1]
    assert s["epochs"][1]["tree_converged_s"] is not None  # each half agrees on its own root
    assert s["epochs"][1]["tree_converged_s"] > 0
    # after the heal the whole line converges again, later than the heal
    assert s["tree_converged_s"] >= 46.0 and s["snake_converged_s"] >= 46.0
    assert all(e["tree_converged_s"] is not None and e["snake_converged_s"] is not None for e in s["epochs"])
    assert rt["epochs"][2]["snake_converged_s"] is not None
    assert s["bucket_s"] == 2.0
    # pings across the cut failed during the partition
    pr = pd.read_parquet(os.path.join(out, "probes"))
    assert (~pr[(pr["t"] >= 26.0) & (pr["t"] < 46.0)]["ok"]).sum() > 0
    # re-parenting caused by the topology changes is not flapping
    an = pd.read_parquet(os.path.join(out, "anomalies.parquet"))
    assert set(an["anomaly"]) <= {"flapping_parent", "sanity_fail"}, set(an["anomaly"])


# -- scenario C: grid, --topology override (names mapped), a node that never converges

@pytest.fixture(scope="module")
def scen_c(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("scen_c")
    g = ts.load_topology(os.path.join(TOPO, "grid4-0049.txt"))
    recs, truth = ts.generate(g, 3, ts.Scenario(duration=30.0, stuck=True, flap_parent=False))
    ts.write_jsonl(str(d / "run.jsonl"), recs)
    # the override adds chords, so shortest paths (and stretch) differ from the grid's
    h = g.copy()
    names = sorted(g.nodes(), key=int)
    extra = [(names[i], names[-1 - i]) for i in range(0, 12, 3)]
    h.add_edges_from(extra)
    with open(str(d / "override.txt"), "w") as f:
        for a, b in sorted(h.edges()):
            f.write("%s %s\n" % (a, b))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["analyze", str(d / "run.jsonl"), "--out", str(d / "out"), "--topology",
                       str(d / "override.txt"), "--report", "-q"])
    assert rc == 0
    with open(str(d / "out" / "summary.json")) as f:
        s = json.load(f)
    keyed = nx.relabel_nodes(h, truth["keys"])
    return s, str(d / "out"), recs, truth, keyed, buf.getvalue()


def test_c_topology_override_and_stuck_node(scen_c):
    s, out, recs, truth, keyed, _stdout = scen_c
    assert s["topology_source"] == "file"
    assert s["topology_links"] == keyed.number_of_edges()
    rt = check_against_truth(s, out, recs, truth, override=keyed)
    assert rt["snake_converged_s"] is None and s["snake_converged_s"] is None
    assert s["snake_correct_ratio_final"] == (truth["nodes"] - 1) / float(truth["nodes"])
    # stretch really uses the override: differs from the grid's for some probe
    plain = replay(recs)
    assert any(abs(plain["stretch"][k] - v) > 1e-9 for k, v in rt["stretch"].items())
    an = pd.read_parquet(os.path.join(out, "anomalies.parquet"))
    assert list(an[an["anomaly"] == "snake_not_converged"]["node"]) == [truth["stuck_node"]]


def test_c_cli_prints_summary_and_writes_report(scen_c):
    s, out, _recs, _truth, _keyed, stdout = scen_c
    assert "snake converged at n/a" in stdout and "nodes 49, records %d" % s["records"] in stdout
    assert "report: " + os.path.join(out, "report", "index.html") in stdout
    assert "(root)" in open(os.path.join(out, "report", "tree.svg")).read()


# -- scenario S: the real virtual-time simulator (`snakemesh sim`) -------------------------

SIM_SCENARIO = """\
2  ping-set 10 interval=2 count=25 timeout=3
3  dgram-set 6 interval=3 count=15 size=1500
20 crash c
26 restart c
32 partition a b e f
44 heal
"""


@pytest.fixture(scope="module")
def scen_sim(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("scen_sim")
    (d / "scenario.txt").write_text(SIM_SCENARIO)
    res = subprocess.run([sys.executable, "-m", "host_tools.cli", "sim", "--topology",
                          os.path.join(TOPO, "sim.txt"), "--duration", "75", "--seed", "5",
                          "--scenario", str(d / "scenario.txt"), "--out", str(d / "sim"), "-q"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    with open(str(d / "sim" / "telemetry.jsonl")) as f:
        recs = [json.loads(line) for line in f]
    with open(str(d / "sim" / "truth.json")) as f:
        truth = json.load(f)
    # the simulator's output folder as it is (telemetry.jsonl beside topology.txt
    # and truth.json), through the CLI with --report (issue 16)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["analyze", str(d / "sim"), "--out", str(d / "out"), "--report", "-q"])
    assert rc == 0
    with open(str(d / "out" / "summary.json")) as f:
        s = json.load(f)
    return s, str(d / "out"), recs, truth


def test_sim_results_equal_ground_truth(scen_sim):
    s, out, recs, truth = scen_sim
    assert s["rejected_records"] == 0 and s["records"] == len(recs)
    assert s["nodes"] == len(truth["nodes"]) == 26
    rt = replay(recs)
    for k in ("tree_converged_s", "snake_converged_s", "snake_correct_ratio_final"):
        assert approx(s[k], rt[k], 1e-6), (k, s[k], rt[k])
    assert len(s["epochs"]) == len(rt["epochs"]) >= 5  # crash, restart, partition, heal
    for got, want in zip(s["epochs"], rt["epochs"]):
        assert got["components"] == want["components"]
        for k in ("tree_converged_s", "snake_converged_s"):
            assert approx(got[k], want[k], 1e-6), (k, got, want)
    # stretch from the simulator's recorded paths and networkx on the topology in force
    key_epochs = topology_epochs(recs)
    starts = [t for t, _g in key_epochs[1:]]
    pr = pd.read_parquet(os.path.join(out, "probes"))
    got = dict((str(i), x) for i, x in zip(pr["id"], pr["stretch"]) if x == x and x is not None)
    want = {}
    for p in truth["probes"]:
        if p["ok"]:
            g = key_epochs[sum(1 for t in starts if t <= p["t"])][1]
            path = p["path_keys"]
            assert all(g.has_edge(a, b) for a, b in zip(path, path[1:]))
            want[str(p["id"])] = (len(path) - 1) / float(nx.shortest_path_length(g, path[0], path[-1]))
    assert set(got) == set(want) and len(want) > 100
    for k, v in want.items():
        assert approx(got[k], v), k
    vals = np.array(list(want.values()))
    assert approx(s["stretch_mean"], float(vals.mean()))
    assert approx(s["stretch_p95"], float(np.percentile(vals, 95)))
    assert approx(s["ping_delivery_ratio"], truth["summary"]["probes_ok"] / float(truth["summary"]["probes"]))
    # application datagrams (acked, some across the crash and the partition)
    dg = truth["datagrams"]
    assert len(dg) == 90 and s["datagrams"] == 90
    assert approx(s["app_delivery_ratio"], sum(1 for d in dg if d["state"] == "delivered") / 90.0)
    rtts = np.array([d["rtt_ms"] for d in dg if d["state"] == "delivered"])
    assert 0 < len(rtts) < 90 or len(rtts) == 90
    assert approx(s["ack_latency_ms_p50"], float(np.percentile(rtts, 50)), 1e-3)
    assert approx(s["ack_latency_ms_p95"], float(np.percentile(rtts, 95)), 1e-3)
    assert s["ping_delivery_ratio"] < 1.0  # pings across the partition and to the crashed node fail


def test_sim_folder_side_files_are_used_not_read_as_telemetry(scen_sim):
    s, out, recs, truth = scen_sim
    assert s["input_files"] == 1 and s["rejected_records"] == 0 and s["skipped_files"] == []
    gt = s["ground_truth"]
    assert gt["source"].endswith("truth.json") and gt["nodes"] == 26
    assert gt["delivery_ratio"] == truth["summary"]["delivery_ratio"]
    assert gt["converged_at_end"] == truth["summary"]["converged_at_end"]
    with open(os.path.join(out, "nodes.json")) as f:
        rows = json.load(f)["nodes"]
    names = dict((k, n) for n, k in truth["nodes"].items())
    assert sorted(r["name"] for r in rows) == sorted(names.values())
    assert all(r["name"] == names[r["node"]] for r in rows)
    assert os.path.isfile(os.path.join(out, "report", "index.html"))
    with open(os.path.join(out, "report", "index.html")) as f:
        html = f.read()
    assert "application datagrams" in html and "of 90 acked datagrams delivered" in html


def test_sim_convergence_matches_the_simulators_own_truth(scen_sim):
    """The simulator checks convergence on the routers every 250 ms; the
    telemetry samples state every 1 s, so each time the pipeline finds is the
    first sample at or after the simulator's (within a sample interval)."""
    s, _out, _recs, truth = scen_sim
    conv = truth["convergence"]
    last = conv["transitions"][-1]
    assert last["converged"] is True
    both = max(s["tree_converged_s"], s["snake_converged_s"])
    assert last["t"] - 0.25 <= both <= last["t"] + 1.25, (both, last)
    assert s["epochs"][1]["nodes_down"] == 1  # the crashed node
    for ev in conv["events"]:
        ep = [e for e in s["epochs"] if abs(e["start_s"] - ev["t"]) < 0.5]
        assert len(ep) == 1, ev
        ep = ep[0]
        # the pipeline sees a reconvergence at the first state sample (1 s apart)
        # at or after the simulator's time; a sample that falls at or after the
        # epoch's end belongs to the next epoch, so near the end either answer is right
        seen = None if ev["reconverged_s"] is None else ev["t"] + ev["reconverged_s"]
        missing = ep["snake_converged_s"] is None or ep["tree_converged_s"] is None
        if seen is not None and seen + 1.0 < ep["end_s"]:
            assert not missing, (ev, ep)
        if not missing:
            assert seen is not None and seen < ep["end_s"], (ev, ep)
            both = max(ep["tree_converged_s"], ep["snake_converged_s"])
            assert ev["reconverged_s"] - 0.25 <= both <= ev["reconverged_s"] + 1.25, (ev, ep)


# -- bad input that needs Spark to notice ------------------------------------------------

def test_file_without_valid_records_is_an_error(spark, tmp_path):
    p = tmp_path / "cut.jsonl"
    p.write_text('{"v":1,"kind":"state","t":1.0,"no\n{"v":1,"ki\n')
    good = tmp_path / "good.jsonl"
    ts.write_jsonl(str(good), ts.generate(ts.load_topology(os.path.join(TOPO, "sim.txt")), 9,
                                          ts.Scenario(duration=5.0))[0])
    with pytest.raises(InputError) as e:
        run_analyze(spark, [str(good), str(p)], str(tmp_path / "out"))
    assert "cut.jsonl" in e.value.message and "no valid telemetry records" in e.value.message
    assert e.value.message.startswith(str(p) + ": ")      # a path, not `///...` (issue 16)
    assert not os.path.exists(str(tmp_path / "out"))
    assert not [x for x in os.listdir(str(tmp_path)) if "partial" in x]


def test_existing_unrelated_folder_is_not_overwritten(spark, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    src = tmp_path / "t.jsonl"
    src.write_text('{"v":1,"kind":"event","t":0.5,"node":"%s","event":"peer_up","detail":""}\n' % ("ab" * 32))
    with pytest.raises(InputError):
        run_analyze(spark, [str(src)], str(out))
    assert (out / "precious.txt").read_text() == "keep me"


# -- scenario D: monitor-like capture: no topology records, counters with the
#    issue 14/15 fields (tx_bytes, capacity), state `profile`, `port` --------------------

@pytest.fixture(scope="module")
def scen_d(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("scen_d")
    g = ts.load_topology(os.path.join(TOPO, "sim.txt"))
    sc = ts.Scenario(duration=150.0, emit_topology=False, peers_interval=5.0, control=True, capacity=True,
                     profile="ESP32_GENERIC", port=True)
    recs, truth = ts.generate(g, 4, sc)
    ts.write_jsonl(str(d / "capture.jsonl"), recs)
    s = run_analyze(spark, [str(d / "capture.jsonl")], str(d / "out"))
    return s, str(d / "out"), recs, truth


def test_d_control_bytes_steady_state(scen_d):
    s, _out, recs, truth = scen_d
    assert s["snake_converged_s"] is not None
    t0 = min(r["t"] for r in recs)
    start = t0 + s["snake_converged_s"] + 30.0
    mean, rates, types = ts.control_truth(truth, start)
    assert len(rates) == 26 and mean > 0
    w = s["control_bytes_window"]
    assert w["basis"] == "snake_converged+30s" and w["nodes"] == 26
    assert approx(w["start_s"], s["snake_converged_s"] + 30.0)
    assert approx(s["control_bytes_per_node_s"], mean)
    busiest = max(rates, key=lambda n: rates[n])
    assert s["control_bytes_busiest"]["node"] == busiest
    assert approx(s["control_bytes_busiest"]["bytes_per_s"], rates[busiest])
    assert set(s["control_bytes_by_type"]) == set(types) == set(ts.FRAME_TYPES) - {"traffic"}
    for k, v in types.items():
        assert approx(s["control_bytes_by_type"][k], v), k
    # the restarted node's counters reset: counted as a new series, not as a negative increase
    with open(os.path.join(_out, "nodes.json")) as f:
        rows = dict((r["node"], r) for r in json.load(f)["nodes"])
    assert rows[truth["restart_node"]]["restarts"] == 1
    assert approx(rows[busiest]["control_bytes_per_s"], rates[busiest])


def test_d_capacity_warnings(scen_d):
    s, _out, _recs, truth = scen_d
    want = [dict(w, name=None) for w in truth["capacity_warnings"]]   # no topology records: no names
    assert s["capacity_warnings"] == want
    assert set((w["node"], w["table"]) for w in want) == {
        (truth["capacity_nodes"]["routes"], "routes"), (truth["capacity_nodes"]["peers"], "peers")}


def test_d_nodes_json_for_the_dashboard(scen_d):
    """nodes.json: one row per node, absent values are null (JSON), never NaN:
    a `monitor` capture has no names (issue 16: the report labelled such
    nodes "nan")."""
    s, out, recs, truth = scen_d
    with open(os.path.join(out, "nodes.json")) as f:
        text = f.read()
    assert "NaN" not in text
    doc = json.loads(text)
    rows = doc["nodes"]
    assert len(rows) == s["nodes"] == 26
    ports = dict((r["node"], r["port"]) for r in recs)
    last_peers = dict((r["node"], r["peers"]) for r in recs if r["kind"] == "state")
    for r in rows:
        assert r["name"] is None
        assert r["profile"] == "ESP32_GENERIC"
        assert r["port"] == ports[r["node"]]
        assert r["snake_ok"] is True and r["root_ok"] is True and r["down_at_end"] is False
        assert r["silent_s"] is not None and r["silent_s"] < 10
        assert r["peers"] == last_peers[r["node"]] >= 1
        assert sum(r["links"].values()) == r["peers"]
        assert r["drops_total"] == sum(r["drops"].values())
        assert r["rx_total"] > 0 and r["mem_free"] is not None
        assert set(r["capacity"]) == {"routes", "peers", "depth"}
    drops = {}
    for r in rows:
        for k, v in r["drops"].items():
            drops[k] = drops.get(k, 0) + v
    assert drops == truth["drops_by_reason"] == s["drops_by_reason"]
    warned = set((r["node"], t) for r in rows for t in r["capacity_warnings"])
    assert warned == set((w["node"], w["table"]) for w in s["capacity_warnings"])
    flagged = [r["node"] for r in rows if "flapping_parent" in r["anomalies"]]
    assert flagged == [truth["flap_parent_node"]]


# -- fleet days: a folder of daily files (glob input), output partitioned by day ---------

def test_fleet_days_daily_files_in_day_partitions(spark, tmp_path):
    """Three days of telemetry from the same boards (host clock, as `monitor`
    writes it), one file per day in a folder per day, named by a glob: every
    record lands once in its day's partition of telemetry/ and probes/, and
    the summary covers the three days."""
    g = ts.load_topology(os.path.join(TOPO, "sim.txt"))
    recs, _truth = ts.generate(g, 5, ts.Scenario(duration=20.0, peers_interval=5.0))
    day0 = 1763856000.0    # 2025-11-23 00:00 UTC
    days = ["2025-11-23", "2025-11-24", "2025-11-25"]
    for i, day in enumerate(days):
        shifted = [dict(r, t=r["t"] + day0 + i * 86400.0 + 3600.0 * (i + 1)) for r in recs]
        os.makedirs(str(tmp_path / "fleet" / day))
        ts.write_jsonl(str(tmp_path / "fleet" / day / "telemetry.jsonl"), shifted)
    # a file of another day that the glob does not name is not read
    os.makedirs(str(tmp_path / "fleet" / "notes"))
    ts.write_jsonl(str(tmp_path / "fleet" / "notes" / "other.jsonl"), recs[:10])
    out = str(tmp_path / "out")
    s = run_analyze(spark, [str(tmp_path / "fleet" / "2025-*" / "telemetry.jsonl")], out)
    assert s["input_files"] == 3 and s["records"] == 3 * len(recs)
    assert approx(s["t_start"], min(r["t"] for r in recs) + day0 + 3600.0)
    assert approx(s["t_end"], max(r["t"] for r in recs) + day0 + 2 * 86400.0 + 3 * 3600.0)
    tele_days = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "telemetry", "day=*")))
    assert tele_days == ["day=" + d for d in days]
    probe_days = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "probes", "day=*")))
    assert probe_days == ["day=" + d for d in days]
    tele = pd.read_parquet(os.path.join(out, "telemetry"))
    kinds = sorted(set(r["kind"] for r in recs))
    for day in days:
        t_day = tele[tele["day"].astype(str) == day]
        assert len(t_day) == len(recs), day
        for k in kinds:
            assert (t_day["kind"].astype(str) == k).sum() == sum(1 for r in recs if r["kind"] == k), (day, k)
    n_probes = sum(1 for r in recs if r["kind"] == "probe")
    pr = pd.read_parquet(os.path.join(out, "probes"))
    assert len(pr) == 3 * n_probes
    assert sorted(pr["day"].astype(str).unique()) == days


# -- R: a hub refuses a link (ports full): sim's truth and analyze agree ------------------------

@pytest.fixture(scope="module")
def scen_refused(spark, tmp_path_factory):
    """h has 3 links and 2 ports: one link never comes up and the mesh ends
    in two components, each converged on its own root; nodes run three
    profiles from a profile map (b is made the root by its keys)."""
    d = tmp_path_factory.mktemp("scen_refused")
    from host_tools import BOARDS_DIR
    with open(os.path.join(BOARDS_DIR, "UNIX", "profile.json")) as f:
        prof = json.load(f)
    prof.update(name="TINY", max_peers=2)
    (d / "tiny.json").write_text(json.dumps(prof))
    (d / "star.txt").write_text("h a\nh b\nh c\nc d\n")
    (d / "profiles.txt").write_text("b GATEWAY root\nd ESP32_GENERIC\n")
    res = subprocess.run([sys.executable, "-m", "host_tools.cli", "sim", "--topology", str(d / "star.txt"),
                          "--profile", str(d / "tiny.json"), "--profile-map", str(d / "profiles.txt"),
                          "--duration", "30", "--seed", "3", "--out", str(d / "sim"), "-q"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "1 of 4 links refused" in res.stdout
    with open(str(d / "sim" / "truth.json")) as f:
        truth = json.load(f)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["analyze", str(d / "sim"), "--out", str(d / "out"), "-q"])
    assert rc == 0
    with open(str(d / "out" / "summary.json")) as f:
        s = json.load(f)
    return s, buf.getvalue(), truth


def test_refused_links_sim_truth_and_analyze_agree(scen_refused):
    s, text, truth = scen_refused
    ts_ = truth["summary"]
    assert ts_["links_refused"] == 1 and ts_["converged_at_end"] is True
    assert s["topology_links_configured"] == 4 and s["topology_links"] == 3
    assert s["components_at_end"] == 2
    assert s["snake_correct_ratio_final"] == ts_["snake_correct_ratio_final"] == 1.0
    # the pipeline samples state every 1 s, the simulator checks every 250 ms
    both = max(s["tree_converged_s"], s["snake_converged_s"])
    assert ts_["converged_s"] - 0.25 <= both <= ts_["converged_s"] + 1.25, (both, ts_)
    assert "judged on the 3 links up at the end (1 of the topology's 4 did not come up" in text
    assert "simulator's truth: converged at" in text
    assert s["profiles"] == {"ESP32_GENERIC": 1, "GATEWAY": 1, "TINY": 3}
    assert "profiles: 3 TINY, 1 ESP32_GENERIC, 1 GATEWAY" in text
