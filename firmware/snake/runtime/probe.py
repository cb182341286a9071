# Ping and trace: application payloads carried in ordinary traffic frames.
#
# Payload, 8 bytes:  "SM" | kind u8 | probe id u32 BE | ttl u8
#
#   kind 1  PING       echo request; the destination answers PONG
#   kind 2  PONG       echo reply (same id)
#   kind 3  TRACE      trace probe, sent with traffic hop limit = ttl
#   kind 4  TRACE_HOP  "your probe expired here": sent by a relay, to the
#                      probe's source key, when the probe's hop limit ran out
#                      at that relay (router.expired hook; needs hop
#                      limiting, which snakemesh switches on)
#   kind 5  TRACE_END  sent by the destination of a TRACE probe
#
# Replies carry the probe's id and ttl; the replying node is the traffic
# frame's source key, so no key is repeated in the payload.
#
# Trace: the source sends TRACE probes with hop limits 1, 2, 3, ... one at a
# time (each relay decrements the hop limit and drops the frame at 1, where
# it calls router.expired); hop k answers TRACE_HOP, the destination
# TRACE_END. The source records each replier's key and the round-trip time
# of that probe; it stops at TRACE_END, after 3 probes in a row without an
# answer, or at the maximum ttl. A relay therefore understands nothing of an
# application payload except this 8-byte TRACE marker, and only in a frame
# whose hop limit ran out. Without hop limiting a trace shows one hop: the
# destination.
#
# Replies are not sent from inside the router's callbacks (which run during
# router.receive): they are queued in a small preallocated ring and sent by
# flush(), which the node calls right after each received frame and on
# every tick. A full ring drops the reply (counted).
from snake import platform
from snake.platform import const, copy_into, ticks_ms, ticks_us, ticks_diff

PING = 1
PONG = 2
TRACE = 3
TRACE_HOP = 4
TRACE_END = 5
PAYLOAD_LEN = 8

# Prober.stats: counters by index, named by report.PROBE_STATS (a list: no
# name string stays in the heap; a test checks the two agree)
_P_REQUESTS = const(0)
_P_REPLIES_SENT = const(1)
_P_REPLIES_DROPPED = const(2)
_P_TRACE_EXPIRED = const(3)
_P_UNMATCHED = const(4)

_SLOTS = const(12)    # (probing.py has the same) probes in flight (all sessions: a ping has <= 5 out, a trace 1)
PENDING = 6           # replies waiting to be sent
MAX_SESSIONS = 2      # concurrent ping/trace commands
_TRACE_MAX_TTL = const(32)


def encode(buf, kind, pid, ttl):
    """Write a probe payload into buf[0:8]; returns 8."""
    buf[0] = 0x53  # S
    buf[1] = 0x4D  # M
    buf[2] = kind
    buf[3] = (pid >> 24) & 0xFF
    buf[4] = (pid >> 16) & 0xFF
    buf[5] = (pid >> 8) & 0xFF
    buf[6] = pid & 0xFF
    buf[7] = ttl & 0xFF
    return PAYLOAD_LEN


def make(kind, pid, ttl=0):
    b = bytearray(PAYLOAD_LEN)
    encode(b, kind, pid, ttl)
    return b


def kind_at(buf, off, n):
    """The probe kind of the payload buf[off:off+n], or 0 if it is not one."""
    if n != PAYLOAD_LEN or buf[off] != 0x53 or buf[off + 1] != 0x4D:
        return 0
    k = buf[off + 2]
    if k < PING or k > TRACE_END:
        return 0
    return k


def id_at(buf, off):
    return (buf[off + 3] << 24) | (buf[off + 4] << 16) | (buf[off + 5] << 8) | buf[off + 6]


class ProbeBusy(Exception):
    pass


