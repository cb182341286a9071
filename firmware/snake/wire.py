# Pinecone wire codec: frames (version 0), the peer handshake (version 1),
# varu64 integers and tree coordinates. Byte layouts follow the reference Go
# router as captured in tests/data/pinecone_wire_vectors.json (where
# docs/reference/PROTOCOL_NOTES.md reads differently, the vectors are right).
#
# Runs unchanged on MicroPython and CPython. The decoder (Frame.decode) and
# the in-place rewrites (set_watermark, to_snek, set_hop_limit) are on the
# forwarding hot path and allocate nothing on MicroPython: no slicing, no
# tuples, no struct; u16 are read as (b[i] << 8) | b[i + 1]. Caveat: on a
# 32-bit port (ESP32) a sequence number above 2**30 (bootstrap/wakeup
# sequences are Unix milliseconds) is a long int, so reading one allocates
# there; on 64-bit ports (unix) small ints reach 2**62.
#
# Header (10 bytes): "pine" | version 0 | type | extra 0 | hop limit |
# u16 BE total length (header included).
#
# Frame(max_hops) is a reusable decoded view. f.decode(buf, n) parses the
# single frame in buf[0:n] (buf: bytes, bytearray or memoryview, may be
# longer than n; the header length must equal n) and sets integer
# attributes, offsets into buf; key bytes are never copied. WireError (a
# ValueError with .reason) is the only exception it raises. Attributes:
#   all types: type, hop_limit, length, payload_off, payload_len (the region
#       covered by the u16 after the header: announcement payload, bootstrap
#       and wakeup signed payload incl. signature, traffic application data)
#   announcement: ann_off (=12), ann_end (=length), root_off, root_seq,
#       nhops, and per hop i < nhops: hop_off[i] (hop i signs
#       buf[ann_off:hop_off[i]]), hop_port[i], hop_key_off[i], hop_sig_off[i]
#   bootstrap: dst_off, wm_off, wm_seq, wm_seq_off, wm_seq_len, seq,
#       root_off, root_seq, sig_off, signed_off, signed_len (the signature,
#       made with the dst key, covers buf[signed_off:signed_off+signed_len] =
#       varu64 seq | root key | varu64 root seq)
#   traffic: dcoords_off, dcoords_len, scoords_off, scoords_len (coordinate
#       bodies: concatenated varu64 ports, without their u16 length), dst_off,
#       src_off, has_wm (True when dcoords_len == 0), wm_off (-1 when absent),
#       wm_seq (0 when absent; an absent watermark means FULL_KEY/0),
#       wm_seq_off (-1 when absent), wm_seq_len (0 when absent),
#       payload_off, payload_len
#   wakeup: src_off, seq, root_off, root_seq, sig_off, signed_off, signed_len
#       (signed by the src key, same layout as the bootstrap)
# Attributes that do not belong to the decoded type keep stale values.
#
# Reasons (WireError.reason): short (buffer or a fixed field runs past the
# frame), magic, version, length (header length != n, or a u16 payload
# length disagrees with the frame), type (unknown frame type), varu64
# (truncated, longer than 10 bytes or above 64 bits), coords (coordinates
# run past the frame or are malformed), too_many_hops, trailing (bytes after
# the last field), oversize (encoder: frame does not fit the buffer or
# MAX_FRAME), key / sig (encoder: wrong key or signature length),
# no_watermark (set_watermark on a frame without one), capabilities
# (handshake).
from array import array
from snake.platform import const, copy_into

MAGIC = b"pine"
FRAME_VERSION = 0
HEADER_LEN = 10
T_KEEPALIVE = 0
T_ANNOUNCEMENT = 1
T_BOOTSTRAP = 2
T_TRAFFIC = 3
T_WAKEUP = 4
TYPE_NAMES = ("keepalive", "announcement", "bootstrap", "traffic", "wakeup")
HOP_LIMIT_TRAFFIC = 10
HOP_LIMIT_WAKEUP = 5
MAX_FRAME = 65535
HANDSHAKE_LEN = 104
PROTO_VERSION = 1
CAPABILITIES = 0x3B
FULL_KEY = b"\xff" * 32
# Application datagrams inside traffic payloads (snake/datagram.py,
# docs/reference/DATAGRAMS.md): the DATA header's bytes before a fragment's
# data, and fragments per datagram (an ack's bitmap is 8 bytes). Here, in
# a module every node keeps loaded, so that the profile check, the
# datagram layer and the telemetry sender share them without loading each
# other (snake.profile is unloaded after boot: importing it again would
# load its code for good).
DGRAM_HDR = 17
DGRAM_MAX_FRAGS = 64

