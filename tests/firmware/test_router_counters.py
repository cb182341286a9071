# Byte and frame counters per frame type and per link type (README
# "Telemetry format": counters tx_bytes, tx_link, tx_bytes_link), counted in
# Router._tx for every frame a link accepted.
from snake import wire
from snake.telemetry import TYPE_NAMES, LINK_NAMES, BYTES_CARRY
from routertest import Node, signer, keys_sorted, announcement, traffic

K = keys_sorted(list(range(61, 67)))
WIFI, BLE = 1, 4


def pub(i):
    return signer(K[i]).public


def _hear(n, now):
    """Both peers say something (a keepalive) so neither is dead."""
    ka = bytearray(16)
    k = wire.encode_keepalive(ka)
    n.rx(1, bytes(ka[:k]), now)
    n.rx(2, bytes(ka[:k]), now)


def _mesh():
    """Node K1 with a Wi-Fi parent (K5 is root) and a BLE child, after
    announcements, keepalives, a bootstrap and a relayed traffic frame."""
    n = Node(K[1])
    n.r.port_up(1, pub(5), WIFI, 0)
    n.r.port_up(2, pub(0), BLE, 0)
    n.rx(1, announcement(K[5], 1, [(K[5], 3)]), 1)
    _hear(n, 4000)
    n.r.tick(5000)       # keepalives (3 s idle) and a bootstrap
    n.rx(2, traffic(pub(5), pub(0), b"x" * 40, wm_key=wire.FULL_KEY), 5100)
    return n


def _expected(n):
    by_type = dict((t, 0) for t in TYPE_NAMES)
    frames_link = dict((l, 0) for l in LINK_NAMES)
    bytes_link = dict((l, 0) for l in LINK_NAMES)
    for port, fr in n.sent:
        by_type[TYPE_NAMES[fr[5]]] += len(fr)
        link = LINK_NAMES[WIFI if port == 1 else BLE]
        frames_link[link] += 1
        bytes_link[link] += len(fr)
    return by_type, frames_link, bytes_link


def test_bytes_per_frame_type_and_frames_and_bytes_per_link_type():
    n = _mesh()
    d = n.r.counters.as_dict()
    by_type, frames_link, bytes_link = _expected(n)
    # every frame type we sent is there, and the sums match what left
    assert by_type["announcement"] > 0 and by_type["traffic"] > 0
    assert by_type["keepalive"] > 0 and by_type["bootstrap"] > 0
    assert d["tx_bytes"] == by_type
    assert d["tx_link"] == frames_link and frames_link["wifi"] > 0 and frames_link["ble"] > 0
    assert d["tx_bytes_link"] == bytes_link
    assert sum(d["tx_link"].values()) == sum(d["tx"].values()) == len(n.sent)


def test_frames_the_link_refused_are_not_counted():
    n = _mesh()
    before = n.r.counters.as_dict()
    n.queue_ok = False
    _hear(n, 8500)
    n.r.tick(9000)
    after = n.r.counters.as_dict()
    assert after["tx_bytes"] == before["tx_bytes"]
    assert after["tx_bytes_link"] == before["tx_bytes_link"]
    assert after["drops"].get("queue_full", 0) > before["drops"].get("queue_full", 0)


def test_byte_counters_carry_instead_of_growing_past_a_small_int():
    n = _mesh()
    c = n.r.counters
    t = wire.T_KEEPALIVE
    c.tx_bytes[t] = BYTES_CARRY - 3
    c.tx_bytes_link[WIFI] = BYTES_CARRY - 3
    base = n.r.counters.as_dict()
    n.clear()
    _hear(n, 8500)
    n.r.tick(9000)   # keepalives (10 bytes each)
    keep = sum(len(fr) for p, fr in n.sent if fr[5] == t)
    wifi = sum(len(fr) for p, fr in n.sent if p == 1)
    assert keep >= 10 and wifi >= 10
    d = n.r.counters.as_dict()
    assert d["tx_bytes"]["keepalive"] == base["tx_bytes"]["keepalive"] + keep
    assert d["tx_bytes_link"]["wifi"] == base["tx_bytes_link"]["wifi"] + wifi
    # the low halves stay below the carry (small ints on a 32-bit port)
    assert c.tx_bytes[t] < BYTES_CARRY and c.tx_bytes_hi[t] == 1
    assert c.tx_bytes_link[WIFI] < BYTES_CARRY and c.tx_bytes_link_hi[WIFI] == 1


def test_drop_names_follow_the_drop_indices():
    # the names live in the cold snake/report.py, the indices in
    # snake/telemetry.py: every D_X names "x" at its index, none is missing
    from snake import telemetry
    from snake.report import DROP_NAMES
    found = 0
    for name in dir(telemetry):
        if name.startswith("D_"):
            i = getattr(telemetry, name)
            assert DROP_NAMES[i] == name[2:].lower(), (name, i)
            found += 1
    assert found == telemetry.N_DROPS == len(DROP_NAMES)
    assert len(telemetry.Counters().drops) == len(DROP_NAMES)
