# The datagram layer's logic (snake/datagram.py has its API and state).
#
# Cold code: a node loads this module for one event (a send, a datagram
# received, a tick with work due, a flush of owed acks) through
# snake.platform.cold() and lets go of it after, so its bytecode is in the
# heap only while the event runs (as .mpy, ~5.5 KB on a stock image, which
# runs nothing from flash). Every function takes the state, a
# snake.datagram.Datagrams (dg), whose class holds nothing of this module:
# no object made here outlives the event (the tx closure, via_router, is the
# resident module's). Only snake.datagram's methods call in here; it names
# this module as a string, and this module imports it.
#
# The layout of the state (one integer array per table, one bytearray for
# every table's bytes, ofs) is this module's; the resident methods read two
# of its small integers (ofs[_O_DUE], ofs[_O_RUN]), count two stats and
# count two tables' slots in use, by the same indices (snake/datagram.py
# says which).
from array import array
from snake.datagram import (S_PENDING, S_SENT, S_DELIVERED, S_FAILED, NO_ROUTE, TIMEOUT, TOO_BIG,
                            NO_MEMORY, BUSY)
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

_OK = const(0)        # tx: handed to the router

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
_G_NO_MEMORY = const(20)       # events not run: no heap to load this module (snake/datagram.py counts them)
_N_STATS = const(21)


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
_O_DUE = const(9)         # the next time tick has work (ticks ms), -1: none (snake/datagram.py reads it)
_O_RUN = const(10)        # events running (nested through tx; snake/datagram.py keeps it)
_ON = const(11)


def init(dg, profile, key, first_id):
    """Datagrams.__init__: every table, preallocated from the profile."""
    dg.key = bytes(key)
    dg.max_size = profile.dgram_max
    P = profile.dgram_pending
    R = profile.dgram_reasm
    A = profile.dgram_acks
    D = profile.dgram_dedup
    dg.stats = [0] * _N_STATS
    dg.tx = None
    dg.on_datagram = None
    dg.on_state = None
    dg.next_id = first_id & 0xFFFF
    dg.last_state = 0           # state of the datagram send() just returned
    dg.last_reason = 0
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
    o[_O_DUE] = -1
    dg.ofs = o
    dg.buf = bytearray(o[_O_DK] + 32 * D)
    dg.s_v = array("i", [0] * (_SN * P))
    dg.s_ref = [None] * (2 * P)
    # round-trip estimates per destination (as many as sends in flight)
    dg.r_v = array("i", [0] * (_RN * P))
    dg.m_v = array("i", [0] * (_MN * R))
    dg.m_buf = [bytearray(dg.max_size) for _ in range(R)]
    # acks owed (sent by flush, never from inside the router's
    # callbacks): a ring of frames (in buf) and their destinations
    # (the source's bytes object)
    dg.a_n = 0
    dg.a_dst = [None] * A
    # delivered datagrams remembered: (source key, id, time), a ring
    dg.d_v = array("i", [0] * (_DN * D))


# ---- sending ----------------------------------------------------------
def send(dg, dst, service, data, now, ack=False, src_service=0):
    """Send `data` to key `dst` for `service`. Returns the handle (the
    datagram id); its state at return is dg.last_state (S_PENDING:
    on_state reports the end; S_SENT or S_FAILED with
    dg.last_reason: already final, on_state has been called too).
    `data` must stay unchanged until the send is final (a reference is
    kept, not a copy). A bad service number is a ValueError."""
    if not (0 <= service <= 0xFFFF and 0 <= src_service <= 0xFFFF):
        raise ValueError("service numbers are 0..65535")
    h = dg.next_id
    dg.next_id = (h + 1) & 0xFFFF
    n = len(data)
    fr = dg.ofs[_O_FRAG]
    count = 1 if n <= fr else (n + fr - 1) // fr
    if n > dg.max_size or n > 0xFFFF or count > DGRAM_MAX_FRAGS:
        return _finish(dg, -1, S_FAILED, TOO_BIG, h)
    v = dg.s_v
    P = len(dg.s_ref) >> 1
    i = 0
    while i < P and v[i * _SN + _S_USED]:
        i += 1
    if i == P:
        return _finish(dg, -1, S_FAILED, BUSY, h)
    try:
        mv = memoryview(data)
    except MemoryError:
        return _finish(dg, -1, S_FAILED, NO_MEMORY, h)
    o = i * _SN
    v[o + _S_USED] = 1
    dg.s_ref[2 * i] = dst if isinstance(dst, bytes) else bytes(dst)
    dg.s_ref[2 * i + 1] = mv
    v[o + _S_ID] = h
    v[o + _S_DSVC] = service
    v[o + _S_SSVC] = src_service
    v[o + _S_LEN] = n
    v[o + _S_COUNT] = count
    v[o + _S_STRIDE] = n if count == 1 else (n + count - 1) // count
    v[o + _S_ACK] = 1 if ack else 0
    _bits_fill(dg.buf, _AF + _SB * i, count)
    _bits_fill(dg.buf, _AF + _SB * i + _ACKED, 0)
    v[o + _S_TRIES] = 1
    v[o + _S_ERR] = 0
    v[o + _S_SAMPLING] = 1 if ack else 0
    _rto(dg, i, now)
    dg.last_state = S_PENDING
    dg.last_reason = 0
    _pump(dg, i, now)
    if v[o + _S_USED] and v[o + _S_ID] == h:
        dg.last_state = S_PENDING
        dg.last_reason = 0
    return h


