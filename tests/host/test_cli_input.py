"""Input errors name what is wrong: a --seed is counted in characters (it is
text), a bad topology line gives its file and line, and a shipped topology
is found by its name alone (host_tools/topologies/NAME.txt)."""
import os

import pytest

from host_tools import topofiles
from host_tools.cli import main


def run(capfd, *argv):
    rc = main(list(argv))
    out, err = capfd.readouterr()
    return rc, out, err


def one_error(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("snakemesh: error: "), err
    return lines[0][len("snakemesh: error: "):]


@pytest.mark.parametrize("seed,msg", [
    ("abcd", "--seed must be 64 hex digits (a 32-byte seed), got 4 characters"),
    ("a", "--seed must be 64 hex digits (a 32-byte seed), got 1 character"),
    # 32 characters used to be taken as a raw 32-byte seed
    ("x" * 32, "--seed must be 64 hex digits (a 32-byte seed), got 32 characters"),
    ("ab" * 20 + "zz" + "ab" * 11, "--seed must be 64 hex digits (a 32-byte seed): character 41 is not "
                                   "a hex digit"),
])
def test_seed_errors_count_characters(capfd, seed, msg):
    rc, out, err = run(capfd, "node", "--seed", seed)
    assert rc == 5 and out == ""
    assert one_error(err) == msg
    assert seed not in err or len(seed) < 8           # never echo a seed


def test_key_file_errors_count_bytes(tmp_path, capfd):
    kf = tmp_path / "k.key"
    kf.write_text("zz" * 32)
    rc, _, err = run(capfd, "node", "--key-file", str(kf))
    assert rc == 5
    assert one_error(err) == ("unknown key format in %s: 64 characters of text, but character 1 is not "
                              "a hex digit (expected 64 hex digits or a 32-byte raw seed)" % kf)


@pytest.mark.parametrize("line,msg", [
    ("a #b c", None),                                            # a comment: fine
    ("a b @latency=q", "@latency=q: 'q' is not a number"),
    ("a b @foo", "unknown link type @foo"),
    ("@ble", "options without node names"),
])
def test_topology_errors_name_file_and_line(tmp_path, capfd, line, msg):
    topo = tmp_path / "t.txt"
    topo.write_text("# a comment\nx y\n%s\n" % line)
    rc, out, err = run(capfd, "sim", "--topology", str(topo), "--duration", "1", "--out",
                       str(tmp_path / "o"), "-q")
    if msg is None:
        assert rc == 0, err
        return
    assert rc == 5
    e = one_error(err)
    assert e.startswith("%s:3: " % topo) and msg in e, e


def test_process_mesh_checks_simulator_options(tmp_path, capfd):
    topo = tmp_path / "t.txt"
    topo.write_text("x y\nx z @loss=7\n")
    rc, _, err = run(capfd, "mesh", "--topology", str(topo), "--out", str(tmp_path / "o"))
    assert rc == 5
    assert one_error(err) == "%s:2: loss must be within 0..1" % topo


def test_shipped_topology_by_name(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)           # not next to the files: found among the shipped ones
    for name in ("sim", "sim.txt"):
        rc, out, err = run(capfd, "sim", "--topology", name, "--duration", "1", "--out",
                           str(tmp_path / "o"), "-q")
        assert rc == 0, err
        assert out.startswith("sim: 26 nodes")
    assert "grid4-0049" in topofiles.shipped() and "demo-mixed" in topofiles.shipped()
    assert topofiles.resolve("grid4-0049") == os.path.join(topofiles.TOPOLOGY_DIR, "grid4-0049.txt")


def test_unknown_topology_lists_the_shipped_ones(tmp_path, capfd):
    tel = tmp_path / "t.jsonl"
    tel.write_text("")
    for cmd in (["sim", "--duration", "1", "-q"], ["mesh"], ["analyze", str(tel)]):
        rc, _, err = run(capfd, cmd[0], "--topology", "grid5-0049", "--out", str(tmp_path / "o"), *cmd[1:])
        assert rc == 5
        assert one_error(err) == ("no such topology: grid5-0049 (not a file, and not one of the shipped "
                                  "topologies: demo-field, demo-mixed, grid4-0049, line-0050, rtree-0050, sim)")


def test_profile_json_errors_say_where(tmp_path, capfd):
    prof = tmp_path / "p.json"
    prof.write_text('{"max_peers": 8,\n "max_routes": 4\n')
    rc, out, err = run(capfd, "node", "--seed", "ab" * 32, "--profile", str(prof), "--no-multicast")
    assert rc == 5 and "running" not in out
    assert one_error(err) == ("profile %s is not valid JSON: Expecting ',' delimiter: line 3 column 1 (char 34)"
                              % prof)
    rc, _, err = run(capfd, "sim", "--generate", "grid:2x2", "--duration", "1", "--out", str(tmp_path / "o"),
                     "--profile", str(prof), "-q")
    assert rc == 5 and "line 3 column 1" in one_error(err)
