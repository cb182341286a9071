import gc
from snake.tables import Table, HopPool, NONE
from snake import platform


def key(i):
    b = bytearray(32)
    b[0] = i & 0xFF
    b[31] = (i >> 8) & 0xFF
    return bytes(b)


def test_insert_find_remove():
    t = Table(4)
    s = t.insert(key(1))
    assert s >= 0 and t.count == 1
    assert t.find(key(1)) == s
    assert t.find(key(2)) == -1
    assert t.insert(key(1)) == s and t.count == 1
    t.remove(s)
    assert t.find(key(1)) == -1 and t.count == 0


def test_find_at_compares_in_place():
    t = Table(3)
    t.insert(key(7))
    frame = bytearray(40)
    frame[5:37] = key(7)
    assert t.find_at(frame, 5) >= 0
    frame[36] ^= 1
    assert t.find_at(frame, 5) == -1
    s = t.insert_at(frame, 5)
    assert t.key(s) == bytes(frame[5:37])


def test_full_without_victim_refuses():
    t = Table(2)
    assert t.insert(key(1)) >= 0 and t.insert(key(2)) >= 0
    assert t.insert(key(3)) == -1
    assert t.count == 2 and t.evictions == 0


def test_eviction_hook_and_counter():
    evicted = []

    def victim(tab):
        # evict the smallest first byte
        best = -1
        for i in range(tab.capacity):
            if tab.used(i) and (best < 0 or tab.keys[32 * i] < tab.keys[32 * best]):
                best = i
        return best

    t = Table(3, victim=victim, on_evict=lambda s: evicted.append(t.key(s)))
    for i in (5, 3, 9):
        t.insert(key(i))
    s = t.insert(key(12))
    assert s >= 0 and t.count == 3 and t.evictions == 1
    assert evicted == [key(3)]
    assert t.find(key(3)) == -1 and t.find(key(12)) == s
    for i in range(100, 200):
        t.insert(key(i))
    assert t.count == 3 and t.count <= t.capacity
    assert t.evictions == 101


def test_order_holds_every_slot_once_used_ones_first():
    # no "used" flag per slot: order[0:count] are the used slots in key
    # order, order[count:] the free ones (the next insert takes
    # order[count]); used(slot) reads the index
    t = Table(5)
    assert list(t.order) == [0, 1, 2, 3, 4] and not t.used(0)
    seed = 7
    live = {}
    for step in range(400):
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        k = key((seed >> 8) % 9)
        s = t.find(k)
        if s >= 0 and (seed >> 4) & 1:
            t.remove(s)
            del live[k]
        elif s < 0:
            s = t.insert(k)
            if s >= 0:
                live[k] = s
        assert sorted(t.order) == list(range(5)), (step, list(t.order))
        used = [t.order[j] for j in range(t.count)]
        assert sorted(live.values()) == sorted(used) and t.count == len(live)
        assert [t.key(x) for x in used] == sorted(live)
        for x in range(5):
            assert t.used(x) == (x in used)
    # a free slot keeps its old key's bytes: used() is still False for it
    # when that key now lives in another slot
    t = Table(3)
    a = t.insert(key(1))
    t.remove(a)
    b = t.insert(key(2))
    c = t.insert(key(1))
    assert b == a and c != a and t.key(c) == key(1)
    t.remove(b)
    assert not t.used(b) and t.used(c) and t.find(key(1)) == c
    t.clear()
    assert t.count == 0 and sorted(t.order) == [0, 1, 2] and not t.used(c)


def test_steady_state_allocates_nothing_on_micropython():
    t = Table(8, victim=lambda tab: 0)
    keys = [key(i) for i in range(20)]
    frame = bytearray(64)
    frame[10:42] = keys[3]
    for k in keys:
        t.insert(k)
    gc.collect()
    if platform.MICROPYTHON:
        before = gc.mem_alloc()
    for _ in range(50):
        for k in keys:
            t.insert(k)
            t.find(k)
        t.find_at(frame, 10)
        t.insert_at(frame, 10)
    if platform.MICROPYTHON:
        assert gc.mem_alloc() - before == 0
    assert t.count == 8


def _pool_order_ok(pool):
    # order[0:count] is exactly the live nodes, ascending by key
    live = [i for i in range(pool.capacity) if pool.live[i]]
    got = [pool.order[k] for k in range(pool.count)]
    assert sorted(got) == live, (got, live)
    ks = [bytes(pool.keys[i << 5:(i << 5) + 32]) for i in got]
    assert ks == sorted(ks)


def test_hop_pool_keeps_its_nodes_in_key_order():
    # equal keys (the same node key under different parents) side by side;
    # nodes come and go in any order
    pool = HopPool(12)
    buf = bytearray(96)
    nodes = []
    for n, k in enumerate((7, 3, 9, 3, 1, 12, 7, 5, 3, 0, 11, 2)):
        buf[0:32] = key(k)
        i = pool.add(NONE, 0, n, buf, 0, 32)
        assert i != NONE
        pool.incref(i)
        nodes.append(i)
        _pool_order_ok(pool)
    buf[0:32] = key(4)
    assert pool.add(NONE, 0, 99, buf, 0, 32) == NONE      # full
    for j in (3, 0, 11, 8, 1):
        pool.decref(nodes[j])
        _pool_order_ok(pool)
    for k in (3, 8, 255):
        buf[0:32] = key(k)
        i = pool.add(NONE, 1, k, buf, 0, 32)
        pool.incref(i)
        _pool_order_ok(pool)
    assert pool.count == 10
