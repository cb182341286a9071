# Platform layer: the only module in firmware/ that looks at which
# interpreter it runs on. MicroPython (ESP32 or unix port) and CPython 3.11
# differ in ticks, const, random bytes, socket constants and crypto backends;
# everything else in the firmware imports them from here.
import sys

MICROPYTHON = sys.implementation.name == "micropython"
# True on a real board (ESP32 port), False on the unix port and CPython.
BOARD = MICROPYTHON and sys.platform not in ("linux", "darwin", "win32")

if MICROPYTHON:
    from micropython import const
    import time as _time
    import os as _os

    ticks_ms = _time.ticks_ms
    ticks_us = _time.ticks_us      # same period: ticks_diff serves both
    ticks_add = _time.ticks_add
    ticks_diff = _time.ticks_diff
    sleep_ms = _time.sleep_ms
    urandom = _os.urandom

    def copy_into(dst, doff, src, soff, n):
        # MicroPython allocates a memoryview for every slice; a byte loop
        # allocates nothing (keys are 32 bytes, so this stays cheap).
        i = 0
        while i < n:
            dst[doff + i] = src[soff + i]
            i += 1

    def key_cmp(a, aoff, b, boff):
        # Order of the 32-byte keys a[aoff:] and b[boff:] (<0, 0, >0) in
        # place: no slices, nothing allocated. Random keys differ in the
        # first byte or two, so this returns early.
        i = 0
        while i < 32:
            x = a[aoff + i]
            y = b[boff + i]
            if x != y:
                return x - y
            i += 1
        return 0

