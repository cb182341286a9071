# Spanning-tree rules of docs/reference/PROTOCOL_NOTES.md, one test per rule, on a single router
# driven by hand (virtual time, scripted peers).
from snake import wire
from snakehost import wire_host
from snake.crypto import verify
from routertest import Node, signer, keys_sorted, announcement, decode
from snake import report

A_ = wire.T_ANNOUNCEMENT
MIN = 60 * 1000


def roles(n):
    """n ids sorted by key: index 0 lowest ... n-1 highest."""
    return keys_sorted(list(range(11, 11 + n)))


def test_peer_connects_gets_our_root_announcement_signed_for_its_port():
    lo, hi = roles(2)
    n = Node(hi)
    assert n.r.port_up(3, signer(lo).public, 1, 0)
    frames = n.frames(A_, 3)
    assert len(frames) == 1
    f = decode(frames[0][1])
    b = frames[0][1]
    assert bytes(b[f.root_off:f.root_off + 32]) == n.key
    assert f.root_seq == 1 and f.nhops == 1 and f.hop_port[0] == 3
    assert bytes(b[f.hop_key_off[0]:f.hop_key_off[0] + 32]) == n.key
    so = f.hop_sig_off[0]
    assert verify(n.key, bytes(b[f.ann_off:f.hop_off[0]]), bytes(b[so:so + 64]))


def test_keepalive_after_3s_idle():
    lo, hi = roles(2)
    n = Node(hi)
    n.r.port_up(1, signer(lo).public, 1, 0)
    n.clear()
    n.r.tick(2900)
    assert n.frames(wire.T_KEEPALIVE) == []
    n.r.tick(3000)
    ka = n.frames(wire.T_KEEPALIVE, 1)
    assert len(ka) == 1 and len(ka[0][1]) == 10


def test_peer_silent_5s_is_dead_and_disconnected():
    lo, hi = roles(2)
    n = Node(hi)
    n.r.port_up(1, signer(lo).public, 1, 0)
    ka = bytearray(10)
    wire.encode_keepalive(ka)
    n.rx(1, bytes(ka), 4000)
    n.r.tick(8900)
    assert n.closed == [] and n.r.up[1]
    n.r.tick(9000)
    assert n.closed == [(1, "dead")]
    assert not n.r.up[1]


def _sanity_case(frame_for, expect):
    lo, mid, hi = roles(3)
    n = Node(lo)
    n.r.port_up(1, signer(mid).public, 1, 0)
    frame = frame_for(lo, mid, hi)
    n.rx(1, frame, 10)
    assert n.closed and n.closed[-1][0] == 1, expect
    assert n.closed[-1][1] == "sanity:" + expect if expect else n.closed[-1][1].startswith("sanity")
    assert not n.r.up[1]
    assert n.r.counters.drops[17] >= 1  # sanity
    assert report.parent_port(n.r) == 0


def test_sanity_no_hops_disconnects():
    def f(lo, mid, hi):
        buf = bytearray(256)
        k = wire_host.encode_announcement(buf, signer(mid).public, 1, [])
        return bytes(buf[:k])
    _sanity_case(f, "no_hops")


def test_sanity_first_hop_not_root_disconnects():
    _sanity_case(lambda lo, mid, hi: _reroot(announcement(mid, 1, [(mid, 1)]), signer(hi).public),
                 None)


def _reroot(frame, root):
    # replace the root key (signatures then no longer match either, but the
    # first-hop check comes first)
    f = decode(frame)
    b = bytearray(frame)
    b[f.root_off:f.root_off + 32] = root
    return bytes(b)


def test_sanity_last_hop_not_peer_disconnects():
    _sanity_case(lambda lo, mid, hi: announcement(hi, 1, [(hi, 1)]), "last_hop_not_peer")


def test_sanity_hop_port_zero_disconnects():
    _sanity_case(lambda lo, mid, hi: announcement(hi, 1, [(hi, 0), (mid, 1)]), "hop_port_zero")


