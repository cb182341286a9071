"""The report as an operator's dashboard: the health verdict's rules, the
per-node table, names that are never "nan", the drawings, and the page as a
real browser shows it (headless Chromium: DOM text and a screenshot).

Rules are checked two ways: on hand-made summary/rows (each threshold on
both sides, no Spark), and end to end on synthetic telemetry
(bench/telemetry_synth.py) through `analyze` + `report`:
H  a 4x4 grid with nothing wrong: healthy, every node healthy
F  the same grid as a monitor capture (no topology records, so no names and
   no truth) with a node stuck on a wrong descending key, 10% ping loss,
   noisy problem drops, a restart, a flapping parent, a sanity_fail, and a
   node that sends no state record: degraded, the stuck node first and red.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import networkx as nx
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import telemetry_synth as ts  # noqa: E402

from host_tools.pipeline import health, topo_svg  # noqa: E402

pytest.importorskip("pyspark")

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]


# -- hand-made telemetry figures: every threshold on both sides ----------------------

def _row(i, **kw):
    r = {"node": "%02x" % i + "ab" * 31, "name": "n%d" % i, "records": 50, "state_records": 20,
         "root": "ff" * 32, "root_seq": 1, "root_ok": True, "snake_ok": True, "down_at_end": False,
         "drops": {}, "rx_total": 1000, "anomalies": [], "mem_free_min": 60000,
         "capacity": {"routes": {"used": 9, "capacity": 64, "max_used": 12, "refused": 0}}}
    r.update(kw)
    return r


def _summary(**kw):
    s = {"nodes": 20, "records": 1000, "rejected_records": 0, "pings": 100, "pings_ok": 100,
         "ping_delivery_ratio": 1.0, "epochs": [{"tree_converged_s": 2.0, "snake_converged_s": 3.0}],
         "drops_by_reason": {}, "capacity_warnings": []}
    s.update(kw)
    return s


def judge(rows, **summary):
    s = _summary(**summary)
    rows = health.judge_nodes(copy.deepcopy(rows), s)
    level, reasons = health.verdict(s, rows)
    return level, dict((x["code"], x["level"]) for x in reasons), rows


def test_verdict_healthy_mesh_and_expected_full_caches_do_not_count():
    rows = [_row(i) for i in range(20)]
    # a signature cache that runs full and evicts a lot, and routine drops, on every node
    level, codes, rows = judge(rows, occupancy_by_table={"sigcache": {"max": 64, "capacity": 64, "max_ratio": 1.0}},
                               evictions_by_table={"sigcache": 1213},
                               drops_by_reason={"wakeup_dup": 5000, "watermark": 30, "hop_limit": 12})
    assert level == "healthy", codes
    assert all(r["status"] == "healthy" for r in rows)
    for code in ("tree", "snake", "delivery", "drops", "capacity", "heap"):
        assert codes[code] == "healthy", (code, codes)


@pytest.mark.parametrize("counts,expect,named", [
    ({"hs_source_limit": 45000, "hs_evicted": 60}, "degraded", "handshake slots"),
    ({"rx_stall": 40, "rx_slow": 12}, "degraded", "receive buffers"),
    ({"wakeup_budget": 5000, "relay_shed": 30}, "degraded", "wakeup storm"),
    ({"rx_stall": 3}, "note", "receive buffers"),
    ({}, None, None)])
def test_verdict_names_an_attack_from_the_defence_counters(counts, expect, named):
    rows = [_row(i) for i in range(20)]
    rows[3]["defence"] = dict(counts)
    s = _summary(defence_by_kind=dict(counts))
    rows = health.judge_nodes(copy.deepcopy(rows), s)
    level, reasons = health.verdict(s, rows)
    att = [x for x in reasons if x["code"] == "attack"]
    if expect is None:
        assert not att and level == "healthy"
        return
    assert len(att) == 1 and att[0]["level"] == expect, att
    assert named in att[0]["text"] and att[0]["nodes"] == [rows_node(3)], att
    assert level == ("degraded" if expect == "degraded" else "healthy")


def rows_node(i):
    return _row(i)["node"]


@pytest.mark.parametrize("ratio,pings,expect", [
    (0.96, 100, "healthy"), (0.95, 100, "healthy"), (0.94, 100, "degraded"), (0.80, 100, "degraded"),
    (0.79, 100, "broken"), (0.0, 9, "note")])
def test_verdict_ping_delivery_thresholds(ratio, pings, expect):
    ok = int(round(ratio * pings))
    level, codes, _r = judge([_row(i) for i in range(20)], pings=pings, pings_ok=ok,
                             ping_delivery_ratio=ok / float(pings))
    assert codes["delivery"] == expect
    assert level == (expect if expect != "note" else "healthy")


def test_verdict_snake_tree_and_lost_nodes():
    rows = [_row(i) for i in range(20)]
    rows[3]["snake_ok"] = False
    level, codes, judged = judge(rows)
    assert (level, codes["snake"]) == ("degraded", "degraded")       # 1 of 20 = 5% < 10%
    assert judged[3]["status"] == "broken" and health.sort_worst_first(judged)[0]["node"] == rows[3]["node"]
    rows[4]["snake_ok"] = False
    assert judge(rows)[1]["snake"] == "broken"                        # 2 of 20 = 10%
    rows = [_row(i) for i in range(20)]
    rows[7]["root_ok"] = False
    level, codes, _j = judge(rows)
    assert (level, codes["tree"]) == ("broken", "broken")
    rows = [_row(i) for i in range(20)]
    assert judge(rows, epochs=[{"tree_converged_s": None}])[1]["tree"] == "broken"
    rows[0]["down_at_end"] = True
    rows[1]["anomalies"] = ["silent"]
    level, codes, judged = judge(rows)
    assert (level, codes["lost"]) == ("degraded", "degraded")
    assert judged[0]["status"] == judged[1]["status"] == "broken"
    for r in rows[2:5]:
        r["down_at_end"] = True
    assert judge(rows)[1]["lost"] == "broken"                         # 5 of 20 = 25%


def test_verdict_drops_heap_capacity_restart_unknown():
    rows = [_row(i) for i in range(20)]
    rows[2]["drops"] = {"no_route": 25, "wakeup_dup": 900}           # 2.5% of 1000 received
    rows[3]["drops"] = {"queue_full": 9}                               # under the minimum count
    rows[4]["mem_free_min"] = 12000
    rows[5]["restarts"] = 1
    level, codes, judged = judge(rows, drops_by_reason={"no_route": 25, "queue_full": 9, "wakeup_dup": 900},
                                 capacity_warnings=[{"node": rows[6]["node"], "table": "routes", "used": 64,
                                                     "capacity": 64, "refused": 3}])
    assert level == "degraded"
    assert codes["drops"] == codes["heap"] == codes["capacity"] == codes["restart"] == "degraded"
    st = dict((r["node"], r["status"]) for r in judged)
    assert [st[rows[i]["node"]] for i in range(2, 8)] == ["degraded", "healthy", "degraded", "degraded",
                                                          "degraded", "healthy"]
    # mesh-wide problem drops over 10% of what was received: broken
    for r in rows:
        r["drops"] = {"bad_signature": 150}
    assert judge(rows, drops_by_reason={"bad_signature": 3000})[1]["drops"] == "broken"
    # a node without a state record is unknown, not healthy and not broken
    rows = [_row(i) for i in range(20)]
    rows[9].update(state_records=0, root=None, root_ok=None, snake_ok=None, depth=None)
    level, codes, judged = judge(rows)
    assert (level, codes["unknown"], judged[9]["status"]) == ("degraded", "degraded", "unknown")
    # no data at all
    assert health.verdict(_summary(), [])[0] == "broken"


def test_capacity_warnings_come_from_the_summary_only():
    rows = [_row(i) for i in range(4)]
    # a full signature cache in a node's figures never makes a warning; the
    # contract-2 rule is analyze's (summary.json capacity_warnings)
    rows[3]["capacity"] = {"routes": {"used": 3, "capacity": 64, "max_used": 3, "refused": 0}}
    rows[3]["occupancy"] = {"sigcache": {"used": 64, "capacity": 64, "max_used": 64}}
    level, codes, judged = judge(rows)
    assert level == "healthy" and codes["capacity"] == "healthy"
    warn = [{"node": rows[1]["node"], "name": "n1", "table": "peers", "used": 16, "capacity": 16, "refused": 2}]
    # refusals while the mesh lost something (here: delivery) degrade
    level, codes, judged = judge(rows, capacity_warnings=warn, pings=100, pings_ok=90, ping_delivery_ratio=0.9)
    assert (level, codes["capacity"]) == ("degraded", "degraded")
    assert [r["status"] for r in judged] == ["healthy", "degraded", "healthy", "healthy"]
    assert judged[1]["issues"][0]["text"] == "peers table 16/16, 2 refused while ping delivery is 90.0%"
    s = _summary()
    del s["capacity_warnings"]
    assert health.capacity_warnings(s) == []
    rows = [_row(i) for i in range(4)]
    assert dict((x["code"], x["level"]) for x in health.verdict(s, health.judge_nodes(rows, s))[1])["capacity"] \
        == "note"


def test_capacity_is_judged_by_what_it_did_to_the_mesh():
    """A mesh sized to its profile (the rgg:250 ESP32_GENERIC run): peers
    tables full on many nodes, some refused entries, 100% delivery and a
    correct snake. That is healthy; the refusals are shown, worst first."""
    rows = [_row(i) for i in range(20)]
    full = [{"node": rows[i]["node"], "name": "n%d" % i, "table": "peers", "used": 8, "capacity": 8, "refused": 0}
            for i in range(0, 12)]
    level, codes, judged = judge(rows, capacity_warnings=full)
    assert (level, codes["capacity"]) == ("healthy", "healthy"), codes
    assert all(r["status"] == "healthy" for r in judged)
    reasons = health.verdict(_summary(capacity_warnings=full), judged)[1]
    assert [x["text"] for x in reasons if x["code"] == "capacity"] == ["peers table full on 12 nodes, nothing refused"]
    # some of them refused entries; nothing was lost: still healthy, most refused named first
    refusing = [dict(w, refused=(9 if i == 6 else 2 if i == 3 else 0)) for i, w in enumerate(full)]
    for i, w in enumerate(refusing):
        rows[i]["capacity"] = {"peers": {"used": 8, "capacity": 8, "max_used": 8, "refused": w["refused"]}}
    level, codes, judged = judge(rows, capacity_warnings=refusing, snake_correct_ratio_final=1.0)
    assert (level, codes["capacity"]) == ("healthy", "healthy"), codes
    reasons = health.verdict(_summary(capacity_warnings=refusing), judged)[1]
    text = [x["text"] for x in reasons if x["code"] == "capacity"][0]
    assert text.startswith("peers table refused 11 entries on 2 nodes (n6, n3)"), text
    # worst first is by severity: n6 (9 refused) before n3 (2) before n0 (0), not by name
    order = [r["name"] for r in health.sort_worst_first(judged)]
    assert order.index("n6") < order.index("n3") < order.index("n0"), order
    # the same refusals with routes lost to full tables: degraded
    level, codes, judged = judge(rows, capacity_warnings=refusing, drops_by_reason={"route_table_full": 40})
    assert codes["capacity"] == "degraded"
    # ... or with a snake that is not right at the end
    level, codes, judged = judge(rows, capacity_warnings=refusing, snake_correct_ratio_final=0.9)
    assert codes["capacity"] == "degraded"


def test_a_capture_of_a_settled_mesh_says_it_was_already_converged():
    rows = [_row(i) for i in range(5)]
    s = _summary(epochs=[{"tree_converged_s": 0.03, "snake_converged_s": 0.03}], tree_agreed_from_start=True,
                 snake_correct_from_start=True)
    level, reasons = health.verdict(s, health.judge_nodes(copy.deepcopy(rows), s))
    texts = dict((x["code"], x["text"]) for x in reasons)
    assert texts["tree"] == "spanning tree already agreed when recording began, and held"
    assert "already when recording began" in texts["snake"] and "0.03" not in texts["snake"]
    # a run that converged during the recording keeps its time
    s = _summary(epochs=[{"tree_converged_s": 2.5, "snake_converged_s": 3.0}], tree_agreed_from_start=False)
    texts = dict((x["code"], x["text"]) for x in health.verdict(s, health.judge_nodes(copy.deepcopy(rows), s))[1])
    assert texts["tree"] == "spanning tree agreed 2.50 s after the start"


def test_epoch_table_collapses_bursts_that_never_converged():
    from host_tools.pipeline import report
    ep = [{"epoch": i, "start_s": i * 0.004, "end_s": (i + 1) * 0.004, "components": 1, "links": 905 - i,
           "nodes_down": 0, "tree_converged_s": None, "snake_converged_s": None} for i in range(116)]
    ep.append({"epoch": 116, "start_s": 0.464, "end_s": 120.0, "components": 1, "links": 763, "nodes_down": 0,
               "tree_converged_s": 2.5, "snake_converged_s": 15.5})
    rows = report._epoch_rows(ep)
    assert rows == [("0-115 (116)", 0.0, 0.464, 1, "790-905", 0, "not in this epoch", "not in this epoch"),
                    ("116", 0.464, 120.0, 1, 763, 0, 2.5, 15.5)]


def test_every_tcp_link_is_wifi_in_the_drawings_and_the_node_table():
    from host_tools import render
    assert [render.link_label(k) for k in ("wifi", "remote", "bonjour", "ble", None)] == \
        ["Wi-Fi", "Wi-Fi", "Wi-Fi", "BLE", "unknown"]
    keys = ["%02x" % i * 32 for i in (1, 2, 3)]
    rows = [dict(_row(0), node=keys[0], parent=None), dict(_row(1), node=keys[1], parent=keys[0]),
            dict(_row(2), node=keys[2], parent=keys[0])]
    s = _summary()
    health.judge_nodes(rows, s)
    svg = topo_svg.tree_svg(rows, [(keys[0], keys[1], "remote"), (keys[0], keys[2], "ble")])
    assert "(Wi-Fi link)" in svg and "(BLE link)" in svg and "remote" not in svg
    assert topo_svg.LINKS["wifi"][0] in svg
    assert "other link" not in topo_svg.legend_html()
    from host_tools.pipeline import report
    rows[1]["links"] = {"remote": 2, "ble": 1}
    for r in rows:
        r["short"] = r["node"][:8]
    html = report._node_table(rows, report._node_columns(rows), dict((r["node"], r) for r in rows), "nodes")
    assert "BLE 1, Wi-Fi 2" in html and "remote" not in html


def test_names_short_keys_and_nan():
    keys = ["ab" * 32, "ab" * 4 + "cd" * 28, "ff" * 32]
    sk = health.short_keys(keys)
    assert sk[keys[2]] == "ff" * 4 and len(sk[keys[0]]) == 9 and len(sk[keys[1]]) == 9
    assert len(set(sk.values())) == 3
    for bad in (float("nan"), None, "", "  "):
        assert health.clean_name(bad) is None
    assert health.label({"node": keys[2], "name": None, "short": "ffffffff"}) == "ffffffff"


def test_load_nodes_reads_nodes_json_and_survives_junk(tmp_path):
    rows = [{"node": "aa" * 32, "name": float("nan"), "drops": None, "anomalies": "silent,flapping_root"},
            {"node": "bb" * 32, "name": "bravo", "profile": "ESP32_GENERIC", "links": {"ble": 1}},
            "junk", {"name": "no key"}]
    (tmp_path / "nodes.json").write_text(json.dumps({"version": 1, "nodes": rows}))
    got = health.load_nodes(str(tmp_path), {})
    assert [health.label(r) for r in got] == ["aaaaaaaa", "bravo"]
    assert got[0]["anomalies"] == ["silent", "flapping_root"] and got[0]["drops"] == {}
    assert got[1]["profile"] == "ESP32_GENERIC"
    health.judge_nodes(got, {})
    assert got[0]["status"] == "broken"                               # silent
    # an analysis without nodes.json (older snakemesh) is a one-line input error
    from host_tools.errors import InputError
    os.unlink(str(tmp_path / "nodes.json"))
    with pytest.raises(InputError, match="re-run `snakemesh analyze`"):
        health.load_nodes(str(tmp_path), {})


def test_drawings_are_deterministic_and_show_tree_root_links_and_snake_direction():
    g = nx.random_geometric_graph(120, 0.16, seed=3)
    g = g.subgraph(max(nx.connected_components(g), key=len)).copy()
    names = dict((n, "n%03d" % n) for n in g)
    keys = dict((n, "%064x" % (n * 7919 + 11)) for n in g)
    root = max(keys.values())
    dist = nx.single_source_shortest_path_length(g, [n for n in g if keys[n] == root][0])
    order = sorted(keys.values())
    rows = []
    for n in g:
        k = keys[n]
        ups = sorted(keys[p] for p in g.neighbors(n) if dist[p] == dist[n] - 1)
        i = order.index(k)
        rows.append({"node": k, "name": names[n], "state_records": 5, "records": 9, "depth": dist[n],
                     "parent": ups[0] if ups else None, "root": root, "desc": order[i - 1] if i else None,
                     "expected_desc": order[i - 1] if i else None, "snake_ok": True, "status": "healthy"})
    bad = [r for r in rows if r["node"] == order[len(order) // 2]][0]
    bad.update(snake_ok=False, desc=order[0], status="broken")
    edges = [(keys[a], keys[b], "ble" if (a + b) % 3 == 0 else "wifi") for a, b in g.edges()]
    t1, t2 = topo_svg.tree_svg(rows, edges), topo_svg.tree_svg(list(reversed(rows)), list(reversed(edges)))
    assert t1 == t2
    assert "(root)" in t1 and 'stroke-dasharray="6,3"' in t1 and "#3182ce" in t1
    assert t1.count('stroke-width="2.4"') == 1 and t1.count("-&gt; parent") == len(rows) - 1
    s1 = topo_svg.snake_svg(rows)
    assert s1 == topo_svg.snake_svg(list(reversed(rows)))
    assert s1.count('marker-end="url(#ah-ok)"') == len(rows) - 2       # lowest key has none, one is wrong
    assert s1.count('marker-end="url(#ah-bad)"') == 1 and "should point to" in s1
    # labels never overlap: every drawn tree label box is disjoint from the others
    boxes = []
    for m in re.finditer(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="(start|end)"[^>]*>([^<]+)</text>', t1):
        x, y, anchor, text = float(m.group(1)), float(m.group(2)), m.group(3), m.group(4)
        w = topo_svg._text_w(text)
        x0 = x if anchor == "start" else x - w
        boxes.append((x0, y - 6, x0 + w, y + 6))
    assert len(boxes) > len(rows) // 2
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not (a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5)


# -- end to end: synthetic telemetry -> analyze -> report ---------------------------

@pytest.fixture(scope="module")
def spark():
    from host_tools.pipeline.session import get_session
    s = get_session(small_input=True)
    yield s
    s.stop()


def _grid():
    g = nx.grid_2d_graph(4, 4)
    return nx.relabel_nodes(g, dict((n, "g%d%d" % n) for n in g))


def _analyze(spark, recs, out):
    from host_tools.pipeline.analysis import analyze
    src = os.path.join(os.path.dirname(out), "run.jsonl")
    ts.write_jsonl(src, recs)
    analyze([src], out, spark=spark)
    from host_tools.pipeline.report import render
    return render(out, with_verdict=True)


@pytest.fixture(scope="module")
def healthy(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("rep_h")
    sc = ts.Scenario(duration=30.0, flap_desc=False, flap_parent=False, restart=False, sanity_fail=False,
                     ping_loss=0.0, drop_reasons=("wakeup_dup", "watermark", "wakeup_root"))
    recs, truth = ts.generate(_grid(), 11, sc)
    return _analyze(spark, recs, str(d / "out")) + (truth,)


@pytest.fixture(scope="module")
def faulty(spark, tmp_path_factory):
    d = tmp_path_factory.mktemp("rep_f")
    sc = ts.Scenario(duration=30.0, stuck=True, emit_topology=False, ping_loss=0.1, flap_desc=False)
    recs, truth = ts.generate(_grid(), 12, sc)
    # a node that is linked but never sends a state record (e.g. an old
    # firmware); the highest key, so no other node's right neighbour changes
    ghost = "f" * 64
    anchor = truth["keys"]["g00"]
    recs.append({"v": 1, "kind": "peers", "t": 5.0, "node": ghost,
                 "peers": [{"port": 1, "key": anchor, "link": "ble", "root": anchor, "root_seq": 1}]})
    recs.append({"v": 1, "kind": "counters", "t": 6.0, "node": ghost, "rx": {"traffic": 1}, "tx": {},
                 "drops": {}, "verify_done": 0, "verify_skipped": 0, "verify_cached": 0, "evictions": {},
                 "occupancy": {}, "mem_free": 50000})
    # one node under a wakeup storm: its counters carry a growing `defence`
    # map (as a node's telemetry does, node.py "Admission"/"Receiving")
    stormed = truth["keys"]["g12"]
    k = 0
    for r in recs:
        if r.get("kind") == "counters" and r.get("node") == stormed:
            k += 1
            r["defence"] = {"wakeup_budget": 400 * k, "relay_shed": k, "rx_stall": 0}
    truth["stormed"] = (stormed, 400 * k, k)
    recs.sort(key=lambda r: r["t"])
    return _analyze(spark, recs, str(d / "out")) + (truth, ghost)


def _page(path):
    with open(path) as f:
        return f.read()


def test_healthy_synthetic_mesh_reads_healthy(healthy):
    path, level, reasons, truth = healthy
    assert level == "healthy", reasons
    page = _page(path)
    assert "data-verdict='healthy'" in page
    rows = re.findall(r"<tr class='(\w+)' data-node='(\w+)'>", page)
    assert len(rows) == truth["nodes"] and set(c for c, _n in rows) == {"healthy"}
    for name in truth["names"].values():
        assert "<b>%s</b>" % name in page
    assert ">nan<" not in page.lower() and "None" not in re.sub(r"<[^>]+>", " ", page).split()


def test_faulty_synthetic_capture_reads_degraded_with_the_bad_nodes_first(faulty):
    path, level, reasons, truth, ghost = faulty
    codes = dict((x["code"], x["level"]) for x in reasons)
    assert level == "degraded", reasons
    for code in ("snake", "delivery", "drops", "restart", "flapping", "sanity", "unknown", "attack"):
        assert codes.get(code) == "degraded", (code, codes)
    # the attack is named, with the node, from the telemetry's defence counters
    stormed, budget, shed = truth["stormed"]
    att = [x for x in reasons if x["code"] == "attack"]
    assert len(att) == 1 and "wakeup storm" in att[0]["text"] and att[0]["nodes"] == [stormed], att
    assert "wakeup_budget %d" % budget in att[0]["text"] and "relay_shed %d" % shed in att[0]["text"], att
    page = _page(path)
    rows = re.findall(r"<tr class='(\w+)' data-node='(\w+)'>", page)
    stuck = truth["stuck_node"]
    assert rows[0] == ("broken", stuck)                               # the worst node is on top, red
    assert dict((n, c) for c, n in rows)[ghost] == "unknown"
    assert dict((n, c) for c, n in rows)[truth["restart_node"]] in ("degraded", "broken")
    ghost_row = page.split("data-node='%s'>" % ghost)[1].split("</tr>")[0]
    assert "no state record from this node" in ghost_row and "unknown" in ghost_row
    # a monitor capture: no topology records, so no names: short keys, never "nan"
    text = re.sub(r"<[^>]+>", " ", page)
    assert not re.search(r"\bnan\b", text, re.I)
    assert health.short_keys([stuck])[stuck] in text


# -- the page in a real browser -------------------------------------------------------

def chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")


def browser_check(index_html, workdir):
    """Render the page in headless Chromium; assert the verdict and the node
    table are in the DOM it built and the screenshot is not blank. Returns
    the screenshot path."""
    exe = chromium()
    url = "file://" + os.path.abspath(index_html)
    profile = tempfile.mkdtemp(dir=workdir, prefix="chromium-")
    shot = os.path.join(workdir, "report.png")
    try:
        dom = subprocess.run([exe] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile, "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
        m = re.search(r"<section id=\"verdict\" class=\"verdict (healthy|degraded|broken)\"", dom)
        assert m, "no verdict in the DOM Chromium built"
        word = re.search(r"<div class=\"word\">(\w+)</div>", dom)
        assert word and word.group(1) == m.group(1), "verdict word missing"
        table = re.search(r"<table class=\"nodes\" id=\"nodes\">(.*?)</table>", dom, re.S)
        assert table, "no per-node table in the DOM"
        assert len(re.findall(r"<tr class=\"(healthy|degraded|broken|unknown)\" data-node=", table.group(1))) >= 1
        assert re.search(r"<svg[^>]*viewBox", dom), "no drawing"
        if os.path.exists(shot):
            os.unlink(shot)
        subprocess.run([exe] + CHROMIUM_FLAGS + ["--user-data-dir=" + profile, "--window-size=1280,1400",
                        "--screenshot=" + shot, url], capture_output=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert os.path.isfile(shot), "Chromium wrote no screenshot"
    from PIL import Image
    im = Image.open(shot).convert("RGB")
    assert im.size == (1280, 1400)
    colours = im.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "screenshot is (nearly) blank"
    # the verdict banner is drawn: its colour covers a visible patch at the top
    top = im.crop((0, 0, 1280, 350))
    banner = {"healthy": (240, 255, 244), "degraded": (255, 250, 240), "broken": (255, 245, 245)}[m.group(1)]
    assert sum(n for n, c in top.getcolors(maxcolors=1 << 20) if c == banner) > 20000, "no verdict banner"
    return shot


def test_report_in_headless_chromium(healthy, tmp_path):
    path, level, _reasons, _truth = healthy
    shot = browser_check(path, str(tmp_path))
    assert os.path.getsize(shot) > 20000
    # the same check fails on a broken page: no verdict, no node table, or a blank page
    folder = os.path.dirname(path)
    good = _page(path)
    for broken in (re.sub(r"<section id='verdict'.*?</section>", "", good, flags=re.S),
                   re.sub(r"<table class='nodes' id='nodes'>.*?</table>", "", good, flags=re.S),
                   good.replace("<style>", "<style>body{display:none}")):
        with open(os.path.join(folder, "broken.html"), "w") as f:
            f.write(broken)
        bad_dir = tempfile.mkdtemp(dir=str(tmp_path))
        with pytest.raises(AssertionError):
            browser_check(os.path.join(folder, "broken.html"), bad_dir)


def test_report_without_state_probes_or_names_does_not_crash(spark, tmp_path):
    """A capture with only counters and peers records (no state, no probes,
    no topology records): the page renders, says broken because nothing can
    be judged, and shows unknown with the reason instead of numbers."""
    keys = ["%064x" % (i + 1) for i in range(3)]
    recs = []
    for t in range(0, 30, 5):
        for i, k in enumerate(keys):
            other = keys[(i + 1) % 3]
            recs.append({"v": 1, "kind": "peers", "t": float(t), "node": k,
                         "peers": [{"port": 1, "key": other, "link": "wifi", "root": other, "root_seq": 1}]})
            recs.append({"v": 1, "kind": "counters", "t": t + 0.5, "node": k, "rx": {"keepalive": t},
                         "tx": {"keepalive": t}, "drops": {}, "verify_done": 0, "verify_skipped": 0,
                         "verify_cached": 0, "evictions": {}, "occupancy": {"sigcache": [t, 64]},
                         "mem_free": None})
    path, level, reasons = _analyze(spark, recs, str(tmp_path / "out"))
    assert level == "broken" and reasons[0]["code"] == "no_state"
    page = _page(path)
    assert "data-verdict='broken'" in page and "no node reported its state" in page
    assert page.count("title='no state record from this node'>unknown</span>") >= 3 * 3
    assert "no pings" in page and not re.search(r"\bnan\b", re.sub(r"<[^>]+>", " ", page), re.I)
    assert os.path.isfile(os.path.join(os.path.dirname(path), "tree.svg"))


def test_tree_nodes_near_the_root_do_not_pile_up():
    """Leaf-weighted wedges give the root's many leaf children a short arc
    next to one big subtree: the circles (and so their labels) must stay
    apart."""
    root = "ff" * 32
    big = "fe" * 32
    rows = [{"node": root, "name": "root", "state_records": 5, "records": 9, "depth": 0, "parent": None,
             "root": root, "status": "healthy"},
            {"node": big, "name": "hub", "state_records": 5, "records": 9, "depth": 1, "parent": root,
             "root": root, "status": "healthy"}]
    for i in range(40):
        rows.append({"node": "%064x" % (i + 1), "name": "leaf%d" % i, "state_records": 5, "records": 9,
                     "depth": 1, "parent": root, "root": root, "status": "healthy"})
    for i in range(200):
        rows.append({"node": "%064x" % (i + 1000), "name": "far%d" % i, "state_records": 5, "records": 9,
                     "depth": 2, "parent": big, "root": root, "status": "healthy"})
    svg = topo_svg.tree_svg(rows, [])
    pts = [(float(x), float(y), float(r)) for x, y, r in
           re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="([\d.]+)" fill="#38a169"', svg)]
    assert len(pts) == len(rows)
    import math
    closest = min(math.hypot(a[0] - b[0], a[1] - b[1]) for i, a in enumerate(pts) for b in pts[i + 1:])
    assert closest >= 2 * pts[0][2], "node circles overlap (%.1f px apart)" % closest
