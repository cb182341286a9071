"""Property tests for the wire codec (CPython only: hypothesis).

Random valid frames of every type go encode -> decode -> re-encode from the
decoded view and must come back byte for byte; the in-place rewrites must
produce exactly what the encoders produce for the rewritten values.
"""
from hypothesis import given, settings, strategies as st, HealthCheck

from snake import wire
from snakehost import wire_host

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

U64 = st.one_of(
    st.integers(0, 300),
    st.integers(0, (1 << 64) - 1),
    st.sampled_from([0, 127, 128, 16383, 16384, 1795290492369, (1 << 63), (1 << 64) - 1]),
)
KEY = st.binary(min_size=32, max_size=32)
SIG = st.binary(min_size=64, max_size=64)
PORT = st.one_of(st.integers(1, 255), st.integers(0, (1 << 64) - 1))
COORDS = st.lists(PORT, max_size=12)
PAYLOAD = st.binary(max_size=400)
HOP_LIMIT = st.integers(0, 255)


def _key(buf, off):
    return bytes(buf[off:off + 32])


def _body(ports):
    return wire.encode_coords_body(ports)


def _decode(buf, n, max_hops=16):
    f = wire.Frame(max_hops)
    f.decode(buf, n)
    assert f.length == n
    return f


@SETTINGS
@given(root=KEY, seq=U64, hops=st.lists(st.tuples(PORT, KEY, SIG), max_size=16))
def test_announcement_roundtrip(root, seq, hops):
    buf = bytearray(4000)
    n = wire_host.encode_announcement(buf, root, seq, hops)
    f = _decode(buf, n)
    assert f.type == wire.T_ANNOUNCEMENT and f.hop_limit == 0
    assert _key(buf, f.root_off) == root and f.root_seq == seq
    assert f.nhops == len(hops)
    got = []
    for i in range(f.nhops):
        got.append((f.hop_port[i], _key(buf, f.hop_key_off[i]),
                    bytes(buf[f.hop_sig_off[i]:f.hop_sig_off[i] + 64])))
        assert wire_host.hop_signed(buf, f, i) == bytes(buf[12:f.hop_off[i]])
    assert got == hops
    again = bytearray(4000)
    assert wire_host.encode_announcement(again, _key(buf, f.root_off), f.root_seq, got) == n
    assert again[:n] == buf[:n]


@SETTINGS
@given(root=KEY, seq=U64, hops=st.lists(st.tuples(PORT, KEY, SIG), max_size=8),
       new=st.tuples(PORT, KEY, SIG), in_place=st.booleans())
def test_extend_announcement_equals_encoding_with_the_extra_hop(root, seq, hops, new, in_place):
    src = bytearray(4000)
    n = wire_host.encode_announcement(src, root, seq, hops)
    f = _decode(src, n)
    assert wire_host.announcement_signed(src, f) == bytes(src[12:n])
    dst = src if in_place else bytearray(4000)
    m = wire_host.extend_announcement(dst, src, f, new[0], new[1], new[2])
    ref = bytearray(4000)
    k = wire_host.encode_announcement(ref, root, seq, hops + [new])
    assert m == k and dst[:m] == ref[:k]
    g = _decode(dst, m)
    assert wire_host.hop_signed(dst, g, g.nhops - 1) == bytes(ref[12:n])


@SETTINGS
@given(dst=KEY, wm=KEY, wm_seq=U64, seq=U64, root=KEY, root_seq=U64, sig=SIG)
def test_bootstrap_roundtrip(dst, wm, wm_seq, seq, root, root_seq, sig):
    buf = bytearray(300)
    n = wire.encode_bootstrap(buf, dst, wm, wm_seq, seq, root, root_seq, sig)
    f = _decode(buf, n)
    assert f.type == wire.T_BOOTSTRAP
    assert (_key(buf, f.dst_off), _key(buf, f.wm_off), f.wm_seq, f.seq,
            _key(buf, f.root_off), f.root_seq) == (dst, wm, wm_seq, seq, root, root_seq)
    assert bytes(buf[f.sig_off:f.sig_off + 64]) == sig
    assert bytes(buf[f.signed_off:f.signed_off + f.signed_len]) == \
        wire.bootstrap_signed(seq, root, root_seq)
    again = bytearray(300)
    m = wire.encode_bootstrap(again, _key(buf, f.dst_off), _key(buf, f.wm_off), f.wm_seq,
                              f.seq, _key(buf, f.root_off), f.root_seq,
                              bytes(buf[f.sig_off:f.sig_off + 64]))
    assert m == n and again[:m] == buf[:n]


