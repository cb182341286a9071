# Malformed input: every class of broken frame raises WireError with the
# right reason, and a seeded fuzz of 10,000 random and mutated frames raises
# nothing but WireError (same PRNG sequence on CPython and MicroPython).
from fwtest import unhex, vectors, frame_bytes, handshakes, det_key, Rng
from snake import wire
from snakehost import wire_host


def _reason(buf, n=None, f=None):
    if f is None:
        f = wire.Frame()
    if n is None:
        n = len(buf)
    try:
        f.decode(buf, n)
    except wire.WireError as e:
        assert isinstance(e, ValueError)
        return e.reason
    return None


def _set_u16(b, off, v):
    b[off] = (v >> 8) & 0xFF
    b[off + 1] = v & 0xFF


def _fix_len(b):
    _set_u16(b, 8, len(b))
    return b


def test_short():
    k = frame_bytes("keepalive_A_to_B")
    for n in range(0, 10):
        assert _reason(k[:n]) == "short", n
    assert _reason(b"") == "short"
    # n larger than the buffer
    assert _reason(k, 11) == "short"
    # a traffic frame cut inside its fixed fields, lengths kept consistent
    t = bytearray(frame_bytes("traffic_tree_A_to_B_originated"))[:60]
    _set_u16(t, 10, 0)
    assert _reason(_fix_len(t)) == "short"
    # bootstrap without room for its signature
    b = bytearray(frame_bytes("bootstrap_B_to_A"))[:-10]
    _set_u16(b, 10, 93)
    assert _reason(_fix_len(b)) == "short"
    # announcement whose last hop is incomplete
    a = bytearray(frame_bytes("tree_announcement_root_A_to_B_port1"))[:-1]
    _set_u16(a, 10, len(a) - 12)
    assert _reason(_fix_len(a)) == "short"


def test_magic_and_version():
    for fid in ("keepalive_A_to_B", "traffic_snek_C_to_B_originated"):
        for i in range(4):
            b = bytearray(frame_bytes(fid))
            b[i] ^= 0x20
            assert _reason(b) == "magic"
        b = bytearray(frame_bytes(fid))
        b[4] = 1
        assert _reason(b) == "version"


def test_header_length_disagrees():
    for v in vectors()["frames"]:
        b = bytearray(unhex(v["hex"]))
        n = len(b)
        for bad in (n - 1, n + 1, 0, 0xFFFF):
            _set_u16(b, 8, bad)
            assert _reason(b) == "length", (v["id"], bad)
        # a longer buffer with n = true length is fine; n = buffer length is not
        b = bytearray(unhex(v["hex"])) + bytearray(5)
        assert _reason(b, n) is None
        assert _reason(b) == "length"


def test_payload_len_disagrees():
    for v in vectors()["frames"]:
        if v["type"] == 0:
            continue
        b = bytearray(unhex(v["hex"]))
        pl = (b[10] << 8) | b[11]
        for bad in (pl - 1, pl + 1, 0xFFFF):
            _set_u16(b, 10, bad)
            assert _reason(b) in ("length", "short"), v["id"]
        _set_u16(b, 10, pl + 1)
        assert _reason(b) == "length", v["id"]
        # payload_len right, but one more byte in the frame: still rejected
        b = bytearray(unhex(v["hex"])) + bytearray(1)
        assert _reason(_fix_len(b)) in ("length", "trailing"), v["id"]


def test_trailing():
    k = bytearray(frame_bytes("keepalive_A_to_B")) + b"\x00"
    assert _reason(_fix_len(k)) == "trailing"
    for fid in ("bootstrap_B_to_A", "wakeup_A_to_B_periodic"):
        b = bytearray(frame_bytes(fid)) + b"\x00"
        pl = (b[10] << 8) | b[11]
        _set_u16(b, 10, pl + 1)
        assert _reason(_fix_len(b)) == "trailing", fid


