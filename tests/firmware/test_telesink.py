# The telemetry sender (snake/runtime/telesink.py) on both interpreters:
# its bytes are the same under CPython and MicroPython (a pinned vector),
# a period's records go as one datagram that the receiving node's datagram
# layer takes (one fragment, service 30, no ack), deltas carry only what
# changed, and what the node keeps between periods is two bytes per value.
# The gateway's side (decoding, merging) is tests/host/test_gateway_parts.py.
from snake.runtime import telesink
from snake.datagram import Datagrams
from snake.profile import Profile

ME = bytes(range(32))
GW = b"\xff\xff" + bytes(30)
KEY = "ab" * 32


class _Tree:
    def root_key(self):
        return GW


class _Router:
    def __init__(self):
        self.tree = _Tree()
        self.sent = []

    def send(self, dst, payload, now, hop_limit=0):
        self.sent.append((dst, bytes(payload)))
        return True


class _Console:
    def __init__(self, recs):
        self.recs = recs

    def records(self):
        return self.recs


class _Profile:
    telemetry_bytes = 1024
    dgram_frag = 880


class _Node:
    def __init__(self, recs):
        self.key = ME
        self.router = _Router()
        self.console = _Console(recs)
        self.profile = _Profile()
        self.tele = None


def _recs(up, n):
    # one name per object, so that the bytes do not depend on an
    # interpreter's order of a dict's entries
    return ({"v": 1, "kind": "state", "up": up, "node": ME, "root": KEY},
            {"v": 1, "kind": "counters", "up": up, "rx": {"traffic": n}},
            {"v": 1, "kind": "peers", "up": up, "peers": [{"key": KEY}, None, -2, "ble", 70000, True]})


def test_the_bytes_are_pinned():
    node = _Node(_recs(300, 5))
    telesink.period(node, None)
    (dst, p), = node.router.sent
    assert dst == GW
    assert p.hex() == (
        "5344010100" "001e" "0000" "0001" "0100" "006b" "006b"  # header: DATA, service 30, id 1, 107 bytes
        "01" "19012c"                                            # format, up 300
        "00" "00" "bf" "05" "5820" + "ab" * 32 + "ff"            # state: root as 32 bytes
        "00" "01" "bf" "10" "bf" "1827" "05" "ff" "ff"           # counters: rx {traffic: 5}
        "00" "02" "bf" "02" "86" "a1" "0e" "5820" + "ab" * 32 + "f6" "21" "63626c65" "1a00011170" "f5" "ff")


def test_a_period_is_one_datagram_the_layer_delivers_and_deltas_are_small():
    got = []
    dg = Datagrams(Profile({"dgram_max": 4096, "dgram_frag": 880, "dgram_reasm": 1, "dgram_pending": 1,
                            "dgram_acks": 1, "dgram_dedup": 2}), GW)
    dg.on_datagram = lambda src, dsvc, ssvc, data: got.append((bytes(src), dsvc, ssvc, bytes(data)))
    dg.tx = lambda *a: 0
    node = _Node(_recs(300, 5))
    sizes = []
    for i in range(6):
        node.console.recs = _recs(300 + i, 5 + i)
        telesink.period(node, None)
        assert len(node.router.sent) == 1
        p = node.router.sent.pop()[1]
        assert dg.receive(ME, p, 0) is True
        sizes.append(len(p))
    assert len(got) == 6 and all(g[0] == ME and g[1] == telesink.SERVICE and g[2] == 0 for g in got)
    assert dg.stats[15] == 0          # none malformed
    # a delta: state with nothing changed and the one counter that did
    # (after format and up 301; counters first: each period another record leads)
    assert got[1][3][4:].hex() == "0101bf10bf182706ffff" "0100bfff"
    # whole again every FULL_EVERY periods, each kind in its own: peers in period 4
    assert max(sizes[1:4] + sizes[5:]) < sizes[0] // 3 and sizes[4] > sizes[1] + 40
    st = dict(zip(telesink.FIELDS, node.tele))
    assert st["sent"] == 6 and st["bytes"] == sum(sizes) - 17 * 6 and st["sink"] == GW
    # between periods: two bytes per value and two for the shape, per kind
    assert [len(v) for v in st["digests"]] == [4, 4, 4]       # state, counters, peers