_KEY = const(32)
_SIG = const(64)
_HOP = const(96)          # hop = varu64 port | key[32] | sig[64]
_MAXV = const(10)         # longest varu64 accepted (64 bits)


class WireError(ValueError):
    # The only exception the decoder raises; .reason is a short snake_case
    # string used as the drop reason in counters.
    @property
    def reason(self):
        return self.args[0]


# ---------------------------------------------------------------- varu64
# Big-endian base-128 (most significant group first, 0x80 on every byte but
# the last). NOT LEB128. 0 -> 00, 127 -> 7f, 128 -> 81 00, 300 -> 82 2c.

def ann_max(hops):
    """Bytes of the longest tree announcement of `hops` hops a node stores:
    header 10, payload length 2, root key 32, root sequence (varu64, <= 10),
    per hop a port (varu64 of at most 16 bits, tree.fits: <= 3), key 32 and
    signature 64. Profile.ann_max sizes buffers with it, the router the
    buffer for our own announcement."""
    return 54 + 99 * hops


def varu64_len(v):
    if v < 0:
        raise WireError("varu64")
    n = 1
    while v >= 128:
        v >>= 7
        n += 1
    # 10 bytes carry 70 bits: the top group may hold only bit 63.
    if n > _MAXV or (n == _MAXV and v > 1):
        raise WireError("varu64")
    return n


def encode_varu64(buf, off, v):
    n = varu64_len(v)
    if off + n > len(buf):
        raise WireError("oversize")
    i = off + n - 1
    buf[i] = v & 0x7F
    v >>= 7
    while i > off:
        i -= 1
        buf[i] = 0x80 | (v & 0x7F)
        v >>= 7
    return off + n


# End offset of the varu64 most recently read by _scan (a module global
# instead of a returned tuple: no allocation on the hot path).
_end = 0


def _scan(buf, off, end):
    # The one varu64 decoder: value of the varu64 at off (must end before
    # `end`); its end offset is left in _end.
    global _end
    lim = off + _MAXV
    if lim > end:
        lim = end
    v = 0
    i = off
    while i < lim:
        b = buf[i]
        v = (v << 7) | (b & 0x7F)
        if b < 0x80:
            if i - off == _MAXV - 1 and (buf[off] & 0x7F) > 1:
                raise WireError("varu64")
            _end = i + 1
            return v
        i += 1
    raise WireError("varu64")


def _varu64_bytes(v):
    out = bytearray(varu64_len(v))
    encode_varu64(out, 0, v)
    return out


# ----------------------------------------------------------- coordinates
# On the wire: u16 BE body length in bytes | varu64 port*. Functions below
# that take (buf, off, blen) work on the body (off = first port byte).

def _check_coords(buf, off, blen):
    # Every port must be a complete varu64 inside the body.
    end = off + blen
    i = off
    while i < end:
        lim = i + _MAXV
        if lim > end:
            lim = end
        j = i
        while j < lim and buf[j] >= 0x80:
            j += 1
        if j >= lim:
            raise WireError("coords")
        if j - i == _MAXV - 1 and (buf[i] & 0x7F) > 1:
            raise WireError("coords")
        i = j + 1


def encode_coords_body(ports):
    n = 0
    for p in ports:
        n += varu64_len(p)
    out = bytearray(n)
    o = 0
    for p in ports:
        o = encode_varu64(out, o, p)
    return bytes(out)


# ----------------------------------------------------------------- Frame

