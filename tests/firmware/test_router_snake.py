# Virtual-snake rules (docs/reference/PROTOCOL_NOTES.md, with its differences), one test per rule:
# next-hop steps 1-7 with watermarks, bootstrap handling, descending updates,
# maintenance, origination, verification policy.
from snake import wire
from snake.platform import ticks_diff
from snake.crypto import verify
from snake.telemetry import (D_BOOTSTRAP_ROOT, D_BOOTSTRAP_REPLAY, D_BAD_SIGNATURE, D_LOOP,
                             D_WATERMARK, D_ROUTE_TABLE_FULL)
from routertest import Node, signer, keys_sorted, announcement, bootstrap, decode, wakeup
from snake import report

B_ = wire.T_BOOTSTRAP
IDS = list(range(21, 31))
K = keys_sorted(IDS)          # K[0] lowest ... K[9] highest key


def pub(i):
    return signer(K[i]).public


def ba(k):
    return bytearray(k)


def keepalive(n, ports, t):
    ka = bytearray(10)
    wire.encode_keepalive(ka)
    for p in ports:
        n.rx(p, bytes(ka), t)


def setup(me=4, **profile):
    """Node K[me] whose parent (port 1) is K[7] under root K[9] (seq 1)."""
    n = Node(K[me], **profile)
    n.r.port_up(1, pub(7), 1, 0)
    n.rx(1, announcement(K[9], 1, [(K[9], 3), (K[7], 1)]), 1)
    assert report.parent_port(n.r) == 1
    n.clear()
    return n


def add_route(n, i, src_port, seq, now=0, dst_port=0):
    s = n.r.snake
    slot = s.routes.insert(pub(i))
    s.set_route(slot, src_port, dst_port, now, pub(9), 1, seq)
    return slot


def nh(n, dst_i, bootstrap=False, wm=None, wm_seq=0, now=10, dst=None):
    s = n.r.snake
    d = ba(dst if dst is not None else pub(dst_i))
    port = s.next_hop(d, bootstrap, ba(wm) if wm is not None else wire.FULL_KEY, wm_seq, now)
    return port, bytes(s.nh_key[s.nh_koff:s.nh_koff + 32]), s.nh_seq


# ---- next hop ----------------------------------------------------------------
def test_step2_traffic_for_our_own_key_is_local():
    n = setup()
    assert nh(n, 4)[0] == 0


def test_step3_1_bootstrap_originator_starts_towards_root():
    n = setup()
    port, key, seq = nh(n, 4, bootstrap=True)
    # root first, then refined by the ancestors below the root: K7
    assert port == 1 and key == pub(7) and seq == 0


def test_step3_1_not_applied_at_relays_so_a_relay_can_be_the_dead_end():
    n = setup()
    assert nh(n, 2, bootstrap=True)[0] == 0


def test_step3_2_destination_above_us_goes_towards_the_root():
    n = setup()
    port, key, seq = nh(n, 6)
    assert port == 1 and key == pub(7) and seq == 0
    port, key, _ = nh(n, 8)
    assert port == 1 and key == pub(9)


def test_step3_3_exact_ancestor_match_for_traffic():
    n = setup()
    port, key, _ = nh(n, 9)
    assert port == 1 and key == pub(9)


def test_step4_peer_ancestor_exact_match_traffic_only():
    n = setup()
    n.r.port_up(2, pub(3), 1, 2)
    n.rx(2, announcement(K[9], 1, [(K[9], 2), (K[1], 1), (K[3], 1)]), 3)
    port, key, _ = nh(n, 1)
    assert port == 2 and key == pub(1)
    # a bootstrap takes no exact match: for K3, nothing lies between K3
    # and our K4, so this relay is the dead end
    assert nh(n, 3, bootstrap=True)[0] == 0


