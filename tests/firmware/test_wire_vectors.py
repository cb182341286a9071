# The Pinecone wire vectors (captured from the reference Go router) decode to
# the recorded field values and re-encode byte for byte with the encoders.
from fwtest import (unhex, tohex, vectors, frames, frame, frame_bytes,
                    handshakes, node_key, segment, segments)
from snake import wire
from snakehost import wire_host


GO_TYPE_NAMES = ("Keepalive", "TreeAnnouncement", "VirtualSnakeBootstrap",
                 "OverlayTraffic", "WakeupBroadcast")


def test_constants():
    assert wire.TYPE_NAMES == ("keepalive", "announcement", "bootstrap", "traffic", "wakeup")
    assert (wire.T_KEEPALIVE, wire.T_ANNOUNCEMENT, wire.T_BOOTSTRAP, wire.T_TRAFFIC,
            wire.T_WAKEUP) == (0, 1, 2, 3, 4)
    assert wire.MAGIC == b"pine" and wire.HEADER_LEN == 10 and wire.FRAME_VERSION == 0
    c = vectors()["provenance"]["router_constants"]
    assert wire.HOP_LIMIT_TRAFFIC == c["types.MaxHopLimit (traffic)"] == 10
    assert wire.HOP_LIMIT_WAKEUP == c["types.NetworkHorizonDistance (wakeup hop limit)"] == 5
    assert wire.PROTO_VERSION == c["handshake ourVersion"] == 1
    assert wire.CAPABILITIES == int(c["ourCapabilities"], 16) == 0x3B
    assert wire.FULL_KEY == b"\xff" * 32 and wire.MAX_FRAME == 65535
    assert wire.HANDSHAKE_LEN == 104
    assert issubclass(wire.WireError, ValueError)


def _k(buf, off):
    return tohex(buf[off:off + 32])


def _decode(fid):
    b = frame_bytes(fid)
    f = wire.Frame()
    f.decode(b, len(b))
    return b, f


def _check_header(vec, f, b):
    h = vec["decoded"]["header"]
    assert h["magic"] == "pine" and h["version"] == wire.FRAME_VERSION
    assert f.type == h["type"] == vec["type"], vec["id"]
    assert f.hop_limit == h["hop_limit"], vec["id"]
    assert f.length == h["frame_length"] == vec["length"] == len(b)
    assert h["type_name"] == GO_TYPE_NAMES[f.type] == vec["type_name"]


def test_segments_concatenate_to_hex():
    n = 0
    for vec in vectors()["frames"] + handshakes():
        assert "".join([s["hex"] for s in vec["segments"]]) == vec["hex"], vec["id"]
        n += 1
    assert n == 18


def test_handshakes_parse_and_reencode():
    hs = handshakes()
    assert len(hs) == 3
    for h in hs:
        raw = unhex(h["hex"])
        assert len(raw) == wire.HANDSHAKE_LEN == h["length"]
        pub, signed, sig = wire.parse_handshake(raw)
        d = h["decoded"]
        assert tohex(pub) == d["public_key"] == h["public_key"]
        assert tohex(signed) == d["signed_bytes"]
        assert tohex(sig) == d["signature"]
        assert d["version"] == wire.PROTO_VERSION
        assert d["capabilities"] == wire.CAPABILITIES
        assert wire.handshake_signed(pub) == signed
        buf = bytearray(120)
        assert wire.encode_handshake(buf, pub, sig) == 104
        assert bytes(buf[:104]) == raw
        # bytearray / memoryview inputs parse the same
        assert wire.parse_handshake(memoryview(bytearray(raw))) == (pub, signed, sig)


def test_keepalive():
    vec = frame("keepalive_A_to_B")
    b, f = _decode(vec["id"])
    _check_header(vec, f, b)
    buf = bytearray(16)
    assert wire.encode_keepalive(buf) == 10
    assert bytes(buf[:10]) == b