class Frame:
    def __init__(self, max_hops=16):
        # (the hops it holds: len(hop_off); one attribute fewer keeps the
        # view's attribute table a size smaller: 29 names, not 30)
        self.type = -1
        self.hop_limit = 0
        self.length = 0
        self.payload_off = 0
        self.payload_len = 0
        # announcement
        self.ann_off = 0
        self.ann_end = 0
        self.root_off = 0
        self.root_seq = 0
        self.nhops = 0
        # offsets in 16-bit arrays (a frame is at most 65535 bytes); ports
        # in a list (a varu64 may exceed any array type)
        self.hop_off = array("H", [0] * max_hops)
        self.hop_port = [0] * max_hops
        self.hop_key_off = array("H", [0] * max_hops)
        self.hop_sig_off = array("H", [0] * max_hops)
        # bootstrap / wakeup
        self.seq = 0
        self.sig_off = 0
        self.signed_off = 0
        self.signed_len = 0
        # bootstrap / traffic
        self.dst_off = 0
        self.src_off = 0
        self.wm_off = -1
        self.wm_seq = 0
        self.wm_seq_off = -1
        self.wm_seq_len = 0
        self.has_wm = False
        # traffic
        self.dcoords_off = 0
        self.dcoords_len = 0
        self.scoords_off = 0
        self.scoords_len = 0

    def decode(self, buf, n):
        if n < HEADER_LEN or n > len(buf):
            raise WireError("short")
        if n > MAX_FRAME:
            raise WireError("oversize")
        if buf[0] != 0x70 or buf[1] != 0x69 or buf[2] != 0x6E or buf[3] != 0x65:
            raise WireError("magic")
        if buf[4] != FRAME_VERSION:
            raise WireError("version")
        if ((buf[8] << 8) | buf[9]) != n:
            raise WireError("length")
        t = buf[5]
        self.type = t
        self.hop_limit = buf[7]
        self.length = n
        if t == T_TRAFFIC:
            self._traffic(buf, n)
        elif t == T_BOOTSTRAP:
            self._bootstrap(buf, n)
        elif t == T_ANNOUNCEMENT:
            self._announcement(buf, n)
        elif t == T_WAKEUP:
            self._wakeup(buf, n)
        elif t == T_KEEPALIVE:
            if n != HEADER_LEN:
                raise WireError("trailing")
            self.payload_off = HEADER_LEN
            self.payload_len = 0
        else:
            raise WireError("type")

    def _traffic(self, buf, n):
        # u16 plen | u16 dlen | dbody | u16 slen | sbody | dst | src |
        # [wm key | varu64 wm seq, only when dlen == 0] | payload
        if n < 16:
            raise WireError("short")
        plen = (buf[10] << 8) | buf[11]
        dlen = (buf[12] << 8) | buf[13]
        i = 14
        if i + dlen + 2 > n:
            raise WireError("coords")
        _check_coords(buf, i, dlen)
        self.dcoords_off = i
        self.dcoords_len = dlen
        i += dlen
        slen = (buf[i] << 8) | buf[i + 1]
        i += 2
        if i + slen > n:
            raise WireError("coords")
        _check_coords(buf, i, slen)
        self.scoords_off = i
        self.scoords_len = slen
        i += slen
        if i + 2 * _KEY > n:
            raise WireError("short")
        self.dst_off = i
        self.src_off = i + _KEY
        i += 2 * _KEY
        if dlen == 0:
            if i + _KEY >= n:
                raise WireError("short")
            self.has_wm = True
            self.wm_off = i
            i += _KEY
            self.wm_seq_off = i
            self.wm_seq = _scan(buf, i, n)
            self.wm_seq_len = _end - i
            i = _end
        else:
            self.has_wm = False
            self.wm_off = -1
            self.wm_seq = 0
            self.wm_seq_off = -1
            self.wm_seq_len = 0
        if i + plen != n:
            raise WireError("length")
        self.payload_off = i
        self.payload_len = plen

    def _signed(self, buf, i, n):
        # varu64 seq | root key | varu64 root seq | signature, ending at n.
        self.signed_off = i
        self.seq = _scan(buf, i, n)
        i = _end
        if i + _KEY >= n:
            raise WireError("short")
        self.root_off = i
        i += _KEY
        self.root_seq = _scan(buf, i, n)
        i = _end
        self.sig_off = i
        self.signed_len = i - self.signed_off
        i += _SIG
        if i > n:
            raise WireError("short")
        if i != n:
            raise WireError("trailing")

    def _bootstrap(self, buf, n):
        # u16 plen | dst key | wm key | varu64 wm seq | signed payload
        if n < 12 + 2 * _KEY + 1:
            raise WireError("short")
        plen = (buf[10] << 8) | buf[11]
        self.dst_off = 12
        self.wm_off = 12 + _KEY
        self.has_wm = True
        i = 12 + 2 * _KEY
        self.wm_seq_off = i
        self.wm_seq = _scan(buf, i, n)
        i = _end
        self.wm_seq_len = i - self.wm_seq_off
        if i + plen != n:
            raise WireError("length")
        self.payload_off = i
        self.payload_len = plen
        self._signed(buf, i, n)

    def _wakeup(self, buf, n):
        # u16 plen | src key | signed payload
        if n < 12 + _KEY:
            raise WireError("short")
        plen = (buf[10] << 8) | buf[11]
        if 12 + _KEY + plen != n:
            raise WireError("length")
        self.src_off = 12
        self.payload_off = 12 + _KEY
        self.payload_len = plen
        self._signed(buf, 12 + _KEY, n)

    def _announcement(self, buf, n):
        # u16 plen | root key | varu64 root seq | (varu64 port | key | sig)*
        if n < 12:
            raise WireError("short")
        plen = (buf[10] << 8) | buf[11]
        if 12 + plen != n:
            raise WireError("length")
        self.ann_off = 12
        self.ann_end = n
        self.payload_off = 12
        self.payload_len = plen
        if 12 + _KEY >= n:
            raise WireError("short")
        self.root_off = 12
        self.root_seq = _scan(buf, 12 + _KEY, n)
        i = _end
        ho = self.hop_off
        hp = self.hop_port
        hk = self.hop_key_off
        hs = self.hop_sig_off
        mx = len(ho)
        h = 0
        while i < n:
            if h >= mx:
                raise WireError("too_many_hops")
            ho[h] = i
            hp[h] = _scan(buf, i, n)
            i = _end
            if i + _HOP > n:
                raise WireError("short")
            hk[h] = i
            hs[h] = i + _KEY
            i += _HOP
            h += 1
        self.nhops = h


