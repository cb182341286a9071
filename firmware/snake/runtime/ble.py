# Bluetooth LE links: the Pinecone byte stream over a GATT service, on
# MicroPython's `bluetooth` module (NimBLE on ESP32; the host emulation in
# host_tools/blemu has the same API). See docs/reference/BLE.md.
#
# GATT stream service (one per node, registered at start):
#   service  SVC_UUID
#     RX     RX_UUID  write / write-without-response: central -> peripheral
#     TX     TX_UUID  notify:                          peripheral -> central
# The central writes without response to the peripheral's RX value handle;
# the peripheral notifies on its own TX value handle. After connecting, the
# central asks for a larger ATT MTU (gattc_exchange_mtu; preferred MTU set
# with config(mtu=...)) and the RX value buffer is grown with
# gatts_set_buffer, so a packet carries up to MTU-3 bytes instead of 20.
#
# Chunking: the stream is cut into consecutive pieces of at most MTU-3 bytes,
# one per write/notify, with no header. Writes without response and
# notifications on one connection are delivered in order and retransmitted
# by the link layer, so the receiver rebuilds the stream by appending every
# piece of a connection to that connection's ring buffer; frame boundaries
# come from the Pinecone frame header (stream.py). A piece the ring cannot
# hold means the stream would have a hole: the connection is dropped and
# counted ("overflow") instead of corrupting frames.
#
# Who connects: every node advertises (connectable, while it has a free BLE
# link) and scans at the same time. The advertisement carries one AD
# structure "Service Data - 128-bit UUID" (type 0x21) for SVC_UUID with 10
# bytes: version (1), free link slots, the first 8 bytes of the node's public
# key. The node with the lower key prefix initiates (is the central); equal
# prefixes fall back to comparing BLE addresses. So two nodes build exactly
# one link to each other. At most profile.ble_links connections (pending
# connection attempts count); when full the node stops advertising, refuses
# centrals that still connect, and stops initiating. A lost link frees its
# slot; the central reconnects when it next hears the peer's advertisement
# (with a back-off after links that die young or attempts that fail).
#
# IRQ handler: on ESP32 it runs on the BLE host task, interleaved with the
# asyncio task at bytecode granularity. It copies data into the connection's
# preallocated ring (single producer / single consumer: the IRQ writes only
# the write index, the reader only the read index), records events in slot
# fields the task only reads, and sets flags. Ownership rules that keep the
# two sides from racing: only the IRQ claims a _FREE slot (on a connection
# event) and it writes `state` last; only the task moves a claimed slot on
# and frees it (reset first, `state = _FREE` last); a disconnect is a separate
# field (`gone`) the task never clears while the slot is in use. Everything
# that calls the stack for set-up runs in the manager task.
import asyncio
import binascii

from snake.platform import const, copy_into, ticks_ms, ticks_diff, ticks_add
from snake import platform
from snake.runtime.stream import sleep_ms


_IRQ_CENTRAL_CONNECT = const(1)
_IRQ_CENTRAL_DISCONNECT = const(2)
_IRQ_GATTS_WRITE = const(3)
_IRQ_SCAN_RESULT = const(5)
_IRQ_SCAN_DONE = const(6)
_IRQ_PERIPHERAL_CONNECT = const(7)
_IRQ_PERIPHERAL_DISCONNECT = const(8)
_IRQ_GATTC_SERVICE_RESULT = const(9)
_IRQ_GATTC_SERVICE_DONE = const(10)
_IRQ_GATTC_CHARACTERISTIC_RESULT = const(11)
_IRQ_GATTC_CHARACTERISTIC_DONE = const(12)
_IRQ_GATTC_NOTIFY = const(18)
_IRQ_MTU_EXCHANGED = const(21)

_ENOMEM = const(12)
_EAGAIN = const(11)
_EBUSY = const(16)
_EALREADY = const(114)
_ENOTCONN = const(107)
_ETIMEDOUT = const(110)

_LINK_BLE = const(4)     # link.py LINK_BLE

SVC_UUID_STR = "a3c8f4e0-6b1d-4e52-9c7a-0d5e2f8b1a60"   # RX, TX: ble_cold.py

_ADV_VERSION = const(1)
_PREFIX_LEN = const(8)
_AD_SERVICE_DATA_128 = const(0x21)

