"""ping/trace take what the tables show: a unique key prefix of at least 8
hex digits (looked up among the keys the node knows, and the names file's),
or a node name from a names file (--names: a mesh/demo/sim output folder,
nodes.json, truth.json, telemetry with a topology record, NAME KEY lines,
or $SNAKEMESH_NAMES). Ambiguous or unknown prefixes and unknown names are
one error line naming the candidates."""
import json
import os
import sys

import pytest

from host_tools import names
from host_tools.cli import main
from host_tools.errors import InputError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fakes"))
from fake_node import DEFAULT_KEY, PEER_KEYS, FakeNode  # noqa: E402

ROOT_KEY, DESC_KEY = PEER_KEYS          # the fake's parent/root and its descending neighbour
OTHER = "7f111111" + "ab" * 28          # shares 8 digits with ROOT_KEY


def run(capfd, *argv):
    rc = main(list(argv))
    out, err = capfd.readouterr()
    return rc, out, err


def one_error(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("snakemesh: error: "), err
    return lines[0][len("snakemesh: error: "):]


@pytest.fixture
def node(monkeypatch):
    monkeypatch.delenv(names.ENV, raising=False)
    with FakeNode("ok", "pty") as n:
        yield n


def sent(n, cmd):
    return [l.split(" ", 1)[1] for l in n.received if l.split(" ", 2)[1] == cmd]


def test_prefix_as_the_tables_show_it(node, capfd):
    rc, out, err = run(capfd, "ping", "--port", node.port, DESC_KEY[:16], "-c", "2")
    assert rc == 0, err
    assert sent(node, "ping") == ["ping %s 2" % DESC_KEY]
    assert out.splitlines()[0] == "ping %s from %s" % (DESC_KEY, node.port)
    rc, out, err = run(capfd, "trace", "--port", node.port, ROOT_KEY[:8].upper())
    assert rc == 0, err
    assert sent(node, "trace") == ["trace %s" % ROOT_KEY]


def test_prefix_unknown_to_the_node(node, capfd):
    rc, _, err = run(capfd, "ping", "--port", node.port, "deadbeef")
    assert rc == 5
    assert one_error(err) == ("no known key starts with deadbeef (the node knows its peers, routes and tree "
                              "only; give all 64 hex digits or --names FILE)")
    assert sent(node, "ping") == []


def test_ambiguous_prefix_lists_the_candidates(node, tmp_path, capfd):
    f = tmp_path / "names.txt"
    f.write_text("# field notes\nhut %s\n" % OTHER)
    rc, _, err = run(capfd, "ping", "--port", node.port, "7f111111", "--names", str(f))
    assert rc == 5
    assert one_error(err) == ("key prefix 7f111111 is ambiguous: 7f11111111111111, 7f111111abababab (hut); "
                              "give more digits")
    rc, _, err = run(capfd, "ping", "--port", node.port, "7f111111a", "--names", str(f))
    assert rc == 0 and sent(node, "ping") == ["ping %s 4" % OTHER]


@pytest.mark.parametrize("key,msg", [
    ("1234567", "key prefix '1234567' is too short: give at least 8 hex digits (or all 64)"),
    ("alpha", "unknown key format: 'alpha' (expected a public key of 64 hex digits, a prefix of at least 8, "
              "or a node name with --names FILE)"),
])
def test_bad_key_arguments_fail_before_the_port(node, capfd, key, msg):
    rc, _, err = run(capfd, "trace", "--port", node.port, key)
    assert rc == 5 and one_error(err) == msg and node.received == []


def mesh_folder(tmp_path):
    d = tmp_path / "mesh"
    d.mkdir()
    (d / "nodes.json").write_text(json.dumps({
        "gw": {"key": DEFAULT_KEY, "console": "/dev/pts/99"},
        "root": {"key": ROOT_KEY, "console": "/dev/pts/98"},
        "leaf": {"key": DESC_KEY, "console": "/dev/pts/97"}}))
    return d


def test_names_from_a_mesh_folder(node, tmp_path, capfd):
    d = mesh_folder(tmp_path)
    rc, out, err = run(capfd, "trace", "--port", node.port, "leaf", "--names", str(tmp_path))   # demo layout
    assert rc == 0, err
    assert sent(node, "trace") == ["trace %s" % DESC_KEY]
    lines = out.splitlines()
    assert lines[0] == "trace to %s (leaf) from %s" % (DESC_KEY, node.port)
    assert lines[1].split() == ["1", ROOT_KEY[:16], "(root)", "4", "ms"]
    rc, out, _ = run(capfd, "peers", "--port", node.port, "--names", str(d / "nodes.json"))
    assert rc == 0
    assert out.splitlines()[0].split() == ["PORT", "KEY", "NAME", "LINK", "ROOT", "ROOT_SEQ", "COORDS"]
    assert out.splitlines()[3].split()[:3] == ["2", DESC_KEY[:16], "leaf"]


def test_unknown_name_lists_the_known_ones(node, tmp_path, capfd, monkeypatch):
    mesh_folder(tmp_path)
    monkeypatch.setenv(names.ENV, str(tmp_path / "mesh"))
    rc, _, err = run(capfd, "ping", "--port", node.port, "lef")
    assert rc == 5
    assert one_error(err) == "unknown node name 'lef' (names from %s: gw, leaf, root)" % (
        tmp_path / "mesh" / "nodes.json")
    rc, _, err = run(capfd, "ping", "--port", node.port, "root", "-c", "1")    # $SNAKEMESH_NAMES
    assert rc == 0 and sent(node, "ping") == ["ping %s 1" % ROOT_KEY]


def test_names_from_sim_outputs(tmp_path):
    (tmp_path / "truth.json").write_text(json.dumps({"nodes": {"a": ROOT_KEY, "b": DESC_KEY}}))
    assert names.load(str(tmp_path)).by_name == {"a": ROOT_KEY, "b": DESC_KEY}
    tel = tmp_path / "t.jsonl"
    tel.write_text(json.dumps({"v": 1, "kind": "state", "node": ROOT_KEY}) + "\n" +
                   json.dumps({"v": 1, "kind": "topology", "node": ROOT_KEY, "edges": [],
                               "names": {ROOT_KEY: "a", DESC_KEY: "b"}}) + "\n")
    n = names.load(str(tel))
    assert n.by_name == {"a": ROOT_KEY, "b": DESC_KEY} and n.label(DESC_KEY) == "b"


@pytest.mark.parametrize("content,msg", [
    ("a %s\nb\n" % ROOT_KEY, "{f}:2: expected NAME KEY (a name and 64 hex digits)"),
    ("# nothing\n", "no node names in {f} (expected nodes.json, truth.json, telemetry with a topology "
                    "record, or NAME KEY lines)"),
])
def test_bad_names_files(tmp_path, content, msg):
    f = tmp_path / "n.txt"
    f.write_text(content)
    with pytest.raises(InputError) as e:
        names.load(str(f))
    assert e.value.message == msg.format(f=f)


def test_missing_names_file(node, tmp_path, capfd):
    rc, _, err = run(capfd, "ping", "--port", node.port, ROOT_KEY, "--names", str(tmp_path / "nope.json"))
    assert rc == 5
    assert one_error(err) == "cannot read names file %s: No such file or directory" % (tmp_path / "nope.json")