def _finish(dg, i, state, reason, h=0):
    """Send i (or, i < 0, send h that never took a slot) ends: counted,
    on_state told; returns its handle."""
    if i >= 0:
        o = i * _SN
        dg.s_v[o + _S_USED] = 0
        dg.s_ref[2 * i] = None
        dg.s_ref[2 * i + 1] = None
        h = dg.s_v[o + _S_ID]
    if state == S_DELIVERED:
        dg.stats[_G_DELIVERED] += 1
    elif state == S_FAILED:
        # _G_FAILED_* follow the reasons' order (NO_ROUTE .. BUSY)
        dg.stats[_G_FAILED_NO_ROUTE + reason - NO_ROUTE] += 1
    dg.last_state = state
    dg.last_reason = reason
    if dg.on_state is not None:
        dg.on_state(h, state, reason)
    return h


def _pump(dg, i, now):
    """Hand send i's owed fragments to tx, lowest first, until done or
    tx refuses (a full queue: the rest goes at a later tick)."""
    if dg.ofs[_O_PUMP]:
        _due(dg, now)       # a send from inside tx: the next tick pumps it
        return
    dg.ofs[_O_PUMP] = 1
    v = dg.s_v
    o = i * _SN
    owed = b = dg.buf
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
            mv = dg.s_ref[2 * i + 1]
            if count > 1:
                off = k * stride
                mv = mv[off:off + stride if k < count - 1 else total]
            r = dg.tx(dg.s_ref[2 * i], b, DGRAM_HDR, now, mv)
            if not (v[o + _S_USED] and v[o + _S_ID] == h):
                return      # ended during tx (a local delivery acked it)
            if r != _OK:
                if r == TOO_BIG or r == NO_MEMORY or (r == NO_ROUTE and not v[o + _S_ACK]):
                    _finish(dg, i, S_FAILED, r)
                    return
                v[o + _S_ERR] = r
                _due(dg, now)   # the rest at the next tick
                return
            owed[ob + (k >> 3)] &= ~(0x80 >> (k & 7)) & 0xFF
            if count > 1:
                dg.stats[_G_FRAGMENTS_SENT] += 1
            if k == last:
                if v[o + _S_TRIES] == 1:
                    if v[o + _S_SAMPLING]:
                        v[o + _S_SAMPLE] = now
                    dg.stats[_G_SENT] += 1
                if not v[o + _S_ACK]:
                    _finish(dg, i, S_SENT, 0)
                    return
                v[o + _S_ERR] = 0
                return
    finally:
        dg.ofs[_O_PUMP] = 0


# ---- round-trip estimates ---------------------------------------------
def _rto(dg, i, now):
    """Arm send i's retransmission timer: its destination's RTO (SRTT + 4
    RTTVAR, bounded; _RTO_INIT_MS before a sample) doubled for each try
    after the first, at most _RTO_MAX_MS, from now."""
    j = _find(dg.r_v, _RN, dg.buf, dg.ofs[_O_RK], dg.s_ref[2 * i])
    t = _RTO_INIT_MS
    if j >= 0:
        o = j * _RN
        t = dg.r_v[o + _R_SRTT] + 4 * dg.r_v[o + _R_VAR]
        if t < _RTO_MIN_MS:
            t = _RTO_MIN_MS
    o = i * _SN
    t <<= dg.s_v[o + _S_TRIES] - 1
    if t > _RTO_MAX_MS:
        t = _RTO_MAX_MS
    t = ticks_add(now, t)
    dg.s_v[o + _S_DEADLINE] = t
    _due(dg, t)