# Timing and sizes. MTU and ADV_INTERVAL_US are module attributes (the
# tests read them); the rest are const(): inlined, no name in the heap.
# preferred ATT MTU: 247 is the largest whose packet (+ 4-byte L2CAP header)
# fits one data-length-extended link-layer PDU (251 bytes), so a larger one
# buys little throughput but doubles what every receive ring must hold
MTU = 247
ADV_INTERVAL_US = 100000
_SCAN_INTERVAL_US = const(100000)
_SCAN_WINDOW_US = const(50000)
_CONNECT_SCAN_MS = const(2000)      # gap_connect scan_duration_ms
_SETUP_TIMEOUT_MS = const(5000)     # connect .. service discovered
_MTU_WAIT_MS = const(1500)          # peripheral: hand the link over without MTU news after this
_SEND_STALL_MS = const(4000)        # stack out of buffers this long: the link is dead
_CLOSE_WAIT_MS = const(3000)        # gap_disconnect without an event after this: free the slot
_CANDIDATE_FRESH_MS = const(3000)   # an advertisement older than this is not acted on
_BACKOFF_MIN_MS = const(500)
_BACKOFF_MAX_MS = const(16000)
_YOUNG_LINK_MS = const(5000)        # a link that dies younger than this counts as a failure
_TICK_MS = const(50)
_N_CANDIDATES = const(8)      # ble_cold.py has the same

# slot states
_FREE = const(0)        # (_FREE, _CENTRAL: ble_cold.py has the same)
_SETUP_MTU = const(2)    # central: connected, MTU exchange
_SETUP_SVC = const(3)    # central: discovering the service
_SETUP_CHR = const(4)    # central: discovering the characteristics
_PERIPH_WAIT = const(5)  # peripheral: connected, waiting for the MTU exchange
_UP = const(6)           # handed to the node as a Link
_DEAD = const(7)         # disconnected (IRQ); the manager frees it

_CENTRAL = const(0)
_PERIPHERAL = const(1)

# BleManager.stats: a list of counters (counting allocates nothing, and no
# name string stays in the heap), indexed by these; their names, in this
# order: ble_cold.STAT_NAMES (records, snapshot; a test checks the two agree)
_S_CONNECTS_OUT = const(0)
_S_CONNECTS_IN = const(1)
_S_CONNECT_FAIL = const(2)
_S_SETUP_FAIL = const(3)
_S_LINKS_UP = const(4)
_S_DISCONNECTS = const(5)
_S_REFUSED_FULL = const(6)
_S_OVERFLOW = const(7)
_S_SEND_STALL = const(8)
_S_ADV_ERRORS = const(9)
_S_SCAN_ERRORS = const(10)
_S_DUPLICATE = const(11)
_S_BYTES_IN = const(12)
_S_BYTES_OUT = const(13)
_S_RETRIES = const(14)
_S_OOM = const(15)


# the service UUID in air order (16 bytes, little-endian)
SVC_UUID_LE = bytes(reversed(binascii.unhexlify(SVC_UUID_STR.replace("-", ""))))


def adv_payload(key, free):
    """31-byte advertisement: flags + service data (version, free, key prefix)."""
    b = bytearray(31)
    b[0] = 2
    b[1] = 0x01
    b[2] = 0x06                       # LE general discoverable, no BR/EDR
    b[3] = 1 + 16 + 2 + _PREFIX_LEN    # 27
    b[4] = _AD_SERVICE_DATA_128
    b[5:21] = SVC_UUID_LE
    b[21] = _ADV_VERSION
    b[22] = free if free < 255 else 255
    b[23:31] = key[0:_PREFIX_LEN]
    return bytes(b)


def find_prefix(adv):
    """Offset of the key prefix inside adv data (any AD order), or -1.

    Allocation-free: runs in the IRQ handler for every scan result."""
    n = len(adv)
    i = 0
    while i + 1 < n:
        ln = adv[i]
        if ln == 0:
            return -1
        if i + 1 + ln > n:
            return -1
        if adv[i + 1] == _AD_SERVICE_DATA_128 and ln >= 1 + 16 + 2 + _PREFIX_LEN:
            j = 0
            while j < 16:
                if adv[i + 2 + j] != SVC_UUID_LE[j]:
                    break
                j += 1
            if j == 16 and adv[i + 18] == _ADV_VERSION:
                return i + 20
        i += 1 + ln
    return -1