def test_step4_peer_ancestors_between_destination_and_best():
    # difference 7: a bootstrap for K1 at relay K4 (ancestors K9, K7 via
    # the parent) goes to the peer whose announcement names K3 (K1 < K3 <
    # K4), not to a dead end here; the smallest such key wins
    n = setup()
    n.r.port_up(2, pub(3), 1, 2)
    n.rx(2, announcement(K[9], 1, [(K[9], 2), (K[8], 1), (K[3], 1)]), 3)
    n.r.port_up(3, pub(6), 1, 3)
    n.rx(3, announcement(K[9], 1, [(K[9], 2), (K[2], 1), (K[6], 1)]), 4)
    port, key, seq = nh(n, 1, bootstrap=True)
    assert port == 3 and key == pub(2) and seq == 0
    port, key, seq = nh(n, 2, bootstrap=True)
    assert port == 2 and key == pub(3) and seq == 0
    # the best key is peer K3 itself: step 5 keeps the direct link
    assert nh(n, 2, bootstrap=True)[0] == 2
    # traffic takes them as the reference does (the seed text: exact match
    # only, which made this relay a dead end for K1)
    port, key, seq = nh(n, 1)
    assert port == 3 and key == pub(2) and seq == 0


def _between_by_scan(tree, dst, best):
    # the rule as the reference states it: every hop of every peer's
    # announcement, ports in order, the smallest key strictly between dst
    # and best (the first port among equals)
    pk = tree.pool.keys
    bk = best
    port = 0
    for p in range(1, len(tree.r.up)):
        if not (tree.r.up[p] and tree.ann_valid[p]):
            continue
        for h in range(tree.ann_nhops[p]):
            x = tree.ann_path[p * tree.max_hops + h]
            k = bytes(pk[x << 5:(x << 5) + 32])
            if dst < k < bk:
                bk = k
                port = p
    return port, bk


def test_step4_between_search_matches_a_scan_of_every_announcement():
    # the pool's key order finds what a scan of every hop of every peer's
    # announcement finds, shared hops and equal keys on several ports included
    n = setup()
    peers = ((2, [(9, 2), (8, 1), (3, 1)]), (3, [(9, 2), (2, 1), (6, 1)]),
             (5, [(9, 2), (8, 1), (1, 1)]), (6, [(9, 4), (0, 1), (5, 1), (8, 2)]))
    for port, path in peers:
        n.r.port_up(port, pub(path[-1][0]), 1, 2)
        n.rx(port, announcement(K[9], 1, [(K[i], q) for i, q in path]), 3)
        assert n.r.tree.ann_valid[port]
    tree = n.r.tree
    all_keys = [pub(i) for i in range(10)]
    cases = 0
    for d in all_keys:
        for b in all_keys:
            if not d < b:
                continue
            want_port, want_key = _between_by_scan(tree, d, b)
            got = tree.peer_key_between(ba(d), ba(b), 0)
            assert got == want_port, (got, want_port)
            if got:
                o = tree.between_off
                assert bytes(tree.pool.keys[o:o + 32]) == want_key
                cases += 1
    assert cases > 10


def test_step5_direct_peer_refines_the_port():
    n = setup()
    n.r.port_up(3, pub(9), 1, 2)
    n.rx(3, announcement(K[9], 1, [(K[9], 6)]), 3)
    port, key, _ = nh(n, 9)
    assert port == 3 and key == pub(9)


def test_step6_route_entries_give_transitive_paths_with_their_sequence():
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    add_route(n, 3, 2, 100)
    port, key, seq = nh(n, 2)
    assert port == 2 and key == pub(3) and seq == 100


def test_step6_skips_expired_entries():
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    add_route(n, 3, 2, 100, now=0)
    assert nh(n, 2, now=10000)[0] == 0


def test_step6_an_entry_near_its_expiry_is_no_new_watermark_but_keeps_the_frames():
    # snakemesh choice H (docs/reference/PROTOCOL_NOTES.md): from 9 s on a route may
    # not become a frame's new watermark key (the relays towards its key hold
    # older entries and would drop the frame as they expire), but a frame
    # whose watermark already is that key still follows it until 10 s
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    add_route(n, 3, 2, 100, now=0)
    assert nh(n, 2, now=8999)[:2] == (2, pub(3))
    port, key, seq = nh(n, 2, now=9000)
    assert key != pub(3) and port != 2
    assert nh(n, 2, wm=pub(3), wm_seq=100, now=9999)[:2] == (2, pub(3))
    assert nh(n, 2, wm=pub(3), wm_seq=100, now=10000)[0] != 2


def test_step6_skips_entries_from_the_local_port():
    n = setup()
    add_route(n, 3, 0, 100)
    assert nh(n, 2)[0] == 0


def test_step6_skips_entry_whose_watermark_key_is_higher_than_the_frames():
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    add_route(n, 3, 2, 100)
    assert nh(n, 2, wm=pub(2), wm_seq=0)[0] == 0


