"""The gateway's parts without processes (issue 26): the node's telemetry
sender (firmware/snake/runtime/telesink.py) against the gateway's
assembler (host_tools/gateway.py) record for record, through the real
datagram layer of the receiving node; one datagram per period, deltas
smaller than whole records, the byte budget, parts of records larger than
a datagram, the sink found without configuration; the capture's rotation
and nodes.json; bad input one line and counted."""
import json
import os

import pytest

from snake.runtime import telesink
from snake.datagram import Datagrams
from snake.profile import Profile
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
    """What telesink uses of the router: the tree's root and send()."""

    def __init__(self, root, frame_max):
        self.tree = _Tree(root)
        self.sent = []
        self.fail = False
        self.frame_max = frame_max

    def send(self, dst, payload, now, hop_limit=0):
        assert isinstance(payload, memoryview)
        if len(payload) > self.frame_max:
            from snake.wire import WireError
            raise WireError("oversize")
        if self.fail:
            return False
        self.sent.append((dst, bytes(payload)))
        return True


class _Console(object):
    def __init__(self):
        self.recs = None

    def records(self):
        return self.recs


class _Profile(object):
    telemetry_bytes = 4096
    dgram_frag = 880


class _Node(object):
    def __init__(self, root=GW, limit=880, budget=4096, frame_max=8192):
        self.key = ME
        self.router = _Router(root, frame_max)
        self.console = _Console()
        self.profile = _Profile()
        self.profile.telemetry_bytes = budget
        self.profile.dgram_frag = limit
        self.tele = None

    @property
    def sent(self):
        return self.router.sent


def _st(node):
    # what the node keeps between periods, by name
    return dict(zip(telesink.FIELDS, node.tele))


