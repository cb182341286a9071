# ping and trace (snake/runtime/probe.py's cold half): the console's probe commands,
# and building the Prober (once, at boot).
#
# Prober.ping/trace load this module for one command and drop it from
# sys.modules at once on MicroPython: the command's coroutine keeps the
# code while it runs, and the heap is rid of it when it ends. Replying to
# others' probes (probe.py: Prober.on_deliver/on_expired/flush) stays hot.

from snake import platform
from snake.runtime.stream import sleep_ms
from snake.platform import const, ticks_ms
from snake.runtime.probe import ProbeBusy, PING, PONG, TRACE, TRACE_HOP, TRACE_END, PENDING, PAYLOAD_LEN

_TRACE_MAX_SILENT = const(3)  # stop a trace after this many unanswered probes in a row
_SLOTS = const(12)            # the same as in probe.py
_STATS = const(5)             # counters in Prober.stats (probe.py _P_*, report.PROBE_STATS)



def _done(d, reply, cmd):
    if reply is None:
        return d
    c, rid = reply
    if cmd == "trace":
        d["reached"] = d["ok"]
        c.reply(cmd, rid, d, ok=d["ok"])
    else:
        c.reply(cmd, rid, d)
    return None


def init(pr, node):
    # Prober.__init__
    pr.node = node
    # probes in flight
    pr.s_used = bytearray(_SLOTS)
    pr.s_id = [0] * _SLOTS
    pr.s_sent = [0] * _SLOTS      # ticks_us at send
    pr.s_got = bytearray(_SLOTS)  # reply kind received (0: none yet)
    pr.s_rtt = [0] * _SLOTS       # us
    pr.s_from = bytearray(32 * _SLOTS)   # who answered probe i: at 32*i
    # replies waiting to be sent: keys and payloads back to back (one
    # object each rather than one per entry: less heap), sent through
    # the scratch key / payload (router.send copies them into its frame)
    pr.p_head = 0
    pr.p_count = 0
    pr.p_key = bytearray(32 * PENDING)
    pr.p_pl = bytearray(PAYLOAD_LEN * PENDING)
    pr.key1 = bytearray(32)
    pr.pl1 = bytearray(PAYLOAD_LEN)
    pr.sessions = 0
    pr.next_id = int.from_bytes(platform.urandom(4), "big") & 0x7FFFFFFF
    pr.stats = [0] * _STATS


async def ping(pr, dst, count, interval_ms, timeout_ms, reserved, reply=None):
    """Send `count` echo requests; {dst, sent, received, rtts_ms}; with
    reply=(console, rid) the console's reply instead, and None (why:
    console.Console._probe_task)."""
    if not reserved:
        pr.reserve()
    rtts = []
    sent = 0
    inflight = []
    try:
        next_send = ticks_ms()
        while sent < count or inflight:
            now = ticks_ms()
            if sent < count and platform.ticks_diff(now, next_send) >= 0:
                i = pr._send(dst, PING, 0, pr.node.hop_limit)
                if i >= 0:
                    sent += 1
                    inflight.append((i, now))
                    next_send = platform.ticks_add(now, interval_ms)
            keep = []
            for i, t0 in inflight:
                got = pr.s_got[i]
                if got == PONG:
                    rtts.append(round(pr.s_rtt[i] / 1000, 3))
                    pr._free(i)
                elif got == 255 or platform.ticks_diff(now, t0) >= timeout_ms:
                    pr._free(i)
                else:
                    keep.append((i, t0))
            inflight = keep
            await sleep_ms(10)
    finally:
        for i, t0 in inflight:
            pr._free(i)
        pr.sessions -= 1
    return _done({"dst": platform.hexstr(dst), "sent": sent, "received": len(rtts), "rtts_ms": rtts}, reply, "ping")


async def trace(pr, dst, max_ttl, timeout_ms, reserved, reply=None):
    """Hop-by-hop path to `dst`: {dst, ok, hops: [{key, rtt_ms}]}
    (reply: as for ping; the reply adds reached = ok)."""
    if not reserved:
        pr.reserve()
    hops = []
    reached = False
    silent = 0
    i = -1
    try:
        ttl = 1
        while ttl <= max_ttl and not reached and silent < _TRACE_MAX_SILENT:
            i = pr._send(dst, TRACE, ttl, ttl)
            if i < 0:
                raise ProbeBusy("busy: no probe slot free")
            t0 = ticks_ms()
            while not pr.s_got[i] and platform.ticks_diff(ticks_ms(), t0) < timeout_ms:
                await sleep_ms(10)
            got = pr.s_got[i]
            if got == TRACE_HOP or got == TRACE_END:
                hops.append({"key": platform.hexstr(pr.s_from[32 * i:32 * i + 32]),
                             "rtt_ms": round(pr.s_rtt[i] / 1000, 3)})
                silent = 0
                if got == TRACE_END:
                    reached = True
            else:
                hops.append({"key": None, "rtt_ms": None})
                silent += 1
            pr._free(i)
            i = -1
            ttl += 1
    finally:
        if i >= 0:
            pr._free(i)
        pr.sessions -= 1
    # unanswered probes after the last answer say nothing: drop them
    while hops and hops[-1]["key"] is None:
        hops.pop()
    return _done({"dst": platform.hexstr(dst), "ok": reached, "hops": hops}, reply, "trace")
