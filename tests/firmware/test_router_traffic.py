# Hybrid traffic forwarding and wakeup broadcasts (docs/reference/PROTOCOL_NOTES.md "Traffic
# forwarding (hybrid)" and difference 5), one test per rule.
from snake import wire
from snakehost import wire_host
from snake.telemetry import (D_LOOP, D_WATERMARK, D_HOP_LIMIT, D_NO_ROUTE, D_WAKEUP_ROOT,
                             D_WAKEUP_DUP, D_WAKEUP_HOP_LIMIT, D_BAD_SIGNATURE)
from routertest import Node, signer, keys_sorted, announcement, decode, traffic, wakeup

T_ = wire.T_TRAFFIC
W_ = wire.T_WAKEUP
K = keys_sorted(list(range(31, 41)))


def pub(i):
    return signer(K[i]).public


def setup(me=4, **profile):
    n = Node(K[me], **profile)
    n.r.port_up(1, pub(7), 1, 0)
    n.rx(1, announcement(K[9], 1, [(K[9], 3), (K[7], 1)]), 1)
    n.clear()
    return n


def test_snek_traffic_for_us_is_delivered_and_source_coordinates_cached():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.rx(2, traffic(n.key, pub(2), b"hello", scoords=wire_host.encode_coords([3, 1, 5])[2:],
                    wm_key=pub(4)), 10)
    assert n.delivered == [(pub(2), b"hello")]
    slot = n.r.ccache.find(pub(2))
    assert slot >= 0 and wire_host.decode_coords(n.r.cc_coords, slot * n.r.cc_max, n.r.cc_len[slot]) == [3, 1, 5]


def test_reply_uses_tree_routing_to_cached_coordinates():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    # K2 is a child of the root at [5]; we are at [3, 1] below K7 ([3])
    n.rx(2, traffic(n.key, pub(2), b"ping", scoords=wire_host.encode_coords([5])[2:],
                    wm_key=pub(4)), 10)
    n.rx(2, announcement(K[9], 1, [(K[9], 5), (K[2], 2)]), 11)
    n.clear()
    assert n.r.send(pub(2), b"pong", 20)
    out = n.frames(T_)
    assert len(out) == 1 and out[0][0] == 2
    f = decode(out[0][1])
    assert f.dcoords_len > 0 and not f.has_wm
    assert wire_host.decode_coords(out[0][1], f.dcoords_off, f.dcoords_len) == [5]


def test_first_traffic_goes_by_snek_with_our_coordinates_and_a_real_watermark():
    n = setup()
    assert n.r.send(pub(8), b"x", 10)
    (port, fr), = n.frames(T_)
    f = decode(fr)
    assert port == 1 and f.dcoords_len == 0 and f.has_wm
    assert wire_host.decode_coords(fr, f.scoords_off, f.scoords_len) == [3, 1]
    assert bytes(fr[f.wm_off:f.wm_off + 32]) == pub(9) and f.wm_seq == 0
    assert f.hop_limit == n.r.profile.traffic_hop_limit == 255


def test_tree_routing_dead_end_falls_back_to_snek():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    # coordinates nobody closer than us knows: [3, 1, 9] (a child of ours we
    # have no link to); destination key K8 is above us -> SNEK to the parent
    n.rx(2, traffic(pub(8), pub(2), b"x", dcoords=wire_host.encode_coords([3, 1, 9])[2:]), 10)
    out = n.frames(T_)
    assert len(out) == 1 and out[0][0] == 1
    f = decode(out[0][1])
    assert f.dcoords_len == 0 and f.has_wm
    assert bytes(out[0][1][f.wm_off:f.wm_off + 32]) == pub(9)


def test_tree_routed_traffic_relayed_towards_closer_peer():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.rx(2, announcement(K[9], 1, [(K[9], 3), (K[7], 1), (K[4], 2), (K[2], 4)]), 3)
    n.clear()
    # K2's coordinates are its announcement's hop ports minus its own hop:
    # [3, 1, 2], one hop from [3, 1, 2, 4]; we are two hops away
    n.rx(1, traffic(pub(0), pub(9), b"x", dcoords=wire_host.encode_coords([3, 1, 2, 4])[2:]), 10)
    out = n.frames(T_)
    assert len(out) == 1 and out[0][0] == 2


