# In-place rewrites (set_watermark, to_snek, set_hop_limit), announcement
# extension, encoder edge cases, and the zero-allocation guarantee of the
# hot path under MicroPython.
from fwtest import (frame_bytes, node_key, det_key, allocated_by,
                    is_micropython, tohex)
from snake import wire
from snakehost import wire_host
from snake.platform import copy_into

BIG_SEQ = 1795290492369          # Unix ms: a 6-byte varu64


def _fresh(b, spare=200):
    buf = bytearray(len(b) + spare)
    buf[:len(b)] = b
    return buf


def _same_view(f, buf, n):
    # f (kept in sync by a rewrite) must equal a fresh decode of the bytes.
    g = wire.Frame()
    g.decode(buf, n)
    names = ("type", "hop_limit", "length", "payload_off", "payload_len")
    if g.type == wire.T_TRAFFIC:
        names += ("dcoords_off", "dcoords_len", "scoords_off", "scoords_len",
                  "dst_off", "src_off", "has_wm", "wm_off", "wm_seq",
                  "wm_seq_off", "wm_seq_len")
    elif g.type == wire.T_BOOTSTRAP:
        names += ("dst_off", "wm_off", "wm_seq", "wm_seq_off", "wm_seq_len",
                  "seq", "root_off", "root_seq", "sig_off", "signed_off",
                  "signed_len")
    for a in names:
        assert getattr(f, a) == getattr(g, a), (a, getattr(f, a), getattr(g, a))
    return g


def _traffic_parts(b, f):
    return (b[f.dcoords_off:f.dcoords_off + f.dcoords_len],
            b[f.scoords_off:f.scoords_off + f.scoords_len],
            b[f.dst_off:f.dst_off + 32], b[f.src_off:f.src_off + 32],
            b[f.payload_off:f.payload_off + f.payload_len])


def test_set_watermark_grows_and_shrinks_traffic():
    orig = frame_bytes("traffic_snek_C_to_B_originated")
    buf = _fresh(orig)
    f = wire.Frame()
    f.decode(buf, len(orig))
    assert f.wm_seq == 0 and f.wm_seq_len == 1
    dc, sc, dst, src, payload = _traffic_parts(orig, f)
    k = det_key(7)
    n = wire.set_watermark(buf, len(orig), f, k, 0, BIG_SEQ)
    assert n == len(orig) + 5
    _same_view(f, buf, n)
    assert f.wm_seq == BIG_SEQ and f.wm_seq_len == 6
    assert bytes(buf[f.wm_off:f.wm_off + 32]) == k
    ref = bytearray(300)
    m = wire.encode_traffic(ref, dc, sc, dst, src, k, BIG_SEQ, payload)
    assert bytes(buf[:n]) == bytes(ref[:m])
    # shrink back to (A, 0): the original bytes again
    n2 = wire.set_watermark(buf, n, f, node_key("A"), 0, 0)
    assert n2 == len(orig)
    assert bytes(buf[:n2]) == orig
    _same_view(f, buf, n2)


def test_set_watermark_same_length_and_key_inside_buffer():
    orig = frame_bytes("traffic_snek_C_to_B_originated")
    buf = _fresh(orig)
    f = wire.Frame()
    f.decode(buf, len(orig))
    # the watermark key taken from the frame itself (its source key)
    n = wire.set_watermark(buf, len(orig), f, buf, f.src_off, 5)
    assert n == len(orig)
    assert buf[f.wm_off:f.wm_off + 32] == buf[f.src_off:f.src_off + 32]
    # key taken from the payload region, which moves when the seq grows
    payload_key_off = f.payload_off
    want = bytes(buf[payload_key_off:payload_key_off + 32])
    n = wire.set_watermark(buf, n, f, buf, payload_key_off, BIG_SEQ)
    assert bytes(buf[f.wm_off:f.wm_off + 32]) == want
    _same_view(f, buf, n)


