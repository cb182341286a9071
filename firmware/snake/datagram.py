# Application datagrams: the sans-I/O layer above the router.
#
# Service numbers (like UDP ports), end-to-end acks with retries on a
# measured round trip, duplicate suppression, fragmentation with selective
# resend. The header is laid out byte by byte in docs/reference/DATAGRAMS.md
# (a program on the reference Pinecone router writes the same bytes with
# WriteTo/ReadFrom); tests/data/datagram_vectors.json pins it.
#
# Same shape as the router: no clock, no I/O, no asyncio. In: send(),
# receive(src, payload, now), tick(now), flush(now). Out, through callables
# the driver sets:
#   tx(dst_key, buf, n, now, body=None) -> 0 or a failure code (NO_ROUTE,
#       BUSY, TOO_BIG, NO_MEMORY): hand buf[:n] followed by body (a
#       fragment's data: a memoryview of the sender's data; None for an
#       ack) to the router as a traffic payload for dst_key
#       (via_router(router) builds one; the router joins them in the frame
#       it builds, so no datagram-sized buffer is held here).
#   on_datagram(src_key, dst_service, src_service, data): a whole datagram
#       arrived; `data` is a memoryview valid only during the call.
#   on_state(handle, state, reason): a send changed state (S_SENT,
#       S_DELIVERED, S_FAILED with a reason; also during send()).
#
# Memory: every table is preallocated from the board profile (dgram_*
# keys): reassembly buffers (dgram_reasm x dgram_max), sends in flight
# (dgram_pending; a send keeps a reference to the caller's data, no copy),
# acks owed (dgram_acks), delivered datagrams remembered (dgram_dedup), one
# round-trip estimate per recent destination. What allocates: one
# memoryview per datagram sent (the sender's data) and one per fragment of
# a fragmented one (its slice), one per datagram delivered (the view handed
# to on_datagram), and via_router's slice of the header buffer per frame
# (Router.send takes a payload object).
from array import array
from snake.platform import const, copy_into, key_cmp, ticks_add, ticks_diff
# (not from snake.profile: it is unloaded after boot, and importing it
# again would load its code for good; the profile object carries the
# resolved dgram_frag)
from snake.wire import DGRAM_HDR, DGRAM_MAX_FRAGS

_MAGIC0 = const(0x53)  # "S"
_MAGIC1 = const(0x44)  # "D": a datagram; ping/trace payloads start "SM" (probe.py)
_VERSION = const(1)
# The wire's numbers (docs/reference/DATAGRAMS.md) and the timing below are
# private constants: on MicroPython a module-level name is a qstr interned
# for good when the module loads, and this module loads after boot, when a
# step of the qstr pool (a block of 2x the last pool) costs ~9 KB of a
# fragmented heap (docs/reports/MEMORY.md, "qstr pool"). Tests take the
# values from the document.
_T_DATA = const(1)
_T_ACK = const(2)
_ACK_HDR = const(12)  # ACK header bytes before the bitmap

# DATA flags (byte 4)
_F_ACK_REQ = const(0x01)          # the sender wants an end-to-end ack
_F_ACK_NOW = const(0x02)          # answer with the bitmap now (last fragment of a burst)
# ACK flags (byte 4)
_F_REFUSED_BUSY = const(0x04)     # no reassembly slot free: try again later
_F_REFUSED_TOO_BIG = const(0x08)  # larger than the receiver's dgram_max

# send states (on_state, last_state) and failure reasons: the application's
# API (snake/runtime/app.py names them)
S_PENDING = 1
S_SENT = 2
S_DELIVERED = 3
S_FAILED = 4
STATE_NAMES = (None, "pending", "sent", "delivered", "failed")
_OK = const(0)        # tx: handed to the router
NO_ROUTE = 1
TIMEOUT = 2
TOO_BIG = 3
NO_MEMORY = 4
BUSY = 5
REASON_NAMES = (None, "no_route", "timeout", "too_big", "no_memory", "busy")

