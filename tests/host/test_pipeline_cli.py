"""Pipeline pieces that need no Spark: input resolution and bad-input errors
through the real CLI (one line, non-zero exit, no traceback, no output), the
topology rules, and the synthetic generator's own consistency."""
import gzip
import json
import os
import subprocess
import sys

import networkx as nx
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import telemetry_synth as ts  # noqa: E402

from host_tools.errors import InputError  # noqa: E402
from host_tools.pipeline import inputs, topology  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPO = os.path.join(ROOT, "host_tools", "topologies")   # shipped with the package, not /work/shared


def snakemesh(*args):
    return subprocess.run([sys.executable, "-m", "host_tools.cli"] + list(args), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def assert_one_line_error(res, *words):
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()
    assert len(err) == 1, res.stderr
    assert err[0].startswith("snakemesh: error: ")
    assert "Traceback" not in res.stderr + res.stdout
    for w in words:
        assert w in err[0], err[0]


def test_cli_missing_path(tmp_path):
    out = tmp_path / "out"
    res = snakemesh("analyze", str(tmp_path / "nope.jsonl"), "--out", str(out))
    assert_one_line_error(res, "no such file")
    assert res.returncode == InputError.exit_code
    assert not out.exists() and os.listdir(str(tmp_path)) == []


def test_cli_binary_garbage_and_empty_folder_and_bad_glob(tmp_path):
    garbage = tmp_path / "dump.jsonl"
    garbage.write_bytes(bytes(range(256)) * 40)
    res = snakemesh("analyze", str(garbage), "--out", str(tmp_path / "o1"))
    assert_one_line_error(res, "binary data")
    empty = tmp_path / "empty"
    empty.mkdir()
    res = snakemesh("analyze", str(empty), "--out", str(tmp_path / "o2"))
    assert_one_line_error(res, "no telemetry files")
    res = snakemesh("analyze", str(tmp_path / "*.ndjson"), "--out", str(tmp_path / "o3"))
    assert_one_line_error(res, "matches no files")
    assert sorted(os.listdir(str(tmp_path))) == ["dump.jsonl", "empty"]


def test_cli_truncated_gzip(tmp_path):
    data = gzip.compress(b'{"v":1}\n' * 5000)
    p = tmp_path / "run.jsonl.gz"
    p.write_bytes(data[: len(data) // 2])
    res = snakemesh("analyze", str(p), "--out", str(tmp_path / "out"))
    assert_one_line_error(res, "gzip")


def test_cli_bad_topology_and_report_errors(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_text('{"v":1,"kind":"event","t":0,"node":"%s","event":"x"}\n' % ("0" * 64))
    res = snakemesh("analyze", str(run), "--out", str(tmp_path / "out"), "--topology", str(tmp_path / "no.txt"))
    assert_one_line_error(res, "cannot read topology")
    res = snakemesh("report", str(tmp_path / "missing"))
    assert_one_line_error(res, "no such folder")
    res = snakemesh("report", str(tmp_path))
    assert_one_line_error(res, "not a `snakemesh analyze` output")


REC = '{"v":1,"kind":"event","t":0.5,"node":"%s","event":"peer_up","detail":""}\n' % ("ab" * 32)


def test_resolve_inputs(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jsonl").write_text(REC)
    (tmp_path / "a" / "notes.md").write_text("hi\n")
    (tmp_path / "a" / ".hidden.jsonl").write_text(REC)
    (tmp_path / "b.ndjson").write_text(REC)
    files, remote = inputs.resolve([str(tmp_path / "a"), str(tmp_path / "*.ndjson"), "hdfs://nn/x/*.jsonl"])
    assert [os.path.basename(f) for f in files] == ["x.jsonl", "b.ndjson"]
    assert remote == ["hdfs://nn/x/*.jsonl"]
    with pytest.raises(InputError):
        inputs.resolve([])


def test_folder_scan_reads_only_telemetry_and_finds_side_files(tmp_path):
    """issue 16: `snakemesh sim --out X` writes topology.txt, truth.json and
    telemetry.jsonl (mesh/demo: nodes.json too); the folder scan read them
    all as telemetry and failed on topology.txt."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "telemetry.jsonl").write_text(REC)
    (run / "topology.txt").write_text("a b c\nc d @ble\n")
    (run / "truth.json").write_text(json.dumps({"nodes": {"a": "ab" * 32}}, indent=1))
    (run / "nodes.json").write_text(json.dumps({"a": {"key": "ab" * 32, "console": "/dev/pts/9"}}, indent=1))
    (run / "readme.txt").write_text("a run of the demo\n")
    (run / "pretty.json").write_text(json.dumps({"v": 1, "kind": "state"}, indent=2))
    (run / "console.log").write_text("MicroPython banner\n@sm " + REC)
    (run / "big.jsonl").write_text('{"edges":[' + ",".join(['["%s","%s","wifi"]' % ("0" * 64, "1" * 64)] * 200)
                                   + '],"kind":"topology","t":0,"v":1}\n')
    res = inputs.resolve([str(run)])
    assert sorted(os.path.basename(f) for f in res.files) == ["big.jsonl", "console.log", "telemetry.jsonl"]
    assert [os.path.basename(f) for f in res.console] == ["console.log"]
    assert sorted(os.path.basename(p) for p, _why in res.skipped) == ["pretty.json", "readme.txt"]
    for name in ("topology.txt", "truth.json", "nodes.json"):
        assert res.side[name] == [str(run / name)]
    # the telemetry file named on its own still brings the files beside it
    res = inputs.resolve([str(run / "telemetry.jsonl")])
    assert res.side["truth.json"] == [str(run / "truth.json")] and not res.skipped
    # a file named explicitly that is not telemetry is a clear error, not rejected lines
    with pytest.raises(InputError) as e:
        inputs.resolve([str(run / "topology.txt")])
    assert "not telemetry" in e.value.message and "--topology" in e.value.message
    with pytest.raises(InputError) as e:
        inputs.resolve([str(run / "truth.json")])
    assert "not telemetry" in e.value.message
    # a folder with nothing but side files
    only = tmp_path / "only"
    only.mkdir()
    (only / "topology.txt").write_text("a b\n")
    (only / "notes.txt").write_text("x\n")
    with pytest.raises(InputError) as e:
        inputs.resolve([str(only)])
    assert "no telemetry files" in e.value.message


def test_source_paths_have_no_uri_prefix():
    """issue 16: paths printed as `///tmp/...` (the `file:` of Spark's file
    URI stripped, the slashes left)."""
    assert inputs.source_path("file:///tmp/run/a.jsonl") == "/tmp/run/a.jsonl"
    assert inputs.source_path("file:/tmp/run/a%20b.jsonl") == "/tmp/run/a b.jsonl"
    assert inputs.source_path("hdfs://nn/x.jsonl") == "hdfs://nn/x.jsonl"


def test_topology_rules(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("a b c\nc a\nd e\nf\n")
    names, edges = topology.read_topology_file(str(p))
    assert names == set("abcdef") and edges == {("a", "b"), ("b", "c"), ("a", "c"), ("d", "e")}
    comp = topology.components(sorted(names), edges)
    assert comp["c"] == "a" and comp["e"] == "d" and comp["f"] == "f"
    exp = topology.expected_desc(comp)
    assert exp == {"a": None, "b": "a", "c": "b", "d": None, "e": "d", "f": None}
    # records: epochs start at each distinct edge set; repeats do not split
    e = [["aa", "bb", "wifi"], ["bb", "cc", "ble"]]
    eps, nm = topology.epochs_from_records([(5.0, e, {"aa": "x"}), (0.0, e, None), (9.0, e[:1], None)])
    assert [ep.start for ep in eps] == [None, 9.0] and nm == {"aa": "x"}
    # file names are mapped through the record names; unknown names are an error
    ep, nodes = topology.epoch_from_file(str(p), dict((k * 2, k) for k in "abcdef"))
    assert ("aa", "bb") in ep.edges and "ff" in nodes
    with pytest.raises(InputError):
        topology.epoch_from_file(str(p), {"aa": "a"})


def test_synth_generator_is_deterministic_and_consistent():
    g = ts.load_topology(os.path.join(TOPO, "sim.txt"))
    r1, t1 = ts.generate(g, 5, ts.Scenario(duration=15.0))
    r2, t2 = ts.generate(g, 5, ts.Scenario(duration=15.0))
    assert r1 == r2 and t1["stretch"] == t2["stretch"]
    keyed = nx.relabel_nodes(g, t1["keys"])
    for r in r1:
        assert r["v"] == 1 and len(r["node"]) == 64
        if r["kind"] == "probe" and r["ok"]:
            path = t1["paths"][r["id"]]
            assert path[0] == r["src"] and path[-1] == r["dst"]
            assert all(keyed.has_edge(a, b) for a, b in zip(path, path[1:]))
            assert t1["stretch"][r["id"]] >= 1.0


def test_class_archive_dumped_once_then_mapped(tmp_path, monkeypatch):
    """The Spark class archive: the first run dumps it under a lock naming
    the dumping JVM, runs meanwhile go without, the first run after that JVM
    is gone takes the dump into place and every later run maps it."""
    from host_tools.pipeline import session
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SNAKEMESH_SPARK_CDS", raising=False)
    first = session.ClassArchive()
    assert first.option.startswith("-XX:ArchiveClassesAtExit=") and first.lock
    dump = first.option.split("=", 1)[1]
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        first.started(jvm.pid)
        assert session.ClassArchive().option == ""          # the dump is under way
    finally:
        jvm.kill()
        jvm.wait()
    with open(dump, "wb") as f:
        f.write(b"archive")
    later = session.ClassArchive()
    assert later.option.startswith("-XX:SharedArchiveFile=") and later.lock is None
    final = later.option.split("=", 1)[1]
    assert os.path.exists(final) and not os.path.exists(dump) and not os.path.exists(first.lock)
    assert session.ClassArchive().option == later.option
    monkeypatch.setenv("SNAKEMESH_SPARK_CDS", "0")
    assert session.ClassArchive().option == ""


def test_class_archive_per_spark_install(tmp_path, monkeypatch):
    """An archive holds Spark's classes for the classpath it was dumped
    with only: another PySpark install (another virtualenv, its jars
    elsewhere) must not map it and get no Spark class from it, but dump
    one of its own."""
    import pyspark
    from host_tools.pipeline import session
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("SNAKEMESH_SPARK_CDS", raising=False)
    here = session.ClassArchive()
    assert here.option.startswith("-XX:ArchiveClassesAtExit=")
    other = tmp_path / "other-venv" / "pyspark"
    other.mkdir(parents=True)
    monkeypatch.setattr(pyspark, "__file__", str(other / "__init__.py"))
    there = session.ClassArchive()
    assert there.option.startswith("-XX:ArchiveClassesAtExit=")
    assert there.option != here.option and there.lock != here.lock