def test_announcements_decode():
    anns = frames(wire.T_ANNOUNCEMENT)
    assert len(anns) == 5
    for vec in anns:
        b, f = _decode(vec["id"])
        d = vec["decoded"]
        _check_header(vec, f, b)
        assert f.payload_len == d["payload_len"]
        assert f.ann_off == 12 and f.ann_end == len(b)
        assert f.ann_off == segment(vec, "root public key")[0]
        assert f.root_off == segment(vec, "root public key")[0]
        assert _k(b, f.root_off) == d["root_public_key"]
        assert f.root_seq == d["root_sequence"]
        sigs = d["signatures"]
        assert f.nhops == len(sigs)
        for i in range(f.nhops):
            s = sigs[i]
            assert f.hop_port[i] == s["hop_port"]
            assert _k(b, f.hop_key_off[i]) == s["public_key"]
            assert tohex(b[f.hop_sig_off[i]:f.hop_sig_off[i] + 64]) == s["signature"]
            assert tohex(b[f.hop_off[i]:f.hop_sig_off[i] + 64]) == s["hop_encoded"]
            # the bytes hop i signs: everything in the payload before it
            assert tohex(b[f.ann_off:f.hop_off[i]]) == s["signed_bytes"]
            assert tohex(wire_host.hop_signed(b, f, i)) == s["signed_bytes"]
            assert f.hop_off[i] == segment(vec, "hop[%d] port" % i)[0]
            assert f.hop_key_off[i] == segment(vec, "hop[%d] public key" % i)[0]
            assert f.hop_sig_off[i] == segment(vec, "hop[%d] signature" % i)[0]
        # sender's coordinates = the hop ports
        assert [f.hop_port[i] for i in range(f.nhops)] == \
            d["receiver_coords_if_it_takes_sender_as_parent"]


def test_announcements_reencode():
    for vec in frames(wire.T_ANNOUNCEMENT):
        b, f = _decode(vec["id"])
        hops = []
        for i in range(f.nhops):
            hops.append((f.hop_port[i], b[f.hop_key_off[i]:f.hop_key_off[i] + 32],
                         b[f.hop_sig_off[i]:f.hop_sig_off[i] + 64]))
        buf = bytearray(400)
        n = wire_host.encode_announcement(buf, b[f.root_off:f.root_off + 32], f.root_seq, hops)
        assert n == len(b)
        assert bytes(buf[:n]) == b, vec["id"]


def test_bootstraps_decode():
    bs = frames(wire.T_BOOTSTRAP)
    assert len(bs) == 2
    for vec in bs:
        b, f = _decode(vec["id"])
        d = vec["decoded"]
        _check_header(vec, f, b)
        assert f.payload_len == d["payload_len"]
        assert _k(b, f.dst_off) == d["destination_key"]
        assert _k(b, f.wm_off) == d["watermark"]["public_key"]
        assert f.wm_seq == d["watermark"]["sequence"]
        assert f.wm_seq_off == segment(vec, "watermark sequence")[0]
        assert f.wm_seq_len == len(segment(vec, "watermark sequence")[1])
        assert f.dst_off == segment(vec, "destination key")[0]
        assert f.wm_off == segment(vec, "watermark key")[0]
        assert f.payload_off == segment(vec, "payload: bootstrap sequence")[0]
        assert f.seq == d["bootstrap"]["sequence"]


def test_bootstraps_payload_and_reencode():
    for vec in frames(wire.T_BOOTSTRAP):
        b, f = _decode(vec["id"])
        d = vec["decoded"]
        bd = d["bootstrap"]
        assert f.seq == bd["sequence"]
        assert f.root_off == segment(vec, "payload: root public key")[0]
        assert _k(b, f.root_off) == bd["root_public_key"]
        assert f.root_seq == bd["root_sequence"]
        assert f.sig_off == segment(vec, "payload: signature")[0]
        assert tohex(b[f.sig_off:f.sig_off + 64]) == bd["signature"]
        assert tohex(b[f.signed_off:f.signed_off + f.signed_len]) == d["signed_bytes"]
        assert tohex(b[f.payload_off:f.payload_off + f.payload_len]) == d["payload"]
        assert tohex(wire.bootstrap_signed(f.seq, b[f.root_off:f.root_off + 32],
                                           f.root_seq)) == d["signed_bytes"]
        buf = bytearray(300)
        n = wire.encode_bootstrap(buf, b[f.dst_off:f.dst_off + 32],
                                  b[f.wm_off:f.wm_off + 32], f.wm_seq, f.seq,
                                  b[f.root_off:f.root_off + 32], f.root_seq,
                                  b[f.sig_off:f.sig_off + 64])
        assert bytes(buf[:n]) == b, vec["id"]