# ---------------------------------------------------------- byte helpers

def _move(buf, dst, src, n):
    # memmove inside one buffer without allocating on MicroPython: copies in
    # chunks no longer than the shift distance, so each chunk is a
    # non-overlapping copy_into (in the right order for the direction).
    if n <= 0 or dst == src:
        return
    if dst < src:
        step = src - dst
        k = 0
        while k < n:
            c = n - k
            if c > step:
                c = step
            copy_into(buf, dst + k, buf, src + k, c)
            k += c
    else:
        step = dst - src
        k = n
        while k > 0:
            c = k
            if c > step:
                c = step
            k -= c
            copy_into(buf, dst + k, buf, src + k, c)


def _put_header(buf, t, hop_limit, n):
    buf[0] = 0x70
    buf[1] = 0x69
    buf[2] = 0x6E
    buf[3] = 0x65
    buf[4] = FRAME_VERSION
    buf[5] = t
    buf[6] = 0
    buf[7] = hop_limit & 0xFF
    buf[8] = n >> 8
    buf[9] = n & 0xFF


def _put_u16(buf, off, v):
    buf[off] = v >> 8
    buf[off + 1] = v & 0xFF


def _fit(buf, n):
    if n > MAX_FRAME or n > len(buf):
        raise WireError("oversize")


def _put_key(buf, off, key):
    if len(key) != _KEY:
        raise WireError("key")
    copy_into(buf, off, key, 0, _KEY)
    return off + _KEY


def _put_sig(buf, off, sig):
    if len(sig) != _SIG:
        raise WireError("sig")
    copy_into(buf, off, sig, 0, _SIG)
    return off + _SIG


# --------------------------------------------------------------- encoders
# Each writes one frame at buf[0:] (a bytearray) and returns its length.

def encode_keepalive(buf):
    _fit(buf, HEADER_LEN)
    _put_header(buf, T_KEEPALIVE, 0, HEADER_LEN)
    return HEADER_LEN


def announcement_start(buf, root_key, root_seq):
    # An announcement written hop by hop (from stored hops, no tuples):
    # announcement_start, then announcement_hop per hop, then
    # announcement_end; the bytes equal wire_host.encode_announcement's.
    _fit(buf, 12 + _KEY)
    i = _put_key(buf, 12, root_key)
    return encode_varu64(buf, i, root_seq)


