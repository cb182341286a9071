"""Differential fuzz of the wire decoder (CPython only).

An independent, deliberately plain reference parser (slices and struct,
written from the vector file's segment layout, not from snake/wire.py)
decides accept/reject and extracts field values for mutated vector frames;
snake.wire.Frame must agree on every frame: same accept/reject decision and,
when accepted, the same field values read through its offsets.
"""
import random
import struct

from fwtest import unhex, vectors
from snake import wire
from snakehost import wire_host

ITERATIONS = 20000
MAX_HOPS = 16


class Reject(Exception):
    pass


def _varu(b):
    """(value, rest) of a big-endian base-128 integer at the start of b."""
    v = 0
    for i, x in enumerate(b[:10]):
        v = (v << 7) | (x & 0x7F)
        if x < 0x80:
            if v >> 64:
                raise Reject("varu64 overflow")
            return v, b[i + 1:]
    raise Reject("varu64")


def _take(b, n):
    if len(b) < n:
        raise Reject("short")
    return b[:n], b[n:]


def _ports(body):
    out = []
    while body:
        p, body = _varu(body)
        out.append(p)
    return out


def _coords(b):
    (blen,), b = struct.unpack(">H", _take(b, 2)[0]), b[2:]
    body, b = _take(b, blen)
    return _ports(body), body, b


def _signed(b):
    seq, rest = _varu(b)
    root, rest = _take(rest, 32)
    root_seq, rest = _varu(rest)
    sig, rest = _take(rest, 64)
    if rest:
        raise Reject("trailing")
    return {"seq": seq, "root": root, "root_seq": root_seq, "sig": sig,
            "signed": b[:len(b) - 64]}


def ref_decode(b):
    b = bytes(b)
    if len(b) < 10:
        raise Reject("short")
    magic, ver, typ, _extra, hop_limit, flen = struct.unpack(">4sBBBBH", b[:10])
    if magic != b"pine" or ver != 0 or flen != len(b):
        raise Reject("header")
    body = b[10:]
    out = {"type": typ, "hop_limit": hop_limit}
    if typ == 0:
        if body:
            raise Reject("trailing")
        return out
    (plen,), body = struct.unpack(">H", _take(body, 2)[0]), body[2:]
    if typ == 1:
        if len(body) != plen:
            raise Reject("length")
        out["root"], rest = _take(body, 32)
        out["root_seq"], rest = _varu(rest)
        hops = []
        while rest:
            start = len(body) - len(rest)
            port, rest = _varu(rest)
            key, rest = _take(rest, 32)
            sig, rest = _take(rest, 64)
            hops.append((port, key, sig, body[:start]))
            if len(hops) > MAX_HOPS:
                raise Reject("hops")
        out["hops"] = hops
        return out
    if typ == 2:
        out["dst"], rest = _take(body, 32)
        out["wm"], rest = _take(rest, 32)
        out["wm_seq"], rest = _varu(rest)
        if len(rest) != plen:
            raise Reject("length")
        out.update(_signed(rest))
        return out
    if typ == 3:
        out["dcoords"], dbody, rest = _coords(body)
        out["scoords"], sbody, rest = _coords(rest)
        out["dst"], rest = _take(rest, 32)
        out["src"], rest = _take(rest, 32)
        if not dbody:
            out["wm"], rest = _take(rest, 32)
            out["wm_seq"], rest = _varu(rest)
        else:
            out["wm"], out["wm_seq"] = None, 0
        if len(rest) != plen:
            raise Reject("length")
        out["payload"] = rest
        return out
    if typ == 4:
        out["src"], rest = _take(body, 32)
        if len(rest) != plen:
            raise Reject("length")
        out.update(_signed(rest))
        return out
    raise Reject("type")


def _k(buf, off, n=32):
    return bytes(buf[off:off + n])