class Prober:
    def __init__(self, node):
        # built by snake/runtime/probing.py, which is loaded now, once at boot: its
        # qstrs are interned now, not at the first ping
        platform.cold("snake.runtime.probing").init(self, node)

    # ---- hooks called by the router (during receive) --------------------
    def _queue_reply(self, key_buf, key_off, kind, pid, ttl):
        if self.p_count >= PENDING:
            self.stats[_P_REPLIES_DROPPED] += 1
            return
        i = (self.p_head + self.p_count) % PENDING
        copy_into(self.p_key, 32 * i, key_buf, key_off, 32)
        encode(self.pl1, kind, pid, ttl)
        copy_into(self.p_pl, PAYLOAD_LEN * i, self.pl1, 0, PAYLOAD_LEN)
        self.p_count += 1

    def on_deliver(self, src, payload):
        """Local traffic; True when it was a probe payload."""
        k = kind_at(payload, 0, len(payload))
        if not k:
            return False
        pid = id_at(payload, 0)
        ttl = payload[7]
        if k == PING:
            self.stats[_P_REQUESTS] += 1
            self._queue_reply(src, 0, PONG, pid, ttl)
        elif k == TRACE:
            self.stats[_P_REQUESTS] += 1
            self._queue_reply(src, 0, TRACE_END, pid, ttl)
        else:
            self._reply(src, k, pid)
        return True

    def on_expired(self, buf, f):
        """A traffic frame's hop limit ran out here: answer trace probes."""
        po = f.payload_off
        if kind_at(buf, po, f.payload_len) != TRACE:
            return
        self.stats[_P_TRACE_EXPIRED] += 1
        self._queue_reply(buf, f.src_off, TRACE_HOP, id_at(buf, po), buf[po + 7])

    def _reply(self, src, kind, pid):
        i = 0
        while i < _SLOTS:
            if self.s_used[i] and self.s_id[i] == pid and not self.s_got[i]:
                self.s_rtt[i] = ticks_diff(ticks_us(), self.s_sent[i])
                self.s_got[i] = kind
                copy_into(self.s_from, 32 * i, src, 0, 32)
                return
            i += 1
        self.stats[_P_UNMATCHED] += 1

    def pending(self):
        return self.p_count

    def flush(self):
        """Send queued replies (outside the router's callbacks)."""
        r = self.node.router
        hl = self.node.hop_limit
        while self.p_count:
            i = self.p_head
            self.p_head = (i + 1) % PENDING
            self.p_count -= 1
            copy_into(self.key1, 0, self.p_key, 32 * i, 32)
            copy_into(self.pl1, 0, self.p_pl, PAYLOAD_LEN * i, PAYLOAD_LEN)
            if r.send(self.key1, self.pl1, ticks_ms(), hl):
                self.stats[_P_REPLIES_SENT] += 1
            else:
                self.stats[_P_REPLIES_DROPPED] += 1

    # ---- probe sessions ---------------------------------------------------
    def _send(self, dst, kind, ttl, hop_limit):
        i = 0
        while i < _SLOTS and self.s_used[i]:
            i += 1
        if i == _SLOTS:
            return -1
        pid = self.next_id = (self.next_id + 1) & 0xFFFFFFFF
        self.s_used[i] = 1
        self.s_id[i] = pid
        self.s_got[i] = 0
        self.s_sent[i] = ticks_us()
        if not self.node.router.send(dst, make(kind, pid, ttl), ticks_ms(), hop_limit):
            self.s_got[i] = 255  # not sent (no route / queue full)
        return i

    def _free(self, i):
        self.s_used[i] = 0

    def reserve(self):
        """Take a session (ProbeBusy when MAX_SESSIONS run); ping/trace
        called with reserved=True release it when they finish."""
        if self.sessions >= MAX_SESSIONS:
            raise ProbeBusy("busy: %d probe commands already running" % MAX_SESSIONS)
        self.sessions += 1

    # ping and trace themselves: snake/runtime/probing.py, loaded for the command
    # (the coroutine keeps it while it runs) and dropped from sys.modules
    # at once on MicroPython, so the running node's heap holds it only then
    # (reply=(console, request id): the coroutine answers the console's
    # request itself and returns None: console.Console._probe_task)
    def ping(self, dst, count=3, interval_ms=500, timeout_ms=2000, reserved=False, reply=None):
        """Coroutine: send `count` echo requests; {dst, sent, received, rtts_ms}."""
        m = platform.cold("snake.runtime.probing")
        return m.ping(self, dst, count, interval_ms, timeout_ms, reserved, reply)

    def trace(self, dst, max_ttl=_TRACE_MAX_TTL, timeout_ms=2000, reserved=False, reply=None):
        """Coroutine: hop-by-hop path to `dst`: {dst, ok, hops: [{key, rtt_ms}]}."""
        m = platform.cold("snake.runtime.probing")
        return m.trace(self, dst, max_ttl, timeout_ms, reserved, reply)

