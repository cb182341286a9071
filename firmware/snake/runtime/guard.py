# Defences against hostile peers that act only under attack or pressure
# (node.py "Admission", "Receiving"): choosing and closing a pending
# handshake to make room, back-off of a source, receive-stall strikes,
# closing a slow link. Cold code (platform.cold): node.py loads it when a
# defence acts and keeps it while the node is under pressure (Node._guard,
# Node._slow), so a node that is not under attack holds none of it. It is
# imported once at boot (boot.start), so its qstrs are interned then, not
# later (stream.py, "Nothing new after boot").
from snake.platform import ticks_diff, ticks_ms, ticks_add, const

# Node.defence, by index (names: snake/report.py DEFENCE_NAMES)
DF_HS_SOURCE = 0        # handshake refused: its source holds _HS_PER_SOURCE
DF_HS_EVICTED = 1       # stalled or crowding pending handshake closed for a newcomer
DF_HS_DEADLINE = 2      # pending handshake closed at _HS_BUSY_MS
DF_HS_BACKOFF = 3       # connection refused from a backed-off source
DF_RX_STALL = 4         # partial frame dropped, its buffer given back
DF_RX_SLOW = 5          # link closed for holding buffers (source backed off)
N_DEFENCE = 6

HS_STALL_MS = 1000      # a pending handshake this old may be closed for a newcomer
HS_BUSY_MS = 2000       # handshake deadline while half the slots are pending
HS_BACKOFF_MS = 3000    # a source whose pending handshake was closed so is refused this long
BACKOFF_MS = 30000      # ... whose link was closed as slow, this long
_RX_STRIKES = const(2)  # receive stalls within RX_STRIKE_WINDOW_MS that close a link
RX_STRIKE_WINDOW_MS = 30000


HS_PER_SOURCE = 2       # pending handshakes one source address may hold


def admit(node, link):
    """Node.admit when a handshake is pending, a source is backed off or
    every slot is taken: refused (counted) or registered as pending."""
    src = source(link)
    now = ticks_ms()
    n = 1                   # the source's pending handshakes with the newcomer
    hl = node.hs_link
    i = 0
    while i < len(hl):
        u = node.bo_until[i]
        if u and ticks_diff(u, now) <= 0:
            node.bo_until[i] = u = 0         # its back-off is over
            node.bo_n -= 1
        if src is not None and node.bo_src[i] == src:
            if u:
                node.defence[DF_HS_BACKOFF] += 1
                node.hs_failed("backoff", None)
                return False
        if src is not None and hl[i] is not None and source(hl[i]) == src:
            n += 1
        i += 1
    if n > HS_PER_SOURCE:
        node.defence[DF_HS_SOURCE] += 1
        node.hs_failed("source_limit", None)
        return False
    if node.rx_out >= node.rx_max and not make_room(node, n, now):
        node.hs_failed("busy", None)
        return False
    i = 0
    while i < len(hl) and hl[i] is not None:
        i += 1
    if i == len(hl):
        node.hs_failed("busy", None)
        return False
    hl[i] = link
    node.hs_t[i] = now
    node.hs_n += 1
    node.rx_out += 1        # counted at admission: an eviction may come before its task
    return True


def expire(node, now):
    """Back-offs that are over are forgotten (Node.bo_n counts the rest)."""
    i = 0
    while i < len(node.bo_until):
        u = node.bo_until[i]
        if u and ticks_diff(u, now) <= 0:
            node.bo_until[i] = 0
            node.bo_n -= 1
        i += 1


def make_room(node, n, now):
    """Every slot taken: close the oldest pending handshake of the source
    holding the most, if that is more than n (the newcomer's source with
    it: sources share the slots), else the oldest that has stalled. True
    when a slot came free."""
    hl = node.hs_link
    ht = node.hs_t
    hs = [source(lk) for lk in hl]      # cold code: a list for the call
    best = -1
    most = n
    old = -1
    i = 0
    while i < len(hl):
        if hl[i] is not None:
            if old < 0 or ticks_diff(ht[old], ht[i]) > 0:
                old = i
            src = hs[i]
            if src is not None:
                c = 0
                j = 0
                while j < len(hl):
                    if hl[j] is not None and hs[j] == src:
                        c += 1
                    j += 1
                if c > most or (c == most and best >= 0 and ticks_diff(ht[best], ht[i]) > 0):
                    most = c
                    best = i
        i += 1
    if best < 0:
        if old < 0 or ticks_diff(now, ht[old]) < HS_STALL_MS:
            return False
        best = old
    evict(node, best, now)
    node.defence[DF_HS_EVICTED] += 1
    return True