def test_step6_skips_entry_with_same_watermark_key_and_lower_sequence():
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    add_route(n, 3, 2, 100)
    assert nh(n, 2, wm=pub(3), wm_seq=200)[0] == 0
    assert nh(n, 2, wm=pub(3), wm_seq=50)[0] == 2
    assert nh(n, 2, wm=pub(3), wm_seq=100)[0] == 2


def test_step6_exact_route_match_for_traffic_not_bootstrap():
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    add_route(n, 3, 2, 100)
    port, key, seq = nh(n, 3)
    assert port == 2 and key == pub(3) and seq == 100
    assert nh(n, 3, bootstrap=True)[0] == 0


def test_step7_prefers_the_faster_link_type_to_the_same_peer():
    n = setup()
    n.r.port_up(2, pub(3), 1, 2)     # wifi (multicast)
    n.r.port_up(5, pub(3), 4, 2)     # bluetooth to the same node
    n.rx(2, announcement(K[9], 1, [(K[9], 2), (K[3], 1)]), 3)
    n.rx(5, announcement(K[9], 1, [(K[9], 2), (K[3], 5)]), 4)
    assert nh(n, 3)[0] == 2
    n2 = setup()
    n2.r.port_up(2, pub(3), 4, 2)    # bluetooth first this time
    n2.r.port_up(5, pub(3), 1, 2)
    n2.rx(2, announcement(K[9], 1, [(K[9], 2), (K[3], 1)]), 3)
    n2.rx(5, announcement(K[9], 1, [(K[9], 2), (K[3], 5)]), 4)
    assert nh(n2, 3)[0] == 5


def test_step7_same_link_type_prefers_the_earlier_received_announcement():
    n = setup()
    n.r.port_up(2, pub(3), 1, 2)
    n.r.port_up(5, pub(3), 1, 2)
    n.rx(5, announcement(K[9], 1, [(K[9], 2), (K[3], 5)]), 3)
    n.rx(2, announcement(K[9], 1, [(K[9], 2), (K[3], 1)]), 4)
    assert nh(n, 3)[0] == 5


def test_watermark_returned_is_best_key_and_sequence_even_when_zero():
    n = setup()
    port, key, seq = nh(n, 6, wm=pub(8), wm_seq=77)
    assert (key, seq) == (pub(7), 0)


# ---- bootstrap handling -----------------------------------------------------
def rx_bootstrap(n, port, origin_i, seq, root_i=9, root_seq=1, t=10, **kw):
    n.rx(port, bootstrap(K[origin_i], seq, K[root_i], root_seq, **kw), t)


def relayed_watermark(n, port):
    """(watermark key, sequence) of the one bootstrap the node sent to port."""
    out = n.frames(B_, port)
    assert len(out) == 1
    fr = out[0][1]
    f = decode(fr)
    return bytes(fr[f.wm_off:f.wm_off + 32]), f.wm_seq


def test_bootstrap_dead_end_installs_route_and_descending_entry():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000, wm_key=pub(4))
    assert report.desc_key(n.r) == pub(2)
    s = n.r.snake
    slot = s.routes.find(pub(2))
    assert slot >= 0 and s.src(slot) == 2 and s.dst(slot) == 0 and s.seq(slot) == 1000
    assert n.frames(B_) == []


def test_bootstrap_forwarded_installs_route_with_next_hop_and_rewrites_watermark():
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    rx_bootstrap(n, 2, 5, 1000, wm_key=pub(9))
    assert relayed_watermark(n, 1) == (pub(7), 0)
    s = n.r.snake
    slot = s.routes.find(pub(5))
    assert s.src(slot) == 2 and s.dst(slot) == 1
    assert report.desc_key(n.r) is None


def test_full_table_evicting_the_next_hop_route_keeps_the_watermark_it_chose():
    # overload (docs/reports/CAPACITY.md): the bootstrap's own route evicts the
    # entry farthest from our key, which can be the entry its next hop was
    # chosen by. The watermark written is still that entry's (key, seq),
    # not the slot's new key (the bootstrapping key itself, which made the
    # next relay drop the bootstrap for its watermark: ba:500:2 with full
    # ESP32_GENERIC tables).
    n = setup(max_routes=1)
    n.r.port_up(2, pub(0), 1, 2)
    n.r.port_up(3, pub(8), 1, 3)
    add_route(n, 6, 3, 500, now=5)
    rx_bootstrap(n, 2, 5, 1000, wm_key=pub(9))
    assert relayed_watermark(n, 3) == (pub(6), 500)
    s = n.r.snake
    assert s.routes.find(pub(5)) >= 0 and s.routes.find(pub(6)) < 0   # evicted for it