@SETTINGS
@given(dst=KEY, wm=KEY, wm_seq=U64, seq=U64, root=KEY, root_seq=U64, sig=SIG,
       new_key=KEY, new_seq=U64)
def test_bootstrap_set_watermark_equals_reencoding(dst, wm, wm_seq, seq, root, root_seq,
                                                   sig, new_key, new_seq):
    buf = bytearray(300)
    n = wire.encode_bootstrap(buf, dst, wm, wm_seq, seq, root, root_seq, sig)
    f = _decode(buf, n)
    m = wire.set_watermark(buf, n, f, new_key, 0, new_seq)
    ref = bytearray(300)
    k = wire.encode_bootstrap(ref, dst, new_key, new_seq, seq, root, root_seq, sig)
    assert m == k and buf[:m] == ref[:k]
    _same_view(f, buf, m)


def _same_view(f, buf, n):
    g = _decode(buf, n)
    for name in ("type", "hop_limit", "length", "payload_off", "payload_len", "dst_off",
                 "wm_off", "wm_seq", "wm_seq_off", "wm_seq_len"):
        assert getattr(f, name) == getattr(g, name), name
    if g.type == wire.T_TRAFFIC:
        for name in ("dcoords_off", "dcoords_len", "scoords_off", "scoords_len",
                     "src_off", "has_wm"):
            assert getattr(f, name) == getattr(g, name), name
    else:
        for name in ("seq", "root_off", "root_seq", "sig_off", "signed_off", "signed_len"):
            assert getattr(f, name) == getattr(g, name), name


@SETTINGS
@given(dc=COORDS, sc=COORDS, dst=KEY, src=KEY, wm=KEY, wm_seq=U64, payload=PAYLOAD,
       hl=HOP_LIMIT)
def test_traffic_roundtrip(dc, sc, dst, src, wm, wm_seq, payload, hl):
    buf = bytearray(1000)
    n = wire.encode_traffic(buf, _body(dc), _body(sc), dst, src, wm, wm_seq, payload,
                            hop_limit=hl)
    f = _decode(buf, n)
    assert f.type == wire.T_TRAFFIC and f.hop_limit == hl
    assert wire_host.decode_coords(buf, f.dcoords_off, f.dcoords_len) == dc
    assert wire_host.decode_coords(buf, f.scoords_off, f.scoords_len) == sc
    assert _key(buf, f.dst_off) == dst and _key(buf, f.src_off) == src
    assert bytes(buf[f.payload_off:f.payload_off + f.payload_len]) == payload
    assert f.has_wm == (not dc)
    if dc:
        assert f.wm_off == -1 and f.wm_seq == 0
        wm_back = wire.FULL_KEY
    else:
        assert _key(buf, f.wm_off) == wm and f.wm_seq == wm_seq
        wm_back = _key(buf, f.wm_off)
    again = bytearray(1000)
    m = wire.encode_traffic(again, bytes(buf[f.dcoords_off:f.dcoords_off + f.dcoords_len]),
                            bytes(buf[f.scoords_off:f.scoords_off + f.scoords_len]),
                            _key(buf, f.dst_off), _key(buf, f.src_off), wm_back, f.wm_seq,
                            bytes(buf[f.payload_off:f.payload_off + f.payload_len]),
                            hop_limit=f.hop_limit)
    assert m == n and again[:m] == buf[:n]


@SETTINGS
@given(dc=COORDS, sc=COORDS, dst=KEY, src=KEY, wm=KEY, wm_seq=U64, payload=PAYLOAD,
       new_key=KEY, new_seq=U64)