def test_traffic_decode_and_reencode():
    ts = frames(wire.T_TRAFFIC)
    assert len(ts) == 4
    for vec in ts:
        b, f = _decode(vec["id"])
        d = vec["decoded"]
        _check_header(vec, f, b)
        assert f.payload_len == d["payload_len"]
        assert wire_host.decode_coords(b, f.dcoords_off, f.dcoords_len) == d["destination_coords"]
        assert wire_host.decode_coords(b, f.scoords_off, f.scoords_len) == d["source_coords"]
        # dcoords_off is the body, just after the u16 body length
        off, lenb = segment(vec, "destination coords length")
        assert f.dcoords_off == off + 2 and f.dcoords_len == (lenb[0] << 8) | lenb[1]
        off, lenb = segment(vec, "source coords length")
        assert f.scoords_off == off + 2 and f.scoords_len == (lenb[0] << 8) | lenb[1]
        assert f.dst_off == segment(vec, "destination key")[0]
        assert f.src_off == segment(vec, "source key")[0]
        assert _k(b, f.dst_off) == d["destination_key"]
        assert _k(b, f.src_off) == d["source_key"]
        assert f.has_wm == d["watermark_on_wire"]
        if f.has_wm:
            assert f.wm_off == segment(vec, "watermark key")[0]
            assert _k(b, f.wm_off) == d["watermark"]["public_key"]
            assert f.wm_seq_off == segment(vec, "watermark sequence")[0]
            wm_key = b[f.wm_off:f.wm_off + 32]
        else:
            assert f.wm_off == -1 and f.wm_seq_len == 0
            assert d["watermark"]["public_key"] == tohex(wire.FULL_KEY)
            wm_key = wire.FULL_KEY
        assert f.wm_seq == d["watermark"]["sequence"]
        assert f.payload_off == [o for (name, o, _) in segments(vec) if name == "payload"][0]
        assert tohex(b[f.payload_off:f.payload_off + f.payload_len]) == d["payload"]
        assert f.payload_off + f.payload_len == len(b)
        buf = bytearray(300)
        n = wire.encode_traffic(buf, b[f.dcoords_off:f.dcoords_off + f.dcoords_len],
                                b[f.scoords_off:f.scoords_off + f.scoords_len],
                                b[f.dst_off:f.dst_off + 32], b[f.src_off:f.src_off + 32],
                                wm_key, f.wm_seq,
                                b[f.payload_off:f.payload_off + f.payload_len],
                                hop_limit=f.hop_limit)
        assert bytes(buf[:n]) == b, vec["id"]


def test_wakeups_decode_and_reencode():
    ws = frames(wire.T_WAKEUP)
    assert len(ws) == 3
    for vec in ws:
        b, f = _decode(vec["id"])
        d = vec["decoded"]
        bd = d["broadcast"]
        _check_header(vec, f, b)
        assert f.payload_len == d["payload_len"]
        assert f.src_off == segment(vec, "source key")[0]
        assert _k(b, f.src_off) == d["source_key"]
        assert f.seq == bd["sequence"]
        assert f.root_off == segment(vec, "payload: root public key")[0]
        assert _k(b, f.root_off) == bd["root_public_key"]
        assert f.root_seq == bd["root_sequence"]
        assert tohex(b[f.sig_off:f.sig_off + 64]) == bd["signature"]
        assert tohex(b[f.signed_off:f.signed_off + f.signed_len]) == d["signed_bytes"]
        assert wire_host.wakeup_signed(f.seq, b[f.root_off:f.root_off + 32],
                                  f.root_seq) == unhex(d["signed_bytes"])
        buf = bytearray(200)
        n = wire.encode_wakeup(buf, b[f.src_off:f.src_off + 32], f.seq,
                               b[f.root_off:f.root_off + 32], f.root_seq,
                               b[f.sig_off:f.sig_off + 64], hop_limit=f.hop_limit)
        assert bytes(buf[:n]) == b, vec["id"]