def test_bootstrap_with_bad_signature_is_dropped():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000, sig=b"\x01" * 64)
    assert report.desc_key(n.r) is None and n.r.snake.routes.count == 0
    assert n.r.counters.drops[D_BAD_SIGNATURE] == 1


def test_bootstrap_with_another_root_or_root_sequence_is_dropped():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000, root_i=8)
    rx_bootstrap(n, 2, 2, 1001, root_seq=2)
    assert report.desc_key(n.r) is None and n.r.snake.routes.count == 0
    assert n.r.counters.drops[D_BOOTSTRAP_ROOT] == 2


def test_bootstrap_sequence_replay_check():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000)
    rx_bootstrap(n, 2, 2, 1000, t=20)
    rx_bootstrap(n, 2, 2, 999, t=30)
    assert n.r.counters.drops[D_BOOTSTRAP_REPLAY] == 2
    rx_bootstrap(n, 2, 2, 1001, t=40)
    s = n.r.snake
    assert s.seq(s.routes.find(pub(2))) == 1001 and s.desc_last == 40


def test_bootstrap_sequence_bound_is_2_46_and_kept_exactly_below_it():
    # a route keeps its sequence in 46 bits (snek.SEQ_LIMIT): the largest
    # one fits exactly, a sequence at 2**46 (the year 4199 in Unix ms) is
    # no real one: dropped and counted as malformed, nothing installed
    from snake.snek import SEQ_LIMIT
    from snake.telemetry import D_MALFORMED
    assert SEQ_LIMIT == 1 << 46
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1 << 46)
    rx_bootstrap(n, 2, 2, (1 << 64) - 1, t=20)
    assert n.r.counters.drops[D_MALFORMED] == 2
    assert n.r.snake.routes.count == 0 and report.desc_key(n.r) is None
    rx_bootstrap(n, 2, 2, (1 << 46) - 1, t=30)
    s = n.r.snake
    slot = s.routes.find(pub(2))
    assert slot >= 0 and s.seq(slot) == (1 << 46) - 1 and n.r.counters.drops[D_MALFORMED] == 2
    assert not s._seq_lt(slot, (1 << 46) - 1) and s._seq_lt(slot, 1 << 46)
    # today's Unix ms and a 2000-epoch board's, and their order
    rx_bootstrap(n, 2, 3, 1795290492369, t=40)
    slot3 = s.routes.find(pub(3))
    assert s.seq(slot3) == 1795290492369 and s._seq_lt(slot3, 1795290492370)
    assert not s._seq_lt(slot3, 1795290492369 - (1 << 30))
    # a wakeup with such a sequence is dropped the same way
    from routertest import wakeup
    n.rx(2, wakeup(K[2], 1 << 46, K[9], 1), 50)
    assert n.r.counters.drops[D_MALFORMED] == 3


def test_route_age_is_exact_across_the_16_bit_and_the_ticks_wrap():
    # a route's refresh time is the ticks' low 16 bits (snek.Snake.age):
    # ages stay exact across 65536 ms and the ticks' own 2**30 wrap, and a
    # route expires at 10 s to the millisecond there as anywhere
    from snake.platform import ticks_add
    period = ticks_add(0, -1) + 1       # 2**30 on a 32-bit port and CPython
    for t0 in (65536 - 100, period - 4000):
        # setup() at t0
        n = Node(K[4], now=t0)
        n.r.port_up(1, pub(7), 1, t0)
        n.rx(1, announcement(K[9], 1, [(K[9], 3), (K[7], 1)]), t0)
        n.r.port_up(2, pub(0), 1, t0)
        rx_bootstrap(n, 2, 5, 1000, t=t0)
        s = n.r.snake
        slot = s.routes.find(pub(5))
        assert slot >= 0 and s.age(slot, t0) == 0
        t = t0
        while ticks_diff(t, t0) < 9000:
            t = ticks_add(t, 1000)
            keepalive(n, [1, 2], t)
            n.r.tick(t)
        t9 = ticks_add(t0, 9999)
        assert s.age(slot, t9) == 9999 and s.age(slot, ticks_add(t0, -5)) == -5
        # traffic for K5 whose watermark is K5's route (the key and its
        # sequence) still takes the route at 9.999 s, not at 10 s
        assert nh(n, 5, wm=pub(5), wm_seq=1000, now=t9)[0] == 2
        assert nh(n, 5, wm=pub(5), wm_seq=1000, now=ticks_add(t0, 10000))[0] == 1     # towards the root
        n.r.tick(ticks_add(t0, 10000))
        assert s.routes.count == 0