# Retry timing: RTO = SRTT + 4 x RTTVAR (RFC 6298 gains 1/8 and 1/4, in
# integer ms), bounded; doubled on each retry up to _RTO_MAX_MS. _MAX_TRIES
# rounds in all: an ack'd send ends within about 1 + 2 + 4 + 5 + 5 + 5 s
# when nothing answers (_RTO_INIT_MS, no sample yet). A round after a
# timeout resends only the highest fragment not confirmed (it asks for the
# bitmap); a round after a partial bitmap resends exactly the missing ones,
# so a lost fragment costs one round trip and only its own bytes.
_RTO_INIT_MS = const(1000)
_RTO_MIN_MS = const(150)
_RTO_MAX_MS = const(5000)
_MAX_TRIES = const(6)
# A reassembly idle this long is given up (longer than the gap between two
# of the sender's bursts: _RTO_MAX_MS).
_REASM_IDLE_MS = const(10000)
# A delivered datagram is remembered this long, longer than a sender keeps
# retrying (_MAX_TRIES bursts of at most _RTO_MAX_MS): a retry is never
# delivered twice. Older entries do not count, so a sender that restarts
# with the same id is not silenced for long.
_DEDUP_MS = const(60000)

# Datagrams.stats: counters by index, named by report.DGRAM_STATS
_G_SENT = const(0)             # datagrams handed to the mesh whole (every fragment once)
_G_DELIVERED = const(1)        # ack'd sends that ended delivered
_G_FAILED_NO_ROUTE = const(2)
_G_FAILED_TIMEOUT = const(3)
_G_FAILED_TOO_BIG = const(4)
_G_FAILED_NO_MEMORY = const(5)
_G_FAILED_BUSY = const(6)
_G_RETRIES = const(7)          # resend rounds (after a timeout or a partial ack)
_G_FRAGMENTS_SENT = const(8)   # fragment frames of fragmented datagrams (resends too)
_G_FRAGMENTS_RECEIVED = const(9)
_G_RECEIVED = const(10)        # datagrams delivered to an application here
_G_DUPLICATES = const(11)      # datagrams (or their fragments) suppressed as already delivered
_G_REASM_REFUSED = const(12)   # reassemblies refused: every slot busy
_G_REASM_TOO_BIG = const(13)   # reassemblies refused: larger than dgram_max
_G_REASM_EXPIRED = const(14)   # reassemblies given up incomplete
_G_MALFORMED = const(15)       # datagram payloads that do not parse (dropped)
_G_ACKS_SENT = const(16)
_G_ACKS_RECEIVED = const(17)
_G_ACKS_UNMATCHED = const(18)  # acks for no send in flight (late, or a duplicate)
_G_ACKS_DROPPED = const(19)    # acks not sent: the ring of owed acks was full or tx refused
_N_STATS = const(20)


# Slot state lives in one integer array per table (a slot's fields at
# slot * stride + field), one bytearray for every table's keys, bitmaps and
# frames (Datagrams.buf) and one list per table for object references: a
# handful of heap objects whatever the table sizes, since every object
# costs its header and allocation rounding on a small heap.
# sends in flight: s_v fields
_S_USED = const(0)
_S_ID = const(1)
_S_DSVC = const(2)
_S_SSVC = const(3)
_S_LEN = const(4)
_S_COUNT = const(5)
_S_STRIDE = const(6)
_S_ACK = const(7)
_S_TRIES = const(8)
_S_ERR = const(9)         # last local failure of this send (NO_ROUTE, BUSY)
_S_DEADLINE = const(10)
_S_SAMPLE = const(11)     # when the first burst's ACK_NOW left
_S_SAMPLING = const(12)
_SN = const(13)
# 16 bytes a send in buf: fragments still to hand to tx, then fragments
# the receiver holds (bitmaps); s_ref: destination key, caller's data
_SB = const(16)
_ACKED = const(8)
# round-trip estimates: r_v fields
_R_USED = const(0)
_R_SRTT = const(1)
_R_VAR = const(2)
_R_TIME = const(3)
_RN = const(4)
# reassemblies: m_v fields (8 bytes of bitmap a slot in buf, m_buf: the buffers)
_M_USED = const(0)
_M_ID = const(1)
_M_COUNT = const(2)
_M_STRIDE = const(3)
_M_TOTAL = const(4)
_M_FLAGS = const(5)
_M_GOT = const(6)         # fragments held
_M_TIME = const(7)
_MN = const(8)
# delivered datagrams remembered: d_v fields
_D_USED = const(0)
_D_ID = const(1)
_D_TIME = const(2)
_DN = const(3)
_AF = const(20)           # bytes of a frame header in buf (_ACK_HDR + 8)


