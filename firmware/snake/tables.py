# Fixed-capacity keyed table: the storage primitive of every router table.
#
# Capacity is fixed at construction and all storage is allocated then: a
# `used` flag per slot and one preallocated bytearray per key. Lookups,
# inserts and removals in steady state allocate nothing (keys are compared
# with `==`, which does not allocate on MicroPython; keys inside a frame
# buffer are compared in place). Owners keep their per-entry fields in
# parallel preallocated lists indexed by slot.
#
# When the table is full, insert() asks the owner's `victim(table)` hook for
# the slot to evict (the owner knows which entry matters least: expired
# first, then by its own rule), calls `on_evict(slot)` so the owner can clear
# dependent state, and counts the eviction.
from snake.platform import copy_into


class Table:
    def __init__(self, capacity, keylen=32, victim=None, on_evict=None):
        if capacity < 1:
            raise ValueError("table capacity must be >= 1")
        self.capacity = capacity
        self.keylen = keylen
        self.used = bytearray(capacity)
        self.keys = [bytearray(keylen) for _ in range(capacity)]
        self.count = 0
        self.evictions = 0
        self.victim = victim
        self.on_evict = on_evict

    def find(self, key):
        """Slot holding `key` (bytes/bytearray), or -1."""
        used = self.used
        keys = self.keys
        i = 0
        n = self.capacity
        while i < n:
            if used[i] and keys[i] == key:
                return i
            i += 1
        return -1

    def find_at(self, buf, off):
        """Slot whose key equals buf[off:off+keylen], compared in place."""
        used = self.used
        keys = self.keys
        kl = self.keylen
        b0 = buf[off]
        i = 0
        n = self.capacity
        while i < n:
            if used[i]:
                k = keys[i]
                if k[0] == b0:
                    j = 1
                    while j < kl and k[j] == buf[off + j]:
                        j += 1
                    if j == kl:
                        return i
            i += 1
        return -1

    def _free_slot(self):
        used = self.used
        i = 0
        n = self.capacity
        while i < n:
            if not used[i]:
                return i
            i += 1
        return -1

    def _claim(self):
        slot = self._free_slot()
        if slot < 0:
            if self.victim is None:
                return -1
            slot = self.victim(self)
            if slot < 0 or not self.used[slot]:
                return -1
            if self.on_evict is not None:
                self.on_evict(slot)
            self.used[slot] = 0
            self.count -= 1
            self.evictions += 1
        self.used[slot] = 1
        self.count += 1
        return slot

    def insert(self, key):
        """Slot for `key`: the existing one, a free one, or an evicted one.
        Returns -1 when full and the owner's victim hook declines."""
        slot = self.find(key)
        if slot >= 0:
            return slot
        slot = self._claim()
        if slot >= 0:
            copy_into(self.keys[slot], 0, key, 0, self.keylen)
        return slot

    def insert_at(self, buf, off):
        slot = self.find_at(buf, off)
        if slot >= 0:
            return slot
        slot = self._claim()
        if slot >= 0:
            copy_into(self.keys[slot], 0, buf, off, self.keylen)
        return slot

    def remove(self, slot):
        if self.used[slot]:
            self.used[slot] = 0
            self.count -= 1

    def clear(self):
        i = 0
        while i < self.capacity:
            self.used[i] = 0
            i += 1
        self.count = 0


def key_eq_at(key, buf, off):
    """key (32 bytes) == buf[off:off+32], compared in place (no slice, so
    no allocation on MicroPython)."""
    i = 0
    while i < 32:
        if key[i] != buf[off + i]:
            return False
        i += 1
    return True


def keys_eq_at(a, aoff, b, boff):
    """a[aoff:aoff+32] == b[boff:boff+32], in place."""
    i = 0
    while i < 32:
        if a[aoff + i] != b[boff + i]:
            return False
        i += 1
    return True