def test_truncated_varu64():
    # announcement whose root sequence is the last byte and has its
    # continuation bit set
    a = bytearray(frame_bytes("tree_announcement_root_A_to_B_port1"))[:45]
    a[44] = 0x81
    _set_u16(a, 10, len(a) - 12)
    assert _reason(_fix_len(a)) == "varu64"
    # SNEK traffic with an empty payload and an unterminated watermark seq
    buf = bytearray(200)
    n = wire.encode_traffic(buf, b"", b"\x01", det_key(1), det_key(2), None, 0, b"")
    buf[n - 1] = 0x81
    assert _reason(buf, n) == "varu64"
    # a varu64 over 64 bits (11 bytes) in a bootstrap watermark
    b = bytearray(frame_bytes("bootstrap_B_to_A"))
    b = b[:76] + bytearray(b"\x80" * 10) + b[76:]
    assert _reason(_fix_len(b)) == "varu64"
    # 10 bytes, top group 2: value >= 2**64
    b = bytearray(frame_bytes("bootstrap_B_to_A"))
    b = b[:76] + bytearray(b"\x82" + b"\x80" * 8) + b[76:]
    assert _reason(_fix_len(b)) == "varu64"
    # 10 bytes, top group 1: 2**63 exactly, accepted
    b = bytearray(frame_bytes("bootstrap_B_to_A"))
    b = b[:76] + bytearray(b"\x81" + b"\x80" * 8) + b[76:]
    f = wire.Frame()
    assert _reason(_fix_len(b), f=f) is None
    assert f.wm_seq == 1 << 63 and f.wm_seq_len == 10


def test_coords_past_the_end_and_malformed():
    t = frame_bytes("traffic_tree_A_to_B_originated")
    for dlen in (0xFFFF, len(t), len(t) - 14 - 1):
        b = bytearray(t)
        _set_u16(b, 12, dlen)
        assert _reason(b) == "coords", dlen
    # source coords length past the end
    b = bytearray(t)
    _set_u16(b, 16, 0x4000)
    assert _reason(b) == "coords"
    # destination coords body ending in a continuation byte
    b = bytearray(t)
    b[15] = 0x82
    assert _reason(b) == "coords"
    # coordinate helpers refuse bodies that end inside a port
    for fn in (wire_host.decode_coords, wire_host.coords_count):
        try:
            fn(b"\x01\x81", 0, 2)
            assert False
        except wire.WireError as e:
            assert e.reason == "coords"
    try:
        wire_host.decode_coords(b"\x01", 0, 4)      # body past the buffer
        assert False
    except wire.WireError as e:
        assert e.reason == "coords"


def test_oversize():
    big = bytearray(70010)
    big[0:10] = frame_bytes("keepalive_A_to_B")
    assert _reason(big, 70000) == "oversize"
    try:
        wire_host.encode_announcement(bytearray(100), det_key(1), 1,
                                 [(1, det_key(1), bytes(64))])
        assert False
    except wire.WireError as e:
        assert e.reason == "oversize"


def test_too_many_hops():
    three = frame_bytes("tree_announcement_3hop_C_to_B_port1")
    assert _reason(three, f=wire.Frame(max_hops=2)) == "too_many_hops"
    f3 = wire.Frame(max_hops=3)
    assert _reason(three, f=f3) is None and f3.nhops == 3
    hops = [(i + 1, det_key(i), bytes(64)) for i in range(17)]
    buf = bytearray(2000)
    n = wire_host.encode_announcement(buf, det_key(99), 5, hops)
    assert _reason(buf, n) == "too_many_hops"          # default max_hops=16
    f = wire.Frame()
    n = wire_host.encode_announcement(buf, det_key(99), 5, hops[:16])
    assert _reason(buf, n, f) is None and f.nhops == 16 and f.hop_port[15] == 16