def announcement_hop(buf, i, port, kbuf, koff, sbuf, soff):
    # Append hop (port, kbuf[koff:koff+32], sbuf[soff:soff+64]) at offset i;
    # returns the offset after it.
    i = encode_varu64(buf, i, port)
    if i + _HOP > len(buf):
        raise WireError("oversize")
    copy_into(buf, i, kbuf, koff, _KEY)
    copy_into(buf, i + _KEY, sbuf, soff, _SIG)
    return i + _HOP


def announcement_end(buf, n):
    # Header and payload length of the announcement ending at n.
    if n > MAX_FRAME:
        raise WireError("oversize")
    _put_header(buf, T_ANNOUNCEMENT, 0, n)
    _put_u16(buf, 10, n - 12)
    return n


def bootstrap_signed(seq, root_key, root_seq):
    if len(root_key) != _KEY:
        raise WireError("key")
    return bytes(_varu64_bytes(seq) + bytearray(root_key) + _varu64_bytes(root_seq))


def _put_signed(buf, i, seq, root_key, root_seq, sig):
    i = encode_varu64(buf, i, seq)
    i = _put_key(buf, i, root_key)
    i = encode_varu64(buf, i, root_seq)
    return _put_sig(buf, i, sig)


def encode_bootstrap(buf, dst_key, wm_key, wm_seq, seq, root_key, root_seq, sig):
    wl = varu64_len(wm_seq)
    plen = varu64_len(seq) + _KEY + varu64_len(root_seq) + _SIG
    n = 12 + 2 * _KEY + wl + plen
    _fit(buf, n)
    _put_header(buf, T_BOOTSTRAP, 0, n)
    _put_u16(buf, 10, plen)
    i = _put_key(buf, 12, dst_key)
    i = _put_key(buf, i, wm_key)
    i = encode_varu64(buf, i, wm_seq)
    _put_signed(buf, i, seq, root_key, root_seq, sig)
    return n


def encode_traffic(buf, dcoords, scoords, dst_key, src_key, wm_key, wm_seq,
                   payload, hop_limit=HOP_LIMIT_TRAFFIC, body=None):
    # dcoords / scoords: coordinate bodies (concatenated varu64 ports, no
    # u16 prefix). The watermark is written only when dcoords is empty
    # (wm_key None means FULL_KEY). The payload is payload then body (when
    # given): a layer's header and its caller's data, joined here.
    dl = len(dcoords)
    sl = len(scoords)
    hl = len(payload)
    pl = hl if body is None else hl + len(body)
    _check_coords(dcoords, 0, dl)
    _check_coords(scoords, 0, sl)
    n = 12 + 2 + dl + 2 + sl + 2 * _KEY + pl
    if dl == 0:
        n += _KEY + varu64_len(wm_seq)
    _fit(buf, n)
    _put_header(buf, T_TRAFFIC, hop_limit, n)
    _put_u16(buf, 10, pl)
    _put_u16(buf, 12, dl)
    copy_into(buf, 14, dcoords, 0, dl)
    i = 14 + dl
    _put_u16(buf, i, sl)
    i += 2
    copy_into(buf, i, scoords, 0, sl)
    i += sl
    i = _put_key(buf, i, dst_key)
    i = _put_key(buf, i, src_key)
    if dl == 0:
        i = _put_key(buf, i, FULL_KEY if wm_key is None else wm_key)
        i = encode_varu64(buf, i, wm_seq)
    copy_into(buf, i, payload, 0, hl)
    if body is not None:
        copy_into(buf, i + hl, body, 0, pl - hl)
    return n


def encode_wakeup(buf, src_key, seq, root_key, root_seq, sig,
                  hop_limit=HOP_LIMIT_WAKEUP):
    plen = varu64_len(seq) + _KEY + varu64_len(root_seq) + _SIG
    n = 12 + _KEY + plen
    _fit(buf, n)
    _put_header(buf, T_WAKEUP, hop_limit, n)
    _put_u16(buf, 10, plen)
    i = _put_key(buf, 12, src_key)
    _put_signed(buf, i, seq, root_key, root_seq, sig)
    return n


# ------------------------------------------------------ in-place rewrites

def set_hop_limit(buf, v):
    buf[7] = v & 0xFF


