"""The gateway's parts without processes (issue 26): the node's telemetry
sender (firmware/snake/runtime/telesink.py) against the gateway's
assembler (host_tools/gateway.py) record for record, deltas smaller than
whole records, the byte budget, parts of records larger than a datagram,
the sink found without configuration; the capture's rotation and
nodes.json; bad input one line and counted."""
import json
import os

import pytest

from snake.runtime import telesink
from host_tools import gateway as G

ME = bytes(range(32))
GW = b"\xff\xff" + bytes(30)
OTHER_ROOT = b"\x7f" * 32


class _Tree(object):
    def __init__(self, root):
        self.root = root

    def root_key(self):
        return self.root


class _Router(object):
    def __init__(self, root):
        self.tree = _Tree(root)


class _Console(object):
    def __init__(self):
        self.recs = None

    def records(self):
        return self.recs


class _Handle(object):
    def __init__(self, state):
        self.state = state


class _Mesh(object):
    def __init__(self, max_size):
        self.max_size = max_size
        self.sent = []
        self.fail = False

    def send(self, dst, data, service=0, ack=False, src_service=0):
        assert isinstance(data, bytes) and service == telesink.SERVICE and not ack
        if self.fail:
            return _Handle("failed")
        self.sent.append((dst, data))
        return _Handle("sent")


class _Profile(object):
    telemetry_bytes = 4096


class _Node(object):
    def __init__(self, root=GW, max_size=4096, budget=4096):
        self.key = ME
        self.router = _Router(root)
        self.console = _Console()
        self.m = _Mesh(max_size)
        self.profile = _Profile()
        self.profile.telemetry_bytes = budget
        self.tele = None

    def mesh(self):
        return self.m