def test_every_frame_decodes_from_memoryview_in_a_larger_buffer():
    f = wire.Frame()
    for vec in vectors()["frames"]:
        b = unhex(vec["hex"])
        big = bytearray(len(b) + 50)
        big[:len(b)] = b
        big[len(b)] = 0xEE
        f.decode(memoryview(big), len(b))
        assert f.type == vec["type"] and f.length == len(b)


def test_varu64_vectors():
    cases = vectors()["encodings"]["varu64"]["cases"]
    assert len(cases) == 9
    for c in cases:
        v = int(c["value_str"])
        assert v == c["value"]
        raw = unhex(c["hex"])
        assert wire.varu64_len(v) == c["length"] == len(raw)
        buf = bytearray(12)
        assert wire.encode_varu64(buf, 1, v) == 1 + len(raw)
        assert bytes(buf[1:1 + len(raw)]) == raw
        assert wire_host.read_varu64(buf, 1, 12) == v
        assert wire_host.varu64_end(buf, 1, 12) == 1 + len(raw)
    # spec examples
    assert wire_host.read_varu64(b"\x82\x2c", 0, 2) == 300
    assert wire_host.read_varu64(b"\x81\x00", 0, 2) == 128


def test_coordinates_vectors():
    cases = vectors()["encodings"]["coordinates"]["cases"]
    assert len(cases) == 4
    for c in cases:
        raw = unhex(c["hex"])
        assert wire_host.encode_coords(c["ports"]) == raw
        blen = (raw[0] << 8) | raw[1]
        assert blen == len(raw) - 2
        assert wire_host.decode_coords(raw, 2, blen) == c["ports"]
        assert wire_host.coords_count(raw, 2, blen) == len(c["ports"])
        assert wire.encode_coords_body(c["ports"]) == raw[2:]


def test_tree_distance_vectors():
    cases = vectors()["encodings"]["tree_distance"]["cases"]
    assert len(cases) == 10
    for c in cases:
        a = wire.encode_coords_body(c["a"])
        b = wire.encode_coords_body(c["b"])
        # embed at non-zero offsets to exercise the offset arithmetic
        pa = b"\x99\x99" + a + b"\x81"
        pb = b"\x77" + b + b"\x80\x80"
        d = wire_host.coords_distance(pa, 2, len(a), pb, 1, len(b))
        assert d == c["distance"], (c, d)
        assert wire_host.coords_distance(pb, 1, len(b), pa, 2, len(a)) == c["distance"]
        assert wire_host.coords_equal(pa, 2, len(a), pb, 1, len(b)) == (c["a"] == c["b"])


def test_relay_snek_traffic_identical():
    # B relays C's SNEK frame: the watermark B's next hop returns is the one
    # the frame carries (A, 0), hop limiting off -> byte-identical.
    orig = frame_bytes("traffic_snek_C_to_B_originated")
    relayed = frame_bytes("traffic_snek_B_to_A_relayed")
    buf = bytearray(300)
    buf[:len(orig)] = orig
    f = wire.Frame()
    f.decode(buf, len(orig))
    a = node_key("A")
    n = wire.set_watermark(buf, len(orig), f, a, 0, 0)
    assert bytes(buf[:n]) == relayed
    cmp = vectors()["relay_comparisons"]
    assert cmp[0]["relayed"] == "traffic_snek_B_to_A_relayed" and cmp[0]["identical"]


