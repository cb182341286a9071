# ESP-NOW links: the Pinecone byte stream between MAC addresses over
# MicroPython's `espnow` module (the C module on ESP32/S3/C3; the host
# emulation in host_tools/espnowemu has the same API). See docs/reference/ESPNOW.md.
#
# Messages (at most 250 bytes, espnow.MAX_DATA_LEN), first byte the kind:
#   BEACON  E1 | ver 1 | free link slots | caps | public key (32)   broadcast, every second
#   OPEN    E2 | sid (2)                                  the lower key asks for a link
#   ACCEPT  E3 | sid (2)                                  the other side agrees
#   DATA    E4 | sid (2) | seq (2) | ack (2) | 1..243 stream bytes
#   ACK     E5 | sid (2) | ack (2) | resume (1)           also the keep-alive
#   CLOSE   E6 | sid (2)
# Numbers big-endian. A link is one session id (sid, random, chosen by the
# opener) between two MACs; a message with another sid is not the link's.
#
# Reliability: ESP-NOW acks each frame at the radio, but a receiver whose
# buffer is full drops a frame its radio acked, and a frame can be lost
# after the MAC's retries. So the stream is carried with byte sequence
# numbers (seq: the stream offset of the first byte, mod 2^16) and
# cumulative acks (ack: the next byte expected), go-back-N: the sender
# keeps unacked bytes in the link's window ring, resends from the oldest
# unacked byte when no ack moved for _RTO_MS, or at once when the receiver
# asks (ACK with resume 1: it saw a gap or had no room). The receiver
# appends only the next expected bytes to the link's receive ring and
# drops the rest, so the stream it rebuilds has neither holes nor
# duplicates, and a full ring is flow control (unacked bytes come again).
# stream.py frames the stream as on every transport.
#
# Liveness: every link sends an ACK when it sent nothing for _KEEPALIVE_MS;
# a link that heard nothing of its session for DEAD_MS is closed. Beacons
# do not keep a link alive (a neighbour that rebooted still beacons).
#
# Who opens: the node with the lower key (as on BLE), when it hears a
# beacon of a key above its own with a free slot, to a MAC it has no link
# with, one OPEN outstanding at a time (resent every _OPEN_RESEND_MS, given
# up after _OPEN_MS, that MAC then backed off). The responder takes a free
# slot or refuses (counted); an OPEN from a MAC that has a link with
# another sid replaces it (the peer restarted).
#
# Bounded state: profile.espnow_links slots, preallocated, each with a
# receive ring and a window ring of profile.espnow_ring bytes; the radio's
# peer table (20) holds the broadcast address and the slots' MACs only;
# the module's peers_table (one entry per sender ever read) is emptied when
# it outgrows the slots. Everything else (a beacon flood, bad messages,
# unknown sessions) is counted and dropped.
import asyncio
from array import array

from snake.platform import const, ticks_ms, ticks_diff, ticks_add
from snake import platform
from snake.runtime.stream import sleep_ms

LINK_ESPNOW = const(5)

_BEACON = const(0xE1)
_OPEN = const(0xE2)
_ACCEPT = const(0xE3)
_DATA = const(0xE4)
_ACK = const(0xE5)
_CLOSE = const(0xE6)
_VERSION = const(1)
_HDR = const(7)           # DATA header
_CHUNK = const(243)       # 250 - _HDR

_TICK_MS = const(20)
_BEACON_MS = const(1000)
_KEEPALIVE_MS = const(1000)
DEAD_MS = 8000            # silence that ends a link (tests read it): a node busy verifying a flood of
                          # new keys can stall its loop for seconds, and a link must outlive that
_RTO_MS = const(120)
_OPEN_RESEND_MS = const(250)
_OPEN_MS = const(1500)
_BACKOFF_MS = const(3000)
_N_BACKOFF = const(4)

_FREE = const(0)
_OPENING = const(1)
_UP = const(2)

# receiver's resend requests (Slot.resume)
_RS_NONE = const(0)
_RS_ASKED = const(1)      # an ACK with resume 1 went out for this gap
_RS_ROOM = const(2)       # dropped the next bytes for lack of room: ask when there is