def test_set_watermark_bootstrap_keeps_signed_payload():
    orig = frame_bytes("bootstrap_C_to_B")
    buf = _fresh(orig)
    f = wire.Frame()
    f.decode(buf, len(orig))
    signed = bytes(orig[f.signed_off:f.signed_off + f.signed_len])
    sig = bytes(orig[f.sig_off:f.sig_off + 64])
    n = wire.set_watermark(buf, len(orig), f, node_key("A"), 0, BIG_SEQ)
    assert n == len(orig) + 5
    g = _same_view(f, buf, n)
    assert bytes(buf[g.signed_off:g.signed_off + g.signed_len]) == signed
    assert bytes(buf[g.sig_off:g.sig_off + 64]) == sig
    assert g.payload_len == 103
    ref = bytearray(300)
    m = wire.encode_bootstrap(ref, node_key("C"), node_key("A"), BIG_SEQ, f.seq,
                              node_key("A"), 1, sig)
    assert bytes(buf[:n]) == bytes(ref[:m])
    n = wire.set_watermark(buf, n, f, node_key("B"), 0, 0)
    assert bytes(buf[:n]) == orig


def test_set_watermark_refuses_tree_traffic_and_full_buffer():
    tree = frame_bytes("traffic_tree_A_to_B_originated")
    f = wire.Frame()
    buf = _fresh(tree)
    f.decode(buf, len(tree))
    try:
        wire.set_watermark(buf, len(tree), f, node_key("A"), 0, 0)
        assert False, "no watermark to set"
    except wire.WireError as e:
        assert e.reason == "no_watermark"
    snek = frame_bytes("traffic_snek_C_to_B_originated")
    buf = bytearray(snek)            # no spare capacity
    f.decode(buf, len(buf))
    try:
        wire.set_watermark(buf, len(buf), f, node_key("A"), 0, BIG_SEQ)
        assert False, "must not grow past the buffer"
    except wire.WireError as e:
        assert e.reason == "oversize"
    assert bytes(buf) == snek        # untouched on failure


def test_to_snek_from_vector():
    tree = frame_bytes("traffic_tree_A_to_B_originated")
    buf = _fresh(tree)
    f = wire.Frame()
    f.decode(buf, len(tree))
    dc, sc, dst, src, payload = _traffic_parts(tree, f)
    assert len(dc) == 2
    for seq in (0, BIG_SEQ):
        buf = _fresh(tree)
        f.decode(buf, len(tree))
        n = wire.to_snek(buf, len(tree), f, node_key("B"), 0, seq)
        ref = bytearray(300)
        m = wire.encode_traffic(ref, b"", sc, dst, src, node_key("B"), seq, payload)
        assert n == m and bytes(buf[:n]) == bytes(ref[:m])
        _same_view(f, buf, n)
        assert f.has_wm and f.dcoords_len == 0 and f.wm_seq == seq


def test_to_snek_long_coords_shrinks_frame():
    # destination coords longer than the watermark: the frame gets shorter
    ports = list(range(200, 240))            # 40 two-byte ports = 80 bytes
    dc = wire.encode_coords_body(ports)
    sc = wire.encode_coords_body([1, 300, 2])
    payload = bytes(bytearray(range(7)))
    buf = bytearray(400)
    n = wire.encode_traffic(buf, dc, sc, det_key(1), det_key(2), None, 0, payload)
    f = wire.Frame()
    f.decode(buf, n)
    assert not f.has_wm and f.dcoords_len == 80
    n2 = wire.to_snek(buf, n, f, det_key(3), 0, 300)
    assert n2 == n - 80 + 32 + 2
    ref = bytearray(400)
    m = wire.encode_traffic(ref, b"", sc, det_key(1), det_key(2), det_key(3), 300, payload)
    assert bytes(buf[:n2]) == bytes(ref[:m])
    _same_view(f, buf, n2)
    assert wire_host.decode_coords(buf, f.scoords_off, f.scoords_len) == [1, 300, 2]


