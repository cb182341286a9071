# The Pinecone wire codec's host half: what tests, benches, the hostile-peer
# harness and other host tools use to build and inspect frames, and a
# running node never calls (coordinate lists and comparisons, varu64
# readers, announcement extension, the bytes a hop signed).
#
# snake/wire.py holds only what the node runs (its .mpy is in a board's
# heap for the node's whole life, docs/reports/MEMORY.md); this module shares its
# private helpers and runs unchanged on MicroPython and CPython. A node
# never imports it.
from snake import wire
from snake.platform import const, copy_into
from snake.wire import (WireError, T_ANNOUNCEMENT, varu64_len, encode_varu64,
                        encode_coords_body, bootstrap_signed, _check_coords, _fit,
                        _put_key, _put_sig, _put_u16, _put_header)

_HOP = const(96)          # as in wire.py: varu64 port | key[32] | sig[64]
_KEY = const(32)


def encode_announcement(buf, root_key, root_seq, hops):
    # hops: sequence of (port, key, sig). A node builds its announcements
    # with wire.announcement_start / _hop / _end (the same bytes).
    plen = _KEY + varu64_len(root_seq)
    for h in hops:
        plen += varu64_len(h[0]) + _HOP
    n = 12 + plen
    _fit(buf, n)
    _put_header(buf, T_ANNOUNCEMENT, 0, n)
    _put_u16(buf, 10, plen)
    i = _put_key(buf, 12, root_key)
    i = encode_varu64(buf, i, root_seq)
    for h in hops:
        i = encode_varu64(buf, i, h[0])
        i = _put_key(buf, i, h[1])
        i = _put_sig(buf, i, h[2])
    return n


def varu64_end(buf, off, end):
    # Offset just after the varu64 starting at off (must end before `end`).
    if end > len(buf):
        end = len(buf)
    wire._scan(buf, off, end)
    return wire._end


def read_varu64(buf, off, end):
    if end > len(buf):
        end = len(buf)
    return wire._scan(buf, off, end)


def encode_coords(ports):
    body = encode_coords_body(ports)
    n = len(body)
    if n > 0xFFFF:
        raise WireError("oversize")
    return bytes(bytearray((n >> 8, n & 0xFF))) + body


def decode_coords(buf, off, blen):
    # Control plane: returns a new list of port numbers.
    if off + blen > len(buf):
        raise WireError("coords")
    _check_coords(buf, off, blen)
    out = []
    end = off + blen
    i = off
    while i < end:
        out.append(read_varu64(buf, i, end))
        i = varu64_end(buf, i, end)
    return out


def coords_count(buf, off, blen):
    # Number of ports: every varu64 ends with exactly one byte < 0x80.
    if blen == 0:
        return 0
    end = off + blen
    if end > len(buf) or buf[end - 1] >= 0x80:
        raise WireError("coords")
    c = 0
    i = off
    while i < end:
        if buf[i] < 0x80:
            c += 1
        i += 1
    return c


def coords_distance(a, aoff, alen, b, boff, blen):
    # Tree distance len(A) + len(B) - 2 * len(common prefix), on encoded
    # bodies, allocation-free. Ports are compared by their bytes after
    # skipping leading zero groups (0x80), which equals comparing values.
    na = coords_count(a, aoff, alen)
    nb = coords_count(b, boff, blen)
    ia = aoff
    ea = aoff + alen
    ib = boff
    eb = boff + blen
    k = 0
    while ia < ea and ib < eb:
        while a[ia] == 0x80:
            ia += 1
        while b[ib] == 0x80:
            ib += 1
        x = a[ia]
        y = b[ib]
        while x == y and x >= 0x80:
            ia += 1
            ib += 1
            x = a[ia]
            y = b[ib]
        if x != y:
            break
        ia += 1
        ib += 1
        k += 1
    return na + nb - 2 * k


def coords_equal(a, aoff, alen, b, boff, blen):
    if alen == blen:
        # Fast path: identical bytes.
        i = 0
        while i < alen and a[aoff + i] == b[boff + i]:
            i += 1
        if i == alen:
            return True
    return coords_distance(a, aoff, alen, b, boff, blen) == 0


def extend_announcement(dst, src, f, port, key, sig):
    # Copy the announcement decoded in f from src into dst (dst may be src
    # itself when it has room) and append the hop (port, key, sig).
    if f.type != T_ANNOUNCEMENT:
        raise WireError("type")
    n0 = f.length
    n = n0 + varu64_len(port) + _HOP
    _fit(dst, n)
    if dst is not src:
        copy_into(dst, 0, src, 0, n0)
    i = encode_varu64(dst, n0, port)
    i = _put_key(dst, i, key)
    _put_sig(dst, i, sig)
    dst[8] = n >> 8
    dst[9] = n & 0xFF
    _put_u16(dst, 10, n - 12)
    return n


def announcement_signed(src, f):
    # The bytes a new hop signs: the whole current announcement payload
    # (a hop's signature does not cover its own port, so one signature
    # serves every per-peer copy).
    return bytes(src[f.ann_off:f.ann_end])


def hop_signed(src, f, i):
    # The bytes hop i of the decoded announcement signed.
    return bytes(src[f.ann_off:f.hop_off[i]])


wakeup_signed = bootstrap_signed    # the same layout, signed by the source key
