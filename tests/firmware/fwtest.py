# Shared helpers for the firmware test suites (run under CPython and
# MicroPython alike): wire-vector loading, hex helpers, deterministic keys,
# tiny deterministic PRNGs and an allocation probe.
import binascii
import json

_HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."
DATA_DIR = _HERE + "/../data"
VECTORS_PATH = DATA_DIR + "/pinecone_wire_vectors.json"

_vectors = None


def unhex(s):
    return binascii.unhexlify(s)


def tohex(b):
    return binascii.hexlify(bytes(b)).decode()


def vectors():
    """The parsed tests/data/pinecone_wire_vectors.json (loaded once)."""
    global _vectors
    if _vectors is None:
        with open(VECTORS_PATH) as fh:
            _vectors = json.load(fh)
    return _vectors


def frames(type_=None):
    """Frame vectors, optionally only those of one frame type number."""
    out = []
    for f in vectors()["frames"]:
        if type_ is None or f["type"] == type_:
            out.append(f)
    return out


def frame(fid):
    for f in vectors()["frames"]:
        if f["id"] == fid:
            return f
    raise KeyError(fid)


def frame_bytes(fid):
    return unhex(frame(fid)["hex"])


def handshakes():
    return vectors()["handshakes"]


def node_key(name):
    """Public key (bytes) of vector node "A", "B" or "C"."""
    return unhex(vectors()["nodes"][name]["public_key"])


def node_seed(name):
    return unhex(vectors()["nodes"][name]["seed"])


def segments(vec):
    """[(field, offset, bytes)] of a frame/handshake vector's segments."""
    out = []
    off = 0
    for s in vec["segments"]:
        b = unhex(s["hex"])
        out.append((s["field"], off, b))
        off += len(b)
    return out


def segment(vec, field):
    """(offset, bytes) of the first segment whose field name starts with
    `field`."""
    for name, off, b in segments(vec):
        if name.startswith(field):
            return off, b
    raise KeyError(field)


def det_key(i):
    """Deterministic 32-byte test key: distinct for distinct i, ordered by i."""
    b = bytearray(32)
    b[0] = (i >> 8) & 0xFF
    b[1] = i & 0xFF
    b[31] = 0xA5
    return bytes(b)


def det_seed(i):
    """Deterministic 32-byte ed25519 seed (i repeated, as in the vectors)."""
    return bytes([i & 0xFF]) * 32


class Rng:
    """xorshift32: the same sequence on CPython and MicroPython."""

    def __init__(self, seed):
        self.s = (seed & 0xFFFFFFFF) or 0x9E3779B9

    def next(self):
        x = self.s
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.s = x
        return x

    def below(self, n):
        return self.next() % n

    def bytes(self, n):
        out = bytearray(n)
        i = 0
        while i < n:
            out[i] = self.next() & 0xFF
            i += 1
        return out


class Lcg:
    """The radio tests' LCG: next(n) in 0..n-1, the same sequence on CPython
    and MicroPython (test_ble_chunking, test_espnow_port: chunk sizes, loss,
    stream contents)."""

    def __init__(self, seed):
        self.s = seed

    def next(self, n):
        self.s = (self.s * 1103515245 + 12345) & 0x7FFFFFFF
        return (self.s >> 8) % n


def pattern(n, seed):
    """n bytes of Lcg(seed) output: a stream whose every byte is checked."""
    b = bytearray(n)
    r = Lcg(seed)
    for i in range(n):
        b[i] = r.next(256)
    return b


def is_micropython():
    import sys
    return sys.implementation.name == "micropython"


def allocated_by(fn, repeat=50):
    """Bytes of heap allocated while calling fn() `repeat` times, after two
    warm-up calls (MicroPython: gc.mem_alloc() delta with the collector
    disabled, and the call also runs once under micropython.heap_lock(), so
    any allocation at all raises MemoryError). On CPython fn() still runs
    (so the caller's result checks apply) and None is returned."""
    if not is_micropython():
        fn()
        fn()
        return None
    import gc
    import micropython
    fn()
    fn()
    gc.collect()
    gc.disable()
    try:
        m0 = gc.mem_alloc()
        i = 0
        while i < repeat:
            fn()
            i += 1
        m1 = gc.mem_alloc()
        micropython.heap_lock()
        try:
            fn()
        finally:
            micropython.heap_unlock()
    finally:
        gc.enable()
    return m1 - m0


def counter_names_follow(module, prefix, names):
    """A module counts into a list by const() indices named prefix + NAME
    (const: only CPython keeps them as module names); names[i] must name
    counter i. Checks every such constant under CPython and returns how
    many it checked (0 under MicroPython)."""
    found = 0
    for name in dir(module):
        if name.startswith(prefix):
            assert names[getattr(module, name)] == name[len(prefix):].lower(), name
            found += 1
    assert found in (0, len(names))
    return found

