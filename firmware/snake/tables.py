# Fixed-capacity storage primitives of every router table.
#
# Capacity is fixed at construction and all storage is allocated then, as
# flat buffers and typed arrays (no object per entry: on a 32-bit board a
# bytearray(32) object per key costs 52 bytes, a slot in one flat
# bytearray 32). Lookups, inserts and removals in steady state allocate
# nothing on MicroPython. Keys are compared in place with key_cmp (bytes
# of a flat buffer at an offset, no slicing).
#
# Table: keyed entries (32-byte keys) with a sorted index. `order` holds
# every slot once: order[0:count] the used slots in ascending key order, so
# an exact lookup and "the smallest key above K" (what SNEK next-hop
# selection asks) are binary searches, O(log n) key comparisons, whatever
# the capacity; order[count:] the free ones, so a free slot is order[count]
# and no per-slot "used" flag is kept (a byte an entry: 320 B of a plain
# ESP32's 320 routes). Owners keep their per-entry fields in parallel
# preallocated arrays indexed by slot, and walk the used slots as
# order[0:count].
#
# When the table is full, insert() asks the owner's `victim(table)` hook for
# the slot to evict (the owner knows which entry matters least), calls
# `on_evict(slot)` so the owner can clear dependent state, and counts it.
#
# HopPool: the hops of the tree announcements a node stores for all its
# peers, as a fixed pool of nodes (parent, depth, port, key, signature) with
# a reference count. Peers' announcements share prefixes (a child's is ours
# plus two hops, neighbours share the path from the root down to where their
# branches part), so each distinct hop is stored once; see tree.py.
from array import array
from snake.platform import copy_into, key_cmp

NONE = 0xFFFF       # "no slot" in the 16-bit index arrays


class Table:
    def __init__(self, capacity, victim=None, on_evict=None):
        if capacity < 1 or capacity >= NONE:
            raise ValueError("capacity must be within 1..65534")
        self.capacity = capacity
        self.keylen = 32
        self.keys = bytearray(32 * capacity)      # slot i: keys[32*i:32*i+32]
        # used slots in ascending key order, then the free slots
        self.order = array("H", range(capacity))
        self.count = 0
        self.evictions = 0
        self.changes = 0      # keys added or removed (watched by the timing policy)
        self.victim = victim
        self.on_evict = on_evict

    # ---- lookups ------------------------------------------------------------
    def lower(self, buf, off):
        """Position in `order` of the first key >= buf[off:off+32]."""
        return lower_bound(self.keys, self.order, self.count, buf, off)

    def find_at(self, buf, off):
        """Slot whose key equals buf[off:off+32], or -1."""
        pos = self.lower(buf, off)
        if pos < self.count:
            s = self.order[pos]
            if key_cmp(self.keys, s << 5, buf, off) == 0:
                return s
        return -1

    def find(self, key):
        """Slot holding `key` (bytes/bytearray of 32), or -1."""
        return self.find_at(key, 0)

    def used(self, slot):
        """Slot holds an entry (its key's place in the sorted index is it:
        keys are unique among the used slots; a free slot keeps the bytes
        of the key it last held). O(log n)."""
        pos = self.lower(self.keys, slot << 5)
        return pos < self.count and self.order[pos] == slot

    def key(self, slot):
        """The key of a slot as bytes (introspection; allocates)."""
        o = slot << 5
        return bytes(self.keys[o:o + 32])

    # ---- changes --------------------------------------------------------------
    def _unlink(self, slot):
        # remove `slot` from the sorted index (keys are unique here); it
        # becomes the first free slot
        self.count = order_remove(self.keys, self.order, self.count, slot)

    def insert_at(self, buf, off):
        """Slot for the key buf[off:off+32]: the existing one, a free one,
        or an evicted one. Returns -1 when full and the victim hook declines."""
        pos = self.lower(buf, off)
        order = self.order
        if pos < self.count and key_cmp(self.keys, order[pos] << 5, buf, off) == 0:
            return order[pos]
        if self.count < self.capacity:
            slot = order[self.count]
        else:
            if self.victim is None:
                return -1
            slot = self.victim(self)
            if slot < 0 or not self.used(slot):
                return -1
            if self.on_evict is not None:
                self.on_evict(slot)
            self._unlink(slot)          # now order[count]
            self.evictions += 1
            pos = self.lower(buf, off)
        copy_into(self.keys, slot << 5, buf, off, 32)
        # order[count] (the slot taken) is overwritten by the shift
        _order_put(order, self.count, pos, slot)
        self.count += 1
        self.changes += 1
        return slot

    def insert(self, key):
        return self.insert_at(key, 0)

    def remove(self, slot):
        if self.used(slot):
            self._unlink(slot)
            self.changes += 1

    def clear(self):
        # order stays a permutation of the slots: all of them free
        self.count = 0