def rtt_of(dg, key):
    """(srtt_ms, rttvar_ms) measured to `key`, or None."""
    j = _find(dg.r_v, _RN, dg.buf, dg.ofs[_O_RK], key)
    if j < 0:
        return None
    return (dg.r_v[j * _RN + _R_SRTT], dg.r_v[j * _RN + _R_VAR])


# ---- timers -----------------------------------------------------------
def tick(dg, now):
    """Retries, timeouts, blocked fragments, stale reassemblies; then the
    owed acks (flush). Sets when it has work next (ofs[_O_DUE])."""
    dg.ofs[_O_DUE] = -1
    v = dg.s_v
    i = 0
    while i < len(dg.s_ref) >> 1:
        o = i * _SN
        if not v[o + _S_USED]:
            pass
        elif ticks_diff(now, v[o + _S_DEADLINE]) < 0:
            if _bits_first(dg.buf, _AF + _SB * i, v[o + _S_COUNT]) >= 0:
                _pump(dg, i, now)
        elif not v[o + _S_ACK]:
            # a send without ack that tx kept refusing for a whole RTO
            _finish(dg, i, S_FAILED, v[o + _S_ERR] or BUSY)
        elif v[o + _S_TRIES] >= _MAX_TRIES:
            _finish(dg, i, S_FAILED, v[o + _S_ERR] or TIMEOUT)
        else:
            # no answer: resend the highest fragment the receiver has
            # not confirmed, asking for its bitmap (fragments a blocked
            # burst still owes go too)
            _retry(dg, i, now, True)
        if v[o + _S_USED]:
            _due(dg, v[o + _S_DEADLINE])
        i += 1
    v = dg.m_v
    i = 0
    while i < len(dg.m_buf):
        o = i * _MN
        if v[o + _M_USED]:
            if ticks_diff(now, v[o + _M_TIME]) >= _REASM_IDLE_MS:
                v[o + _M_USED] = 0
                dg.stats[_G_REASM_EXPIRED] += 1
            else:
                _due(dg, ticks_add(v[o + _M_TIME], _REASM_IDLE_MS))
        i += 1
    flush(dg, now)


def _retry(dg, i, now, probe):
    v = dg.s_v
    o = i * _SN
    b = dg.buf
    ob = _AF + _SB * i
    v[o + _S_TRIES] += 1
    dg.stats[_G_RETRIES] += 1
    k = v[o + _S_COUNT] - 1
    while k >= 0:
        if not b[ob + _ACKED + (k >> 3)] & (0x80 >> (k & 7)):
            b[ob + (k >> 3)] |= 0x80 >> (k & 7)
            if probe:
                break
        k -= 1
    _rto(dg, i, now)
    _pump(dg, i, now)