def test_a_stalled_node_reads_no_route_as_fresh_after_the_16_bit_wrap():
    # a node whose ticks stopped (a stall of 70 s): 70000 ms is 4464 in 16
    # bits, and the route must not look 4.5 s old. The first lookup after a
    # sweep is ROUTE_EXPIRY_MS late sweeps first (snek.Snake.expire); one
    # later than 22.8 s cannot tell ages and clears the table (every route
    # is expired by then)
    from snake.snek import ROUTE_EXPIRY_MS
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    rx_bootstrap(n, 2, 5, 1000, t=10)
    s = n.r.snake
    assert s.routes.count == 1 and nh(n, 5, now=20)[0] == 2
    changes = s.routes.changes
    t = 10 + 70000
    assert s.age(s.routes.find(pub(5)), t) == 4464     # what 16 bits read
    assert nh(n, 5, now=t)[0] == 1 and s.routes.count == 0
    assert s.routes.changes == changes + 1 and s.last_maintain == t
    # a sweep late by less than that is an ordinary one: exact ages, the
    # fresh route stays, the old one goes
    n2 = setup()
    n2.r.port_up(2, pub(0), 1, 2)
    rx_bootstrap(n2, 2, 5, 1000, t=10)
    s2 = n2.r.snake
    rx_bootstrap(n2, 2, 3, 1000, t=15000)     # (this bootstrap swept first: 15 s late)
    assert s2.routes.count == 1 and s2.routes.find(pub(3)) >= 0 and s2.last_maintain == 15000
    rx_bootstrap(n2, 2, 5, 1001, t=20000)
    assert s2.routes.count == 2
    assert nh(n2, 5, now=15000 + ROUTE_EXPIRY_MS)[0] == 2     # swept first: K3 is 10 s old
    assert s2.routes.find(pub(3)) < 0 and s2.routes.find(pub(5)) >= 0


def test_route_ports_and_root_share_one_item_sized_by_the_profile():
    # src and dst ports (r_pw bits each: 0..max_peers) and the root index
    # (two bits) of a route in one item: a byte up to 7 peers, 16 bits up
    # to 127, 32 above; every value comes back as it went in
    from snake.snek import Snake
    from snake.profile import Profile

    class R:
        k_dst = bytearray(32)
        k_wm = bytearray(32)
    for peers, pw, item in ((7, 3, 1), (8, 4, 2), (16, 5, 2), (127, 7, 2), (255, 8, 4)):
        s = Snake(R(), Profile({"max_peers": peers, "max_routes": 4}))
        assert s.r_pw == pw, (peers, s.r_pw)
        assert len(bytes(s.r_port)) == 4 * item, (peers, len(bytes(s.r_port)))
        for src in (0, 1, peers):
            for dst in (0, 1, peers - 1, peers):
                for rix in (0, 1, 2, 3):
                    s.set_ports(2, src, dst, rix)
                    assert (s.src(2), s.dst(2), s.root_ix(2)) == (src, dst, rix)
    # the ring holds three recent roots: a fourth reuses the oldest slot,
    # and the routes installed under it lose their root, not their ports
    n = setup(max_peers=7)
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000)
    s = n.r.snake
    slot = s.routes.find(pub(2))
    assert s.route_root(slot) == (pub(9), 1) and (s.src(slot), s.dst(slot)) == (2, 0)
    for seq in (2, 3):
        s.root_index(pub(9), seq)
    assert s.route_root(slot) == (pub(9), 1)
    s.root_index(pub(8), 1)
    assert s.route_root(slot) == (None, 0) and (s.src(slot), s.dst(slot)) == (2, 0)