def _records(up, rx, peers):
    node = ME.hex()
    st = {"v": 1, "kind": "state", "up": up, "node": node, "root": GW.hex(), "root_seq": 3,
          "parent": GW.hex(), "coords": [1], "depth": 1, "desc": None, "peers": len(peers), "routes": 2,
          "profile": "ESP32_GENERIC"}
    co = {"v": 1, "kind": "counters", "up": up, "node": node, "rx": {"traffic": rx, "keepalive": 3},
          "tx": {"traffic": rx // 2}, "drops": {}, "mem_free": 40000 + rx,
          "capacity": {"routes": [2, 64, 0]}, "big": ["x" * 20] * 10}
    pe = {"v": 1, "kind": "peers", "up": up, "node": node, "peers": peers}
    return (st, co, pe)


def _deliver(node, asm, now):
    """Every datagram the node sent -> whole records at the gateway."""
    out = []
    for dst, data in node.m.sent:
        assert dst == GW
        rec = asm.add(ME.hex(), json.loads(data.decode("utf-8")), now)
        if rec is not None:
            out.append(rec)
    del node.m.sent[:]
    return out


def _strip(rec):
    assert rec["v"] == 1
    return dict((k, v) for k, v in rec.items() if k not in ("t", "host_t", "port"))


def test_records_arrive_whole_and_deltas_are_smaller():
    node = _Node()
    asm = G.Assembler()
    peers = [{"port": 1, "key": GW.hex(), "link": "wifi"}]
    sizes = []
    for i in range(12):
        recs = _records(10 * i, 100 + i, peers)
        node.console.recs = recs
        telesink.period(node, None)
        sizes.append(sum(len(d) for _, d in node.m.sent))
        got = dict((r["kind"], r) for r in _deliver(node, asm, 1000.0 + i))
        # state goes every period; counters changed (rx); peers unchanged after the first
        assert set(got) == ({"state", "counters", "peers"} if i in (0, 10) else {"state", "counters"})
        for r in recs:
            if r["kind"] in got:
                assert _strip(got[r["kind"]]) == r
                assert got[r["kind"]]["t"] == 1000.0 + i
    assert max(sizes[1:10]) < sizes[0] / 2          # deltas: unchanged fields stay home
    assert sizes[10] >= sizes[0] * 0.9              # every FULL_EVERY periods: whole again
    st = node.tele
    assert st["sent"] > 0 and st["failed"] == 0 and st["sink"] == GW.hex()


def test_a_record_larger_than_a_datagram_goes_in_parts():
    limit = 200
    node = _Node(max_size=limit)
    asm = G.Assembler()
    recs = _records(5, 7, [{"port": p, "key": ("%02x" % p) * 32, "link": "ble"} for p in range(1, 5)])
    node.console.recs = recs
    telesink.period(node, None)
    assert all(len(d) <= limit for _, d in node.m.sent)
    assert sum(1 for _, d in node.m.sent if b'"m":1' in d) >= 1     # the state record needs two
    got = _deliver(node, asm, 5.0)
    # peers: its one field (the list) does not fit, so nothing of it goes
    assert sorted(r["kind"] for r in got) == ["counters", "state"]
    dropped = 0
    for r in got:
        w = dict((k, v) for k, v in recs[("state", "counters", "peers").index(r["kind"])].items())
        for f in list(w):
            # a field that does not fit one datagram by itself stays home, counted
            if f not in telesink.SKIP and len('"%s":%s' % (f, json.dumps(w[f], separators=(",", ":")))) + 40 > limit:
                w.pop(f)
                dropped += 1
        assert _strip(r) == w
    assert dropped == 1 and node.tele["too_big"] == 2        # counters "big", and the peers list


def test_the_byte_budget_defers_records_and_none_starves():
    node = _Node(budget=300)
    asm = G.Assembler()
    seen = set()
    for i in range(3):
        node.console.recs = _records(i, 50 + i, [])
        telesink.period(node, None)
        assert sum(len(d) for _, d in node.m.sent) <= 300 + 400   # the first record of a period always goes
        seen.update(r["kind"] for r in _deliver(node, asm, float(i)))
    assert node.tele["deferred"] > 0
    assert seen == {"state", "counters", "peers"}


def test_the_sink_without_configuration_is_a_gateway_keyed_root():
    node = _Node(root=OTHER_ROOT)
    node.console.recs = _records(1, 1, [])
    telesink.period(node, None)
    assert node.m.sent == [] and node.tele["no_sink"] == 1       # the root is no gateway
    node.router.tree.root = GW
    telesink.period(node, None)
    assert node.m.sent and all(dst == GW for dst, _ in node.m.sent)
    other = b"\x01" * 32
    del node.m.sent[:]
    telesink.period(node, other)                                  # a configured sink wins
    assert node.m.sent and all(dst == other for dst, _ in node.m.sent)
    node.key = GW                                                 # the gateway itself sends nothing
    node.router.tree.root = GW
    del node.m.sent[:]
    telesink.period(node, None)
    assert node.m.sent == []


def test_a_failed_send_is_counted_and_the_record_goes_again():
    node = _Node()
    node.console.recs = _records(1, 1, [])
    node.m.fail = True
    telesink.period(node, None)
    assert node.tele["failed"] == 1 and node.tele["sent"] == 0
    node.m.fail = False
    telesink.period(node, None)
    asm = G.Assembler()
    kinds = [r["kind"] for r in _deliver(node, asm, 1.0)]
    assert "peers" in kinds and "counters" in kinds     # nothing was marked sent by the failure


def test_capture_rotates_and_keeps_who_was_heard_when(tmp_path):
    cap = G.Capture(str(tmp_path), rotate_bytes=400)
    for i in range(20):
        cap.write({"v": 1, "kind": "state", "t": 100.0 + i, "node": ("a" if i % 2 else "b") * 64, "x": "y" * 40})
    cap.close()
    files = cap.files()
    assert len(files) > 3
    lines = [json.loads(l) for f in files for l in open(f)]
    assert [r["t"] for r in lines] == [100.0 + i for i in range(20)]       # nothing lost across files
    nodes = json.load(open(os.path.join(str(tmp_path), "nodes.json")))
    assert nodes["a" * 64] == {"first": 101.0, "last": 119.0, "records": 10}
    assert nodes["b" * 64]["last"] == 118.0
    again = G.Capture(str(tmp_path))                                     # a restart starts a new file
    again.close()
    assert len(again.files()) == len(files) + 1


def _gw(tmp_path):
    said = []
    gw = G.Gateway(G.Capture(str(tmp_path)), None, said.append)
    return gw, said


def test_bad_telemetry_is_one_line_and_counted(tmp_path):
    gw, said = _gw(tmp_path)
    src = "ab" * 32
    gw.on_datagram(src, G.SERVICE, b"\xff\xfe not utf-8")
    gw.on_datagram(src, G.SERVICE, b"{not json")
    gw.on_datagram(src, G.SERVICE, b"[1, 2]")
    gw.on_datagram(src, G.SERVICE, b'{"kind":"state","up":1,"root":"x"}')
    assert gw.counts["bad_telemetry"] == 3 and gw.counts["telemetry"] == 1
    assert len(said) == 3 and all("\n" not in s and src[:16] in s for s in said)
    assert "not UTF-8" in said[0]
    gw.on_line(b"@sm {\xff")                      # a garbled console line: ignored, no crash
    gw.on_line(b"@sm [1]")
    gw.capture.close()


def test_bad_downlink_topics_are_one_line_and_counted(tmp_path):
    gw, said = _gw(tmp_path)
    key = "cd" * 32
    for topic in ("snakemesh/down/%s/70000" % key, "snakemesh/down/%s/x" % key, "snakemesh/down/%s/-1" % key,
                  "snakemesh/down/zz%s/7" % key[2:], "snakemesh/down/abc/7", "snakemesh/down/%s" % key):
        gw._downlink(topic, b"hi")
    assert gw.counts["bad_downlink"] == 6 and len(said) == 6 and gw.down_q == []
    assert "service" in said[0] and "key" in said[3]
    gw._downlink("snakemesh/down/%s/7" % key.upper(), b"hi")
    assert gw.down_q == [(key, 7, b"hi")]
    gw.capture.close()


def test_downlink_outcome_is_delivered_or_failed_with_the_reason(tmp_path):
    asked = []
    replies = iter([{"ok": True, "state": "delivered"}, {"ok": True, "state": "failed", "reason": "timeout"},
                    None])

    def request(cmd, timeout=5.0):
        asked.append(cmd)
        return next(replies)
    said = []
    gw = G.Gateway(G.Capture(str(tmp_path)), request, said.append)
    key = "ef" * 32
    assert gw.send(key, 7, b"on") == "delivered"
    assert asked[-1] == "send %s 7 1 6f6e" % key
    assert gw.send(key, 7, b"") == "failed: timeout"
    assert gw.send(key, 8, b"x") == "failed: no answer from the node"
    assert gw.counts["downlink_delivered"] == 1 and gw.counts["downlink_failed"] == 2
    gw.capture.close()


def test_the_node_takes_sink_and_interval_from_config_and_arguments():
    from snake.runtime import config as C
    c = C.from_argv(["--seed", "11" * 32, "--sink", GW.hex(), "--telemetry", "15"], getenv=lambda k: None)
    assert c.sink == GW and c.telemetry_s == 15
    for bad in ({"sink": "abc"}, {"sink": 5}, {"telemetry_s": -1}, {"telemetry_s": "x"}):
        with pytest.raises(C.ConfigError):
            C.Config().apply_json(bad)
    cfg = C.Config()
    cfg.apply_json({"sink": "off"})
    assert cfg.sink == "off"


def _cli(*args):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "host_tools.cli"] + list(args), capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("cmd", [["node", "--seed", "11" * 32], ["provision", "--port", "/dev/null"]])
def test_a_bad_sink_is_one_line_before_anything_starts(cmd):
    rc, out, err = _cli(*(cmd + ["--sink", "c0ffee"]))
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        "snakemesh: error: --sink: expected a gateway's key (64 hex digits), auto or off, got 'c0ffee'"]