# EspNowManager.stats, indexed by these; names: espnow_cold.STAT_NAMES
_S_BEACONS_IN = const(0)
_S_OPENS_OUT = const(1)
_S_OPENS_IN = const(2)
_S_OPEN_FAIL = const(3)
_S_LINKS_UP = const(4)
_S_DISCONNECTS = const(5)
_S_DEAD = const(6)
_S_REFUSED_FULL = const(7)
_S_PEER_FULL = const(8)
_S_BAD_MSG = const(9)
_S_NO_LINK = const(10)
_S_RETRANSMITS = const(11)
_S_RESUMES = const(12)
_S_RX_DROPPED = const(13)
_S_TX_BUSY = const(14)
_S_BYTES_IN = const(15)
_S_BYTES_OUT = const(16)
_S_TABLE_CLEARED = const(17)
_S_OOM = const(18)

_BCAST = b"\xff\xff\xff\xff\xff\xff"


def _mac_eq(a, b):
    return _mac_eq_at(a, 0, b)


def _mac_eq_at(a, off, b):
    i = 0
    while i < 6:
        if a[off + i] != b[i]:
            return False
        i += 1
    return True


class Slot:
    """One link's state: the peer's MAC and session, a receive ring and a
    window ring (bytes taken from the node, oldest unacked first)."""

    def __init__(self, size):
        self.size = size
        self.rx = bytearray(size)
        self.tx = bytearray(size)
        self.mac = bytearray(6)
        self.gen = 0
        self.state = _FREE
        self.clear()

    def clear(self):
        self.sid = 0
        self.rr = 0          # receive ring: read offset, bytes held
        self.rn = 0
        self.rx_next = 0     # the next stream byte expected (mod 2^16)
        self.resume = _RS_NONE
        self.tb = 0          # window ring: offset of the oldest unacked byte
        self.tn = 0          # bytes held (unacked + unsent)
        self.ts = 0          # bytes of them sent (from the oldest)
        self.tx_base = 0     # stream offset of the oldest unacked byte (mod 2^16)
        self.t_heard = 0
        self.t_sent = 0
        self.t_prog = 0      # last ack progress (or first send after it)
        self.t0 = 0
        self.ack_due = False
        self.kill = False
        self.link = None
        self.outbound = False


class EspNowLink:
    """A link to one neighbour (snake/link.py contract)."""

    link_type = LINK_ESPNOW
    closed = False

    def __init__(self, mgr, slot):
        self.m = mgr
        self.slot = slot
        self.gen = slot.gen
        self.outbound = slot.outbound
        self.flag = platform.irq_flag()

    @property
    def name(self):
        a = self.slot.mac
        return "espnow %02x:%02x:%02x:%02x:%02x:%02x" % (a[0], a[1], a[2], a[3], a[4], a[5])

    def _ok(self):
        s = self.slot
        return not self.closed and s.gen == self.gen and s.state == _UP and not s.kill

    async def recv_into(self, mv):
        s = self.slot
        while True:
            if not self._ok():
                return 0
            n = s.rn
            if n:
                k = len(mv)
                if n > k:
                    n = k
                r = s.rr
                size = s.size
                a = size - r
                if n <= a:
                    mv[0:n] = memoryview(s.rx)[r:r + n]
                else:
                    mv[0:a] = memoryview(s.rx)[r:size]
                    mv[a:n] = memoryview(s.rx)[0:n - a]
                s.rr = (r + n) % size
                s.rn -= n
                self.m.stats[_S_BYTES_IN] += n
                if s.resume == _RS_ROOM:
                    # room again after a drop: ask for the rest now
                    s.ack_due = True
                return n
            try:
                await self.flag.wait()
            except asyncio.CancelledError:
                if self.closed:
                    return 0
                raise

    def try_send(self, buf, n, off):
        if not self._ok():
            return -1
        s = self.slot
        k = n - off
        room = s.size - s.tn
        if k > room:
            k = room
        if k <= 0:
            return 0
        size = s.size
        w = (s.tb + s.tn) % size
        a = size - w
        src = memoryview(buf)
        if k <= a:
            s.tx[w:w + k] = src[off:off + k]
        else:
            s.tx[w:size] = src[off:off + a]
            s.tx[0:k - a] = src[off + a:off + k]
        s.tn += k
        self.m.push(s, ticks_ms())
        return k

    async def send(self, buf, n):
        off = 0
        t0 = ticks_ms()
        while off < n:
            k = self.try_send(buf, n, off)
            if k < 0:
                raise OSError(107)      # ENOTCONN
            off += k
            if off < n:
                if ticks_diff(ticks_ms(), t0) > DEAD_MS:
                    self.close()
                    raise OSError(110)  # ETIMEDOUT
                await sleep_ms(_TICK_MS)

    def close(self):
        if self.closed:
            return
        self.closed = True
        s = self.slot
        if s.gen == self.gen and s.state != _FREE:
            s.kill = True
        self.flag.set()