def test_to_snek_on_snek_frame_sets_watermark():
    snek = frame_bytes("traffic_snek_C_to_B_originated")
    buf = _fresh(snek)
    f = wire.Frame()
    f.decode(buf, len(snek))
    n = wire.to_snek(buf, len(snek), f, node_key("B"), 0, 9)
    assert n == len(snek)
    assert bytes(buf[f.wm_off:f.wm_off + 32]) == node_key("B") and f.wm_seq == 9
    _same_view(f, buf, n)


def test_to_snek_large_payload_and_bigger_shift():
    payload = bytes(bytearray([i & 0xFF for i in range(1000)]))
    buf = bytearray(1200)
    n = wire.encode_traffic(buf, b"\x01", b"", det_key(1), det_key(2), None, 0,
                            payload, hop_limit=3)
    f = wire.Frame()
    f.decode(buf, n)
    n2 = wire.to_snek(buf, n, f, det_key(4), 0, BIG_SEQ)
    assert n2 == n - 1 + 32 + 6
    assert bytes(buf[f.payload_off:f.payload_off + f.payload_len]) == payload
    assert f.hop_limit == 3
    _same_view(f, buf, n2)


def test_extend_announcement_in_place_and_copy():
    one = frame_bytes("tree_announcement_root_A_to_B_port1")
    f = wire.Frame()
    f.decode(one, len(one))
    sig = b"\x5a" * 64
    buf = _fresh(one, 400)
    n = wire_host.extend_announcement(buf, buf, f, 300, det_key(9), sig)
    assert n == len(one) + 2 + 96
    g = wire.Frame()
    g.decode(buf, n)
    assert g.nhops == 2 and g.hop_port[1] == 300
    assert bytes(buf[g.hop_key_off[1]:g.hop_key_off[1] + 32]) == det_key(9)
    assert bytes(buf[g.hop_sig_off[1]:g.hop_sig_off[1] + 64]) == sig
    assert wire_host.hop_signed(buf, g, 1) == one[12:]
    assert bytes(buf[:len(one)])[12:] == one[12:]
    # copy into a separate buffer gives the same bytes
    dst = bytearray(500)
    m = wire_host.extend_announcement(dst, one, f, 300, det_key(9), sig)
    assert bytes(dst[:m]) == bytes(buf[:n])
    # too small a destination
    try:
        wire_host.extend_announcement(bytearray(len(one) + 10), one, f, 1, det_key(9), sig)
        assert False
    except wire.WireError as e:
        assert e.reason == "oversize"
    # not an announcement
    k = frame_bytes("keepalive_A_to_B")
    f.decode(k, len(k))
    try:
        wire_host.extend_announcement(dst, k, f, 1, det_key(9), sig)
        assert False
    except wire.WireError as e:
        assert e.reason == "type"


def test_encoders_reject_oversize_and_bad_keys():
    buf = bytearray(100)
    try:
        wire.encode_traffic(buf, b"", b"", det_key(1), det_key(2), None, 0, b"x" * 50)
        assert False
    except wire.WireError as e:
        assert e.reason == "oversize"
    big = bytearray(70000)
    try:
        wire.encode_traffic(big, b"", b"", det_key(1), det_key(2), None, 0, bytes(65500))
        assert False
    except wire.WireError as e:
        assert e.reason == "oversize"
    # exactly MAX_FRAME fits
    pl = wire.MAX_FRAME - (12 + 2 + 2 + 64 + 33)
    n = wire.encode_traffic(big, b"", b"", det_key(1), det_key(2), None, 0, bytes(pl))
    assert n == wire.MAX_FRAME
    f = wire.Frame()
    f.decode(big, n)
    assert f.payload_len == pl
    try:
        wire.encode_bootstrap(bytearray(300), b"short", det_key(1), 0, 1, det_key(2), 1, bytes(64))
        assert False
    except wire.WireError as e:
        assert e.reason == "key"
    try:
        wire.encode_wakeup(bytearray(300), det_key(1), 1, det_key(2), 1, bytes(63))
        assert False
    except wire.WireError as e:
        assert e.reason == "sig"
    try:
        wire.encode_traffic(bytearray(300), b"\x81", b"", det_key(1), det_key(2), None, 0, b"")
        assert False
    except wire.WireError as e:
        assert e.reason == "coords"
    try:
        wire.encode_keepalive(bytearray(9))
        assert False
    except wire.WireError as e:
        assert e.reason == "oversize"