def test_traffic_dropped_when_next_hop_is_the_incoming_port():
    n = setup()
    n.rx(1, traffic(pub(9), pub(0), b"x", wm_key=wire.FULL_KEY), 10)
    assert n.r.counters.drops[D_LOOP] == 1 and n.frames(T_) == []


def test_traffic_dropped_when_new_watermark_is_worse():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.rx(2, traffic(pub(6), pub(2), b"x", wm_key=pub(5)), 10)
    assert n.r.counters.drops[D_WATERMARK] == 1 and n.frames(T_) == []


def _relay_hop_limit(n, payload, hop_limit, t):
    """Relay one frame from port 2 (towards pub(8), via port 1): the hop
    limit it leaves with, or None when it was not relayed."""
    n.clear()
    n.rx(2, traffic(pub(8), pub(2), payload, hop_limit=hop_limit), t)
    out = n.frames(T_)
    if not out:
        return None
    (port, fr), = out
    assert port == 1
    return fr[7]


def test_trace_probes_are_counted_down_by_relays_and_end_at_one():
    from snake.runtime import probe
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    expired = []
    n.r.expired = lambda buf, f: expired.append(bytes(buf[f.src_off:f.src_off + 32]))
    tr = bytes(probe.make(probe.TRACE, 9, 5))
    assert _relay_hop_limit(n, tr, 5, 10) == 4
    assert _relay_hop_limit(n, tr, 30, 11) == 29      # in both ranges
    assert _relay_hop_limit(n, tr, 1, 20) is None
    assert n.r.counters.drops[D_HOP_LIMIT] == 1 and expired == [pub(2)]


def test_snakemesh_hop_limit_budget_is_counted_down_to_the_reference_range():
    # choice A: above 10 the hop limit is snakemesh's budget (it originates
    # 255); a relay counts it down and it is used up at 10
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    expired = []
    n.r.expired = lambda buf, f: expired.append(1)
    assert _relay_hop_limit(n, b"x", 255, 10) == 254
    assert _relay_hop_limit(n, b"x", 12, 11) == 11
    assert _relay_hop_limit(n, b"x", 11, 12) is None
    assert n.r.counters.drops[D_HOP_LIMIT] == 1 and expired == []


def test_reference_hop_limits_are_left_as_they_are():
    # the reference originates traffic with 10 and its relays (hop limiting
    # off) never count it down: a snakemesh relay leaves 10 and below alone,
    # or reference traffic would die after 9 snakemesh relays
    from snake.runtime import probe
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    assert _relay_hop_limit(n, b"x", 10, 10) == 10
    assert _relay_hop_limit(n, b"x", 1, 11) == 1
    assert _relay_hop_limit(n, bytes(probe.make(probe.PING, 3)), 2, 12) == 2
    assert n.r.counters.drops[D_HOP_LIMIT] == 0


def test_without_hop_limiting_nothing_is_counted_down():
    from snake.runtime import probe
    n = setup(hop_limiting=False)
    n.r.port_up(2, pub(2), 1, 2)
    assert _relay_hop_limit(n, b"x", 255, 10) == 255
    assert _relay_hop_limit(n, bytes(probe.make(probe.TRACE, 9, 1)), 1, 11) == 1


def test_traffic_to_unknown_key_at_dead_end_is_counted_not_delivered():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    # the key right below ours: nobody has it, and we are its closest node
    k = (int.from_bytes(pub(4), "big") - 1).to_bytes(32, "big")
    n.rx(2, traffic(k, pub(2), b"x", wm_key=wire.FULL_KEY), 10)
    assert n.delivered == [] and n.r.counters.drops[D_NO_ROUTE] == 1


# ---- wakeups -------------------------------------------------------------
def test_new_peer_gets_our_own_wakeup_only_on_its_first_announcement():
    m = Node(K[4])
    m.r.port_up(1, pub(7), 1, 0)
    m.r.port_up(2, pub(2), 1, 0)
    m.rx(1, announcement(K[9], 1, [(K[9], 3), (K[7], 1)]), 1)
    w = m.frames(W_)
    # hop limit 3: snakemesh's own wakeups reach 3 hops (router.py
    # WAKEUP_HOP_LIMIT; the reference originates 5)
    assert len(w) == 1 and w[0][0] == 1 and w[0][1][7] == 3
    m.rx(1, announcement(K[9], 1, [(K[9], 3), (K[7], 1)]), 2)
    assert len(m.frames(W_)) == 1