def test_bootstrap_replay_check_ignores_an_entry_for_another_root():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    slot = add_route(n, 2, 2, 5000, now=5)
    s = n.r.snake
    s.set_ports(slot, s.src(slot), s.dst(slot), s.root_index(pub(8), 1))
    rx_bootstrap(n, 2, 2, 1000)
    assert s.seq(slot) == 1000 and s.route_root(slot) == (pub(9), 1)


def test_descending_closer_key_replaces_farther_is_ignored():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.r.port_up(3, pub(3), 1, 2)
    rx_bootstrap(n, 2, 2, 1000)
    assert report.desc_key(n.r) == pub(2)
    rx_bootstrap(n, 3, 3, 1000, t=20)
    assert report.desc_key(n.r) == pub(3)
    rx_bootstrap(n, 2, 2, 1001, t=30)
    assert report.desc_key(n.r) == pub(3)


def test_descending_refresh_from_existing_descending_node():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000, t=10)
    rx_bootstrap(n, 2, 2, 1001, t=900)
    s = n.r.snake
    assert report.desc_key(n.r) == pub(2) and s.desc_last == 900 and s.desc_seq == 1001


def test_descending_ignores_keys_above_ours():
    # K8 dead-ends at the root K9: the root's descending must stay below it,
    # but here we check a node that is the dead end for a higher key.
    n = Node(K[9])
    n.r.port_up(1, pub(8), 1, 0)
    n.rx(1, bootstrap(K[8], 1000, K[9], 1), 10)
    assert report.desc_key(n.r) == pub(8)
    n2 = setup(me=4)
    n2.r.snake._set_desc(ba(pub(2)), 1, 10, 1, 1)
    assert not n2.r.snake._desc_would_change(ba(pub(5)), 2)


def test_bootstrap_dropped_when_next_hop_is_the_incoming_port():
    n = setup()
    rx_bootstrap(n, 1, 5, 1000)       # K5 from the parent port goes back up
    assert n.r.counters.drops[D_LOOP] == 1 and n.r.snake.routes.count == 0


def test_bootstrap_dropped_when_new_watermark_is_worse():
    n = setup()
    n.r.port_up(2, pub(0), 1, 2)
    rx_bootstrap(n, 2, 5, 1000, wm_key=pub(6))  # next hop gives K7 > K6
    assert n.r.counters.drops[D_WATERMARK] == 1 and n.frames(B_) == []


# ---- maintenance -------------------------------------------------------------
def test_descending_entry_expires_after_10_seconds():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000, t=10)
    t = 10
    while t < 10000:
        t += 1000
        keepalive(n, [1, 2], t)
        n.r.tick(t)
    assert report.desc_key(n.r) == pub(2) or t >= 10010
    keepalive(n, [1, 2], 10010)
    n.r.tick(10010)
    assert report.desc_key(n.r) is None
    assert n.r.snake.routes.count == 0   # routes expire after 10 s too


def test_descending_entry_removed_when_root_changes():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    rx_bootstrap(n, 2, 2, 1000, t=10)
    n.rx(1, announcement(K[9], 2, [(K[9], 3), (K[7], 1)]), 500)
    keepalive(n, [2], 1100)
    n.r.tick(1100)
    assert report.desc_key(n.r) is None


def test_port_down_drops_routes_and_descending_through_it():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.r.port_up(3, pub(0), 1, 2)
    rx_bootstrap(n, 2, 2, 1000)
    rx_bootstrap(n, 3, 5, 1000)
    assert n.r.snake.routes.count == 2
    n.r.port_down(2, 20)
    assert report.desc_key(n.r) is None and n.r.snake.routes.count == 1
    n.r.port_down(1, 30)   # K5's route went out through the parent
    assert n.r.snake.routes.count == 0


# ---- origination and policy ------------------------------------------------
def bootstrap_times(n, ports, t0, t1, step=100):
    """Tick n every `step` ms from t0 to t1 (keepalives on `ports` keep the
    peers alive); the times at which it originated a bootstrap."""
    out = []
    t = t0
    while t <= t1:
        keepalive(n, ports, t)
        before = len(n.frames(B_))
        n.r.tick(t)
        if len(n.frames(B_)) > before:
            out.append(t)
        t += step
    return out