def _less(a, aoff, b, boff, n):
    """-1, 0, 1: compare a[aoff:aoff+n] with b[boff:boff+n] without slicing."""
    i = 0
    while i < n:
        x = a[aoff + i]
        y = b[boff + i]
        if x != y:
            return -1 if x < y else 1
        i += 1
    return 0


class Ring:
    """Byte ring, single producer (IRQ) / single consumer (reader task).

    Positions run modulo 2*size so full and empty differ; the producer only
    stores `w`, the consumer only stores `r` (each in one assignment), so the
    two sides never lose each other's updates."""

    def __init__(self, size):
        self.size = size
        self.buf = bytearray(size)
        self.mv = memoryview(self.buf)
        self.r = 0
        self.w = 0

    def reset(self):
        self.r = 0
        self.w = 0

    def count(self):
        return (self.w - self.r) % (2 * self.size)

    def put(self, data):
        """Append all of data (bytes / bytearray / memoryview) or nothing."""
        n = len(data)
        size = self.size
        w = self.w
        if n > size - (w - self.r) % (2 * size):
            return False
        p = w % size
        k = size - p
        if n <= k:
            self.mv[p:p + n] = data
        else:
            src = memoryview(data)
            self.mv[p:size] = src[0:k]
            self.mv[0:n - k] = src[k:n]
        self.w = (w + n) % (2 * size)
        return True

    def get_into(self, mv, n):
        """Move up to n bytes into mv[0:]; returns how many."""
        size = self.size
        r = self.r
        m = (self.w - r) % (2 * size)
        if m > n:
            m = n
        if m == 0:
            return 0
        p = r % size
        k = size - p
        if m <= k:
            if m == len(mv):
                mv[:] = self.mv[p:p + m]
            else:
                mv[0:m] = self.mv[p:p + m]
        else:
            mv[0:k] = self.mv[p:size]
            mv[k:m] = self.mv[0:m - k]
        self.r = (r + m) % (2 * size)
        return m


class Slot(Ring):
    """A BLE connection slot; it is its own receive ring (one object)."""

    def __init__(self, index, ring_size):
        Ring.__init__(self, ring_size)
        self.index = index
        self.addr = bytearray(6)
        self.state = _FREE
        self.gen = 0
        self.reset()

    def reset(self):
        self.conn = -1
        self.role = _CENTRAL
        self.addr_type = 0
        self.mtu = 23
        self.mtu_done = False
        self.req = False
        self.disc_done = False
        self.svc_start = 0
        self.svc_end = 0
        self.rx_handle = 0
        self.tx_handle = 0
        self.t0 = 0
        self.t_up = 0
        self.gone = False
        self.kill = False
        self.closing = False
        self.overflow = False
        self.flag = None
        self.link = None
        Ring.reset(self)