def test_wakeup_relayed_with_hop_limit_decremented_not_back():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.r.port_up(3, pub(3), 1, 2)
    n.clear()
    n.rx(2, wakeup(K[0], 5000, K[9], 1, hop_limit=5), 10)
    out = n.frames(W_)
    assert sorted(p for p, _ in out) == [1, 3]
    assert all(fr[7] == 4 for _, fr in out)


def test_wakeup_filters_before_verifying():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    c = n.r.counters
    n.rx(2, wakeup(K[0], 5000, K[8], 1), 10)
    assert c.drops[D_WAKEUP_ROOT] == 1
    done = c.verify_done
    n.rx(2, wakeup(K[0], 5000, K[9], 1), 20)
    assert c.verify_done == done + 1
    # a storm from the same origin within 30 s costs no verification
    for i in range(20):
        n.rx(2, wakeup(K[0], 5001 + i, K[9], 1), 30 + i)
    n.rx(2, wakeup(K[0], 4000, K[9], 1), 40000)  # old sequence
    assert c.verify_done == done + 1 and c.drops[D_WAKEUP_DUP] == 21
    n.rx(2, wakeup(K[0], 9000, K[9], 1), 40000)
    assert c.verify_done == done + 2


def test_wakeup_at_hop_limit_one_is_accepted_not_relayed():
    # as the reference's _handleBroadcast: the origin is taken into the
    # filter (and may ask for an early bootstrap), only the relaying stops
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.r.port_up(3, pub(3), 1, 2)
    n.clear()
    c = n.r.counters
    done = c.verify_done
    n.r.bootstrap_soon = False
    n.rx(2, wakeup(K[0], 5000, K[9], 1, hop_limit=1), 10)
    assert c.verify_done == done + 1 and n.frames(W_) == []
    assert c.drops[D_WAKEUP_HOP_LIMIT] == 1
    assert n.r.wakeups.find(pub(0)) >= 0 and n.r.bootstrap_soon
    # the same origin again within 30 s is a duplicate now
    n.rx(2, wakeup(K[0], 5001, K[9], 1, hop_limit=4), 20)
    assert c.drops[D_WAKEUP_DUP] == 1 and n.frames(W_) == []


def test_wakeup_with_bad_signature_is_dropped():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.clear()
    n.rx(2, wakeup(K[0], 5000, K[9], 1, sig=b"\x07" * 64), 10)
    assert n.r.counters.drops[D_BAD_SIGNATURE] == 1 and n.frames(W_) == []


def test_own_wakeup_flooded_once_after_a_root_change_not_every_60_seconds():
    # snakemesh timing policy (Router._wakeup_due): a flood once our root
    # has changed and stayed for 1 s; the reference floods every 60 s
    n = Node(K[4])
    n.r.port_up(1, pub(7), 1, 0)
    n.r.port_up(2, pub(2), 1, 0)
    ka = bytearray(10)
    wire.encode_keepalive(ka)
    n.rx(1, announcement(K[9], 1, [(K[9], 3), (K[7], 1)]), 100)   # root K9 now
    n.clear()
    floods = []
    t = 100
    while t < 200000:
        t += 250
        n.rx(1, bytes(ka), t)
        n.rx(2, bytes(ka), t)
        n.r.tick(t)
        out = n.frames(W_)
        if out:
            floods.append((t, sorted(p for p, _ in out), out))
        n.clear()
    assert [(ft, ports) for ft, ports, _ in floods] == [(1100, [1, 2])], floods
    fr = floods[0][2][0][1]
    f = decode(fr)
    assert bytes(fr[f.src_off:f.src_off + 32]) == n.key and f.hop_limit == 3
    assert bytes(fr[f.root_off:f.root_off + 32]) == pub(9)
    # the parent goes away: we are our own root (a partition); flooded again
    down = t + 10
    n.r.port_down(1, down)
    first = t + 250 * ((down + 1000 - t + 249) // 250)   # first tick 1 s after it
    floods = []
    while t < 210000:
        t += 250
        n.rx(2, bytes(ka), t)
        n.r.tick(t)
        if n.frames(W_):
            floods.append((t, [p for p, _ in n.frames(W_)]))
        n.clear()
    assert floods == [(first, [2])], floods