# Datagrams.ofs: where each table starts in buf, and the layer's small
# integers (one array: an attribute is a qstr, see above)
_O_AK = const(0)          # the owed acks' frames
_O_RK = const(1)          # the keys of the round-trip estimates
_O_MK = const(2)          # the keys of the reassemblies
_O_MH = const(3)          # the reassemblies' bitmaps
_O_DK = const(4)          # the keys of the delivered datagrams remembered
_O_AHEAD = const(5)       # first owed ack in the ring
_O_DNEXT = const(6)       # next slot of the delivered ring
_O_PUMP = const(7)        # 1 while _pump runs (tx may call back into send)
_O_FRAG = const(8)        # fragment data bytes (dgram_frag)
_ON = const(9)


class Datagrams:
    def __init__(self, profile, key, first_id=1):
        self.key = bytes(key)
        self.max_size = profile.dgram_max
        P = profile.dgram_pending
        R = profile.dgram_reasm
        A = profile.dgram_acks
        D = profile.dgram_dedup
        self.stats = [0] * _N_STATS
        self.tx = None
        self.on_datagram = None
        self.on_state = None
        self.next_id = first_id & 0xFFFF
        self.last_state = 0           # state of the datagram send() just returned
        self.last_reason = 0
        # Every table's bytes in one buffer: the header of every frame we
        # build (an ack's bitmap included; a fragment's data goes to tx as
        # a view of the sender's data) at 0, the sends' bitmaps at _AF,
        # then the owed acks' frames, the keys of the round-trip estimates,
        # of the reassemblies, their bitmaps and the keys of the delivered
        # datagrams remembered (ofs says where).
        o = array("i", [0] * _ON)
        o[_O_AK] = _AF + _SB * P
        o[_O_RK] = o[_O_AK] + _AF * A
        o[_O_MK] = o[_O_RK] + 32 * P
        o[_O_MH] = o[_O_MK] + 32 * R
        o[_O_DK] = o[_O_MH] + 8 * R
        o[_O_FRAG] = profile.dgram_frag
        self.ofs = o
        self.buf = bytearray(o[_O_DK] + 32 * D)
        self.s_v = array("i", [0] * (_SN * P))
        self.s_ref = [None] * (2 * P)
        # round-trip estimates per destination (as many as sends in flight)
        self.r_v = array("i", [0] * (_RN * P))
        self.m_v = array("i", [0] * (_MN * R))
        self.m_buf = [bytearray(self.max_size) for _ in range(R)]
        # acks owed (sent by flush, never from inside the router's
        # callbacks): a ring of frames (in buf) and their destinations
        # (the source's bytes object)
        self.a_n = 0
        self.a_dst = [None] * A
        # delivered datagrams remembered: (source key, id, time), a ring
        self.d_v = array("i", [0] * (_DN * D))

    # ---- sending ----------------------------------------------------------
    def send(self, dst, service, data, now, ack=False, src_service=0):
        """Send `data` to key `dst` for `service`. Returns the handle (the
        datagram id); its state at return is self.last_state (S_PENDING:
        on_state reports the end; S_SENT or S_FAILED with
        self.last_reason: already final, on_state has been called too).
        `data` must stay unchanged until the send is final (a reference is
        kept, not a copy). A bad service number is a ValueError."""
        if not (0 <= service <= 0xFFFF and 0 <= src_service <= 0xFFFF):
            raise ValueError("service numbers are 0..65535")
        h = self.next_id
        self.next_id = (h + 1) & 0xFFFF
        n = len(data)
        fr = self.ofs[_O_FRAG]
        count = 1 if n <= fr else (n + fr - 1) // fr
        if n > self.max_size or n > 0xFFFF or count > DGRAM_MAX_FRAGS:
            return self._finish(-1, S_FAILED, TOO_BIG, h)
        v = self.s_v
        P = len(self.s_ref) >> 1
        i = 0
        while i < P and v[i * _SN + _S_USED]:
            i += 1
        if i == P:
            return self._finish(-1, S_FAILED, BUSY, h)
        try:
            mv = memoryview(data)
        except MemoryError:
            return self._finish(-1, S_FAILED, NO_MEMORY, h)
        o = i * _SN
        v[o + _S_USED] = 1
        self.s_ref[2 * i] = dst if isinstance(dst, bytes) else bytes(dst)
        self.s_ref[2 * i + 1] = mv
        v[o + _S_ID] = h
        v[o + _S_DSVC] = service
        v[o + _S_SSVC] = src_service
        v[o + _S_LEN] = n
        v[o + _S_COUNT] = count
        v[o + _S_STRIDE] = n if count == 1 else (n + count - 1) // count
        v[o + _S_ACK] = 1 if ack else 0
        _bits_fill(self.buf, _AF + _SB * i, count)
        _bits_fill(self.buf, _AF + _SB * i + _ACKED, 0)
        v[o + _S_TRIES] = 1
        v[o + _S_ERR] = 0
        v[o + _S_SAMPLING] = 1 if ack else 0
        v[o + _S_DEADLINE] = ticks_add(now, self._rto(i, now))
        self.last_state = S_PENDING
        self.last_reason = 0
        self._pump(i, now)
        if v[o + _S_USED] and v[o + _S_ID] == h:
            self.last_state = S_PENDING
            self.last_reason = 0
        return h

    def _finish(self, i, state, reason, h=0):
        """Send i (or, i < 0, send h that never took a slot) ends: counted,
        on_state told; returns its handle."""
        if i >= 0:
            o = i * _SN
            self.s_v[o + _S_USED] = 0
            self.s_ref[2 * i] = None
            self.s_ref[2 * i + 1] = None
            h = self.s_v[o + _S_ID]
        if state == S_DELIVERED:
            self.stats[_G_DELIVERED] += 1
        elif state == S_FAILED:
            # _G_FAILED_* follow the reasons' order (NO_ROUTE .. BUSY)
            self.stats[_G_FAILED_NO_ROUTE + reason - NO_ROUTE] += 1
        self.last_state = state
        self.last_reason = reason
        if self.on_state is not None:
            self.on_state(h, state, reason)
        return h

    def pending(self):
        """Sends in flight."""
        return _used(self.s_v, _SN)

    def _pump(self, i, now):
        """Hand send i's owed fragments to tx, lowest first, until done or
        tx refuses (a full queue: the rest goes at a later tick)."""
        if self.ofs[_O_PUMP]:
            return
        self.ofs[_O_PUMP] = 1
        v = self.s_v
        o = i * _SN
        owed = b = self.buf
        ob = _AF + _SB * i
        count = v[o + _S_COUNT]
        stride = v[o + _S_STRIDE]
        total = v[o + _S_LEN]
        h = v[o + _S_ID]
        last = count - 1
        while last >= 0 and not owed[ob + (last >> 3)] & (0x80 >> (last & 7)):
            last -= 1
        try:
            while last >= 0:
                k = _bits_first(owed, ob, count)
                fl = 0
                if v[o + _S_ACK]:
                    fl = _F_ACK_REQ
                    if k == last:
                        fl |= _F_ACK_NOW
                b[0] = _MAGIC0
                b[1] = _MAGIC1
                b[2] = _VERSION
                b[3] = _T_DATA
                b[4] = fl
                x = v[o + _S_DSVC]
                b[5] = x >> 8
                b[6] = x & 0xFF
                x = v[o + _S_SSVC]
                b[7] = x >> 8
                b[8] = x & 0xFF
                b[9] = h >> 8
                b[10] = h & 0xFF
                b[11] = count
                b[12] = k
                b[13] = stride >> 8
                b[14] = stride & 0xFF
                b[15] = total >> 8
                b[16] = total & 0xFF
                mv = self.s_ref[2 * i + 1]
                if count > 1:
                    off = k * stride
                    mv = mv[off:off + stride if k < count - 1 else total]
                r = self.tx(self.s_ref[2 * i], b, DGRAM_HDR, now, mv)
                if not (v[o + _S_USED] and v[o + _S_ID] == h):
                    return      # ended during tx (a local delivery acked it)
                if r != _OK:
                    if r == TOO_BIG or r == NO_MEMORY or (r == NO_ROUTE and not v[o + _S_ACK]):
                        self._finish(i, S_FAILED, r)
                        return
                    v[o + _S_ERR] = r
                    return
                owed[ob + (k >> 3)] &= ~(0x80 >> (k & 7)) & 0xFF
                if count > 1:
                    self.stats[_G_FRAGMENTS_SENT] += 1
                if k == last:
                    if v[o + _S_TRIES] == 1:
                        if v[o + _S_SAMPLING]:
                            v[o + _S_SAMPLE] = now
                        self.stats[_G_SENT] += 1
                    if not v[o + _S_ACK]:
                        self._finish(i, S_SENT, 0)
                        return
                    v[o + _S_ERR] = 0
                    return
        finally:
            self.ofs[_O_PUMP] = 0

    # ---- round-trip estimates ---------------------------------------------
    def _rto(self, i, now):
        """Retransmission timeout for send i's destination, before backoff."""
        j = _find(self.r_v, _RN, self.buf, self.ofs[_O_RK], self.s_ref[2 * i])
        if j < 0:
            return _RTO_INIT_MS
        o = j * _RN
        t = self.r_v[o + _R_SRTT] + 4 * self.r_v[o + _R_VAR]
        if t < _RTO_MIN_MS:
            return _RTO_MIN_MS
        if t > _RTO_MAX_MS:
            return _RTO_MAX_MS
        return t

    def rtt_of(self, key):
        """(srtt_ms, rttvar_ms) measured to `key`, or None."""
        j = _find(self.r_v, _RN, self.buf, self.ofs[_O_RK], key)
        if j < 0:
            return None
        return (self.r_v[j * _RN + _R_SRTT], self.r_v[j * _RN + _R_VAR])

    # ---- timers -----------------------------------------------------------
    def tick(self, now):
        """Retries, timeouts, blocked fragments, stale reassemblies; then the
        owed acks (flush)."""
        v = self.s_v
        i = 0
        while i < len(self.s_ref) >> 1:
            o = i * _SN
            if not v[o + _S_USED]:
                pass
            elif ticks_diff(now, v[o + _S_DEADLINE]) < 0:
                if _bits_first(self.buf, _AF + _SB * i, v[o + _S_COUNT]) >= 0:
                    self._pump(i, now)
            elif not v[o + _S_ACK]:
                # a send without ack that tx kept refusing for a whole RTO
                self._finish(i, S_FAILED, v[o + _S_ERR] or BUSY)
            elif v[o + _S_TRIES] >= _MAX_TRIES:
                self._finish(i, S_FAILED, v[o + _S_ERR] or TIMEOUT)
            else:
                # no answer: resend the highest fragment the receiver has
                # not confirmed, asking for its bitmap (fragments a blocked
                # burst still owes go too)
                self._retry(i, now, True)
            i += 1
        v = self.m_v
        i = 0
        while i < len(self.m_buf):
            o = i * _MN
            if v[o + _M_USED] and ticks_diff(now, v[o + _M_TIME]) >= _REASM_IDLE_MS:
                v[o + _M_USED] = 0
                self.stats[_G_REASM_EXPIRED] += 1
            i += 1
        self.flush(now)

    def _retry(self, i, now, probe):
        v = self.s_v
        o = i * _SN
        b = self.buf
        ob = _AF + _SB * i
        t = v[o + _S_TRIES] + 1
        v[o + _S_TRIES] = t
        self.stats[_G_RETRIES] += 1
        k = v[o + _S_COUNT] - 1
        while k >= 0:
            if not b[ob + _ACKED + (k >> 3)] & (0x80 >> (k & 7)):
                b[ob + (k >> 3)] |= 0x80 >> (k & 7)
                if probe:
                    break
            k -= 1
        rto = self._rto(i, now) << (t - 1)
        if rto > _RTO_MAX_MS:
            rto = _RTO_MAX_MS
        v[o + _S_DEADLINE] = ticks_add(now, rto)
        self._pump(i, now)

    # ---- receiving --------------------------------------------------------
    def receive(self, src, payload, now):
        """A traffic payload delivered to us from key `src`. False when it is
        no datagram (another layer's: ping/trace, or an application's raw
        payload); True when it was one (also when it was malformed:
        counted, dropped)."""
        n = len(payload)
        if n < 2 or payload[0] != _MAGIC0 or payload[1] != _MAGIC1:
            return False
        if n < _ACK_HDR or payload[2] != _VERSION:
            self.stats[_G_MALFORMED] += 1
            return True
        p = payload
        t = p[3]
        if t == _T_ACK:
            st = self.stats
            count = p[11]
            nb = (count + 7) >> 3
            if count < 1 or count > DGRAM_MAX_FRAGS or n != _ACK_HDR + nb:
                st[_G_MALFORMED] += 1
                return True
            st[_G_ACKS_RECEIVED] += 1
            hid = (p[9] << 8) | p[10]
            v = self.s_v
            i = 0
            P = len(self.s_ref) >> 1
            while i < P:
                o = i * _SN
                if (v[o + _S_USED] and v[o + _S_ACK] and v[o + _S_ID] == hid
                        and key_cmp(self.s_ref[2 * i], 0, src, 0) == 0 and v[o + _S_COUNT] == count):
                    break
                i += 1
            if i == P:
                st[_G_ACKS_UNMATCHED] += 1
                return True
            fl = p[4]
            if fl & _F_REFUSED_TOO_BIG:
                self._finish(i, S_FAILED, TOO_BIG)
                return True
            if fl & _F_REFUSED_BUSY:
                v[o + _S_ERR] = BUSY    # the retry timer tries again
                return True
            b = self.buf
            ob = _AF + _SB * i
            k = 0
            while k < nb:
                b[ob + _ACKED + k] |= p[_ACK_HDR + k]
                k += 1
            if v[o + _S_SAMPLING] and v[o + _S_TRIES] == 1 and _bits_first(b, ob, count) < 0:
                # Karn: only the first burst's answer measures the round trip
                v[o + _S_SAMPLING] = 0
                rtt = ticks_diff(now, v[o + _S_SAMPLE])
                r = self.r_v
                d = self.s_ref[2 * i]
                j = _find(r, _RN, b, self.ofs[_O_RK], d)
                if j < 0:
                    # a new destination takes a free slot or the least recently sampled
                    j = 0
                    k = 0
                    while k < len(r) // _RN:
                        if not r[k * _RN + _R_USED]:
                            j = k
                            break
                        if ticks_diff(r[j * _RN + _R_TIME], r[k * _RN + _R_TIME]) > 0:
                            j = k
                        k += 1
                    q = j * _RN
                    r[q + _R_USED] = 1
                    copy_into(b, self.ofs[_O_RK] + 32 * j, d, 0, 32)
                    r[q + _R_SRTT] = rtt
                    r[q + _R_VAR] = rtt >> 1
                else:
                    q = j * _RN
                    e = r[q + _R_SRTT] - rtt
                    if e < 0:
                        e = -e
                    r[q + _R_VAR] += (e - r[q + _R_VAR]) >> 2
                    r[q + _R_SRTT] += (rtt - r[q + _R_SRTT]) >> 3
                r[q + _R_TIME] = now
            if _bits_first(b, ob + _ACKED, count, True) < 0:
                self._finish(i, S_DELIVERED, 0)
                return True
            # a partial bitmap: resend only what is missing, now
            if _bits_first(b, ob, count) >= 0:
                return True     # a burst is still going out
            if v[o + _S_TRIES] >= _MAX_TRIES:
                return True     # the timer ends it
            self._retry(i, now, False)
            return True
        if t != _T_DATA:
            self.stats[_G_MALFORMED] += 1
            return True
        st = self.stats
        if n < DGRAM_HDR:
            st[_G_MALFORMED] += 1
            return True
        fl = p[4]
        hid = (p[9] << 8) | p[10]
        count = p[11]
        k = p[12]
        stride = (p[13] << 8) | p[14]
        total = (p[15] << 8) | p[16]
        ln = n - DGRAM_HDR
        if count < 1 or count > DGRAM_MAX_FRAGS or k >= count:
            st[_G_MALFORMED] += 1
            return True
        if count == 1:
            ok = stride == total and ln == total
        else:
            # every fragment but the last is `stride` long; the last holds the rest
            last_len = total - (count - 1) * stride
            ok = 1 <= last_len <= stride and ln == (stride if k < count - 1 else last_len)
        if not ok:
            st[_G_MALFORMED] += 1
            return True
        want_ack = fl & _F_ACK_REQ
        if want_ack and self._dedup(src, p, now, False):
            st[_G_DUPLICATES] += 1
            if fl & _F_ACK_NOW or count == 1:
                self._owe_ack(src, p, count, -1, 0)
            return True
        if count == 1:
            st[_G_RECEIVED] += 1
            if want_ack:
                self._dedup(src, p, now, True)
                self._owe_ack(src, p, 1, -1, 0)
            data = memoryview(p)[DGRAM_HDR:DGRAM_HDR + ln]
            if self.on_datagram is not None:
                self.on_datagram(src, (p[5] << 8) | p[6], (p[7] << 8) | p[8], data)
            return True
        st[_G_FRAGMENTS_RECEIVED] += 1
        if total > self.max_size:
            st[_G_REASM_TOO_BIG] += 1
            if want_ack and fl & _F_ACK_NOW:
                self._owe_ack(src, p, count, -1, _F_REFUSED_TOO_BIG)
            return True
        # the reassembly slot of (src, hid): found, or a free one set up
        v = self.m_v
        mk = self.ofs[_O_MK]
        m = -1
        i = 0
        while i < len(self.m_buf):
            o = i * _MN
            if v[o + _M_USED]:
                if v[o + _M_ID] == hid and key_cmp(self.buf, mk + 32 * i, src, 0) == 0:
                    if (v[o + _M_COUNT] != count or v[o + _M_STRIDE] != stride
                            or v[o + _M_TOTAL] != total):
                        st[_G_MALFORMED] += 1     # layout differs from its other fragments
                        return True
                    m = i
                    break
                if ticks_diff(now, v[o + _M_TIME]) >= _REASM_IDLE_MS:
                    v[o + _M_USED] = 0
                    st[_G_REASM_EXPIRED] += 1
            i += 1
        if m < 0:
            i = 0
            while i < len(self.m_buf) and v[i * _MN + _M_USED]:
                i += 1
            if i == len(self.m_buf):
                st[_G_REASM_REFUSED] += 1
                if want_ack and fl & _F_ACK_NOW:
                    self._owe_ack(src, p, count, -1, _F_REFUSED_BUSY)
                return True
            m = i
            o = m * _MN
            v[o + _M_USED] = 1
            copy_into(self.buf, mk + 32 * m, src, 0, 32)
            v[o + _M_ID] = hid
            v[o + _M_COUNT] = count
            v[o + _M_STRIDE] = stride
            v[o + _M_TOTAL] = total
            v[o + _M_FLAGS] = 0
            v[o + _M_GOT] = 0
            _bits_fill(self.buf, self.ofs[_O_MH] + 8 * m, 0)
        o = m * _MN
        hb = self.ofs[_O_MH] + 8 * m
        x = 0x80 >> (k & 7)
        if not self.buf[hb + (k >> 3)] & x:
            self.buf[hb + (k >> 3)] |= x
            v[o + _M_GOT] += 1
            copy_into(self.m_buf[m], k * stride, p, DGRAM_HDR, ln)
        v[o + _M_TIME] = now
        v[o + _M_FLAGS] |= fl
        if v[o + _M_GOT] == count:
            v[o + _M_USED] = 0
            st[_G_RECEIVED] += 1
            if v[o + _M_FLAGS] & _F_ACK_REQ:
                self._dedup(src, p, now, True)
                self._owe_ack(src, p, count, -1, 0)
            data = memoryview(self.m_buf[m])[:total]
            if self.on_datagram is not None:
                self.on_datagram(src, (p[5] << 8) | p[6], (p[7] << 8) | p[8], data)
        elif want_ack and fl & _F_ACK_NOW:
            self._owe_ack(src, p, count, hb, 0)
        return True

    def reassemblies(self):
        """Reassemblies in flight."""
        return _used(self.m_v, _MN)

    # ---- duplicate suppression ----------------------------------------------
    def _dedup(self, src, p, now, add):
        """add False: whether the datagram whose header is p, from src, was
        delivered within _DEDUP_MS; True: remember it delivered."""
        v = self.d_v
        dk = self.ofs[_O_DK]
        hid = (p[9] << 8) | p[10]
        if add:
            i = self.ofs[_O_DNEXT]
            self.ofs[_O_DNEXT] = (i + 1) % (len(v) // _DN)
            o = i * _DN
            v[o + _D_USED] = 1
            copy_into(self.buf, dk + 32 * i, src, 0, 32)
            v[o + _D_ID] = hid
            v[o + _D_TIME] = now
            return True
        i = 0
        while i < len(v) // _DN:
            o = i * _DN
            if (v[o + _D_USED] and v[o + _D_ID] == hid
                    and ticks_diff(now, v[o + _D_TIME]) < _DEDUP_MS
                    and key_cmp(self.buf, dk + 32 * i, src, 0) == 0):
                return True
            i += 1
        return False

    # ---- acks -------------------------------------------------------------
    def _owe_ack(self, src, p, count, base, flags):
        """Queue an ack for the datagram whose header is p: its bitmap from
        buf[base:] (base < 0: every fragment) and flags."""
        A = len(self.a_dst)
        if self.a_n >= A:
            self.stats[_G_ACKS_DROPPED] += 1
            return
        j = (self.ofs[_O_AHEAD] + self.a_n) % A
        self.a_n += 1
        self.a_dst[j] = src
        fb = self.buf
        o = self.ofs[_O_AK] + _AF * j
        fb[o] = _MAGIC0
        fb[o + 1] = _MAGIC1
        fb[o + 2] = _VERSION
        fb[o + 3] = _T_ACK
        fb[o + 4] = flags
        copy_into(fb, o + 5, p, 5, 6)    # services and id, as in the data
        fb[o + 11] = count
        k = 0
        while k < (count + 7) >> 3:
            if flags & (_F_REFUSED_BUSY | _F_REFUSED_TOO_BIG):
                x = 0
            elif base < 0:
                x = 0xFF
                rest = count - 8 * k
                if rest < 8:
                    x = (0xFF << (8 - rest)) & 0xFF
            else:
                x = fb[base + k]
            fb[o + _ACK_HDR + k] = x
            k += 1

    def flush(self, now):
        """Send the owed acks (call after router.receive and on every tick:
        never from inside the router's callbacks)."""
        A = len(self.a_dst)
        b = self.buf
        while self.a_n:
            j = self.ofs[_O_AHEAD]
            self.ofs[_O_AHEAD] = (j + 1) % A
            self.a_n -= 1
            o = self.ofs[_O_AK] + _AF * j
            n = _ACK_HDR + ((b[o + 11] + 7) >> 3)
            copy_into(b, 0, b, o, n)
            d = self.a_dst[j]
            self.a_dst[j] = None
            if self.tx(d, b, n, now) == _OK:
                self.stats[_G_ACKS_SENT] += 1
            else:
                self.stats[_G_ACKS_DROPPED] += 1



def _used(v, n):
    """Slots in use of a table of n fields a slot whose field 0 says so."""
    c = 0
    i = 0
    while i < len(v):
        if v[i]:
            c += 1
        i += n
    return c


def _find(v, n, keys, base, key):
    """Slot in use of a table of n fields a slot whose field 0 says so and
    whose key (32 bytes a slot in keys from base) is `key`, else -1."""
    j = 0
    while j * n < len(v):
        if v[j * n] and key_cmp(keys, base + 32 * j, key, 0) == 0:
            return j
        j += 1
    return -1


# ---- bitmaps of up to 64 fragments in bytearrays (bit k: byte k >> 3,
# mask 0x80 >> (k & 7), as on the wire) --------------------------------------
def _bits_fill(b, o, count):
    """Bits 0..count-1 set, the rest of the 8 bytes clear."""
    k = 0
    while k < 8:
        b[o + k] = 0
        k += 1
    k = 0
    while k < count:
        b[o + (k >> 3)] |= 0x80 >> (k & 7)
        k += 1


def _bits_first(b, o, count, clear=False):
    """First of bits 0..count-1 set (clear: not set), else -1."""
    k = 0
    while k < count:
        if (not b[o + (k >> 3)] & (0x80 >> (k & 7))) == clear:
            return k
        k += 1
    return -1


def via_router(router, hop_limit=0):
    """A tx for Datagrams that sends through router.send (hop_limit 0: the
    profile's). Tells no route (the router counted drops.no_route) from a
    full queue (busy)."""
    from snake.telemetry import D_NO_ROUTE
    from snake.wire import WireError
    drops = router.counters.drops

    def tx(dst, buf, n, now, body=None):
        nr = drops[D_NO_ROUTE]
        try:
            ok = router.send(dst, memoryview(buf)[:n], now, hop_limit, body)
        except WireError:
            return TOO_BIG
        except MemoryError:
            return NO_MEMORY
        if ok:
            return _OK
        return NO_ROUTE if drops[D_NO_ROUTE] != nr else BUSY
    return tx
