# The datagram header as docs/reference/DATAGRAMS.md lays it out: the
# vectors in tests/data/datagram_vectors.json are rebuilt here from their
# fields with struct and the documented layout (not with datagram.py), must
# match the examples printed in the doc, and datagram.py must write and read
# exactly them. Runs under CPython and MicroPython.
import json
import struct

from snake.datagram import Datagrams

OK = 0     # a tx's answer: handed to the router (snake/datagram.py)
from snake.profile import Profile
from fwtest import DATA_DIR, unhex, tohex

DOC = DATA_DIR + "/../../docs/reference/DATAGRAMS.md"
SRC = b"\x5a" * 32
DST = b"\x6b" * 32


def vectors():
    with open(DATA_DIR + "/datagram_vectors.json") as fh:
        return json.load(fh)["vectors"]


def vec(vid):
    for v in vectors():
        if v["id"] == vid:
            return v
    raise KeyError(vid)


def doc_data(f, data):
    # bytes 0..16 as the doc's DATA table says, then the data
    return struct.pack(">BBBBBHHHBBHH", 0x53, 0x44, 1, 1, f["flags"], f["dst_service"],
                       f["src_service"], f["id"], f["count"], f["index"], f["stride"],
                       f["total"]) + data


def doc_ack(f, bitmap):
    # bytes 0..11 as the doc's ACK table says, then the bitmap
    return struct.pack(">BBBBBHHHB", 0x53, 0x44, 1, 2, f["flags"], f["dst_service"],
                       f["src_service"], f["id"], f["count"]) + bitmap


def test_vectors_follow_the_documented_layout():
    vs = vectors()
    assert len(vs) >= 10
    for v in vs:
        f = v["fields"]
        if f["type"] == "data":
            built = doc_data(f, unhex(f["data_hex"]))
            assert len(built) == 17 + f["total"] or f["count"] > 1, v["id"]
        else:
            built = doc_ack(f, unhex(f["bitmap_hex"]))
            assert len(built) == 12 + (f["count"] + 7) // 8, v["id"]
        assert tohex(built) == v["hex"], v["id"]


def test_doc_examples_are_the_vectors():
    with open(DOC) as fh:
        lines = fh.read().split("\n")
    rows = {}
    for ln in lines:
        parts = ln.split()
        if parts and "|" in parts:
            rows[parts[0]] = ln
    for v in vectors():
        ln = rows[v["id"]]
        head, tail = ln.split("|")
        head = "".join(head.split()[1:])
        tail = tail.strip()
        h = v["hex"]
        if tail.startswith("<"):
            # long data: the header bytes are printed, the data described
            assert h.startswith(head), v["id"]
            n = int(tail[1:].split()[0])
            assert len(h) // 2 == len(head) // 2 + n, v["id"]
        else:
            assert head + "".join(tail.split()) == h, v["id"]


class Capture:
    def __init__(self):
        self.frames = []
        self.got = []

    def make(self, key, first_id=1, **kw):
        d = {"dgram_max": 1000, "dgram_frag": 100, "dgram_reasm": 1}
        d.update(kw)
        dg = Datagrams(Profile(d), key, first_id)
        dg.tx = lambda dst, buf, n, now, body=None: self.frames.append(
            (bytes(dst), bytes(buf[:n]) + (bytes(body) if body is not None else b""))) or OK
        dg.on_datagram = lambda src, ds, ss, data: self.got.append((bytes(src), ds, ss, bytes(data)))
        return dg


def test_datagram_py_writes_the_vectors():
    c = Capture()
    a = c.make(SRC, first_id=0x0102)
    a.send(DST, 7, b"hello", 0, ack=True, src_service=9)
    a = c.make(SRC, first_id=0xBEEF)
    a.send(DST, 1000, b"hi!", 0)
    a = c.make(SRC, first_id=1)
    a.send(DST, 5, b"", 0)
    a = c.make(SRC, first_id=7)
    a.send(DST, 80, bytes(i & 0xFF for i in range(250)), 0, ack=True, src_service=81)
    got = [tohex(p) for d, p in c.frames]
    assert got[0] == vec("data_single_ack")["hex"]
    assert got[1] == vec("data_no_ack")["hex"]
    assert got[2] == vec("data_empty")["hex"]
    assert got[4] == vec("data_frag_mid")["hex"] and got[5] == vec("data_frag_last")["hex"]
    assert all(d == DST for d, p in c.frames)


def test_datagram_py_reads_the_vectors_and_answers_with_them():
    c = Capture()
    b = c.make(DST)
    assert b.receive(SRC, unhex(vec("data_single_ack")["hex"]), 0)
    b.flush(0)
    assert c.got == [(SRC, 7, 9, b"hello")]
    assert [tohex(p) for d, p in c.frames] == [vec("ack_single")["hex"]]
    c.frames = []
    b.receive(SRC, unhex(vec("data_no_ack")["hex"]), 0)
    b.receive(SRC, unhex(vec("data_empty")["hex"]), 0)
    b.flush(0)
    assert c.got[1:] == [(SRC, 1000, 0, b"hi!"), (SRC, 5, 0, b"")] and c.frames == []
    # fragment 0 (built from the layout), then the last: fragment 1 missing
    f0 = dict(vec("data_frag_mid")["fields"])
    f0["index"] = 0
    b.receive(SRC, doc_data(f0, bytes(range(84))), 0)
    b.receive(SRC, unhex(vec("data_frag_last")["hex"]), 0)
    b.flush(0)
    assert [tohex(p) for d, p in c.frames] == [vec("ack_partial")["hex"]]
    c.frames = []
    b.receive(SRC, unhex(vec("data_frag_mid")["hex"]), 0)
    b.flush(0)
    assert c.got[-1] == (SRC, 80, 81, bytes(i & 0xFF for i in range(250)))
    assert len(c.frames) == 1 and c.frames[0][1][11:] == b"\x03\xe0"   # whole: full bitmap
    # ten fragments of 10 bytes (total 95), 3 and 6 missing
    c.frames = []
    f = {"flags": 1, "dst_service": 80, "src_service": 81, "id": 8, "count": 10, "stride": 10,
         "total": 95}
    for k in range(10):
        if k in (3, 6):
            continue
        f["index"] = k
        if k == 9:
            f["flags"] = 3
        b.receive(SRC, doc_data(f, bytes(5 if k == 9 else 10)), 0)
    b.flush(0)
    assert [tohex(p) for d, p in c.frames] == [vec("ack_ten_missing_3_6")["hex"]]


def test_refusals_are_the_vectors():
    c = Capture()
    busy = c.make(DST, dgram_reasm=0)
    busy.receive(SRC, unhex(vec("data_frag_last")["hex"]), 0)
    busy.flush(0)
    small = c.make(DST, dgram_max=200)
    small.receive(SRC, unhex(vec("data_frag_last")["hex"]), 0)
    small.flush(0)
    assert [tohex(p) for d, p in c.frames] == [vec("ack_refused_busy")["hex"],
                                              vec("ack_refused_too_big")["hex"]]
    assert c.got == []