def _records(up, rx, peers):
    node = ME.hex()
    st = {"v": 1, "kind": "state", "up": up, "node": node, "root": GW.hex(), "root_seq": 3,
          "parent": GW.hex(), "coords": [1], "depth": 1, "desc": None, "peers": len(peers), "routes": 2,
          "profile": "ESP32_GENERIC"}
    co = {"v": 1, "kind": "counters", "up": up, "node": node, "rx": {"traffic": rx, "keepalive": 3},
          "tx": {"traffic": rx // 2}, "drops": {}, "mem_free": 40000 + rx,
          "capacity": {"routes": [2, 64, 0]}, "occupancy": {"routes": [2, 64], "hops": [1, 40]},
          "datagrams": None, "big": ["x" * 20] * 10, "ratio": 0.25, "neg": -70000, "huge": 2 ** 40,
          "flag": True, "word": "abc", "hexish": "ABCDEF" * 10 + "0123"}
    pe = {"v": 1, "kind": "peers", "up": up, "node": node, "peers": peers}
    return (st, co, pe)


def _gateway_layer():
    # the gateway node's datagram layer (GATEWAY-like settings)
    got = []
    dg = Datagrams(Profile({"dgram_max": 4096, "dgram_frag": 880, "dgram_reasm": 2, "dgram_pending": 2,
                            "dgram_acks": 2, "dgram_dedup": 4}), GW)
    dg.on_datagram = lambda src, dsvc, ssvc, data: got.append((bytes(src), dsvc, ssvc, bytes(data)))
    dg.tx = lambda *a: 0
    return dg, got


def _deliver(node, asm, now):
    """Every datagram the node sent, through the gateway's datagram layer,
    -> whole records at the gateway."""
    dg, got = _gateway_layer()
    out = []
    for dst, payload in node.sent:
        assert dst == GW
        assert dg.receive(ME, payload, 0) is True
    assert len(got) == len(node.sent) and dg.stats[15] == 0          # none malformed
    for src, dsvc, ssvc, data in got:
        assert src == ME and dsvc == telesink.SERVICE and ssvc == 0
        out += asm.add_datagram(ME.hex(), data, now)
    del node.sent[:]
    return out


def _strip(rec):
    assert rec["v"] == 1
    return dict((k, v) for k, v in rec.items() if k not in ("t", "host_t", "port"))


def test_records_arrive_whole_in_one_datagram_and_deltas_are_small():
    node = _Node()
    asm = G.Assembler()
    peers = [{"port": 1, "key": GW.hex(), "link": "wifi", "root": GW.hex(), "root_seq": 3, "coords": [1]}]
    sizes = []
    for i in range(24):
        recs = _records(10 * i, 100 + i, peers)
        node.console.recs = recs
        telesink.period(node, None)
        assert len(node.sent) == 1                      # the period's records in one datagram
        sizes.append(len(node.sent[0][1]))
        got = dict((r["kind"], r) for r in _deliver(node, asm, 1000.0 + i))
        # state goes every period; counters changed (rx); peers unchanged but every 10th period (4, 14)
        assert set(got) == ({"state", "counters", "peers"} if i in (0, 4, 14) else {"state", "counters"}), i
        for r in recs:
            if r["kind"] in got:
                assert _strip(got[r["kind"]]) == r
                assert got[r["kind"]]["t"] == 1000.0 + i
    whole = sizes[0]
    json_whole = sum(len(json.dumps(r, separators=(",", ":"))) for r in _records(0, 100, peers))
    assert whole < json_whole / 2                       # binary: names as indices, keys as bytes
    assert max(sizes[i] for i in (1, 2, 5, 6, 8, 9)) < 60        # deltas: a few bytes of what changed
    st = _st(node)
    assert st["sent"] == 24 and st["failed"] == 0 and st["sink"] == GW


def test_the_datagram_is_one_fragment_without_ack_as_the_layer_writes_it():
    node = _Node()
    node.console.recs = _records(5, 7, [])
    telesink.period(node, None)
    (dst, p), = node.sent
    n = len(p) - 17
    assert p[:5] == b"SD\x01\x01\x00"                   # DATA, no ack asked
    assert p[5:9] == bytes([0, telesink.SERVICE, 0, 0])
    assert p[11:17] == bytes([1, 0, n >> 8, n & 0xFF, n >> 8, n & 0xFF])
    assert p[17] == telesink.FORMAT


def test_a_record_larger_than_a_datagram_goes_in_parts():
    limit = 120
    node = _Node(limit=limit)
    asm = G.Assembler()
    peers = [{"port": p, "key": ("%02x" % p) * 32, "link": "ble"} for p in range(1, 5)]
    recs = _records(5, 7, peers)
    node.console.recs = recs
    got = []
    for i in range(3):       # a record in parts goes as a period's first record; each kind is first once
        telesink.period(node, None)
        assert all(len(d) <= 17 + limit for _, d in node.sent)
        got += _deliver(node, asm, 5.0 + i)
    kinds = dict((r["kind"], r) for r in got)
    assert sorted(kinds) == ["counters", "peers", "state"]
    assert _strip(kinds["state"]) == recs[0]
    # a field that does not fit one datagram by itself stays home, counted:
    # the peers list (4 peers) and counters' "big"
    assert "big" not in kinds["counters"] and "peers" not in kinds["peers"]
    assert _strip(kinds["counters"]) == dict((k, v) for k, v in recs[1].items() if k != "big")
    assert _st(node)["too_big"] >= 2


def test_the_byte_budget_defers_records_and_none_starves():
    node = _Node(budget=100)
    asm = G.Assembler()
    seen = set()
    for i in range(3):
        node.console.recs = _records(i, 50 + i, [])
        telesink.period(node, None)
        payload = sum(len(d) - 17 for _, d in node.sent)
        kinds = [r["kind"] for r in _deliver(node, asm, float(i))]
        # within the budget (and its datagram's 3 bytes of format and uptime),
        # but the first record of a period always goes
        assert kinds and (payload <= 100 + 3 or len(kinds) == 1), (payload, kinds)
        seen.update(kinds)
    assert _st(node)["deferred"] > 0
    assert seen == {"state", "counters", "peers"}


def test_the_sink_without_configuration_is_a_gateway_keyed_root():
    node = _Node(root=OTHER_ROOT)
    node.console.recs = _records(1, 1, [])
    telesink.period(node, None)
    assert node.sent == [] and _st(node)["no_sink"] == 1       # the root is no gateway
    node.router.tree.root = GW
    telesink.period(node, None)
    assert node.sent and all(dst == GW for dst, _ in node.sent)
    other = b"\x01" * 32
    del node.sent[:]
    telesink.period(node, other)                                  # a configured sink wins
    assert node.sent and all(dst == other for dst, _ in node.sent)
    node.key = GW                                                 # the gateway itself sends nothing
    node.router.tree.root = GW
    del node.sent[:]
    telesink.period(node, None)
    assert node.sent == []


def test_a_failed_send_is_counted_and_the_next_period_goes_whole():
    node = _Node()
    node.console.recs = _records(1, 1, [])
    telesink.period(node, None)
    del node.sent[:]
    node.router.fail = True
    node.console.recs = _records(2, 2, [])
    telesink.period(node, None)
    assert _st(node)["failed"] == 1 and _st(node)["sent"] == 1
    node.router.fail = False
    node.console.recs = _records(3, 3, [])
    telesink.period(node, None)
    asm = G.Assembler()
    got = dict((r["kind"], r) for r in _deliver(node, asm, 1.0))
    assert sorted(got) == ["counters", "peers", "state"]           # whole again: nothing was assumed sent
    assert _strip(got["counters"]) == node.console.recs[1]


def test_a_frame_too_large_for_the_router_is_a_failed_send():
    node = _Node(frame_max=50)
    node.console.recs = _records(1, 1, [])
    telesink.period(node, None)
    assert _st(node)["failed"] == 1 and node.sent == []


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
    (_, p), = node.sent
    up, sent = G.decode(p[17:])
    sent = dict((k, (f, d)) for k, f, d, m in sent)
    assert sent["counters"] == ({"rx": {"traffic": 11}}, True)
    assert sent["state"] == ({}, True)                  # state: every period, here with nothing changed
    got = [r for r in _deliver(node, asm, 2.0) if r["kind"] == "counters"]
    assert _strip(got[0]) == co                        # merged whole at the gateway
    co2 = dict(co)
    co2["drops"] = {"no_route": 2}                     # a new name: the record goes whole
    node.console.recs = (recs[0], co2, recs[2])
    telesink.period(node, None)
    (_, p), = node.sent
    sent = dict((k, (f, d)) for k, f, d, m in G.decode(p[17:])[1])
    assert sent["counters"][1] is False and sent["counters"][0]["drops"] == {"no_route": 2}
    got = [r for r in _deliver(node, asm, 3.0) if r["kind"] == "counters"]
    assert _strip(got[0]) == co2


def test_every_name_of_a_nodes_records_has_an_index():
    # names missing from NAMES go as text: correct, but larger
    from snake import report
    for tab in (report.TYPE_NAMES, report.LINK_NAMES, report.DROP_NAMES, report.DEFENCE_NAMES,
                report.DGRAM_STATS):
        assert set(tab) <= set(telesink.NAMES), set(tab) - set(telesink.NAMES)
    assert len(set(telesink.NAMES)) == len(telesink.NAMES)
    assert len(telesink.new_state()) == len(telesink.FIELDS)
    assert set(telesink.FIELDS) - {"digests", "n"} <= set(telesink.NAMES)


def test_bad_binary_telemetry_is_one_line_and_counted(tmp_path):
    gw, said = _gw(tmp_path)
    src = "ab" * 32
    F = bytes([telesink.FORMAT])
    for bad in (F, F + b"\x05\x00\x00", F + b"\x05\x00\x7f\xbf", F + b"\x05\x00\x00\xbf\x18\xf0\x01\xff",
                F + b"\x05\x00\x00\xbf\x04\x62\xff\xfe\xff"):
        gw.on_datagram(src, G.SERVICE, bad)
    assert gw.counts["bad_telemetry"] == 5 and gw.counts["telemetry"] == 0
    assert len(said) == 5 and all("\n" not in s and src[:16] in s for s in said)
    assert "unknown name index" in said[3] and "not UTF-8" in said[4]
    gw.on_datagram(src, G.SERVICE, F + b"\x05\x00\x00\xbf\xff")
    assert gw.counts["telemetry"] == 1
    gw.capture.close()


def test_progress_says_nodes_records_and_who_was_heard_last(tmp_path):
    gw, said = _gw(tmp_path)
    gw.on_datagram("ab" * 32, G.SERVICE, b'{"kind":"state","up":1}', now=100.0)
    gw.on_datagram("cd" * 32, G.SERVICE, b'{"kind":"state","up":1}', now=104.0)
    assert gw.progress(now=110.0) == ("nodes 2, records 2, last %s 6 s ago, quietest %s 10 s ago"
                                      % ("cd" * 8, "ab" * 8))
    gw.capture.close()