def test_sanity_duplicate_key_disconnects():
    _sanity_case(lambda lo, mid, hi: announcement(hi, 1, [(hi, 2), (mid, 3), (hi, 4), (mid, 1)]),
                 "duplicate_key")


def test_sanity_bad_hop_signature_disconnects():
    def f(lo, mid, hi):
        fr = bytearray(announcement(hi, 1, [(hi, 2), (mid, 1)]))
        d = decode(bytes(fr))
        fr[d.hop_sig_off[0] + 5] ^= 0x40
        return bytes(fr)
    _sanity_case(f, "bad_signature")


def test_sanity_malformed_announcement_disconnects():
    def f(lo, mid, hi):
        fr = bytearray(announcement(hi, 1, [(hi, 2), (mid, 1)]))
        fr[11] ^= 0x01  # payload length disagrees with the frame length
        return bytes(fr)
    _sanity_case(f, None)


def test_sanity_sequence_going_backwards_disconnects():
    lo, mid, hi = roles(3)
    n = Node(lo)
    n.r.port_up(1, signer(mid).public, 1, 0)
    n.rx(1, announcement(hi, 5, [(hi, 2), (mid, 1)]), 10)
    assert n.closed == [] and report.parent_port(n.r) == 1
    n.rx(1, announcement(hi, 4, [(hi, 2), (mid, 1)]), 20)
    assert n.closed == [(1, "sanity:sequence_backwards")]


def test_higher_root_from_peer_becomes_parent_and_announces_to_all():
    lo, mid, hi = roles(3)
    n = Node(mid)
    n.r.port_up(1, signer(hi).public, 1, 0)
    n.r.port_up(2, signer(lo).public, 1, 0)
    n.clear()
    n.rx(1, announcement(hi, 1, [(hi, 7)]), 10)
    assert report.parent_port(n.r) == 1
    assert report.root_key(n.r) == signer(hi).public and report.coords(n.r) == [7]
    out = n.frames(A_, 2)
    assert len(out) == 1
    f = decode(out[0][1])
    assert f.nhops == 2 and f.hop_port[1] == 2 and f.root_seq == 1
    assert ("parent_changed", _hexk(hi)) in n.events


def _hexk(i):
    import binascii
    return binascii.hexlify(signer(i).public).decode()


def test_weaker_root_first_time_no_reply_then_reply_on_repeat():
    lo, hi = roles(2)
    n = Node(hi)
    n.r.port_up(1, signer(lo).public, 1, 0)
    n.clear()
    n.rx(1, announcement(lo, 1, [(lo, 1)]), 10)
    assert n.frames(A_) == []
    n.rx(1, announcement(lo, 1, [(lo, 1)]), 20)
    out = n.frames(A_, 1)
    assert len(out) == 1
    f = decode(out[0][1])
    assert bytes(out[0][1][f.root_off:f.root_off + 32]) == n.key


def _child_of(me, parent, root, extra_ports=()):
    n = Node(me)
    n.r.port_up(1, signer(parent).public, 1, 0)
    for p, who in extra_ports:
        n.r.port_up(p, signer(who).public, 1, 0)
    n.rx(1, announcement(root, 1, [(root, 4), (parent, 1)]), 10)
    assert report.parent_port(n.r) == 1
    n.clear()
    return n


def test_bad_news_same_root_and_sequence_from_parent_becomes_root_and_waits():
    a, b, c, d = roles(4)
    n = _child_of(a, c, d, extra_ports=[(2, b)])
    n.rx(1, announcement(d, 1, [(d, 5), (c, 1)]), 100)   # same root, same seq
    assert report.parent_port(n.r) == 0
    out = n.frames(A_)
    assert sorted(p for p, _ in out) == [1, 2]
    for _, fr in out:
        f = decode(fr)
        assert bytes(fr[f.root_off:f.root_off + 32]) == n.key
    # during the 1 s wait: store only
    n.rx(2, announcement(d, 2, [(d, 6), (b, 2)]), 500)
    assert report.parent_port(n.r) == 0
    n.r.tick(1099)
    assert report.parent_port(n.r) == 0
    n.r.tick(1100)
    assert report.parent_port(n.r) == 2   # higher sequence wins the selection
    assert report.root_key(n.r) == signer(d).public