class HopPool:
    """Fixed pool of announcement hops shared by all peers' announcements.

    Node i: parent[i] (the node of the previous hop, NONE for the first),
    depth[i] (position in the announcement), port[i], key (keys[32i:]),
    signature (sigs[64i:]), ref[i] (how many stored paths use it), live[i].
    Two hops are the same node when their parent, depth, port, key and
    signature are equal (a hop's signature covers everything before it, so
    equal nodes stand for byte-identical announcement prefixes). A hash on
    the key's first two bytes chains nodes with similar keys, so looking a
    hop up, or finding every node with a given key, is one short chain walk.
    """

    def __init__(self, capacity):
        if capacity < 1 or capacity >= NONE:
            raise ValueError("capacity must be within 1..65534")
        self.capacity = capacity
        self.keys = bytearray(32 * capacity)
        self.sigs = bytearray(64 * capacity)
        self.port = array("H", [0] * capacity)
        self.parent = array("H", [NONE] * capacity)
        self.depth = bytearray(capacity)
        self.ref = array("H", [0] * capacity)
        self.live = bytearray(capacity)
        self.next = array("H", [NONE] * capacity)
        nb = 1
        while nb < capacity:
            nb <<= 1
        self.mask = nb - 1
        self.head = array("H", [NONE] * nb)
        # the live nodes in ascending key order (equal keys side by side):
        # "the smallest stored key above K" is a binary search
        # (Tree.peer_key_between, SNEK next hop step 4)
        self.order = array("H", [0] * capacity)
        self.count = 0
        self.peak = 0
        self.free_hint = 0

    def _bucket(self, buf, off):
        return ((buf[off] << 8) | buf[off + 1]) & self.mask

    def first_key(self, buf, off):
        """First node whose key equals buf[off:off+32], or NONE; continue
        with next_key(i, buf, off)."""
        i = self.head[self._bucket(buf, off)]
        return self._scan_key(i, buf, off)

    def next_key(self, i, buf, off):
        return self._scan_key(self.next[i], buf, off)

    def _scan_key(self, i, buf, off):
        keys = self.keys
        nxt = self.next
        b0 = buf[off]
        while i != NONE:
            if keys[i << 5] == b0 and key_cmp(keys, i << 5, buf, off) == 0:
                return i
            i = nxt[i]
        return NONE

    def lookup(self, par, depth, port, buf, koff, soff):
        """The node for hop (par, depth, port, key at koff, sig at soff) or NONE."""
        i = self.head[self._bucket(buf, koff)]
        keys = self.keys
        sigs = self.sigs
        while i != NONE:
            if self.parent[i] == par and self.depth[i] == depth and self.port[i] == port \
                    and key_cmp(keys, i << 5, buf, koff) == 0:
                so = i << 6
                j = 0
                while j < 64 and sigs[so + j] == buf[soff + j]:
                    j += 1
                if j == 64:
                    return i
            i = self.next[i]
        return NONE

    def free(self):
        return self.capacity - self.count

    def add(self, par, depth, port, buf, koff, soff):
        """A new node (reference count 0: the caller takes references);
        NONE when the pool is full."""
        if self.count >= self.capacity:
            return NONE
        live = self.live
        n = self.capacity
        i = self.free_hint
        while live[i]:
            i += 1
            if i >= n:
                i = 0
        live[i] = 1
        self.parent[i] = par
        self.depth[i] = depth
        self.port[i] = port
        copy_into(self.keys, i << 5, buf, koff, 32)
        copy_into(self.sigs, i << 6, buf, soff, 64)
        b = self._bucket(buf, koff)
        self.next[i] = self.head[b]
        self.head[b] = i
        self.ref[i] = 0
        c = self.count
        _order_put(self.order, c, lower_bound(self.keys, self.order, c, buf, koff), i)
        self.count = c + 1
        if self.count > self.peak:
            self.peak = self.count
        self.free_hint = i + 1 if i + 1 < n else 0
        return i

    def incref(self, i):
        self.ref[i] += 1

    def decref(self, i):
        r = self.ref[i] - 1
        self.ref[i] = r
        if r == 0:
            self._drop(i)

    def _drop(self, i):
        b = self._bucket(self.keys, i << 5)
        j = self.head[b]
        if j == i:
            self.head[b] = self.next[i]
        else:
            while j != NONE:
                k = self.next[j]
                if k == i:
                    self.next[j] = self.next[i]
                    break
                j = k
        self.next[i] = NONE
        self.parent[i] = NONE
        self.live[i] = 0
        self.count = order_remove(self.keys, self.order, self.count, i)


# ---- sorted index of slots (order[0:n], ascending by keys[32 * slot:]) ----
def lower_bound(keys, order, n, buf, off):
    """Position in order[0:n] of the first slot whose key >= buf[off:off+32]."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) >> 1
        if key_cmp(keys, order[mid] << 5, buf, off) < 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _order_put(order, n, pos, slot):
    # order[0:n] -> order[0:n+1] with slot at pos
    i = n
    while i > pos:
        order[i] = order[i - 1]
        i -= 1
    order[pos] = slot


def order_remove(keys, order, n, slot):
    """Take slot out of order[0:n] (among equal keys: the one that is
    slot) and put it at order[n - 1] (a Table's first free slot); returns
    n - 1."""
    pos = lower_bound(keys, order, n, keys, slot << 5)
    while order[pos] != slot:
        pos += 1
    n -= 1
    while pos < n:
        order[pos] = order[pos + 1]
        pos += 1
    order[n] = slot
    return n


def key_eq_at(key, buf, off):
    """key (32 bytes) == buf[off:off+32], compared in place (no slice, so
    no allocation on MicroPython)."""
    return key_cmp(key, 0, buf, off) == 0


def keys_eq_at(a, aoff, b, boff):
    """a[aoff:aoff+32] == b[boff:boff+32], in place."""
    return key_cmp(a, aoff, b, boff) == 0
