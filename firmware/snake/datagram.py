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
# the driver sets (attributes of Datagrams):
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
#
# Resident and cold: this module (the API, the constants other modules
# read, via_router) stays loaded; the protocol's logic is
# snake/datagram_cold.py, loaded for the duration of one event and let go
# after (on MicroPython; on CPython it stays imported). A Datagrams holds
# only state (its tables, counters and callbacks); its methods look whether
# there is work first (a payload that is no datagram, a tick with nothing
# due, no acks owed: the logic is not loaded) and hand the rest to the cold
# module. An event that cannot load it for want of heap is counted
# (stats no_memory) and dropped, never raised: a send fails no_memory, a
# datagram received is lost (its sender retries), a tick or a flush runs at
# the next tick.
from snake.platform import cold, const, ticks_diff

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

# The cold module's indices this module uses (snake/datagram_cold.py has
# them all): two counters of Datagrams.stats, two small integers of
# Datagrams.ofs and the strides of two tables (a slot's field 0: in use).
_G_FAILED_NO_MEMORY = const(5)
_G_NO_MEMORY = const(20)
_O_DUE = const(9)      # the next time tick has work (ticks ms), -1: none
_O_RUN = const(10)     # events running (nested: tx delivered locally)
_SN = const(13)        # fields a send in flight (s_v)
_MN = const(8)         # fields a reassembly (m_v)


class Datagrams:
    """The layer's state: every table preallocated from the board profile
    (dgram_* keys), the counters (stats, named by report.DGRAM_STATS), the
    callbacks (tx, on_datagram, on_state) and the state of the last send
    (last_state, last_reason). Building one loads the logic once; a
    MemoryError then is the caller's."""

    def __init__(self, profile, key, first_id=1):
        self.code = None      # the logic while an event runs (_load)
        cold("snake.datagram_cold").init(self, profile, key, first_id)

    def send(self, dst, service, data, now, ack=False, src_service=0):
        """Send `data` to key `dst` for `service`. Returns the handle (the
        datagram id); its state at return is self.last_state (S_PENDING:
        on_state reports the end; S_SENT or S_FAILED with
        self.last_reason: already final, on_state has been called too).
        `data` must stay unchanged until the send is final (a reference is
        kept, not a copy). A bad service number is a ValueError."""
        h = self._load("send", dst, service, data, now, ack, src_service)
        if h is None:
            # no heap for the logic: failed no_memory, as a send that found
            # no slot
            h = self.next_id
            self.next_id = (h + 1) & 0xFFFF
            self.stats[_G_FAILED_NO_MEMORY] += 1
            self.last_state = S_FAILED
            self.last_reason = NO_MEMORY
            if self.on_state is not None:
                self.on_state(h, S_FAILED, NO_MEMORY)
        return h

    def receive(self, src, payload, now):
        """A traffic payload delivered to us from key `src`. False when it is
        no datagram (another layer's: ping/trace, or an application's raw
        payload); True when it was one (also when it was malformed or the
        heap could not take the logic: counted, dropped)."""
        if len(payload) < 2 or payload[0] != 0x53 or payload[1] != 0x44:    # "SD"
            return False
        self._load("receive", src, payload, now)
        return True

    def tick(self, now):
        """Retries, timeouts, blocked fragments, stale reassemblies; then the
        owed acks (flush). Loads the logic only when one is due."""
        d = self.ofs[_O_DUE]
        if self.a_n or (d >= 0 and ticks_diff(now, d) >= 0):
            self._load("tick", now)

    def flush(self, now):
        """Send the owed acks (call after router.receive and on every tick:
        never from inside the router's callbacks)."""
        if self.a_n:
            self._load("flush", now)

    def pending(self):
        """Sends in flight."""
        return _used(self.s_v, _SN)

    def reassemblies(self):
        """Reassemblies in flight."""
        return _used(self.m_v, _MN)

    def rtt_of(self, key):
        """(srtt_ms, rttvar_ms) measured to `key`, or None (also when the
        heap cannot take the logic)."""
        return self._load("rtt_of", key)

    def _load(self, name, *args):
        # The logic's function `name` on this state; None when the heap cannot
        # take the module (counted). The module is held while an event runs,
        # so an event nested in it (tx delivered locally, back into
        # receive) uses the same code, and while acks are owed: flush, right
        # after the router's receive that owed them, needs it again.
        m = self.code
        if m is None:
            try:
                m = cold("snake.datagram_cold")
            except MemoryError:
                self.stats[_G_NO_MEMORY] += 1
                return None
            self.code = m
        o = self.ofs
        o[_O_RUN] += 1
        try:
            return getattr(m, name)(self, *args)
        finally:
            o[_O_RUN] -= 1
            if not o[_O_RUN] and not self.a_n:
                self.code = None


def _used(v, n):
    """Slots in use of a table of n fields a slot whose field 0 says so."""
    c = 0
    i = 0
    while i < len(v):
        if v[i]:
            c += 1
        i += n
    return c


def via_router(router, hop_limit=0):
    """A tx for Datagrams that sends through router.send (hop_limit 0: the
    profile's). Tells no route (the router counted drops.no_route) from a
    full queue (busy). Resident code: the closure outlives every event."""
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