def test_relay_tree_traffic_identical():
    orig = frame_bytes("traffic_tree_A_to_B_originated")
    relayed = frame_bytes("traffic_tree_B_to_C_relayed")
    f = wire.Frame()
    f.decode(orig, len(orig))
    assert not f.has_wm and orig == relayed


def test_relay_wakeup_differs_only_in_hop_limit():
    orig = frame_bytes("wakeup_A_to_B_periodic")
    relayed = frame_bytes("wakeup_A_relayed_B_to_C")
    diff = [i for i in range(len(orig)) if orig[i] != relayed[i]]
    assert diff == [7]
    buf = bytearray(orig)
    f = wire.Frame()
    f.decode(buf, len(buf))
    wire.set_hop_limit(buf, f.hop_limit - 1)
    assert bytes(buf) == relayed
    f.decode(buf, len(buf))
    assert f.hop_limit == wire.HOP_LIMIT_WAKEUP - 1


def test_announcement_per_peer_copies():
    one = frame_bytes("tree_announcement_root_A_to_B_port1")
    to_c = frame_bytes("tree_announcement_2hop_B_to_C_port2")
    to_a = frame_bytes("tree_announcement_2hop_B_to_A_port1")
    diff = [i for i in range(len(to_c)) if to_c[i] != to_a[i]]
    assert diff == [142]
    f = wire.Frame()
    f.decode(one, len(one))
    signed = wire_host.announcement_signed(one, f)
    vec = frame("tree_announcement_2hop_B_to_C_port2")
    assert tohex(signed) == vec["decoded"]["signatures"][1]["signed_bytes"]
    f2 = wire.Frame()
    f2.decode(to_c, len(to_c))
    b_sig = to_c[f2.hop_sig_off[1]:f2.hop_sig_off[1] + 64]
    b_key = node_key("B")
    for port, want in ((2, to_c), (1, to_a)):
        dst = bytearray(400)
        n = wire_host.extend_announcement(dst, one, f, port, b_key, b_sig)
        assert bytes(dst[:n]) == want
    # and a second extension of the 2-hop copy reproduces C's 3-hop one
    three = frame_bytes("tree_announcement_3hop_C_to_B_port1")
    f3 = wire.Frame()
    f3.decode(three, len(three))
    c_sig = three[f3.hop_sig_off[2]:f3.hop_sig_off[2] + 64]
    dst = bytearray(400)
    n = wire_host.extend_announcement(dst, to_c, f2, 1, node_key("C"), c_sig)
    assert bytes(dst[:n]) == three


def _crypto():
    from snake import crypto
    return crypto


def test_signatures_verify_with_crypto():
    # Every signature in the vectors verifies over the byte range the codec
    # says it covers (needs snake.crypto).
    crypto = _crypto()
    count = 0
    for h in handshakes():
        pub, signed, sig = wire.parse_handshake(unhex(h["hex"]))
        assert crypto.verify(pub, signed, sig)
        count += 1
    f = wire.Frame()
    for vec in vectors()["frames"]:
        b = unhex(vec["hex"])
        f.decode(b, len(b))
        if f.type == wire.T_ANNOUNCEMENT:
            for i in range(f.nhops):
                key = b[f.hop_key_off[i]:f.hop_key_off[i] + 32]
                sig = b[f.hop_sig_off[i]:f.hop_sig_off[i] + 64]
                assert crypto.verify(key, wire_host.hop_signed(b, f, i), sig), (vec["id"], i)
                count += 1
        elif f.type in (wire.T_BOOTSTRAP, wire.T_WAKEUP):
            key_off = f.dst_off if f.type == wire.T_BOOTSTRAP else f.src_off
            key = b[key_off:key_off + 32]
            signed = b[f.signed_off:f.signed_off + f.signed_len]
            sig = b[f.sig_off:f.sig_off + 64]
            assert crypto.verify(key, signed, sig), vec["id"]
            # a flipped bit in the signed range breaks it
            bad = bytearray(signed)
            bad[0] ^= 1
            assert not crypto.verify(key, bytes(bad), sig)
            count += 1
    assert count == 3 + 9 + 5