def test_bootstrap_soon_then_ramp_then_every_5_seconds_signed_with_increasing_sequence():
    n = setup()
    # joining a tree (parent and root changed) triggers one bootstrap soon
    # (>= 500 ms after the last), then the ramp (1 s x 4, 2 s x 10, 3,
    # 4 s), then every 5 s, the seeds' interval: snakemesh timing policy (router.py
    # BOOTSTRAP_RAMP_MS, BOOTSTRAP_EVERY_MS; Router.snake_changed)
    keepalive(n, [1], 499)
    n.r.tick(499)
    assert n.frames(B_) == []
    keepalive(n, [1], 600)
    n.r.tick(600)
    out = n.frames(B_, 1)
    assert len(out) == 1
    fr = out[0][1]
    f = decode(fr)
    assert bytes(fr[f.dst_off:f.dst_off + 32]) == n.key
    assert bytes(fr[f.wm_off:f.wm_off + 32]) == pub(7) and f.wm_seq == 0
    assert bytes(fr[f.root_off:f.root_off + 32]) == pub(9) and f.root_seq == 1
    assert verify(n.key, bytes(fr[f.signed_off:f.signed_off + f.signed_len]),
                  bytes(fr[f.sig_off:f.sig_off + 64]))
    times = [600] + bootstrap_times(n, [1], 700, 50000)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps == [1000] * 4 + [2000] * 10 + [3000, 4000] + [5000] * 3, gaps
    seqs = [decode(fr).seq for _, fr in n.frames(B_, 1)]
    assert len(seqs) == len(times)
    for a, b in zip(seqs, seqs[1:]):
        assert b > a


def test_steady_state_bootstraps_every_5_seconds_and_wakeups_that_bring_news():
    n = setup()                                  # K4 below K7 (parent) below K9 (root)
    bootstrap_times(n, [1], 100, 70000)          # the ramp after joining is over
    # wakeups (origin index, sequence) arriving at these times
    wakeups = {80050: (0, 5000),     # never heard of: bootstrap soon (as the reference)
               112050: (0, 6000),    # known and below us: our bootstrap goes where it went
               114050: (8, 5000),    # never heard of: soon
               146050: (8, 6000),    # known, above us but above K7 (our first target): no
               148050: (5, 5000),    # never heard of: soon
               180050: (5, 6000)}    # known, between us and K7: can be our successor: soon
    times = []
    t = 70100
    while t <= 190000:
        keepalive(n, [1], t)
        w = wakeups.get(t - 50)
        if w is not None:
            n.rx(1, wakeup(K[w[0]], w[1], K[9], 1), t - 50)
        before = len(n.frames(B_))
        n.r.tick(t)
        if len(n.frames(B_)) > before:
            times.append(t)
        t += 100
    early = [t for t in times if t - 50 in wakeups]
    assert early == [80100, 114100, 148100, 180100], early
    # no ramp from the start after a wakeup: one bootstrap soon, and the
    # steady interval counts from it
    gaps = [b - a for a, b in zip(times, times[1:]) if b not in early]
    assert set(gaps) == {5000}, gaps


def test_descending_change_triggers_bootstrap_soon_and_the_ramp():
    # Regression (tests/host/test_faults_sim.py on rtree-0050): the reference
    # bootstraps soon when its descending entry changes (_setDescendingNode);
    # snakemesh did not, and after a crash or flap rebuilt the snake one 5 s
    # round at a time (20-50 s on a 50-node tree).
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    n.r.port_up(3, pub(3), 1, 2)
    times = bootstrap_times(n, [1, 2, 3], 100, 80000)
    assert times[-1] - times[-2] == 5000         # steady: every 5 s
    # a first descending entry, 1 s into a 5 s period
    t = times[-1] + 1000
    rx_bootstrap(n, 2, 2, 1000, t=t)
    assert report.desc_key(n.r) == pub(2)
    got = bootstrap_times(n, [1, 2, 3], t + 100, t + 6000)
    assert got == [t + 100, t + 1100, t + 2100, t + 3100, t + 4100], got
    # a closer key replaces it 200 ms after a bootstrap: soon (>= 500 ms
    # after that bootstrap), then the ramp from its start
    t = got[-1] + 200
    rx_bootstrap(n, 3, 3, 1001, t=t)
    assert report.desc_key(n.r) == pub(3)
    got = bootstrap_times(n, [1, 2, 3], t + 100, t + 2500)
    assert got == [t + 300, t + 1300, t + 2300], got
    # a refresh from the same descending node changes nothing: the ramp
    # goes on where it was (1 s steps)
    t = got[-1] + 300
    rx_bootstrap(n, 3, 3, 1002, t=t)
    got = bootstrap_times(n, [1, 2, 3], t + 100, t + 2000)
    assert got == [t + 700, t + 1700], got