# ---- receiving --------------------------------------------------------
def receive(dg, src, payload, now):
    """A datagram payload (it starts "SD": Datagrams.receive looked)
    delivered to us from key `src`; a malformed one is counted and
    dropped."""
    n = len(payload)
    if n < _ACK_HDR or payload[2] != _VERSION:
        dg.stats[_G_MALFORMED] += 1
        return
    p = payload
    t = p[3]
    if t == _T_ACK:
        st = dg.stats
        count = p[11]
        nb = (count + 7) >> 3
        if count < 1 or count > DGRAM_MAX_FRAGS or n != _ACK_HDR + nb:
            st[_G_MALFORMED] += 1
            return
        st[_G_ACKS_RECEIVED] += 1
        hid = (p[9] << 8) | p[10]
        v = dg.s_v
        i = 0
        P = len(dg.s_ref) >> 1
        while i < P:
            o = i * _SN
            if (v[o + _S_USED] and v[o + _S_ACK] and v[o + _S_ID] == hid
                    and key_cmp(dg.s_ref[2 * i], 0, src, 0) == 0 and v[o + _S_COUNT] == count):
                break
            i += 1
        if i == P:
            st[_G_ACKS_UNMATCHED] += 1
            return
        fl = p[4]
        if fl & _F_REFUSED_TOO_BIG:
            _finish(dg, i, S_FAILED, TOO_BIG)
            return
        if fl & _F_REFUSED_BUSY:
            v[o + _S_ERR] = BUSY    # the retry timer tries again
            return
        b = dg.buf
        ob = _AF + _SB * i
        k = 0
        while k < nb:
            b[ob + _ACKED + k] |= p[_ACK_HDR + k]
            k += 1
        if v[o + _S_SAMPLING] and v[o + _S_TRIES] == 1 and _bits_first(b, ob, count) < 0:
            # Karn: only the first burst's answer measures the round trip
            v[o + _S_SAMPLING] = 0
            rtt = ticks_diff(now, v[o + _S_SAMPLE])
            r = dg.r_v
            d = dg.s_ref[2 * i]
            j = _find(r, _RN, b, dg.ofs[_O_RK], d)
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
                copy_into(b, dg.ofs[_O_RK] + 32 * j, d, 0, 32)
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
            _finish(dg, i, S_DELIVERED, 0)
            return
        # a partial bitmap: resend only what is missing, now
        if _bits_first(b, ob, count) >= 0:
            return          # a burst is still going out
        if v[o + _S_TRIES] >= _MAX_TRIES:
            return          # the timer ends it
        _retry(dg, i, now, False)
        return
    if t != _T_DATA:
        dg.stats[_G_MALFORMED] += 1
        return
    st = dg.stats
    if n < DGRAM_HDR:
        st[_G_MALFORMED] += 1
        return
    fl = p[4]
    hid = (p[9] << 8) | p[10]
    count = p[11]
    k = p[12]
    stride = (p[13] << 8) | p[14]
    total = (p[15] << 8) | p[16]
    ln = n - DGRAM_HDR
    if count < 1 or count > DGRAM_MAX_FRAGS or k >= count:
        st[_G_MALFORMED] += 1
        return
    if count == 1:
        ok = stride == total and ln == total
    else:
        # every fragment but the last is `stride` long; the last holds the rest
        last_len = total - (count - 1) * stride
        ok = 1 <= last_len <= stride and ln == (stride if k < count - 1 else last_len)
    if not ok:
        st[_G_MALFORMED] += 1
        return
    want_ack = fl & _F_ACK_REQ
    if want_ack and _dedup(dg, src, p, now, False):
        st[_G_DUPLICATES] += 1
        if fl & _F_ACK_NOW or count == 1:
            _owe_ack(dg, src, p, count, -1, 0)
        return
    if count == 1:
        st[_G_RECEIVED] += 1
        if want_ack:
            _dedup(dg, src, p, now, True)
            _owe_ack(dg, src, p, 1, -1, 0)
        data = memoryview(p)[DGRAM_HDR:DGRAM_HDR + ln]
        if dg.on_datagram is not None:
            dg.on_datagram(src, (p[5] << 8) | p[6], (p[7] << 8) | p[8], data)
        return
    st[_G_FRAGMENTS_RECEIVED] += 1
    if total > dg.max_size:
        st[_G_REASM_TOO_BIG] += 1
        if want_ack and fl & _F_ACK_NOW:
            _owe_ack(dg, src, p, count, -1, _F_REFUSED_TOO_BIG)
        return
    # the reassembly slot of (src, hid): found, or a free one set up
    v = dg.m_v
    mk = dg.ofs[_O_MK]
    m = -1
    i = 0
    while i < len(dg.m_buf):
        o = i * _MN
        if v[o + _M_USED]:
            if v[o + _M_ID] == hid and key_cmp(dg.buf, mk + 32 * i, src, 0) == 0:
                if (v[o + _M_COUNT] != count or v[o + _M_STRIDE] != stride
                        or v[o + _M_TOTAL] != total):
                    st[_G_MALFORMED] += 1     # layout differs from its other fragments
                    return
                m = i
                break
            if ticks_diff(now, v[o + _M_TIME]) >= _REASM_IDLE_MS:
                v[o + _M_USED] = 0
                st[_G_REASM_EXPIRED] += 1
        i += 1
    if m < 0:
        i = 0
        while i < len(dg.m_buf) and v[i * _MN + _M_USED]:
            i += 1
        if i == len(dg.m_buf):
            st[_G_REASM_REFUSED] += 1
            if want_ack and fl & _F_ACK_NOW:
                _owe_ack(dg, src, p, count, -1, _F_REFUSED_BUSY)
            return
        m = i
        o = m * _MN
        v[o + _M_USED] = 1
        copy_into(dg.buf, mk + 32 * m, src, 0, 32)
        v[o + _M_ID] = hid
        v[o + _M_COUNT] = count
        v[o + _M_STRIDE] = stride
        v[o + _M_TOTAL] = total
        v[o + _M_FLAGS] = 0
        v[o + _M_GOT] = 0
        _bits_fill(dg.buf, dg.ofs[_O_MH] + 8 * m, 0)
    o = m * _MN
    hb = dg.ofs[_O_MH] + 8 * m
    x = 0x80 >> (k & 7)
    if not dg.buf[hb + (k >> 3)] & x:
        dg.buf[hb + (k >> 3)] |= x
        v[o + _M_GOT] += 1
        copy_into(dg.m_buf[m], k * stride, p, DGRAM_HDR, ln)
    v[o + _M_TIME] = now
    _due(dg, ticks_add(now, _REASM_IDLE_MS))
    v[o + _M_FLAGS] |= fl
    if v[o + _M_GOT] == count:
        v[o + _M_USED] = 0
        st[_G_RECEIVED] += 1
        if v[o + _M_FLAGS] & _F_ACK_REQ:
            _dedup(dg, src, p, now, True)
            _owe_ack(dg, src, p, count, -1, 0)
        data = memoryview(dg.m_buf[m])[:total]
        if dg.on_datagram is not None:
            dg.on_datagram(src, (p[5] << 8) | p[6], (p[7] << 8) | p[8], data)
    elif want_ack and fl & _F_ACK_NOW:
        _owe_ack(dg, src, p, count, hb, 0)
    return