class EspNowManager:
    """Beacons, link set-up and the reliable streams on one ESPNow radio.

    on_link(link) gets every link that came up (node.start_link);
    e: an espnow.ESPNow() object (default: the module's singleton)."""

    # construction, start, stop and snapshot run once or never while the
    # node runs: snake/runtime/espnow_cold.py, loaded for the call
    def __init__(self, profile, public_key, on_link, e=None, settings=None):
        platform.cold("snake.runtime.espnow_cold").init(self, profile, public_key, on_link, e, settings)

    def start(self):
        return platform.cold("snake.runtime.espnow_cold").start(self)

    def stop(self):
        platform.cold("snake.runtime.espnow_cold").stop(self)

    def snapshot(self):
        return platform.cold("snake.runtime.espnow_cold").snapshot(self)

    # ------------------------------------------------------------ radio
    def _irq(self, e):
        self.flag.set()

    def _send(self, mac, msg):
        """One message; False when the radio has no room now (retried)."""
        try:
            self.e.send(mac, msg, False)
            return True
        except OSError:
            # ESP_ERR_ESPNOW_NO_MEM (tx queue full) and the rest: the
            # message is owed again at the next tick (timers resend)
            self.stats[_S_TX_BUSY] += 1
            return False
        except ValueError:
            self.stats[_S_BAD_MSG] += 1
            return False

    def _ctl(self, s, kind, extra):
        b = self.cbuf
        b[0] = kind
        b[1] = s.sid >> 8
        b[2] = s.sid & 0xFF
        if kind == _ACK:
            b[3] = s.rx_next >> 8
            b[4] = s.rx_next & 0xFF
            b[5] = extra
            return self._send(s.mac, self.cmv[0:6])
        return self._send(s.mac, self.cmv[0:3])

    def push(self, s, now):
        """Send what the window allows of slot s (new bytes, or again after a
        resend was asked for); an ACK when one is due and no data carried it."""
        if s.state != _UP or s.kill:
            return
        size = s.size
        b = self.dbuf
        sent = False
        while s.ts < s.tn:
            k = s.tn - s.ts
            if k > _CHUNK:
                k = _CHUNK
            seq = (s.tx_base + s.ts) & 0xFFFF
            b[0] = _DATA
            b[1] = s.sid >> 8
            b[2] = s.sid & 0xFF
            b[3] = seq >> 8
            b[4] = seq & 0xFF
            b[5] = s.rx_next >> 8
            b[6] = s.rx_next & 0xFF
            r = (s.tb + s.ts) % size
            a = size - r
            if k <= a:
                b[_HDR:_HDR + k] = memoryview(s.tx)[r:r + k]
            else:
                b[_HDR:_HDR + a] = memoryview(s.tx)[r:size]
                b[_HDR + a:_HDR + k] = memoryview(s.tx)[0:k - a]
            if not self._send(s.mac, self.dmv[0:_HDR + k]):
                break
            if s.ts == 0:
                s.t_prog = now
            s.ts += k
            self.stats[_S_BYTES_OUT] += k
            sent = True
        if sent:
            s.ack_due = False
            s.t_sent = now
        elif s.ack_due:
            room = s.resume == _RS_ROOM
            if self._ctl(s, _ACK, 1 if room else 0):
                s.ack_due = False
                s.t_sent = now
                if room:
                    s.resume = _RS_ASKED

    # ------------------------------------------------------------ receiving
    def _slot_of(self, mac):
        for s in self.slots:
            if s.state != _FREE and _mac_eq(s.mac, mac):
                return s
        return None

    def _rx_all(self, now):
        e = self.e
        n = 0
        while True:
            try:
                mac, msg = e.irecv(0)
            except OSError:
                return
            if mac is None:
                break
            n += 1
            try:
                self._on_msg(mac, msg, now)
            except (IndexError, ValueError):
                self.stats[_S_BAD_MSG] += 1
        if n:
            for s in self.slots:
                if s.ack_due and s.state == _UP:
                    self.push(s, now)
            pt = self.ptable
            if pt is not None and len(pt) > self.nslots + 4:
                # every sender read out stays in the module's table: a flood
                # from many MACs must not grow the heap
                pt.clear()
                self.stats[_S_TABLE_CLEARED] += 1

    def _on_msg(self, mac, msg, now):
        ln = len(msg)
        kind = msg[0] if ln else 0
        if kind == _BEACON:
            if ln != 36 or msg[1] != _VERSION:
                self.stats[_S_BAD_MSG] += 1
                return
            self.stats[_S_BEACONS_IN] += 1
            self._beacon(mac, msg, now)
            return
        if ln < 3 or kind < _OPEN or kind > _CLOSE:
            self.stats[_S_BAD_MSG] += 1
            return
        sid = (msg[1] << 8) | msg[2]
        s = self._slot_of(mac)
        if kind == _OPEN:
            self._opened(s, mac, sid, now)
            return
        if s is None or s.sid != sid or s.kill:
            self.stats[_S_NO_LINK] += 1
            return
        if kind == _CLOSE:
            s.kill = True
            return
        if s.state == _OPENING:
            if kind == _ACCEPT or kind == _DATA:
                self._up(s, now)
            if kind != _DATA:
                return
        s.t_heard = now
        if kind == _DATA:
            if ln <= _HDR:
                self.stats[_S_BAD_MSG] += 1
                return
            self._acked(s, (msg[5] << 8) | msg[6], now)
            self._data(s, msg, ln, (msg[3] << 8) | msg[4])
        elif kind == _ACK:
            if ln != 6:
                self.stats[_S_BAD_MSG] += 1
                return
            self._acked(s, (msg[3] << 8) | msg[4], now)
            if msg[5] and s.ts:
                # the receiver saw a gap or had no room: go back now
                s.ts = 0
                self.stats[_S_RESUMES] += 1
                self.push(s, now)

    def _acked(self, s, ack, now):
        d = (ack - s.tx_base) & 0xFFFF
        if d == 0 or d > s.ts:
            return          # nothing new (or not from this window: ignored)
        s.tb = (s.tb + d) % s.size
        s.tn -= d
        s.ts -= d
        s.tx_base = ack
        s.t_prog = now      # (the node's flusher retries a full link every 10 ms)

    def _data(self, s, msg, ln, seq):
        k = ln - _HDR
        s.ack_due = True
        if seq != s.rx_next or k > s.size - s.rn:
            # a gap (lost before) or a duplicate, or no room: not taken;
            # one resume request per gap (the sender goes back at once)
            if seq != s.rx_next and ((seq - s.rx_next) & 0xFFFF) < 0x8000 and s.resume == _RS_NONE:
                if self._ctl(s, _ACK, 1):
                    s.resume = _RS_ASKED
                    s.ack_due = False
            elif seq == s.rx_next:
                s.resume = _RS_ROOM       # recv_into asks for it when room is back
            self.stats[_S_RX_DROPPED] += 1
            return
        size = s.size
        w = (s.rr + s.rn) % size
        a = size - w
        src = memoryview(msg)
        if k <= a:
            s.rx[w:w + k] = src[_HDR:ln]
        else:
            s.rx[w:size] = src[_HDR:_HDR + a]
            s.rx[0:k - a] = src[_HDR + a:ln]
        s.rn += k
        s.rx_next = (s.rx_next + k) & 0xFFFF
        s.resume = _RS_NONE
        lk = s.link
        if lk is not None:
            lk.flag.set()

    def _beacon(self, mac, msg, now):
        # the lower key opens: only towards keys above ours
        key = self.key
        i = 0
        while i < 32:
            x = msg[4 + i]
            y = key[i]
            if x != y:
                break
            i += 1
        if i == 32 or msg[4 + i] < key[i]:
            return
        if msg[2] == 0 or self.pending is not None or self._slot_of(mac) is not None:
            return
        for j in range(_N_BACKOFF):
            if self.bo_used[j] and _mac_eq_at(self.bo_mac, 6 * j, mac):
                if ticks_diff(now, self.bo_until[j]) < 0:
                    return
                self.bo_used[j] = 0
        s = self._free_slot(0)
        if s is None:
            return
        if not self._claim(s, mac, int.from_bytes(platform.urandom(2), "big") or 1, now):
            return
        s.state = _OPENING
        s.outbound = True
        self.pending = s
        self.stats[_S_OPENS_OUT] += 1
        self._ctl(s, _OPEN, 0)
        s.t_sent = now

    def _opened(self, s, mac, sid, now):
        if s is not None:
            if s.sid == sid:
                if s.state == _UP and not s.outbound:
                    self._ctl(s, _ACCEPT, 0)      # our ACCEPT was lost
                return
            # a new session from that MAC: it restarted (or both opened)
            if s.state == _OPENING:
                # both sides opened at once: the lower MAC's OPEN wins
                if _less_mac(self.mac, mac):
                    return
            self._free(s, now)
        s = self._free_slot(0)
        if s is None:
            self.stats[_S_REFUSED_FULL] += 1
            return
        if not self._claim(s, mac, sid, now):
            return
        self.stats[_S_OPENS_IN] += 1
        self._ctl(s, _ACCEPT, 0)
        self._up(s, now)

    # ------------------------------------------------------------ slots
    def _free_slot(self, keep):
        found = None
        n = 0
        for s in self.slots:
            if s.state == _FREE:
                n += 1
                if found is None:
                    found = s
        return found if n > keep else None

    def _claim(self, s, mac, sid, now):
        try:
            self.e.add_peer(mac)
        except OSError as ex:
            if not (len(ex.args) > 1 and ex.args[1] == "ESP_ERR_ESPNOW_EXIST"):
                self.stats[_S_PEER_FULL] += 1
                return False
        i = 0
        while i < 6:
            s.mac[i] = mac[i]
            i += 1
        s.sid = sid
        s.t0 = now
        s.t_heard = now
        s.t_prog = now
        s.state = _OPENING
        return True

    def _up(self, s, now):
        if self.pending is s:
            self.pending = None
        try:
            link = EspNowLink(self, s)
        except MemoryError:
            self.stats[_S_OOM] += 1
            s.kill = True
            return
        s.state = _UP
        s.link = link
        s.t_heard = now
        self.stats[_S_LINKS_UP] += 1
        try:
            self.on_link(link)
        except MemoryError:
            self.stats[_S_OOM] += 1
            link.close()

    def _free(self, s, now):
        if s.state == _UP:
            self.stats[_S_DISCONNECTS] += 1
        if self.pending is s:
            self.pending = None
        try:
            self._ctl(s, _CLOSE, 0)
            self.e.del_peer(s.mac)
        except (OSError, ValueError):
            pass
        lk = s.link
        s.gen += 1
        s.clear()
        s.state = _FREE
        if lk is not None:
            lk.flag.set()

    def _backoff(self, s, now):
        j = self.bo_next
        self.bo_next = (j + 1) % _N_BACKOFF
        self.bo_mac[6 * j:6 * j + 6] = s.mac
        self.bo_until[j] = ticks_add(now, _BACKOFF_MS)
        self.bo_used[j] = 1

    # ------------------------------------------------------------ task
    def tick(self, now):
        """Timers: beacons, open retries, resends, keep-alives, dead links."""
        for s in self.slots:
            st = s.state
            if st == _FREE:
                continue
            if s.kill:
                self._free(s, now)
                continue
            if st == _OPENING:
                if ticks_diff(now, s.t0) > _OPEN_MS:
                    self.stats[_S_OPEN_FAIL] += 1
                    self._backoff(s, now)
                    self._free(s, now)
                elif ticks_diff(now, s.t_sent) >= _OPEN_RESEND_MS:
                    self._ctl(s, _OPEN, 0)
                    s.t_sent = now
                continue
            if ticks_diff(now, s.t_heard) > DEAD_MS:
                self.stats[_S_DEAD] += 1
                self._free(s, now)
                continue
            if s.ts and ticks_diff(now, s.t_prog) > _RTO_MS:
                # no ack moved: go back to the oldest unacked byte
                s.ts = 0
                self.stats[_S_RETRANSMITS] += 1
                s.t_prog = now
            if ticks_diff(now, s.t_sent) >= _KEEPALIVE_MS:
                s.ack_due = True
            self.push(s, now)
        if ticks_diff(now, self.t_beacon) >= _BEACON_MS:
            b = self.beacon
            free = 0
            for s in self.slots:
                if s.state == _FREE:
                    free += 1
            b[2] = free
            if self._send(_BCAST, b):
                self.t_beacon = now

    async def _run(self):
        while self.running:
            try:
                now = ticks_ms()
                self._rx_all(now)
                if ticks_diff(now, self.t_tick) >= _TICK_MS:
                    self.t_tick = now
                    self.tick(now)
            except MemoryError:
                self.stats[_S_OOM] += 1
                import gc
                gc.collect()
            await self.flag.wait()

    async def _clock(self):
        while self.running:
            await sleep_ms(_TICK_MS)
            self.flag.set()


def _less_mac(a, b):
    i = 0
    while i < 6:
        if a[i] != b[i]:
            return a[i] < b[i]
        i += 1
    return False