def _set_length(buf, f, n):
    buf[8] = n >> 8
    buf[9] = n & 0xFF
    f.length = n


def set_watermark(buf, n, f, key, key_off, seq):
    # Rewrite the watermark of the bootstrap / SNEK traffic frame decoded in
    # f to (key[key_off:key_off+32], seq); shifts the tail when the varu64
    # length changes. Returns the new frame length; f is kept in sync.
    t = f.type
    if not (t == T_BOOTSTRAP or (t == T_TRAFFIC and f.has_wm)):
        raise WireError("no_watermark")
    old = f.wm_seq_len
    d = varu64_len(seq) - old
    if d != 0:
        tail = f.wm_seq_off + old
        nn = n + d
        _fit(buf, nn)
        _move(buf, tail + d, tail, n - tail)
        if key is buf and key_off >= tail:
            key_off += d
        n = nn
        _set_length(buf, f, n)
        f.wm_seq_len = old + d
        f.payload_off += d
        if t == T_BOOTSTRAP:
            f.signed_off += d
            f.root_off += d
            f.sig_off += d
    if not (key is buf and key_off == f.wm_off):
        copy_into(buf, f.wm_off, key, key_off, _KEY)
    encode_varu64(buf, f.wm_seq_off, seq)
    f.wm_seq = seq
    return n


def to_snek(buf, n, f, key, key_off, seq):
    # Turn the tree-routed traffic frame decoded in f into SNEK form: empty
    # destination coordinates, watermark (key, seq) inserted after the
    # source key. Returns the new length; f is kept in sync.
    if f.type != T_TRAFFIC:
        raise WireError("type")
    dlen = f.dcoords_len
    if dlen == 0:
        return set_watermark(buf, n, f, key, key_off, seq)
    sl = varu64_len(seq)
    delta = _KEY + sl - dlen
    nn = n + delta
    _fit(buf, nn)
    b1 = f.dcoords_off + dlen          # scoords length field .. end of src key
    ps = f.payload_off
    pl = f.payload_len
    if delta > 0:
        _move(buf, ps + delta, ps, pl)
        _move(buf, b1 - dlen, b1, ps - b1)
    else:
        _move(buf, b1 - dlen, b1, ps - b1)
        _move(buf, ps + delta, ps, pl)
    if key is buf:
        if key_off >= ps:
            key_off += delta
        elif key_off >= b1:
            key_off -= dlen
    buf[12] = 0
    buf[13] = 0
    wm = ps - dlen
    copy_into(buf, wm, key, key_off, _KEY)
    encode_varu64(buf, wm + _KEY, seq)
    _set_length(buf, f, nn)
    f.dcoords_len = 0
    f.scoords_off -= dlen
    f.dst_off -= dlen
    f.src_off -= dlen
    f.has_wm = True
    f.wm_off = wm
    f.wm_seq_off = wm + _KEY
    f.wm_seq_len = sl
    f.wm_seq = seq
    f.payload_off = ps + delta
    return nn


# -------------------------------------------------------------- handshake
# 104 bytes: version 1 | 3 zero bytes | u32 BE capabilities 0x3b |
# public key[32] | ed25519 signature over bytes 0..39.

def handshake_signed(pub):
    if len(pub) != _KEY:
        raise WireError("key")
    out = bytearray(40)
    out[0] = PROTO_VERSION
    out[7] = CAPABILITIES
    copy_into(out, 8, pub, 0, _KEY)
    return bytes(out)


def encode_handshake(buf, pub, sig):
    if len(buf) < HANDSHAKE_LEN:
        raise WireError("oversize")
    copy_into(buf, 0, handshake_signed(pub), 0, 40)
    _put_sig(buf, 40, sig)
    return HANDSHAKE_LEN


def parse_handshake(buf):
    # -> (pub, signed, sig) as bytes; the caller verifies sig over signed.
    if len(buf) < HANDSHAKE_LEN:
        raise WireError("short")
    if buf[0] != PROTO_VERSION:
        raise WireError("version")
    if buf[4] != 0 or buf[5] != 0 or buf[6] != 0 or buf[7] != CAPABILITIES:
        raise WireError("capabilities")
    return bytes(buf[8:40]), bytes(buf[0:40]), bytes(buf[40:HANDSHAKE_LEN])
