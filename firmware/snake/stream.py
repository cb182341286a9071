# Stream port: the peer handshake, then Pinecone frames, over any Link
# (snake/link.py has the Link contract).
#
#   1. both sides send their 104-byte handshake at once (version 1,
#      capabilities 0x3B, public key, signature over bytes 0..39) and read the
#      peer's within the deadline (10 s by default, node.hs_timeout_ms);
#      wrong version / capabilities, a bad signature, our own key, a timeout
#      or EOF close the link and are counted in node.stats["hs_fail"];
#   2. node.link_up(link, key) assigns a switch port (or refuses: duplicate
#      link to that key and link type, no free port);
#   3. frames: the 10-byte header is read into the link's preallocated
#      buffer (bytearray(profile.frame_max)), then the rest of the frame
#      behind it; the whole frame goes to router.receive(port, buf, n, now).
#      A frame longer than frame_max is read in pieces and dropped (counted
#      as "oversize"); a bad magic or a length below the header means the
#      byte stream lost sync: the link is closed (counted as "framing");
#   4. a writer task drains the port's bounded send queue onto the link.
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
from snake.platform import ticks_ms
from snake.telemetry import D_OVERSIZE, D_MALFORMED

_wait_for = asyncio.wait_for     # asyncio.funcs: the handshake deadline
_Event = asyncio.Event           # asyncio.event: port send queues, BLE flags

_MAGIC0, _MAGIC1, _MAGIC2, _MAGIC3 = 0x70, 0x69, 0x6E, 0x65   # "pine"


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


async def handshake(node, link, buf, mv):
    """Exchange handshakes; the peer's public key (bytes) or None (counted)."""
    try:
        err = await _wait_for(_exchange(node, link, mv), node.hs_timeout_ms / 1000)
    except asyncio.TimeoutError:
        err = "timeout"
    if err is not None:
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


async def _writer(node, link, port, q):
    try:
        while True:
            while q.count == 0:
                q.ev.clear()
                await q.ev.wait()
            w = getattr(link, "w", None)
            if w is None or getattr(link, "_copy", True):
                i = q.head
                try:
                    await link.send(q.slots[i], q.lens[i])
                except MemoryError:
                    node.oom()     # that frame is dropped
                q.pop()
                continue
            # MicroPython stream: write every queued frame (the stream copies
            # it into its output buffer), then drain once
            try:
                while q.count:
                    i = q.head
                    w.write(memoryview(q.slots[i])[0:q.lens[i]])
                    q.pop()
            except MemoryError:
                node.oom()
                q.pop()
            await w.drain()
    except OSError:
        link.close()


async def run(node, link):
    """Serve one link until it closes. Returns the close reason (str)."""
    buf = node.rxbuf_get()
    if buf is None:
        why = "busy" if node.rx_out >= node.rx_max else "no_memory"
        node.hs_failed(why, link)
        link.close()
        return why
    mv = memoryview(buf)
    hdr = mv[0:wire.HEADER_LEN]
    fmax = len(buf)
    port = 0
    wt = None
    reason = "eof"
    r = node.router
    try:
        pub = await handshake(node, link, buf, mv)
        if pub is None:
            return "handshake"
        try:
            link.peer_key = pub
        except AttributeError:
            pass
        port = node.link_up(link, pub)
        if not port:
            return "refused"
        q = node.queues[port]
        wt = asyncio.create_task(_writer(node, link, port, q))
        while True:
            if not await _read_exact(link, hdr, 0, wire.HEADER_LEN):
                break
            if buf[0] != _MAGIC0 or buf[1] != _MAGIC1 or buf[2] != _MAGIC2 or buf[3] != _MAGIC3:
                r.counters.drops[D_MALFORMED] += 1
                node.stat("framing")
                reason = "framing"
                break
            n = (buf[8] << 8) | buf[9]
            if n < wire.HEADER_LEN:
                r.counters.drops[D_MALFORMED] += 1
                node.stat("framing")
                reason = "framing"
                break
            if n > fmax:
                r.counters.drops[D_OVERSIZE] += 1
                if not await _skip(link, mv, n - wire.HEADER_LEN):
                    break
                continue
            if n > wire.HEADER_LEN:
                if not await _read_exact(link, mv, wire.HEADER_LEN, n - wire.HEADER_LEN):
                    break
            try:
                r.receive(port, buf, n, ticks_ms())
                node.after_receive()
            except MemoryError:
                # the frame is lost, the link and the node carry on
                node.oom()
            if node.links[port] is not link:
                reason = "closed by router"
                break
    except asyncio.CancelledError:
        reason = "cancelled"
    except MemoryError:
        # e.g. the writer task could not be created: the link goes, the node stays
        node.oom()
        reason = "no_memory"
    finally:
        if wt is not None:
            wt.cancel()
        if port:
            node.link_down(port, link, reason)
        link.close()
        node.rxbuf_put(buf)
    return reason