def test_encoders_accept_bytearray_keys_and_memoryview_payload():
    k1 = bytearray(det_key(1))
    k2 = bytearray(det_key(2))
    buf = bytearray(200)
    n = wire.encode_traffic(buf, bytearray(b"\x01\x02"), memoryview(b"\x03"), k1, k2,
                            None, 0, memoryview(b"hello"))
    f = wire.Frame()
    f.decode(buf, n)
    assert bytes(buf[f.payload_off:f.payload_off + 5]) == b"hello"
    assert bytes(buf[f.dst_off:f.dst_off + 32]) == bytes(k1)
    assert wire_host.decode_coords(buf, f.dcoords_off, f.dcoords_len) == [1, 2]
    assert wire_host.decode_coords(buf, f.scoords_off, f.scoords_len) == [3]
    # SNEK form with default (None) watermark key writes FULL_KEY
    n = wire.encode_traffic(buf, b"", b"", k1, k2, None, 0, b"")
    f.decode(buf, n)
    assert f.has_wm and bytes(buf[f.wm_off:f.wm_off + 32]) == wire.FULL_KEY


def test_varu64_limits():
    buf = bytearray(12)
    top = (1 << 64) - 1
    assert wire.varu64_len(top) == 10
    assert wire.encode_varu64(buf, 0, top) == 10
    assert tohex(buf[:10]) == "81ffffffffffffffff7f"
    assert wire_host.read_varu64(buf, 0, 12) == top
    for bad in (1 << 64, -1):
        try:
            wire.varu64_len(bad)
            assert False
        except wire.WireError as e:
            assert e.reason == "varu64"
    # 10 bytes whose top group is 2: above 64 bits
    over = b"\x82" + b"\x80" * 8 + b"\x00"
    for fn in (wire_host.read_varu64, wire_host.varu64_end):
        try:
            fn(over, 0, 10)
            assert False
        except wire.WireError as e:
            assert e.reason == "varu64"
    # 11 bytes (leading zero groups) are refused too
    try:
        wire_host.read_varu64(b"\x80" * 10 + b"\x01", 0, 11)
        assert False
    except wire.WireError as e:
        assert e.reason == "varu64"
    # non-canonical leading zero groups are read like Go does
    assert wire_host.read_varu64(b"\x80\x80\x05", 0, 3) == 5
    assert wire_host.varu64_end(b"\x80\x80\x05\x07", 0, 4) == 3
    # the end bound is respected even when the buffer goes on
    try:
        wire_host.read_varu64(b"\x81\x00", 0, 1)
        assert False
    except wire.WireError as e:
        assert e.reason == "varu64"


def test_coords_distance_noncanonical_ports_compare_by_value():
    a = b"\x01\x80\x02\x03"          # [1, 2, 3] with a padded 2
    b = b"\x01\x02\x04"
    assert wire_host.coords_distance(a, 0, len(a), b, 0, len(b)) == 2
    assert wire_host.coords_equal(a, 0, len(a), b"\x01\x02\x03", 0, 3)
    assert wire_host.coords_count(a, 0, len(a)) == 3
    try:
        wire_host.coords_distance(b"\x01\x81", 0, 2, b, 0, 3)
        assert False
    except wire.WireError as e:
        assert e.reason == "coords"


def _check_alloc(fn):
    a = allocated_by(fn)
    if is_micropython():
        assert a == 0, "hot path allocated %d bytes" % a
    else:
        assert a is None