def test_bad_news_root_got_lower_from_parent():
    a, b, c, d = roles(4)
    n = _child_of(a, c, d)
    n.rx(1, announcement(c, 1, [(c, 1)]), 100)
    assert report.parent_port(n.r) == 0 and n.r.tree.wait


def test_bad_news_parent_announcement_contains_our_key():
    a, b, c, d = roles(4)
    n = _child_of(b, c, d)
    n.rx(1, announcement(d, 2, [(d, 4), (b, 3), (a, 2), (c, 1)]), 100)
    assert report.parent_port(n.r) == 0 and n.r.tree.wait


def test_parent_higher_sequence_is_resigned_to_all_peers():
    a, b, c, d = roles(4)
    n = _child_of(b, c, d, extra_ports=[(2, a)])
    n.rx(1, announcement(d, 2, [(d, 4), (c, 1)]), 100)
    assert report.parent_port(n.r) == 1 and report.root_seq(n.r) == 2
    out = n.frames(A_)
    assert sorted(p for p, _ in out) == [1, 2]
    for p, fr in out:
        f = decode(fr)
        assert f.root_seq == 2 and f.nhops == 3 and f.hop_port[2] == p


def test_announcement_from_other_peer_containing_our_key_is_ignored():
    a, b, c, d = roles(4)
    n = _child_of(b, c, d, extra_ports=[(2, a)])
    n.rx(2, announcement(d, 1, [(d, 4), (c, 1), (b, 2), (a, 1)]), 100)
    assert report.parent_port(n.r) == 1 and n.frames(A_) == []


def test_parent_selection_prefers_higher_sequence_then_earliest_received():
    a, b, c, d = roles(4)
    n = Node(a)
    n.r.port_up(1, signer(b).public, 1, 0)
    n.r.port_up(2, signer(c).public, 1, 0)
    n.rx(1, announcement(d, 1, [(d, 1), (b, 1)]), 10)
    assert report.parent_port(n.r) == 1
    n.rx(2, announcement(d, 2, [(d, 2), (c, 1)]), 20)
    assert report.parent_port(n.r) == 2
    n.rx(1, announcement(d, 2, [(d, 1), (b, 1)]), 30)
    assert report.parent_port(n.r) == 2   # same root and seq: earliest received stays


def test_root_refreshes_every_30_minutes_with_sequence_increment():
    # the reference's timing (host_tools/sim/reftiming.py): no early
    # re-announcements, the first new sequence after 30 min
    lo, hi = roles(2)
    n = Node(hi)
    n.r.tree.reseq_early = n.r.tree.reseq_due = 0
    n.r.port_up(1, signer(lo).public, 1, 0)
    ka = bytearray(10)
    wire.encode_keepalive(ka)
    t = 0
    while t < 30 * MIN - 1:
        t += 4000
        if t >= 30 * MIN:
            t = 30 * MIN - 1
        n.rx(1, bytes(ka), t)
        n.r.tick(t)
    n.clear()
    n.rx(1, bytes(ka), 30 * MIN)
    n.r.tick(30 * MIN)
    out = n.frames(A_, 1)
    assert len(out) == 1 and decode(out[0][1]).root_seq == 2 and report.root_seq(n.r) == 2


def _root_seqs(n, port, until, step=1000, t=0, alive=()):
    """Tick n (its peers on `port` and `alive` keeping their links up)
    from t to until; [(time, sequence)] of the root announcements it sent
    on port."""
    ka = bytearray(10)
    wire.encode_keepalive(ka)
    out = []
    while t < until:
        t += step
        n.clear()
        for p in (port,) + tuple(alive):
            n.rx(p, bytes(ka), t)
        n.r.tick(t)
        for _, b in n.frames(A_, port):
            out.append((t, decode(b).root_seq))
    return out


