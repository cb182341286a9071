# Stream port: the peer handshake, then Pinecone frames, over any Link
# (snake/runtime/link.py has the Link contract).
#
#   1. both sides send their 104-byte handshake at once (version 1,
#      capabilities 0x3B, public key, signature over bytes 0..39) and read the
#      peer's within the deadline (10 s by default, node.hs_timeout_ms);
#      wrong version / capabilities, a bad signature, our own key, a timeout
#      or EOF close the link and are counted in node.stats["hs_fail"];
#   2. node.link_up(link, key) assigns a switch port (or refuses: duplicate
#      link to that key and link type, no free port);
#   3. frames: the 10-byte header is read into the link's own 10-byte
#      buffer (the 104-byte handshake buffer is dropped), then a buffer that fits the length is taken
#      from the node's receive pool (node.rxpool; waiting while none is
#      free; a frame for the large buffer may take it back from a send queue:
#      node.py "One large buffer"), the header copied in and the rest of the frame read behind it;
#      the whole frame goes to router.receive(port, buf, n, now) and the
#      buffer back to the pool. A frame longer than frame_max (a tree
#      announcement: profile.ann_max, from the depth the node stores) is read in
#      pieces and dropped (counted as "oversize"); a bad magic or a length
#      below the header means the byte stream lost sync: the link is closed
#      (counted as "framing");
#   4. sending is the node's (node.py: try_send at once, else the port's
#      bounded send queue, drained by the node's one flusher task).
# On EOF, error or close: node.link_down(port, link), link.close().
#
# Nothing new after boot: this module is imported at boot (node.py, wifi.py),
# not at the first link, and the asyncio parts that MicroPython loads lazily
# on first use are resolved below. Loading a module interns its names as
# qstrs, and a new qstr can need MicroPython's next qstr pool: one block of
# 2x the last pool (1280 entries, ~14 KB on the 64-bit unix port) that a heap
# fragmented by link traffic cannot give even with 140 KB free. From then on
# every new qstr raised MemoryError ("allocating 1280 bytes": the count of
# entries), killing the BLE manager at its next link and every console
# request whose id held a digit not seen before (`make soak`, nodes silent
# after a BLE link came up). At boot the heap is not fragmented yet.
import asyncio

from snake import wire
from snake.platform import ticks_ms, ticks_add, const
from snake.telemetry import D_OVERSIZE, D_MALFORMED

_Event = asyncio.Event           # asyncio.event: send queues, BLE flags
# The one sleep helper of the I/O layer (node, Wi-Fi, BLE, boot, probing):
# MicroPython's asyncio.sleep_ms takes the integer, no float made every
# tick; CPython's asyncio has only sleep(seconds).
try:
    sleep_ms = asyncio.sleep_ms
except AttributeError:
    def sleep_ms(ms):
        return asyncio.sleep(ms / 1000)

_MAGIC0, _MAGIC1, _MAGIC2, _MAGIC3 = 0x70, 0x69, 0x6E, 0x65   # "pine"
_HL = const(10)           # wire.HEADER_LEN


async def _read_exact(link, mv, off, n):
    """Fill mv[off:off+n] from the link; False on EOF."""
    end = off + n
    while off < end:
        if off == 0 and end == len(mv):
            k = await link.recv_into(mv)       # no slice: nothing allocated
        else:
            k = await link.recv_into(mv[off:end])
        if k <= 0:
            return False
        off += k
    return True


async def _skip(link, mv, n):
    # discard n bytes (an oversize frame) using the frame buffer as scratch
    cap = len(mv)
    while n > 0:
        k = n if n < cap else cap
        if not await _read_exact(link, mv, 0, k):
            return False
        n -= k
    return True


async def _exchange(node, link, mv):
    # send ours, read theirs; "send" / "eof" / None (ok)
    try:
        await link.send(node.hs, wire.HANDSHAKE_LEN)
    except OSError:
        return "send"
    if not await _read_exact(link, mv, 0, wire.HANDSHAKE_LEN):
        return "eof"
    return None


async def handshake(node, link, buf):
    """Exchange handshakes (the peer's is read into buf, HANDSHAKE_LEN
    bytes); the peer's public key (bytes) or None (counted)."""
    # The deadline is the node's (Node._slow closes a handshake pending
    # longer than node.hs_timeout_ms and marks the link late): no timer
    # task per link and no asyncio.funcs in the heap.
    try:
        err = await _exchange(node, link, memoryview(buf))
    except MemoryError:
        node.oom()
        err = "no_memory"
    node.hs_done(link)
    if err is not None:
        if getattr(link, "evicted", False):
            err = "evicted"     # Node.admit / Node._slow closed it
        elif getattr(link, "late", False):
            err = "timeout"     # Node._slow closed it at the deadline
        if err == "send" and getattr(link, "outbound", False) and link.link_type < 4:
            # our first write on a TCP link we dialled failed: the connection
            # never came up (a refused connect on a board): a failed dial
            node.stat("dial_fail")
            node.log("dial failed: %s refused the connection" % link.name)
        else:
            node.hs_failed(err, link)
        return None
    try:
        pub, signed, sig = wire.parse_handshake(buf)
    except wire.WireError as e:
        node.hs_failed(e.reason, link)       # version / capabilities / short
        return None
    if pub == node.key:
        node.hs_failed("self", link)
        return None
    try:
        ok = node.verify(pub, signed, sig)
    except MemoryError:
        # no heap for the check says nothing about the peer: count it, drop
        # the link (the dialer tries again) and keep the node running
        node.oom()
        node.hs_failed("no_memory", link)
        return None
    if not ok:
        node.hs_failed("bad_signature", link)
        return None
    return pub