def test_losing_the_descending_entry_triggers_bootstrap_soon():
    n = setup()
    n.r.port_up(2, pub(2), 1, 2)
    bootstrap_times(n, [1, 2], 100, 30000)
    rx_bootstrap(n, 2, 2, 1000, t=30050)
    # no refresh: the entry expires 10 s later; the next bootstrap follows
    # at once instead of at the end of the 5 s period
    t = 30100
    lost = None
    times = []
    while t <= 46000:
        keepalive(n, [1, 2], t)
        before = len(n.frames(B_))
        n.r.tick(t)
        if len(n.frames(B_)) > before:
            times.append(t)
        if lost is None and report.desc_key(n.r) is None:
            lost = t
        t += 100
    assert lost is not None and 40050 <= lost <= 41100
    assert lost in times and times[times.index(lost) + 1] - lost == 1000
    # through its port going down (the ramp after the new entry would
    # bootstrap 2 s after the last one; the loss brings it forward)
    rx_bootstrap(n, 2, 2, 1001, t=t)
    assert report.desc_key(n.r) == pub(2)
    assert bootstrap_times(n, [1, 2], t + 100, t + 3000) == [t + 100, t + 1100, t + 2100]
    n.r.port_down(2, t + 3050)
    assert report.desc_key(n.r) is None
    assert bootstrap_times(n, [1], t + 3100, t + 4000) == [t + 3100]


def test_root_does_not_bootstrap():
    n = Node(K[9])
    n.r.port_up(1, pub(8), 1, 0)
    for t in (4000, 8000, 12000):
        keepalive(n, [1], t)
        n.r.tick(t)
    assert n.frames(B_) == []


def test_verify_policy_on_change_skips_refreshes_of_a_verified_path():
    n = setup(bootstrap_verify="on-change")
    n.r.port_up(2, pub(2), 1, 2)
    c = n.r.counters
    d0 = c.verify_done
    rx_bootstrap(n, 2, 2, 1000)
    assert c.verify_done == d0 + 1
    rx_bootstrap(n, 2, 2, 1001, t=20)
    assert c.verify_done == d0 + 1 and c.verify_skipped == 1
    # a forged refresh is not checked under on-change (documented trade-off)
    rx_bootstrap(n, 2, 2, 1002, t=30, sig=b"\x00" * 64)
    assert c.verify_skipped == 2
    # but a new source port is verified, and a forgery rejected
    n.r.port_up(3, pub(1), 1, 2)
    rx_bootstrap(n, 3, 2, 1003, t=40, sig=b"\x00" * 64)
    assert c.drops[D_BAD_SIGNATURE] == 1


def test_verify_policy_off_verifies_nothing():
    n = setup(bootstrap_verify="off")
    n.r.port_up(2, pub(2), 1, 2)
    c = n.r.counters
    d0 = c.verify_done
    rx_bootstrap(n, 2, 2, 1000)
    rx_bootstrap(n, 2, 2, 1001, t=20)
    assert c.verify_done == d0 and c.verify_skipped == 2
    assert report.desc_key(n.r) == pub(2)


def test_routing_table_never_exceeds_capacity_under_bootstrap_flood():
    n = setup(max_routes=4, bootstrap_verify="off")
    n.r.port_up(2, pub(0), 1, 2)
    for i in range(40):
        # synthetic origin keys all below ours: each dead-ends here
        k = bytearray(pub(4))
        k[31] = (k[31] + 1) & 0xFF
        k[30] = i
        k[0] = max(0, k[0] - 1 - (i % 3))
        buf = bytearray(512)
        m = wire.encode_bootstrap(buf, bytes(k), pub(4), 0, 1000 + i, pub(9), 1, b"\x00" * 64)
        n.rx(2, bytes(buf[:m]), 10 + i)
    s = n.r.snake
    c = n.r.counters
    assert s.routes.count == 4
    # every bootstrap beyond the first four either evicted an entry, was
    # refused as less useful than all, or was routed back out (loop)
    assert s.routes.evictions >= 1
    assert s.routes.evictions + c.drops[D_ROUTE_TABLE_FULL] + c.drops[D_LOOP] == 36
