"""Console client and the inspection commands against a fake node served on
a pseudo-terminal and on a socket:// URL."""
import io
import json
import os
import sys
import time

import pytest

from host_tools.cli import main
from host_tools.console_client import ConsoleClient, NodeError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fakes"))
from fake_node import DEFAULT_KEY, PEER_KEYS, FakeNode  # noqa: E402

DST = PEER_KEYS[1]


@pytest.fixture(params=["pty", "socket"])
def node(request):
    with FakeNode("ok", request.param) as n:
        yield n


@pytest.fixture
def pty_node():
    with FakeNode("ok", "pty") as n:
        yield n


# ------------------------------------------------------------------ client --

@pytest.mark.parametrize("mode", ["ok", "noise", "idless", "echo"])
@pytest.mark.parametrize("transport", ["pty", "socket"])
def test_request_reply(mode, transport):
    with FakeNode(mode, transport) as n:
        with ConsoleClient(n.port, timeout=3) as c:
            r1 = c.request("status")
            r2 = c.request("version")
        assert r1["re"] == "status" and r1["ok"] is True
        assert r1["key"] == DEFAULT_KEY and r1["uptime_s"] == 42     # not the stale reply (-1)
        assert r2["version"] == "0.1.0"
        assert [l.split(" ", 1)[1] for l in n.received] == ["status", "version"]
        assert n.received[0].startswith("#1 ") and n.received[1].startswith("#2 ")


def test_telemetry_seen_while_waiting_is_kept():
    with FakeNode("noise", "pty") as n:
        with ConsoleClient(n.port, timeout=3) as c:
            c.request("status")
            recs = list(c.records(duration=0.05))
    assert any(r.get("kind") == "event" and r.get("v") == 1 for r in recs)


def test_node_error_reply():
    with FakeNode("error", "pty") as n:
        with ConsoleClient(n.port, timeout=3) as c:
            with pytest.raises(NodeError) as e:
                c.request("status")
            assert e.value.message == "%s: 'status' failed on the node: no route to destination" % n.port
            assert c.request("status", check=False)["ok"] is False


def test_records_stream(pty_node):
    with ConsoleClient(pty_node.port, timeout=3) as c:
        c.request("telemetry", 1)
        recs = list(c.records(duration=0.4))
    kinds = set(r["kind"] for r in recs)
    assert {"state", "counters"} <= kinds
    assert all(r["v"] == 1 and r["node"] == DEFAULT_KEY for r in recs)


def test_overlong_line_without_newline_is_dropped(pty_node):
    with ConsoleClient(pty_node.port, timeout=3) as c:
        c._buf += b"x" * 70000
        assert c.request("version")["version"] == "0.1.0"


# ---------------------------------------------------------- inspection CLI --

def run(capfd, *argv):
    rc = main(list(argv))
    out, err = capfd.readouterr()
    return rc, out, err


def test_status_table(node, capfd):
    rc, out, err = run(capfd, "status", "--port", node.port)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "key       " + DEFAULT_KEY
    assert "coords    [1,2]" in lines and "mem_free  51234" in lines