def test_zero_hop_announcement_is_well_formed():
    buf = bytearray(100)
    n = wire_host.encode_announcement(buf, det_key(1), 300, [])
    f = wire.Frame()
    f.decode(buf, n)
    assert f.nhops == 0 and f.root_seq == 300 and n == 12 + 32 + 2


def test_unknown_type():
    for t in (5, 6, 0x7F, 0xFF):
        b = bytearray(frame_bytes("keepalive_A_to_B"))
        b[5] = t
        assert _reason(b) == "type", t


def test_handshake_errors():
    raw = unhex(handshakes()[0]["hex"])
    for n in (0, 1, 40, 103):
        try:
            wire.parse_handshake(raw[:n])
            assert False
        except wire.WireError as e:
            assert e.reason == "short"
    b = bytearray(raw)
    b[0] = 2
    try:
        wire.parse_handshake(b)
        assert False
    except wire.WireError as e:
        assert e.reason == "version"
    for i, v in ((7, 0x3A), (4, 1), (5, 0xFF), (6, 1)):
        b = bytearray(raw)
        b[i] = v
        try:
            wire.parse_handshake(b)
            assert False
        except wire.WireError as e:
            assert e.reason == "capabilities"
    # bytes 1..3 are ignored by the reference, and so here
    b = bytearray(raw)
    b[2] = 9
    assert wire.parse_handshake(b)[0] == raw[8:40]


# ------------------------------------------------------------------ fuzz

FUZZ_ITERATIONS = 10000


def _mutate(rng, data):
    m = rng.below(7)
    n = len(data)
    if m == 0 and n:                       # bit flips
        k = 1 + rng.below(3)
        while k:
            i = rng.below(n)
            data[i] ^= 1 << rng.below(8)
            k -= 1
    elif m == 1:                           # truncation
        data = data[:rng.below(n + 1)]
    elif m == 2:                           # insertion
        i = rng.below(n + 1)
        data = data[:i] + rng.bytes(1 + rng.below(12)) + data[i:]
    elif m == 3 and n:                     # deletion
        i = rng.below(n)
        data = data[:i] + data[i + 1 + rng.below(8):]
    elif m == 4 and n >= 12:               # u16 payload length edits
        v = (data[10] << 8) | data[11]
        d = rng.below(5)
        v = (v + (d - 2)) & 0xFFFF if d else rng.below(0x10000)
        _set_u16(data, 10, v)
    elif m == 5 and n >= 18:               # coordinate length edits
        off = 12 if rng.below(2) else 14 + ((data[12] << 8) | data[13])
        if off + 2 <= n:
            _set_u16(data, off, rng.below(40) if rng.below(2) else rng.below(0x10000))
    elif n:                                # a byte set to an edge value
        data[rng.below(n)] = (0x00, 0x7F, 0x80, 0x81, 0xFF)[rng.below(5)]
    return data


def _u16(b, off):
    return (b[off] << 8) | b[off + 1]


def _repair_payload_len(data):
    # Set the u16 payload length to what the rest of the (mutated) frame
    # implies, so the fuzz gets past that check and into the fields.
    n = len(data)
    if n < 12:
        return
    t = data[5]
    try:
        if t == 1:
            v = n - 12
        elif t == 4:
            v = n - 44
        elif t == 2:
            v = n - wire_host.varu64_end(data, 76, n)
        elif t == 3:
            i = 14 + _u16(data, 12)
            i += 2 + _u16(data, i)
            i += 64
            if _u16(data, 12) == 0:
                i = wire_host.varu64_end(data, i + 32, n)
            v = n - i
        else:
            return
    except (wire.WireError, IndexError):
        return
    if 0 <= v <= 0xFFFF:
        _set_u16(data, 10, v)