class BleLink:
    """A connected GATT stream (snake/runtime/link.py contract)."""

    link_type = _LINK_BLE
    # class defaults, set on the link when they change: a link that has
    # not closed keeps six attributes (a table a size smaller than seven)
    closed = False
    _sending = False    # send() is part-way through (the handshake)

    def __init__(self, mgr, slot):
        self.m = mgr
        self.slot = slot
        self.gen = slot.gen
        self.outbound = slot.role == _CENTRAL
        self.flag = platform.irq_flag()

    @property
    def name(self):
        a = self.slot.addr     # (made when asked for: logs)
        return "ble %02x:%02x:%02x:%02x:%02x:%02x %s" % (
            a[0], a[1], a[2], a[3], a[4], a[5], "central" if self.outbound else "peripheral")

    def _ok(self):
        s = self.slot
        return (not self.closed and s.gen == self.gen and s.state == _UP and not s.gone
                and not s.kill and not s.closing and not s.overflow)

    @property
    def mtu(self):
        return self.slot.mtu

    async def recv_into(self, mv):
        s = self.slot
        while True:
            if self.closed or s.gen != self.gen or s.overflow:
                return 0
            n = s.get_into(mv, len(mv))
            if n:
                self.m.stats[_S_BYTES_IN] += n
                return n
            if s.state != _UP or s.gone or s.kill or s.closing:
                return 0
            try:
                await self.flag.wait()
            except asyncio.CancelledError:
                if self.closed:
                    return 0
                raise

    def _write(self, mv, off, n):
        """Hand the stack the next chunk of mv[off:n] (at most MTU-3 bytes,
        one write or notify): its length; 0 when the stack is out of
        buffers (the rest must wait); -1 when the link failed (closed)."""
        m = self.m
        s = self.slot
        c = s.mtu - 3
        if c > n - off:
            c = n - off
        try:
            if s.role == _CENTRAL:
                m.ble.gattc_write(s.conn, s.rx_handle, mv[off:off + c], 0)
            else:
                m.ble.gatts_notify(s.conn, m.tx_handle, mv[off:off + c])
        except OSError as e:
            code = e.args[0] if e.args else 0
            if code == _ENOMEM or code == _EBUSY or code == _EAGAIN:
                return 0
            self.close()
            return -1
        m.stats[_S_BYTES_OUT] += c
        return c

    def try_send(self, buf, n, off):
        """The chunks the stack takes now (link.py: try_send)."""
        if not self._ok():
            return -1
        if self._sending or off >= n:
            return 0            # send() is part-way through the handshake
        mv = memoryview(buf)
        start = off
        while off < n:
            c = self._write(mv, off, n)
            if c < 0:
                return -1
            if c == 0:
                break           # stack out of buffers: the rest is queued
            off += c
        return off - start

    async def send(self, buf, n):
        if not self._ok():
            raise OSError(_ENOTCONN)
        mv = memoryview(buf)
        # one caller at a time (stream.run's handshake, before the node sends
        # frames with try_send); no asyncio.Lock: its module is heap
        self._sending = True
        try:
            off = 0
            stalled = False
            stall = 0
            k = 0
            while off < n:
                if not self._ok():
                    raise OSError(_ENOTCONN)
                c = self._write(mv, off, n)
                if c < 0:
                    raise OSError(_ENOTCONN)
                if c == 0:
                    # stack out of tx buffers: wait for the radio to drain
                    self.m.stats[_S_RETRIES] += 1
                    if not stalled:
                        stalled = True
                        stall = ticks_ms()
                    elif ticks_diff(ticks_ms(), stall) > _SEND_STALL_MS:
                        self.m.stats[_S_SEND_STALL] += 1
                        self.close()
                        raise OSError(_ETIMEDOUT)
                    await sleep_ms(5)
                    continue
                stalled = False
                off += c
                k += 1
                if k & 3 == 0:
                    await asyncio.sleep(0)
        finally:
            self._sending = False

    def close(self):
        if self.closed:
            return
        self.closed = True
        s = self.slot
        if s.gen == self.gen and s.state != _FREE:
            s.kill = True
        self.flag.set()