def evict(node, i, now):
    # close pending handshake i: its reader sees EOF and ends; the slot is
    # free at once, and the source is refused for HS_BACKOFF_MS (a peer that
    # reopens at once does not take it back before an honest one's turn)
    link = node.hs_link[i]
    back_off(node, source(link), now, HS_BACKOFF_MS)
    node.hs_link[i] = None
    node.hs_n -= 1
    node.rx_out -= 1        # stream.run does not count an evicted link down again
    link.evicted = True
    link.close()


def hs_deadline(node, now):
    """Half the slots pending: close those pending longer than HS_BUSY_MS."""
    i = 0
    while i < len(node.hs_link):
        if node.hs_link[i] is not None and ticks_diff(now, node.hs_t[i]) > HS_BUSY_MS:
            node.defence[DF_HS_DEADLINE] += 1
            evict(node, i, now)
        i += 1


def source(link):
    """The peer's address (host) of a link we accepted, or None: the Link's
    source() where it has one; an accepted TcpLink's peer name (the raw
    sockaddr of the MicroPython unix port gives its 4 address bytes); None
    for a link we dialled or one without an address (BLE)."""
    if link is None:
        return None
    if hasattr(link, "source"):
        return link.source()
    w = getattr(link, "w", None)
    if w is None or link.outbound:
        return None
    try:
        a = w.get_extra_info("peername")
    except (KeyError, AttributeError, TypeError):
        return None
    if isinstance(a, tuple):
        return a[0]
    if isinstance(a, (bytes, bytearray)) and len(a) >= 8:
        return bytes(a[4:8])
    return None


def box(node, src, now):
    """The entry of src among the remembered sources (made, in place of
    the least recently struck, when missing)."""
    bs = node.bo_src
    j = 0
    i = 0
    while i < len(bs):
        if bs[i] == src:
            return i
        if bs[j] is not None and (bs[i] is None or ticks_diff(node.bo_t[j], node.bo_t[i]) > 0):
            j = i
        i += 1
    bs[j] = src
    if node.bo_until[j]:
        node.bo_n -= 1      # an older back-off makes room
    node.bo_until[j] = 0
    node.bo_strikes[j] = 0
    node.bo_t[j] = now
    return j


def back_off(node, src, now, ms=BACKOFF_MS):
    """Refuse new links from src for ms (a longer back-off stays)."""
    if src is not None:
        j = box(node, src, now)
        u = node.bo_until[j]
        u2 = ticks_add(now, ms) | 1
        if not u:
            node.bo_n += 1
            node.bo_until[j] = u2
        elif ticks_diff(u2, u) > 0:
            node.bo_until[j] = u2


async def stalled(node, port, link, j, mv, rest):
    """stream.run: the reader on port was cancelled to take its receive
    buffer j back (Node._slow). Gives it back, counts a strike, then reads
    past the rest of the frame (rest bytes) into mv. False when the link is
    closed (too many strikes, or EOF)."""
    from snake.runtime import stream
    node.rx_drop[port] = 0
    node.rx_since[port] = 0
    pool = node.rxpool
    pool.give(j)
    if j >= pool.nsmall:
        node.owed()
    rx_stalled(node, port, link)
    if node.links[port] is not link:
        return False
    return await stream._skip(link, mv, rest)


def rx_stalled(node, port, link):
    """A link's partial frame was dropped (its buffer taken back): a strike
    against its source (a link without one, BLE, only gives its buffers
    back); _RX_STRIKES within the window close the link and back the
    source off."""
    now = ticks_ms()
    node.defence[DF_RX_STALL] += 1
    src = source(link)
    if src is None:
        return
    st = node.bo_strikes
    i = box(node, src, now)
    if ticks_diff(now, node.bo_t[i]) > RX_STRIKE_WINDOW_MS:
        st[i] = 0
    node.bo_t[i] = now
    if st[i] < 255:
        st[i] += 1
    if st[i] >= _RX_STRIKES:
        st[i] = 0
        close_slow(node, port, now)


def close_slow(node, port, now):
    """Close the link on port for holding receive buffers; back its source off."""
    link = node.links[port]
    if link is None:
        return
    node.stat("slow")
    node.defence[DF_RX_SLOW] += 1
    back_off(node, source(link), now)
    node._disconnect(port, "slow")
    node.router.port_down(port, now)