def test_gateway_needs_out_and_takes_the_issue_options():
    rc, out, err = _cli("gateway", "--help")
    assert rc == 0
    for opt in ("--seed", "--key-file", "--listen", "--connect", "--profile", "--out", "--mqtt"):
        assert opt in out
    rc, out, err = _cli("gateway")
    assert rc == 2 and "--out" in err


def test_of_an_object_field_only_the_entries_that_changed_go():
    node = _Node()
    asm = G.Assembler()
    recs = _records(1, 10, [])
    node.console.recs = recs
    telesink.period(node, None)
    _deliver(node, asm, 1.0)
    co = dict(recs[1])
    co["rx"] = {"traffic": 11, "keepalive": 3}          # one entry changed
    node.console.recs = (recs[0], co, recs[2])
    telesink.period(node, None)
    sent = [json.loads(d) for _, d in node.m.sent if b'"counters"' in d]
    assert len(sent) == 1 and sent[0]["d"] == 1 and sent[0]["rx"] == {"traffic": 11}
    got = [r for r in _deliver(node, asm, 2.0) if r["kind"] == "counters"]
    assert _strip(got[0]) == co                        # merged whole at the gateway
    co2 = dict(co)
    co2["drops"] = {"no_route": 2}                     # a new key: the object goes whole
    node.console.recs = (recs[0], co2, recs[2])
    telesink.period(node, None)
    sent = [json.loads(d) for _, d in node.m.sent if b'"counters"' in d]
    assert sent[0]["drops"] == {"no_route": 2} and "rx" not in sent[0]
    got = [r for r in _deliver(node, asm, 3.0) if r["kind"] == "counters"]
    assert _strip(got[0]) == co2


def test_progress_says_nodes_records_and_who_was_heard_last(tmp_path):
    gw, said = _gw(tmp_path)
    gw.on_datagram("ab" * 32, G.SERVICE, b'{"kind":"state","up":1}', now=100.0)
    gw.on_datagram("cd" * 32, G.SERVICE, b'{"kind":"state","up":1}', now=104.0)
    assert gw.progress(now=110.0) == ("nodes 2, records 2, last %s 6 s ago, quietest %s 10 s ago"
                                      % ("cd" * 8, "ab" * 8))
    gw.capture.close()