def test_new_root_re_announces_once_after_4_s_then_every_30_minutes():
    # choice H: a new sequence 4 s after a node becomes root (every node
    # re-picks its parent by first arrival once the start's links are up),
    # then the 30 min interval
    lo, hi = roles(2)
    n = Node(hi)
    n.r.port_up(1, signer(lo).public, 1, 0)
    assert _root_seqs(n, 1, 40 * 1000) == [(4000, 2)]
    assert report.root_seq(n.r) == 2
    late = _root_seqs(n, 1, 4 * 1000 + 30 * MIN, step=4000, t=40 * 1000)
    assert late == [(4 * 1000 + 30 * MIN, 3)]


def test_node_that_becomes_root_again_starts_the_early_schedule_again():
    a, b, c = roles(3)
    n = Node(b)
    n.r.port_up(1, signer(c).public, 1, 0)
    n.r.port_up(2, signer(a).public, 1, 0)
    n.rx(1, announcement(c, 1, [(c, 1)]), 10)
    assert report.parent_port(n.r) == 1
    # a child does not re-announce on its own
    assert _root_seqs(n, 1, 60 * 1000, t=10, alive=(2,)) == []
    n.r.port_down(1, 60 * 1000)
    assert report.parent_port(n.r) == 0                   # root again, its own sequence
    assert _root_seqs(n, 2, 90 * 1000, t=60 * 1000) == [(64000, 2)]


def test_announcement_expires_after_45_minutes():
    lo, hi = roles(2)
    n = Node(lo)
    n.r.port_up(1, signer(hi).public, 1, 0)
    n.rx(1, announcement(hi, 1, [(hi, 1)]), 0)
    assert report.parent_port(n.r) == 1
    ka = bytearray(10)
    wire.encode_keepalive(ka)
    t = 0
    while t < 45 * MIN - 4000:
        t += 4000
        n.rx(1, bytes(ka), t)
        n.r.tick(t)
    assert report.parent_port(n.r) == 1
    n.rx(1, bytes(ka), 45 * MIN)
    n.r.tick(45 * MIN)
    assert report.parent_port(n.r) == 0 and report.root_key(n.r) == n.key


def test_coordinates_are_the_ports_of_the_parents_announcement():
    a, b, c, d = roles(4)
    n = Node(a)
    n.r.port_up(1, signer(b).public, 1, 0)
    n.rx(1, announcement(d, 1, [(d, 300), (c, 2), (b, 9)]), 10)
    assert report.coords(n.r) == [300, 2, 9]
    assert report.snapshot(n.r)["depth"] == 3


def test_parent_disconnect_reselects_parent():
    a, b, c, d = roles(4)
    n = Node(a)
    n.r.port_up(1, signer(b).public, 1, 0)
    n.r.port_up(2, signer(c).public, 1, 0)
    n.rx(1, announcement(d, 1, [(d, 1), (b, 1)]), 10)
    n.rx(2, announcement(d, 1, [(d, 2), (c, 1)]), 20)
    assert report.parent_port(n.r) == 1
    n.r.port_down(1, 30)
    assert report.parent_port(n.r) == 2 and report.coords(n.r) == [2, 1]


def test_extended_prefix_costs_one_new_verification():
    a, b, c, d = roles(4)
    n = Node(a)
    n.r.port_up(1, signer(c).public, 1, 0)
    n.r.port_up(2, signer(b).public, 1, 0)
    n.rx(1, announcement(d, 1, [(d, 1), (c, 1)]), 10)
    done = n.r.counters.verify_done
    # same prefix (d's hop and c's hop sign the same bytes), one more hop
    n.rx(2, announcement(d, 1, [(d, 1), (c, 2), (b, 1)]), 20)
    assert n.r.counters.verify_done == done + 1
    # d's hop is the same stored hop (hop pool: not verified again), c's
    # hop signs the same bytes for another port (signature cache)
    assert n.r.counters.verify_cached >= 1
    assert n.r.tree.pool.count == 4       # d->us, c->us, d->c... shared: d's hop once