def test_traffic_rewrites_equal_reencoding(dc, sc, dst, src, wm, wm_seq, payload,
                                           new_key, new_seq):
    buf = bytearray(1000)
    n = wire.encode_traffic(buf, _body(dc), _body(sc), dst, src, wm, wm_seq, payload)
    f = _decode(buf, n)
    if dc:
        m = wire.to_snek(buf, n, f, new_key, 0, new_seq)
    else:
        m = wire.set_watermark(buf, n, f, new_key, 0, new_seq)
    ref = bytearray(1000)
    k = wire.encode_traffic(ref, b"", _body(sc), dst, src, new_key, new_seq, payload)
    assert m == k and buf[:m] == ref[:k]
    _same_view(f, buf, m)


@SETTINGS
@given(src=KEY, seq=U64, root=KEY, root_seq=U64, sig=SIG, hl=HOP_LIMIT)
def test_wakeup_roundtrip(src, seq, root, root_seq, sig, hl):
    buf = bytearray(300)
    n = wire.encode_wakeup(buf, src, seq, root, root_seq, sig, hop_limit=hl)
    f = _decode(buf, n)
    assert f.type == wire.T_WAKEUP and f.hop_limit == hl
    assert (_key(buf, f.src_off), f.seq, _key(buf, f.root_off), f.root_seq) == \
        (src, seq, root, root_seq)
    assert bytes(buf[f.signed_off:f.signed_off + f.signed_len]) == \
        wire_host.wakeup_signed(seq, root, root_seq)
    again = bytearray(300)
    m = wire.encode_wakeup(again, _key(buf, f.src_off), f.seq, _key(buf, f.root_off),
                           f.root_seq, bytes(buf[f.sig_off:f.sig_off + 64]),
                           hop_limit=f.hop_limit)
    assert m == n and again[:m] == buf[:n]
    wire.set_hop_limit(buf, hl - 1)
    assert _decode(buf, n).hop_limit == (hl - 1) & 0xFF


@SETTINGS
@given(pub=KEY, sig=SIG)
def test_handshake_roundtrip(pub, sig):
    buf = bytearray(104)
    assert wire.encode_handshake(buf, pub, sig) == 104
    assert wire.parse_handshake(buf) == (pub, wire.handshake_signed(pub), sig)


def _ref_distance(a, b):
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    return len(a) + len(b) - 2 * k


@SETTINGS
@given(prefix=st.lists(st.integers(0, 400), max_size=6),
       a=st.lists(st.integers(0, 400), max_size=6), b=st.lists(st.integers(0, 400), max_size=6))
def test_coords_distance_matches_list_reference(prefix, a, b):
    a = prefix + a
    b = prefix + b
    ea = _body(a)
    eb = _body(b)
    assert wire_host.coords_count(ea, 0, len(ea)) == len(a)
    assert wire_host.coords_distance(ea, 0, len(ea), eb, 0, len(eb)) == _ref_distance(a, b)
    assert wire_host.coords_equal(ea, 0, len(ea), eb, 0, len(eb)) == (a == b)
    assert wire_host.decode_coords(wire_host.encode_coords(a), 2, len(ea)) == a


@SETTINGS
@given(v=U64)
def test_varu64_roundtrip(v):
    buf = bytearray(11)
    end = wire.encode_varu64(buf, 1, v)
    assert end - 1 == wire.varu64_len(v)
    assert wire_host.read_varu64(buf, 1, 11) == v
    assert wire_host.varu64_end(buf, 1, 11) == end
    # big-endian base-128: last byte has no continuation bit, others do
    assert buf[end - 1] < 0x80 and all(x >= 0x80 for x in buf[1:end - 1])


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=300), fix_len=st.booleans(), typ=st.integers(0, 6))
def test_random_bytes_raise_only_wire_errors(data, fix_len, typ):
    data = bytearray(data)
    if fix_len and len(data) >= 10:
        data[0:5] = b"pine\x00"
        data[5] = typ
        data[8] = len(data) >> 8
        data[9] = len(data) & 0xFF
    f = wire.Frame()
    try:
        f.decode(data, len(data))
    except wire.WireError as e:
        assert isinstance(e.reason, str) and e.reason
    else:
        assert f.length == len(data)