class BleManager:
    """Advertise + scan, connect (lower key initiates), hand links to the node.

    on_link(link) is called from the manager task for every link that is
    ready for the handshake (node.start_link). ble: a `bluetooth.BLE()`
    object (default: the singleton of the `bluetooth` module)."""

    # construction, start, stop and snapshot run once or never while the
    # node runs: snake/runtime/ble_cold.py, loaded for the call and dropped
    def __init__(self, profile, public_key, on_link, ble=None, gap_name=None):
        platform.cold("snake.runtime.ble_cold").init(self, profile, public_key, on_link, ble, gap_name)

    def start(self):
        """Bring the radio up, register the service, start the manager task."""
        return platform.cold("snake.runtime.ble_cold").start(self)

    def stop(self):
        platform.cold("snake.runtime.ble_cold").stop(self)

    def snapshot(self):
        return platform.cold("snake.runtime.ble_cold").snapshot(self)

    # ---------------------------------------------------------------- IRQ
    def _slot_conn(self, conn):
        for s in self.slots:
            if s.conn == conn and s.state != _FREE and not s.gone:
                return s
        return None

    def _rx(self, s, data):
        if s.overflow:
            return
        if not s.put(data):
            s.overflow = True
            self.stats[_S_OVERFLOW] += 1
        f = s.flag
        if f is not None:
            f.set()

    def _irq(self, event, data):
        if event == _IRQ_GATTS_WRITE:
            conn, h = data
            if h != self.rx_handle:
                return
            d = self.ble.gatts_read(h)
            s = self._slot_conn(conn)
            if s is not None and s.role == _PERIPHERAL:
                self._rx(s, d)
        elif event == _IRQ_GATTC_NOTIFY:
            conn, h, d = data
            s = self._slot_conn(conn)
            if s is not None and s.role == _CENTRAL and (s.tx_handle == 0 or h == s.tx_handle):
                self._rx(s, d)
        elif event == _IRQ_SCAN_RESULT:
            addr_type, addr, adv_type, rssi, adv = data
            if adv_type > 1:          # only connectable advertisements
                return
            off = find_prefix(adv)
            if off >= 0:
                self._heard(addr_type, addr, adv, off)
        elif event == _IRQ_SCAN_DONE:
            self.scanning = False
        elif event == _IRQ_CENTRAL_CONNECT:
            conn, addr_type, addr = data
            self.advertising = False     # connectable advertising ends here
            if not self.running:
                self.ble.gap_disconnect(conn)
                return
            for s in self.slots:
                if s.state != _FREE and _less(s.addr, 0, addr, 0, 6) == 0:
                    # the peer reconnected before we noticed the old link die
                    s.kill = True
                    self.stats[_S_DUPLICATE] += 1
            # keep a slot for our own outstanding connection attempt
            s = self._free_slot(1 if self.p_active else 0)
            if s is None:
                self.stats[_S_REFUSED_FULL] += 1
                self.ble.gap_disconnect(conn)
                return
            self._claim(s, _PERIPHERAL, conn, addr_type, addr, _PERIPH_WAIT)
            self.stats[_S_CONNECTS_IN] += 1
        elif event == _IRQ_PERIPHERAL_CONNECT:
            conn, addr_type, addr = data
            s = self._free_slot(0) if self.p_active else None
            if s is None:
                # not ours (a cancelled attempt that completed anyway)
                self.ble.gap_disconnect(conn)
                return
            self.p_active = False
            self._claim(s, _CENTRAL, conn, addr_type, addr, _SETUP_MTU)
            self.stats[_S_CONNECTS_OUT] += 1
        elif event == _IRQ_CENTRAL_DISCONNECT or event == _IRQ_PERIPHERAL_DISCONNECT:
            conn, addr_type, addr = data
            s = self._slot_conn(conn)
            if s is not None:
                s.gone = True
                if s.flag is not None:
                    s.flag.set()
            elif event == _IRQ_PERIPHERAL_DISCONNECT and self.p_active:
                # our connection attempt failed or was cancelled
                self.p_active = False
                self.p_fail = True
        elif event == _IRQ_MTU_EXCHANGED:
            conn, mtu = data
            s = self._slot_conn(conn)
            if s is not None:
                s.mtu = mtu
                s.mtu_done = True
        elif event == _IRQ_GATTC_SERVICE_RESULT:
            conn, start, end, uuid = data
            s = self._slot_conn(conn)
            if s is not None and uuid == self._uuids[0]:
                s.svc_start = start
                s.svc_end = end
        elif event == _IRQ_GATTC_CHARACTERISTIC_RESULT:
            conn, def_handle, value_handle, props, uuid = data
            s = self._slot_conn(conn)
            if s is not None:
                if uuid == self._uuids[1]:
                    s.rx_handle = value_handle
                elif uuid == self._uuids[2]:
                    s.tx_handle = value_handle
        elif event == _IRQ_GATTC_SERVICE_DONE or event == _IRQ_GATTC_CHARACTERISTIC_DONE:
            conn, status = data
            s = self._slot_conn(conn)
            if s is not None:
                s.disc_done = True

    def _heard(self, addr_type, addr, adv, off):
        # Only remember peers we are supposed to connect to: lower key initiates.
        c = _less(self.key, 0, adv, off, _PREFIX_LEN)
        if c > 0 or (c == 0 and _less(self.addr, 0, addr, 0, 6) >= 0):
            return
        if adv[off - 1] == 0:        # peer has no free link slot
            return
        now = ticks_ms()
        free = -1
        oldest = -1
        for i in range(_N_CANDIDATES):
            if self.c_used[i]:
                if _less(self.c_addr, 6 * i, addr, 0, 6) == 0:
                    self.c_seen[i] = now
                    self.c_type[i] = addr_type
                    return
                if oldest < 0 or ticks_diff(self.c_seen[oldest], self.c_seen[i]) > 0:
                    oldest = i
            elif free < 0:
                free = i
        i = free if free >= 0 else oldest
        j = 0
        ca = self.c_addr
        while j < 6:
            ca[6 * i + j] = addr[j]
            j += 1
        self.c_type[i] = addr_type
        self.c_seen[i] = now
        self.c_used[i] = 1
        self.c_wait[i] = now
        self.c_fails[i] = 0

    def _free_slot(self, keep):
        # a _FREE slot, provided `keep` others stay free
        found = None
        n = 0
        for s in self.slots:
            if s.state == _FREE:
                n += 1
                if found is None:
                    found = s
        if n > keep:
            return found
        return None

    def _claim(self, s, role, conn, addr_type, addr, state):
        # IRQ side; the slot was reset when it was freed
        s.role = role
        s.conn = conn
        s.addr_type = addr_type
        copy_into(s.addr, 0, addr, 0, 6)
        s.t0 = ticks_ms()
        s.state = state     # last: the task looks at a slot once this is set

    # ---------------------------------------------------------------- task
    async def _run(self):
        while self.running:
            try:
                self.step()
            except OSError as e:
                # one stack call failed; the next tick retries
                print("ble: step error", e)
            except MemoryError:
                # no heap for one pass (a link object, a stack call): counted;
                # the manager must outlive it, or BLE is gone for good
                self.stats[_S_OOM] += 1
                import gc
                gc.collect()
            await sleep_ms(_TICK_MS)

    def _used(self):
        n = 1 if self.p_active else 0
        for s in self.slots:
            if s.state != _FREE:
                n += 1
        return n

    def _backoff(self, ci, now, failed):
        if ci < 0:
            return
        if failed:
            f = self.c_fails[ci] + 1
            if f < 255:
                self.c_fails[ci] = f
            d = _BACKOFF_MIN_MS << (f - 1 if f < 8 else 7)
            if d > _BACKOFF_MAX_MS:
                d = _BACKOFF_MAX_MS
        else:
            self.c_fails[ci] = 0
            d = _BACKOFF_MIN_MS
        self.c_wait[ci] = ticks_add(now, d)

    def _cand_of(self, s):
        for i in range(_N_CANDIDATES):
            if self.c_used[i] and _less(self.c_addr, 6 * i, s.addr, 0, 6) == 0:
                return i
        return -1

    def _free(self, s, now):
        failed = s.t_up == 0 or ticks_diff(now, s.t_up) < _YOUNG_LINK_MS
        if s.role == _CENTRAL:
            self._backoff(self._cand_of(s), now, failed)
        if s.t_up != 0:
            self.stats[_S_DISCONNECTS] += 1
        s.gen += 1
        if s.flag is not None:
            s.flag.set()
        s.reset()
        s.state = _FREE      # last: the IRQ may claim it from here on

    def _kill(self, s, now):
        s.kill = False
        if s.closing:
            return
        s.closing = True
        s.t0 = now
        if s.flag is not None:
            s.flag.set()
        ok = False
        try:
            ok = self.ble.gap_disconnect(s.conn)
        except OSError:
            ok = False
        if not ok:
            s.state = _DEAD

    def step(self):
        """One manager pass (also called directly by tests)."""
        ble = self.ble
        now = ticks_ms()
        for s in self.slots:
            st = s.state
            if st == _FREE:
                continue
            if st == _DEAD or s.gone:
                self._free(s, now)
                continue
            el = ticks_diff(now, s.t0)
            if s.overflow and not s.closing:
                s.kill = True
            if s.kill:
                self._kill(s, now)
                continue
            if s.closing:
                if el > _CLOSE_WAIT_MS:
                    s.state = _DEAD
                continue
            if st == _SETUP_MTU:
                if not s.req:
                    s.req = True
                    try:
                        ble.gattc_exchange_mtu(s.conn)
                    except OSError:
                        s.mtu_done = True  # keep the default MTU
                if s.mtu_done or el > _MTU_WAIT_MS:
                    s.state = _SETUP_SVC
                    s.disc_done = False
                    ble.gattc_discover_services(s.conn, self._uuids[0])
            elif st == _SETUP_SVC:
                if s.disc_done:
                    if s.svc_end == 0:
                        self.stats[_S_SETUP_FAIL] += 1
                        s.kill = True
                    else:
                        s.state = _SETUP_CHR
                        s.disc_done = False
                        ble.gattc_discover_characteristics(s.conn, s.svc_start, s.svc_end)
                elif el > _SETUP_TIMEOUT_MS:
                    self.stats[_S_SETUP_FAIL] += 1
                    s.kill = True
            elif st == _SETUP_CHR:
                if s.disc_done:
                    if s.rx_handle == 0 or s.tx_handle == 0:
                        self.stats[_S_SETUP_FAIL] += 1
                        s.kill = True
                    else:
                        self._up(s, now)
                elif el > _SETUP_TIMEOUT_MS:
                    self.stats[_S_SETUP_FAIL] += 1
                    s.kill = True
            elif st == _PERIPH_WAIT:
                if s.mtu_done or el > _MTU_WAIT_MS:
                    self._up(s, now)
        self._connect_attempt(now)
        self._radio(now)

    def _connect_attempt(self, now):
        if self.p_fail:
            self.p_fail = False
            self.stats[_S_CONNECT_FAIL] += 1
            self._backoff(self.p_ci, now, True)
        if not self.p_active:
            return
        el = ticks_diff(now, self.p_t0)
        if el > _CONNECT_SCAN_MS + 1000 and not self.p_cancel:
            self.p_cancel = True
            try:
                self.ble.gap_connect(None)
            except OSError:
                pass
        elif el > _CONNECT_SCAN_MS + 4000:
            # the stack never answered: give up on it
            self.p_active = False
            self.stats[_S_CONNECT_FAIL] += 1
            self._backoff(self.p_ci, now, True)

    def _up(self, s, now):
        try:
            link = BleLink(self, s)
        except MemoryError:
            # the connection cannot be served: drop it (the central retries)
            self.stats[_S_OOM] += 1
            s.kill = True
            return
        s.state = _UP
        s.t_up = now if now != 0 else 1
        s.link = link
        s.flag = link.flag
        if s.count():
            link.flag.set()
        self.stats[_S_LINKS_UP] += 1
        try:
            self.on_link(link)
        except MemoryError:
            # nobody will serve it (no task): close it, the slot is freed
            self.stats[_S_OOM] += 1
            link.close()

    def _radio(self, now):
        ble = self.ble
        # 1. initiate towards a peer we heard (we hold the lower key)
        if not self.p_active and self._used() < self.nslots:
            ci = self._pick(now)
            if ci >= 0:
                self.p_type = self.c_type[ci]
                copy_into(self.p_addr, 0, self.c_addr, 6 * ci, 6)
                self.p_t0 = now
                self.p_ci = ci
                self.p_cancel = False
                self.p_fail = False
                self.p_active = True
                try:
                    ble.gap_connect(self.p_type, self.p_addr, _CONNECT_SCAN_MS)
                    self.scanning = False   # gap_connect stops the scan
                except OSError:
                    self.p_active = False
                    self.stats[_S_CONNECT_FAIL] += 1
                    self._backoff(ci, now, True)
        # 2. scan whenever no connection attempt is pending
        if not self.p_active and not self.scanning:
            try:
                ble.gap_scan(0, _SCAN_INTERVAL_US, _SCAN_WINDOW_US, False)
                self.scanning = True
            except OSError as e:
                if e.args and e.args[0] == _EALREADY:
                    self.scanning = True
                else:
                    self.stats[_S_SCAN_ERRORS] += 1
        # 3. advertise while a slot is free (the free count is in the payload)
        free = self.nslots - self._used()
        if free > 0:
            if not self.advertising or self.adv_free != free:
                try:
                    ble.gap_advertise(ADV_INTERVAL_US, adv_payload(self.key, free))
                    self.advertising = True
                    self.adv_free = free
                except OSError:
                    self.stats[_S_ADV_ERRORS] += 1
        elif self.advertising:
            try:
                ble.gap_advertise(None)
            except OSError:
                pass
            self.advertising = False
            self.adv_free = 0

    def _pick(self, now):
        for i in range(_N_CANDIDATES):
            if not self.c_used[i]:
                continue
            if ticks_diff(now, self.c_seen[i]) > _CANDIDATE_FRESH_MS:
                continue
            if ticks_diff(now, self.c_wait[i]) < 0:
                continue
            busy = False
            for s in self.slots:
                if s.state != _FREE and _less(s.addr, 0, self.c_addr, 6 * i, 6) == 0:
                    busy = True
                    break
            if not busy:
                return i
        return -1