else:
    import os as _os
    import time as _time

    def const(x):
        return x

    # MicroPython's ticks: a millisecond counter that wraps; differences are
    # taken modulo the period and mapped to the signed range. The same
    # arithmetic here so the core behaves identically on both interpreters.
    TICKS_PERIOD = 1 << 30
    TICKS_MAX = TICKS_PERIOD - 1
    TICKS_HALF = TICKS_PERIOD // 2
    _t0 = _time.monotonic_ns()

    def ticks_ms():
        return ((_time.monotonic_ns() - _t0) // 1000000) & TICKS_MAX

    def ticks_us():
        return ((_time.monotonic_ns() - _t0) // 1000) & TICKS_MAX

    def ticks_add(t, d):
        return (t + d) & TICKS_MAX

    def ticks_diff(a, b):
        return ((a - b + TICKS_HALF) & TICKS_MAX) - TICKS_HALF

    def sleep_ms(ms):
        _time.sleep(ms / 1000)

    urandom = _os.urandom

    def copy_into(dst, doff, src, soff, n):
        dst[doff:doff + n] = src[soff:soff + n]

    def key_cmp(a, aoff, b, boff):
        # Same order as the MicroPython byte loop; slices are cheap here.
        x = a[aoff:aoff + 32]
        y = b[boff:boff + 32]
        return (x > y) - (x < y)

TICKS_MASK = (1 << 30) - 1


def wall_ms():
    """Milliseconds since the Unix epoch (best effort on a board without RTC).

    Used for bootstrap and wakeup sequence numbers, which must increase
    monotonically per node (the reference implementation uses Unix ms)."""
    t = _time.time()
    if MICROPYTHON and BOARD:
        # ESP32 epoch is 2000-01-01; shift to the Unix epoch.
        t += 946684800
    return int(t * 1000)


# Socket constants: MicroPython lacks several, and numbers differ by OS only
# in theory (these are the Linux/lwIP values).
IPPROTO_IP = 0
IPPROTO_TCP = 6
TCP_NODELAY = 1
try:
    import socket as _socket
    IP_ADD_MEMBERSHIP = getattr(_socket, "IP_ADD_MEMBERSHIP", 35)
    IP_MULTICAST_LOOP = getattr(_socket, "IP_MULTICAST_LOOP", 34)
except ImportError:  # pragma: no cover - every supported platform has socket
    IP_ADD_MEMBERSHIP, IP_MULTICAST_LOOP = 35, 34


def hexstr(b):
    """Bytes as lowercase hex text (keys in logs, events and records); None
    stays None."""
    if b is None:
        return None
    import binascii
    return binascii.hexlify(bytes(b)).decode()


def try_import(name):
    """Import a module by name, or return None when this platform lacks it."""
    try:
        return __import__(name)
    except ImportError:
        return None


def heap_used():
    """Live heap bytes after a collection (MicroPython), None on CPython."""
    if not MICROPYTHON:
        return None
    import gc
    gc.collect()
    return gc.mem_alloc()


def largest_free():
    """Largest block the heap can give right now, bytes (MicroPython; None on
    CPython): a fragmented heap refuses a frame buffer with plenty free in
    total. Found by trial allocations (synchronous, each freed at once)."""
    if not MICROPYTHON:
        return None
    import gc
    gc.collect()
    lo = 0
    hi = gc.mem_free()
    while hi - lo > 16:
        mid = (lo + hi) // 2
        try:
            b = bytearray(mid)
            b = None
            lo = mid
        except MemoryError:
            hi = mid
        gc.collect()
    return lo


# Hot and cold code. A module the running node needs all the time is hot;
# the code it needs once (booting, a console command, a probe, building the
# BLE manager, choosing the crypto backend, the names of the counters) is a
# cold module beside it. Cold modules import hot ones; a hot module names its
# cold half only as a string and loads it with cold() for one use (the
# pattern of MicroPython's asyncio package, whose optional modules the core
# names in a table and loads lazily): there is no import circle, and on
# MicroPython the cold code leaves the heap once the caller lets go of it.
def cold(name):
    """Module `name` ("snake.runtime.cmds") for one use: imported, and on
    MicroPython dropped from sys.modules again at once, so its code stays in
    the heap only while the caller holds the module (a running coroutine of
    it included). On CPython it stays imported (a re-import costs time)."""
    import sys
    __import__(name)
    mod = sys.modules[name]
    if MICROPYTHON:
        unload(name)
    return mod


def unload(name):
    """Drop module `name` from sys.modules and its package, so its code
    leaves the heap once nothing else refers to it."""
    import sys
    sys.modules.pop(name, None)
    pkg, _, attr = name.rpartition(".")
    mod = sys.modules.get(pkg)
    if mod is not None:
        try:
            delattr(mod, attr)
        except (AttributeError, KeyError):  # MicroPython raises KeyError
            pass


class Meter:
    """Where the node's heap went while it booted: gc.mem_alloc() growth
    (after a collection) from one mark to the next, per part. The parts are
    built once at boot and stay (fixed-size tables and buffers), so these
    figures hold for the node's whole run; what is allocated later (links,
    their tasks and queues) is the rest of the live heap (console `mem`,
    snake/runtime/cmds.py, reads names and sizes)."""

    def __init__(self, base=None):
        self.names = []
        self.sizes = []
        self.last = base if base is not None else heap_used()

    def mark(self, name):
        a = heap_used()
        if a is None or self.last is None:
            return
        if name in self.names:
            i = self.names.index(name)
            self.sizes[i] += a - self.last
        else:
            self.names.append(name)
            self.sizes.append(a - self.last)
        self.last = a



class _EventFlag:
    # asyncio.Event with ThreadSafeFlag's wait-then-clear semantics.
    def __init__(self):
        import asyncio
        self.ev = asyncio.Event()

    def set(self):
        self.ev.set()

    def clear(self):
        self.ev.clear()

    async def wait(self):
        await self.ev.wait()
        self.ev.clear()


def irq_flag():
    """A flag an IRQ handler sets and an asyncio task waits on.

    On a board the bluetooth IRQ runs outside the asyncio task context, so
    this is asyncio.ThreadSafeFlag. Elsewhere (unix port with the emulated
    radio, CPython) the "IRQ" is called from an asyncio task and a plain
    Event-based flag is used: on the v1.29 unix port ThreadSafeFlag (a
    non-fd pollable) in the same poll set as sockets made the interpreter
    segfault in modselect's poll."""
    if BOARD:
        import asyncio
        tsf = getattr(asyncio, "ThreadSafeFlag", None)
        if tsf is not None:
            return tsf()
    return _EventFlag()