# The hot paths run as bound methods of these holders, not as closures: on
# MicroPython calling a closure over more than a few variables allocates its
# argument array, which would be the harness's allocation, not the codec's.

class _DecodeHot:
    def __init__(self):
        self.snek = bytearray(frame_bytes("traffic_snek_C_to_B_originated"))
        self.tree = bytearray(frame_bytes("traffic_tree_A_to_B_originated"))
        self.boot = bytearray(frame_bytes("bootstrap_B_to_A"))
        self.ann = bytearray(frame_bytes("tree_announcement_3hop_C_to_B_port1"))
        self.mv = memoryview(self.snek)
        self.f = wire.Frame()
        self.out = bytearray(5)

    def run(self):
        f = self.f
        out = self.out
        f.decode(self.snek, len(self.snek))
        out[0] = f.payload_off
        f.decode(self.mv, len(self.snek))
        f.decode(self.tree, len(self.tree))
        out[1] = f.dst_off
        f.decode(self.boot, len(self.boot))
        out[2] = f.wm_seq_len
        out[3] = f.seq & 0xFF
        f.decode(self.ann, len(self.ann))
        out[4] = f.nhops


def test_decode_allocates_nothing():
    h = _DecodeHot()
    _check_alloc(h.run)
    f = h.f
    f.decode(h.snek, len(h.snek))
    assert f.has_wm and h.out[0] == f.payload_off
    f.decode(h.tree, len(h.tree))
    assert h.out[1] == f.dst_off and not f.has_wm
    f.decode(h.boot, len(h.boot))
    assert h.out[2] == f.wm_seq_len == 1 and h.out[3] == f.seq & 0xFF
    assert h.out[4] == 3


class _DistanceHot:
    def __init__(self):
        self.a = wire.encode_coords_body([1, 3, 5, 3, 4])
        self.b = wire.encode_coords_body([1, 3, 5, 7, 6, 1])
        self.out = bytearray(2)

    def run(self):
        a = self.a
        b = self.b
        self.out[0] = wire_host.coords_distance(a, 0, len(a), b, 0, len(b))
        self.out[1] = 1 if wire_host.coords_equal(a, 0, len(a), a, 0, len(a)) else 0


def test_coords_distance_allocates_nothing():
    h = _DistanceHot()
    _check_alloc(h.run)
    assert h.out[0] == 5 and h.out[1] == 1


class _RewriteHot:
    def __init__(self):
        self.snek0 = frame_bytes("traffic_snek_C_to_B_originated")
        self.tree0 = frame_bytes("traffic_tree_A_to_B_originated")
        self.buf = bytearray(400)
        self.key = bytearray(node_key("B"))
        self.f = wire.Frame()
        self.lens = [0, 0, 0]

    def run(self):
        buf = self.buf
        f = self.f
        key = self.key
        snek0 = self.snek0
        tree0 = self.tree0
        copy_into(buf, 0, snek0, 0, len(snek0))
        f.decode(buf, len(snek0))
        n = wire.set_watermark(buf, len(snek0), f, key, 0, BIG_SEQ)   # grow
        n = wire.set_watermark(buf, n, f, key, 0, 7)                  # shrink
        self.lens[0] = n
        wire.set_hop_limit(buf, 9)
        copy_into(buf, 0, tree0, 0, len(tree0))
        f.decode(buf, len(tree0))
        n = wire.to_snek(buf, len(tree0), f, key, 0, BIG_SEQ)
        self.lens[1] = n
        f.decode(buf, n)
        self.lens[2] = f.wm_seq_len


def test_rewrites_allocate_nothing():
    h = _RewriteHot()
    _check_alloc(h.run)
    assert h.lens[0] == len(h.snek0)
    assert h.lens[1] == len(h.tree0) - 2 + 32 + 6
    assert h.lens[2] == 6
    assert h.buf[7] == 10            # the tree frame's own hop limit