def _check_invariants(f, n):
    assert f.length == n and 0 <= f.payload_off <= n
    t = f.type
    if t == wire.T_TRAFFIC:
        assert f.payload_off + f.payload_len == n
        assert 14 <= f.dcoords_off and f.dcoords_off + f.dcoords_len <= n
        assert f.scoords_off + f.scoords_len + 64 <= n
        assert f.src_off == f.dst_off + 32
        assert f.has_wm == (f.dcoords_len == 0)
        if f.has_wm:
            assert f.wm_seq_off == f.wm_off + 32 and f.wm_seq_off + f.wm_seq_len == f.payload_off
    elif t == wire.T_ANNOUNCEMENT:
        end = f.root_off + 33                  # root key + >= 1 seq byte
        for i in range(f.nhops):
            assert f.hop_off[i] >= end and f.hop_key_off[i] > f.hop_off[i]
            assert f.hop_sig_off[i] == f.hop_key_off[i] + 32
            end = f.hop_sig_off[i] + 64
        assert end == n if f.nhops else end <= n
    elif t == wire.T_BOOTSTRAP or t == wire.T_WAKEUP:
        assert f.sig_off + 64 == n
        assert f.signed_off + f.signed_len == f.sig_off
    else:
        assert t == wire.T_KEEPALIVE and n == 10


def test_fuzz_only_wire_errors():
    rng = Rng(0x5EED1234)
    bases = [bytearray(unhex(v["hex"])) for v in vectors()["frames"]]
    f = wire.Frame()
    small = wire.Frame(max_hops=2)
    reasons = {}
    ok = 0
    it = 0
    while it < FUZZ_ITERATIONS:
        it += 1
        if rng.below(10) == 0:
            data = rng.bytes(rng.below(200))
            if len(data) >= 10 and rng.below(2):
                data[0:5] = b"pine\x00"
                data[5] = rng.below(6)
        else:
            data = bytearray(bases[rng.below(len(bases))])
            k = 1 + rng.below(3)
            while k:
                data = _mutate(rng, data)
                k -= 1
        if rng.below(2):
            _repair_payload_len(data)
        n = len(data)
        if n >= 10 and rng.below(4):
            _set_u16(data, 8, n)           # keep the header length honest
        if rng.below(4) == 0:
            data = data + bytearray(b"\xee" * rng.below(8))    # buffer longer than n
        for fr in (f, small):
            try:
                fr.decode(data, n)
            except wire.WireError as e:
                r = e.reason
                reasons[r] = reasons.get(r, 0) + 1
            else:
                _check_invariants(fr, n)
                if fr is f:
                    ok += 1
                    if fr.type == wire.T_TRAFFIC:
                        wire_host.decode_coords(data, fr.dcoords_off, fr.dcoords_len)
                        wire_host.coords_distance(data, fr.dcoords_off, fr.dcoords_len,
                                             data, fr.scoords_off, fr.scoords_len)
        # coordinate helpers on arbitrary bytes
        if n:
            off = rng.below(n)
            blen = rng.below(n - off + 1)
            for fn in (wire_host.decode_coords, wire_host.coords_count):
                try:
                    fn(data, off, blen)
                except wire.WireError:
                    pass
            try:
                wire_host.coords_distance(data, off, blen, data, 0, rng.below(n + 1))
            except wire.WireError:
                pass
    # the fuzz reached every layer of the decoder
    for r in ("short", "magic", "version", "length", "type", "varu64",
              "coords", "trailing", "too_many_hops"):
        assert reasons.get(r, 0) > 0, (r, reasons)
    assert ok > 500, (ok, reasons)


def test_fuzz_handshakes():
    rng = Rng(77)
    raws = [bytearray(unhex(h["hex"])) for h in handshakes()]
    good = 0
    i = 0
    while i < 2000:
        i += 1
        data = _mutate(rng, bytearray(raws[rng.below(3)]))
        try:
            pub, signed, sig = wire.parse_handshake(data)
        except wire.WireError as e:
            assert e.reason in ("short", "version", "capabilities")
        else:
            assert len(pub) == 32 and len(signed) == 40 and len(sig) == 64
            good += 1
    assert 100 < good < 2000