def view(f, buf):
    """The same dict as ref_decode, read through Frame's offsets."""
    out = {"type": f.type, "hop_limit": f.hop_limit}
    if f.type == 1:
        out["root"] = _k(buf, f.root_off)
        out["root_seq"] = f.root_seq
        out["hops"] = [(f.hop_port[i], _k(buf, f.hop_key_off[i]), _k(buf, f.hop_sig_off[i], 64),
                        bytes(buf[f.ann_off:f.hop_off[i]])) for i in range(f.nhops)]
    elif f.type in (2, 4):
        if f.type == 2:
            out["dst"] = _k(buf, f.dst_off)
            out["wm"] = _k(buf, f.wm_off)
            out["wm_seq"] = f.wm_seq
        else:
            out["src"] = _k(buf, f.src_off)
        out.update({"seq": f.seq, "root": _k(buf, f.root_off), "root_seq": f.root_seq,
                    "sig": _k(buf, f.sig_off, 64),
                    "signed": bytes(buf[f.signed_off:f.signed_off + f.signed_len])})
    elif f.type == 3:
        out["dcoords"] = wire_host.decode_coords(buf, f.dcoords_off, f.dcoords_len)
        out["scoords"] = wire_host.decode_coords(buf, f.scoords_off, f.scoords_len)
        out["dst"] = _k(buf, f.dst_off)
        out["src"] = _k(buf, f.src_off)
        out["wm"] = _k(buf, f.wm_off) if f.has_wm else None
        out["wm_seq"] = f.wm_seq
        out["payload"] = bytes(buf[f.payload_off:f.payload_off + f.payload_len])
    return out


def _mutate(rnd, b):
    m = rnd.randrange(7)
    n = len(b)
    if m == 0 and n:
        for _ in range(rnd.randint(1, 3)):
            b[rnd.randrange(n)] ^= 1 << rnd.randrange(8)
    elif m == 1:
        del b[rnd.randrange(n + 1):]
    elif m == 2:
        i = rnd.randrange(n + 1)
        b[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 12)))
    elif m == 3 and n:
        i = rnd.randrange(n)
        del b[i:i + rnd.randint(1, 8)]
    elif m == 4 and n >= 12:
        struct.pack_into(">H", b, 10, rnd.randrange(0x10000) if rnd.random() < 0.3
                         else (struct.unpack_from(">H", b, 10)[0] + rnd.randint(-3, 3)) & 0xFFFF)
    elif m == 5 and n >= 16:
        off = rnd.choice([12, 14 + struct.unpack_from(">H", b, 12)[0]])
        if off + 2 <= n:
            struct.pack_into(">H", b, off, rnd.randrange(40))
    elif n:
        b[rnd.randrange(n)] = rnd.choice([0, 0x7F, 0x80, 0x81, 0xFF])
    return b


def _repair(b):
    """Make header length and payload length agree with the mutated frame
    when the reference parser can tell what they should be."""
    if len(b) >= 10:
        struct.pack_into(">H", b, 8, len(b) & 0xFFFF)
    if len(b) < 12:
        return
    for plen in _candidate_plens(b):
        if 0 <= plen <= 0xFFFF:
            struct.pack_into(">H", b, 10, plen)
        return


def _candidate_plens(b):
    t = b[5]
    try:
        if t == 1:
            return [len(b) - 12]
        if t == 4:
            return [len(b) - 44]
        if t == 2:
            _, rest = _varu(bytes(b[76:]))
            return [len(rest)]
        if t == 3:
            _, _, rest = _coords(bytes(b[12:]))
            _, dbody, _ = _coords(bytes(b[12:]))
            _, _, rest = _coords(rest)
            rest = rest[64:]
            if not dbody:
                _, rest = _varu(rest[32:])
            return [len(rest)]
    except (Reject, struct.error, IndexError):
        pass
    return []


def test_differential_fuzz_against_reference_parser():
    rnd = random.Random(20261121)
    bases = [bytearray(unhex(v["hex"])) for v in vectors()["frames"]]
    f = wire.Frame(MAX_HOPS)
    agree_ok = agree_reject = 0
    for _ in range(ITERATIONS):
        b = bytearray(rnd.choice(bases))
        for _ in range(rnd.randint(1, 3)):
            b = _mutate(rnd, b)
        if rnd.random() < 0.7:
            _repair(b)
        try:
            want = ref_decode(b)
        except Reject:
            want = None
        padded = b + bytes(rnd.randrange(4))
        try:
            f.decode(padded, len(b))
        except wire.WireError:
            assert want is None, (b.hex(), want)
            agree_reject += 1
            continue
        assert want is not None, ("codec accepted what the reference rejects", b.hex())
        assert view(f, padded) == want, b.hex()
        agree_ok += 1
    # both outcomes were exercised in bulk
    assert agree_ok > 2000 and agree_reject > 2000, (agree_ok, agree_reject)


def test_every_vector_accepted_by_both():
    f = wire.Frame()
    for v in vectors()["frames"]:
        b = unhex(v["hex"])
        f.decode(b, len(b))
        assert view(f, b) == ref_decode(b)
