# The `capacity` report (telemetry contract 2, docs/reports/CAPACITY.md):
# {table: [used, capacity, refused]} for peers, routes and depth, with
# refused counted cumulatively when a table turns something away.
from routertest import Node, signer, keys_sorted, announcement, bootstrap
from snake import report

IDS = list(range(41, 53))
K = keys_sorted(IDS)          # K[0] lowest ... K[11] highest key


def pub(i):
    return signer(K[i]).public


def test_capacity_reports_peers_routes_depth_with_their_limits():
    n = Node(K[4], max_peers=3, max_routes=5, max_hops=6)
    c = report.capacity(n.r)
    assert set(c) >= {"peers", "routes", "depth"}
    assert c["peers"] == [0, 3, 0]
    assert c["routes"] == [0, 5, 0]
    assert c["depth"] == [0, 6, 0]
    n.r.port_up(1, pub(7), 1, 0)
    n.rx(1, announcement(K[11], 1, [(K[11], 3), (K[9], 2), (K[7], 1)]), 1)
    c = report.capacity(n.r)
    assert c["peers"] == [1, 3, 0]
    assert c["depth"] == [3, 6, 0]      # our coordinates: 3 ports


def test_refused_links_are_counted_under_peers():
    n = Node(K[4], max_peers=2)
    n.r.peer_refused()
    n.r.peer_refused()
    assert report.capacity(n.r)["peers"][2] == 2


def test_too_deep_announcement_is_counted_under_depth():
    n = Node(K[0], max_hops=3)
    n.r.port_up(1, pub(7), 1, 0)
    deep = announcement(K[11], 1, [(K[11], 1), (K[10], 1), (K[9], 1), (K[7], 1)])
    n.rx(1, deep, 1)
    c = report.capacity(n.r)
    assert c["depth"][2] == 1
    assert c["depth"][0] == 0           # not joined through it
    assert n.r.up[1]                    # the peer stays


def test_route_table_full_is_counted_under_routes():
    # own key lowest: every bootstrap key is above ours; the table keeps the
    # keys closest to ours and refuses farther ones
    n = Node(K[0], max_routes=2)
    n.r.port_up(1, pub(11), 1, 0)
    n.r.port_up(2, pub(10), 1, 0)
    n.rx(1, announcement(K[11], 1, [(K[11], 1)]), 1)
    assert report.parent_port(n.r) == 1
    t = 2
    for i in (1, 2, 3):
        n.rx(2, bootstrap(K[i], 1000 + i, K[11], 1), t)
        t += 1
    c = report.capacity(n.r)
    assert c["routes"][0] == 2 and c["routes"][1] == 2
    assert c["routes"][2] == 1          # K[3] is farther than both: refused
    n.rx(2, bootstrap(K[5], 2000, K[11], 1), t)
    assert report.capacity(n.r)["routes"][2] == 2


def test_announcement_refused_by_the_tx_path_is_sent_at_the_next_tick():
    # a board keeps one buffer for long frames: announce_all to several
    # peers finds it taken; an announcement is not repeated on a timer, so
    # the router owes it and sends it when the tx path takes it again
    from snake import wire
    n = Node(K[4])
    n.r.port_up(1, pub(7), 1, 0)
    n.r.port_up(2, pub(2), 1, 0)
    n.clear()
    n.queue_ok = False
    n.rx(1, announcement(K[11], 1, [(K[11], 3), (K[7], 1)]), 10)
    assert report.parent_port(n.r) == 1
    assert n.frames(wire.T_ANNOUNCEMENT) == []
    n.queue_ok = True
    n.r.tick(260)
    got = n.frames(wire.T_ANNOUNCEMENT)
    assert sorted(p for p, _ in got) == [1, 2]
    n.clear()
    n.r.tick(520)
    assert n.frames(wire.T_ANNOUNCEMENT) == []      # owed once, sent once


def _full_table_node(policy):
    # own key lowest; the table (2 routes) holds K[2] and K[3]
    n = Node(K[0], max_routes=2, bootstrap_verify=policy)
    n.r.port_up(1, pub(11), 1, 0)
    n.r.port_up(2, pub(10), 1, 0)
    n.rx(1, announcement(K[11], 1, [(K[11], 1)]), 1)
    n.rx(2, bootstrap(K[2], 1002, K[11], 1), 2)
    n.rx(2, bootstrap(K[3], 1003, K[11], 1), 3)
    assert report.capacity(n.r)["routes"][:2] == [2, 2]
    return n


def test_bootstrap_the_full_table_refuses_is_not_verified_on_change():
    # overload policy (docs/reports/CAPACITY.md): a key the full table would refuse
    # changes nothing of ours, so "on-change" relays it unverified (a node
    # that stores its route verifies it); a key that would go in is verified
    from snake.report import DROP_NAMES
    bad = DROP_NAMES.index("bad_signature")
    n = _full_table_node("on-change")
    c = n.r.counters
    done, skipped = c.verify_done, c.verify_skipped
    n.rx(2, bootstrap(K[5], 2000, K[11], 1, sig=bytes(64)), 4)     # farther than K[3]
    assert c.verify_done == done and c.verify_skipped == skipped + 1
    assert report.capacity(n.r)["routes"] == [2, 2, 1]                  # refused, counted
    assert c.drops[bad] == 0
    n.rx(1, bootstrap(K[1], 2001, K[11], 1, sig=bytes(64)), 5)     # closer: would evict K[3]
    assert c.verify_done == done + 1 and c.drops[bad] == 1
    assert n.r.snake.routes.find(bytearray(pub(3))) >= 0           # the forgery moved nothing


def test_bootstrap_the_full_table_refuses_is_verified_with_policy_all():
    from snake.report import DROP_NAMES
    n = _full_table_node("all")
    c = n.r.counters
    done = c.verify_done
    n.rx(2, bootstrap(K[5], 2000, K[11], 1, sig=bytes(64)), 4)
    assert c.verify_done == done + 1 and c.drops[DROP_NAMES.index("bad_signature")] == 1


def test_full_table_evicts_a_route_its_bootstraps_left_before_refusing():
    # overload (snek.Snake._victim): an entry not refreshed for 7 s
    # (ROUTE_STALE_MS; its bootstrap took another path) goes first, even
    # when its key is closer to ours than the new one
    n = _full_table_node("all")
    n.rx(1, bootstrap(K[2], 1102, K[11], 1), 7000)          # K[2] refreshed, K[3] not
    n.rx(2, bootstrap(K[5], 2000, K[11], 1), 7004)          # farther than K[3]
    s = n.r.snake
    assert s.routes.find(bytearray(pub(5))) >= 0
    assert s.routes.find(bytearray(pub(3))) < 0 and s.routes.find(bytearray(pub(2))) >= 0
    assert report.capacity(n.r)["routes"] == [2, 2, 0]      # nothing live refused or evicted
    # a fresh table refuses the farther key as before
    n = _full_table_node("all")
    n.rx(2, bootstrap(K[5], 2000, K[11], 1), 7001)          # both younger than 7 s
    assert n.r.snake.routes.find(bytearray(pub(5))) < 0
    assert report.capacity(n.r)["routes"] == [2, 2, 1]