def test_status_json(node, capfd):
    rc, out, _ = run(capfd, "status", "--port", node.port, "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["key"] == DEFAULT_KEY and data["re"] == "status" and data["root_seq"] == 7


def test_peers_table(pty_node, capfd):
    rc, out, _ = run(capfd, "peers", "--port", pty_node.port)
    assert rc == 0
    assert out.splitlines() == [
        "PORT  KEY               LINK   ROOT              ROOT_SEQ  COORDS",
        "----  ----------------  -----  ----------------  --------  -------",
        "1     7f11111111111111  Wi-Fi  7f11111111111111  7         [1]",
        "2     3c22222222222222  BLE    7f11111111111111  7         [1,2,1]",
    ]
    rc, out, _ = run(capfd, "peers", "--port", pty_node.port, "--wide")
    assert PEER_KEYS[1] in out


def test_tree_snake_routes_stats(pty_node, capfd):
    rc, out, _ = run(capfd, "tree", "--port", pty_node.port)
    assert rc == 0 and "depth     2" in out and "  1  " + PEER_KEYS[0] in out
    rc, out, _ = run(capfd, "snake", "--port", pty_node.port)
    assert rc == 0 and out.startswith("descending: " + PEER_KEYS[1] + " (port 2") and "snake routes: 3" in out
    rc, out, _ = run(capfd, "routes", "--port", pty_node.port)
    assert rc == 0
    assert out.splitlines()[0].split() == ["KEY", "SRC", "DST", "ROOT", "ROOT_SEQ", "WM_KEY", "WM_SEQ", "AGE_MS"]
    assert out.splitlines()[2].split() == ["3c22222222222222", "0", "2", "7f11111111111111", "7",
                                           "3c22222222222222", "3", "1500"]
    rc, out, _ = run(capfd, "stats", "--port", pty_node.port)
    assert rc == 0
    # grouped by concern, not one flat line per counter
    sections = [block.splitlines()[0] for block in out.strip().split("\n\n")]
    assert sections == ["frames", "traffic", "drops by reason", "crypto (signature checks)",
                        "links and handshakes", "tables", "memory"], sections
    assert "  traffic    10   9" in out.splitlines()
    assert "  control (every type but traffic): 0 of 9 frames sent (0%)" in out.splitlines()
    assert "drops by reason\n  no_route  1\n" in out
    assert [l.split() for l in out.splitlines() if l.startswith("  routes ")] == [
        ["routes", "3", "32", "9.4%", "0", "-"]]
    assert "verify_done  5    verify_cached  3    verify_skipped  1" in out
    assert "no link counters" in out and "handshake failures" not in out     # the fake sends neither


def test_ping_statistics(pty_node, capfd):
    rc, out, _ = run(capfd, "ping", "--port", pty_node.port, DST, "-c", "3")
    assert rc == 0
    assert pty_node.received[-1] == "#1 ping %s 3" % DST
    assert "3 probes sent, 3 received, 0% loss" in out
    assert "rtt min/avg/max/mdev = 10.00/12.50/15.00/2.04 ms" in out


def test_ping_unreachable_exit_1(pty_node, capfd):
    rc, out, err = run(capfd, "ping", "--port", pty_node.port, "00" * 32, "-c", "2")
    assert rc == 1
    assert "2 probes sent, 0 received, 100% loss" in out and "rtt" not in out and err == ""


def test_ping_json(pty_node, capfd):
    rc, out, _ = run(capfd, "ping", "--port", pty_node.port, DST.upper(), "--json")
    assert rc == 0
    assert json.loads(out)["rtts_ms"] == [10.0, 12.5, 15.0, 17.5]
    assert pty_node.received[-1] == "#1 ping %s 4" % DST     # keys are normalised to lower case


def test_trace(pty_node, capfd):
    rc, out, _ = run(capfd, "trace", "--port", pty_node.port, DST)
    assert rc == 0
    lines = out.splitlines()
    assert lines[1].split() == ["1", PEER_KEYS[0][:16], "4", "ms"]
    assert lines[3].split() == ["3", DST[:16], "15.25", "ms"]
    assert lines[-1] == "reached"
    rc, out, _ = run(capfd, "trace", "--port", pty_node.port, "00" * 32)
    assert rc == 1 and out.splitlines()[-1] == "destination not reached"


def test_monitor_two_ports(tmp_path, capfd):
    out_file = tmp_path / "t.jsonl"
    with FakeNode("ok", "pty") as a, FakeNode("ok", "socket", key="ab" * 32) as b:
        t0 = time.time()
        rc, out, err = run(capfd, "monitor", "--port", a.port, "--port", b.port, "--out", str(out_file),
                           "--duration", "0.6")
        t1 = time.time()
        assert rc == 0
        assert "telemetry 1" in [l.split(" ", 1)[1] for l in a.received]
        assert [l.split(" ", 1)[1] for l in b.received][-1] == "telemetry off"
    recs = [json.loads(l) for l in out_file.read_text().splitlines()]
    assert {r["port"] for r in recs} == {a.port, b.port}
    assert {r["node"] for r in recs} == {DEFAULT_KEY, "ab" * 32}
    assert all(r["v"] == 1 and r["kind"] in ("state", "counters") for r in recs)
    counters = [r for r in recs if r["kind"] == "counters"]
    assert counters and all(t0 - 1 <= r["t"] <= t1 + 1 for r in counters)   # host time filled in
    states = [r for r in recs if r["kind"] == "state"]
    assert states and all(r["t"] < 1000 for r in states)                     # the node's own t kept
    assert "wrote %d records to %s" % (len(recs), out_file) in out
    assert "monitoring 2 node(s)" in err


def test_monitor_bad_out_path(pty_node, tmp_path, capfd):
    rc, _, err = run(capfd, "monitor", "--port", pty_node.port, "--out", str(tmp_path / "no" / "x.jsonl"),
                     "--duration", "0.1")
    assert rc == 5 and err.startswith("snakemesh: error: cannot write")


def test_monitor_one_bad_port_fails_clearly(pty_node, tmp_path, capfd):
    rc, _, err = run(capfd, "monitor", "--port", pty_node.port, "--port", "/dev/ttyNOPE1",
                     "--out", str(tmp_path / "x.jsonl"), "--duration", "0.1")
    assert rc == 3
    assert err.strip() == "snakemesh: error: no such port: /dev/ttyNOPE1 (is the board plugged in? is the node running?)"


def test_console_from_a_pipe(pty_node, monkeypatch, capfd):
    # not a terminal: no prompt, each reply printed (as a table) before the next line is read
    monkeypatch.setattr(sys, "stdin", io.StringIO("status\nhelp\n\npeers\n"))
    rc, out, err = run(capfd, "console", "--port", pty_node.port, "--timeout", "3")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "key       " + DEFAULT_KEY and "mem_free  51234" in lines
    assert "commands: help version status peers tree snake routes stats ping trace telemetry" in lines
    assert lines[-1].split() == ["2", "3c22222222222222", "BLE", "7f11111111111111", "7", "[1,2,1]"]
    assert [l.split(" ", 1)[1] for l in pty_node.received] == ["status", "help", "peers"]


def test_console_json_from_a_pipe(pty_node, monkeypatch, capfd):
    monkeypatch.setattr(sys, "stdin", io.StringIO("status\nhelp\n"))
    rc, out, _ = run(capfd, "console", "--port", pty_node.port, "--timeout", "3", "--json")
    assert rc == 0
    replies = [json.loads(l) for l in out.splitlines()]
    assert [r["re"] for r in replies] == ["status", "help"]
    assert replies[0]["key"] == DEFAULT_KEY


@pytest.mark.parametrize("mode,rc,msg", [
    ("silent", 4, "timeout: no reply to 'status' from {port} within 1 s (is the snakemesh firmware running? "
                  "reset the board or retry with a larger --timeout)"),
    ("garbage", 3, "no snakemesh console on {port} (garbage on the line)"),
    ("repl", 3, "board on {port} is in the MicroPython REPL, not running snakemesh; press Ctrl-D or reset it"),
])
def test_console_from_a_pipe_fails_clearly(mode, rc, msg, monkeypatch, capfd):
    with FakeNode(mode, "pty") as n:
        monkeypatch.setattr(sys, "stdin", io.StringIO("status\nhelp\n"))
        code, out, err = run(capfd, "console", "--port", n.port, "--timeout", "1")
    assert code == rc
    assert err.strip() == "snakemesh: error: " + msg.format(port=n.port)


def test_console_from_a_pipe_error_reply_exit_1(monkeypatch, capfd):
    with FakeNode("error", "pty") as n:
        monkeypatch.setattr(sys, "stdin", io.StringIO("status\n"))
        code, out, err = run(capfd, "console", "--port", n.port, "--timeout", "2")
    assert code == 1 and out == "error: status: no route to destination\n"