# ---- duplicate suppression ----------------------------------------------
def _dedup(dg, src, p, now, add):
    """add False: whether the datagram whose header is p, from src, was
    delivered within _DEDUP_MS; True: remember it delivered."""
    v = dg.d_v
    dk = dg.ofs[_O_DK]
    hid = (p[9] << 8) | p[10]
    if add:
        i = dg.ofs[_O_DNEXT]
        dg.ofs[_O_DNEXT] = (i + 1) % (len(v) // _DN)
        o = i * _DN
        v[o + _D_USED] = 1
        copy_into(dg.buf, dk + 32 * i, src, 0, 32)
        v[o + _D_ID] = hid
        v[o + _D_TIME] = now
        return True
    i = 0
    while i < len(v) // _DN:
        o = i * _DN
        if (v[o + _D_USED] and v[o + _D_ID] == hid
                and ticks_diff(now, v[o + _D_TIME]) < _DEDUP_MS
                and key_cmp(dg.buf, dk + 32 * i, src, 0) == 0):
            return True
        i += 1
    return False


# ---- acks -------------------------------------------------------------
def _owe_ack(dg, src, p, count, base, flags):
    """Queue an ack for the datagram whose header is p: its bitmap from
    buf[base:] (base < 0: every fragment) and flags."""
    A = len(dg.a_dst)
    if dg.a_n >= A:
        dg.stats[_G_ACKS_DROPPED] += 1
        return
    j = (dg.ofs[_O_AHEAD] + dg.a_n) % A
    dg.a_n += 1
    dg.a_dst[j] = src
    fb = dg.buf
    o = dg.ofs[_O_AK] + _AF * j
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


def flush(dg, now):
    """Send the owed acks (call after router.receive and on every tick:
    never from inside the router's callbacks)."""
    A = len(dg.a_dst)
    b = dg.buf
    while dg.a_n:
        j = dg.ofs[_O_AHEAD]
        dg.ofs[_O_AHEAD] = (j + 1) % A
        dg.a_n -= 1
        o = dg.ofs[_O_AK] + _AF * j
        n = _ACK_HDR + ((b[o + 11] + 7) >> 3)
        copy_into(b, 0, b, o, n)
        d = dg.a_dst[j]
        dg.a_dst[j] = None
        if dg.tx(d, b, n, now) == _OK:
            dg.stats[_G_ACKS_SENT] += 1
        else:
            dg.stats[_G_ACKS_DROPPED] += 1


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


def _due(dg, t):
    """tick() has work at t (ticks ms): the state's next due time is t if
    that is earlier (snake/datagram.py's tick loads this module only then,
    or for owed acks)."""
    d = dg.ofs[_O_DUE]
    if d < 0 or ticks_diff(t, d) < 0:
        dg.ofs[_O_DUE] = t