def _receive(node, port, buf, n, j):
    # one whole frame (in rxpool buffer j) to the router, and the buffer
    # back to the pool in any case: a plain function, so run's frame (kept
    # per link) needs no handler for it
    pool = node.rxpool
    try:
        node.router.receive(port, buf, n, ticks_ms())
        if j >= pool.nsmall:
            # the large buffer back first: what the router owes
            # for want of it goes out now (node.owed)
            pool.give(j)
            j = -1
            node.owed()
        node.after_receive()
    except MemoryError:
        # the frame is lost, the link and the node carry on
        node.oom()
    finally:
        if j >= 0:
            pool.give(j)


async def run(node, link, admitted=False):
    """Serve one link until it closes (admitted: node.admit(link) said yes
    already). Returns the close reason (str)."""
    if not admitted and not node.admit(link):     # counted (node.py "Admission")
        link.close()
        return "busy"
    try:
        hb = bytearray(wire.HANDSHAKE_LEN)     # handshake, then frame headers
    except MemoryError:
        node.hs_done(link)
        node.oom()
        node.hs_failed("no_memory", link)
        link.close()
        if not getattr(link, "evicted", False):
            node.rx_out -= 1
        return "no_memory"
    port = 0
    j = -1
    reason = "eof"
    pool = node.rxpool
    try:
        buf = await handshake(node, link, hb)     # the peer's public key
        if buf is None:
            return "handshake"
        if getattr(link, "want_key", False):
            link.peer_key = buf      # the dialler of a static peer remembers it
        # frame headers: a 10-byte buffer (one 16-byte heap block), read
        # into as it is (links take a bytearray or a memoryview; no view
        # kept per link); the handshake's 104 bytes and their view go back
        # to the heap for as long as the link lives. Few locals and
        # handlers: this coroutine's frame is kept per link (each local is a
        # word of it, each handler three),
        # so the node's tables are read through node, and handing a frame to
        # the router is _receive's.
        hb = bytearray(_HL)
        port = node.link_up(link, buf)
        if not port:
            return "refused"
        while True:
            k = 0
            while k < _HL:
                g = await link.recv_into(hb if k == 0 else memoryview(hb)[k:])
                if g <= 0:
                    return "eof"
                k += g
            if hb[0] != _MAGIC0 or hb[1] != _MAGIC1 or hb[2] != _MAGIC2 or hb[3] != _MAGIC3:
                node.router.counters.drops[D_MALFORMED] += 1
                node.stat("framing")
                reason = "framing"
                break
            n = (hb[8] << 8) | hb[9]
            if n < _HL:
                node.router.counters.drops[D_MALFORMED] += 1
                node.stat("framing")
                reason = "framing"
                break
            # longer than frame_max: oversize, but for an announcement
            # (wire.T_ANNOUNCEMENT) within its depth-derived limit ann_max
            if n > node.profile.frame_max and (hb[5] != 1 or n > node.profile.ann_max):
                j = -1
            else:
                # links that wait for a buffer go first (node.py "Receiving")
                if node.rx_wait == 0 or pool.free() > node.rx_wait:
                    j = pool.take(n)
                if j < 0:
                    j = -2      # waiting (counted in node.rx_wait)
                    node.rx_wait += 1
                    while j < 0:
                        # a large frame may take back the large buffer from a
                        # frame queued to send (node.reclaim); else wait for one
                        if n <= pool.small_size or not node.reclaim():
                            await pool.wait()
                            if node.links[port] is not link:
                                return "closed by router"
                        g = pool.take(n)
                        if g >= 0:
                            node.rx_wait -= 1
                            j = g
            if j < 0:
                node.router.counters.drops[D_OVERSIZE] += 1
                if not await _skip(link, memoryview(hb), n - _HL):
                    break
                continue
            node.rx_since[port] = ticks_add(ticks_ms(), n) | 1    # node._slow: 1 ms a byte more
            buf = pool.bufs[j]
            k = 0
            while k < _HL:
                buf[k] = hb[k]
                k += 1
            try:
                while k < n:
                    g = await link.recv_into(pool.mvs[j][k:n])
                    if g <= 0:
                        return "eof"
                    k += g
            except asyncio.CancelledError:
                if not node.rx_drop[port]:
                    raise
                # Node._slow took the buffer back (a link waits for it): the
                # partial frame is dropped and the rest read past without
                # one (guard.stalled gives the buffer back, counts a strike)
                g = j
                j = -1
                if not await node._guard().stalled(node, port, link, g, memoryview(hb), n - k):
                    reason = "slow"
                    break
                continue
            node.rx_since[port] = 0
            g = j
            j = -1          # _receive gives the buffer back, whatever happens
            _receive(node, port, buf, n, g)
            if node.links[port] is not link:
                reason = "closed by router"
                break
    except asyncio.CancelledError:
        reason = "cancelled"
    except MemoryError:
        node.oom()
        reason = "no_memory"
    finally:
        if j >= 0:
            pool.give(j)
        elif j == -2:
            node.rx_wait -= 1
        node.hs_done(link)
        if port:
            node.rx_since[port] = 0
            node.rx_drop[port] = 0
            node.link_down(port, link, reason)
        link.close()
        if not getattr(link, "evicted", False):
            node.rx_out -= 1      # an evicted link was counted out by guard.evict
    return reason
