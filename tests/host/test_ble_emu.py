"""The emulated `bluetooth` module against the radio medium (CPython, in
process): connection set-up, MTU exchange, discovery, write / notify in both
directions, truncation at MTU-3 and at the value buffer, disconnect events,
connection limit, stack busy rules, range, loss, bad input."""
import asyncio
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blemu_harness import Medium, PY, ROOT  # noqa: E402

from host_tools.blemu import bluetooth as bt  # noqa: E402

SVC = bt.UUID("a3c8f4e0-6b1d-4e52-9c7a-0d5e2f8b1a60")
RX = bt.UUID("a3c8f4e0-6b1d-4e52-9c7a-0d5e2f8b1a61")
TX = bt.UUID("a3c8f4e0-6b1d-4e52-9c7a-0d5e2f8b1a62")
SERVICES = ((SVC, ((RX, bt.FLAG_WRITE_NO_RESPONSE | bt.FLAG_WRITE), (TX, bt.FLAG_NOTIFY))),)


class Rec:
    """An IRQ handler that copies event data (memoryviews die with the call)."""

    def __init__(self, radio):
        self.ev = []
        self.radio = radio
        radio.irq(self)

    def __call__(self, event, data):
        self.ev.append((event, tuple(bytes(x) if isinstance(x, memoryview) else x for x in data)))

    def of(self, event):
        return [d for e, d in self.ev if e == event]


async def until(cond, timeout=3.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        await asyncio.sleep(0.01)
    return cond()


def radios(medium, *names, **kw):
    out = []
    for n in names:
        r = bt.Radio(medium.addr, n, **kw)
        r.active(True)
        out.append((r, Rec(r)))
    return out


def close_all(rs):
    for r, _ in rs:
        r.active(False)


async def connect(central, crec, periph, prec):
    """central connects to periph (which advertises); returns (hc, hp)."""
    periph.gap_advertise(100000, b"\x02\x01\x06")
    n0 = len(crec.of(7))
    central.gap_connect(1, periph.config("mac")[1])
    assert await until(lambda: len(crec.of(7)) > n0)
    hc = crec.of(7)[-1][0]
    assert await until(lambda: prec.of(1))
    hp = prec.of(1)[-1][0]
    return hc, hp


def test_uuid_forms():
    assert bt.UUID(0x180D) == bt.UUID(b"\x0d\x18")
    assert bt.UUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E") == bt.UUID("6e400001b5a3f393e0a9e50e24dcca9e")
    assert bytes(bt.UUID("6E400001-B5A3-F393-E0A9-E50E24DCCA9E"))[0] == 0x9E   # little-endian
    assert repr(bt.UUID(0x2A37)) == "UUID(0x2a37)"
    assert bt.UUID(0x2A37) != bt.UUID(0x2A38)
    for bad in (0x10000, "xyz", b"\x01\x02\x03"):
        with pytest.raises(ValueError):
            bt.UUID(bad)


def test_connect_mtu_discovery_write_notify_and_truncation():
    async def run(m):
        (a, ra), (b, rb) = radios(m, "a", "b")
        try:
            a.config(mtu=300)
            b.config(mtu=150)
            ((rx, tx),) = b.gatts_register_services(SERVICES)
            a.gatts_register_services(SERVICES)
            assert a.config("mac")[1] != b.config("mac")[1]
            hc, hp = await connect(a, ra, b, rb)
            assert rb.of(1)[-1][2] == a.config("mac")[1]       # peer address reported
            # MTU: min(300, 150, medium cap 200) on both sides
            a.gattc_exchange_mtu(hc)
            assert await until(lambda: ra.of(21) and rb.of(21))
            assert ra.of(21)[-1] == (hc, 150) and rb.of(21)[-1] == (hp, 150)
            # discovery of the peer's table
            a.gattc_discover_services(hc, SVC)
            assert await until(lambda: ra.of(10))
            (_, start, end, uuid), = ra.of(9)
            assert uuid == SVC and start < rx < tx <= end
            a.gattc_discover_characteristics(hc, start, end)
            assert await until(lambda: ra.of(12))
            chars = {u: (vh, props) for (_, d, vh, props, u) in ra.of(11)}
            assert chars[RX][0] == rx and chars[TX][0] == tx
            assert chars[RX][1] & bt.FLAG_WRITE_NO_RESPONSE and chars[TX][1] & bt.FLAG_NOTIFY
            # central -> peripheral write without response: default buffer is 20 bytes
            a.gattc_write(hc, rx, bytes(range(100)))
            assert await until(lambda: rb.of(3))
            assert rb.of(3)[-1] == (hp, rx)
            assert b.gatts_read(rx) == bytes(range(20))
            # grown buffer: a full MTU-3 payload, longer is truncated like NimBLE does
            b.gatts_set_buffer(rx, 512)
            a.gattc_write(hc, rx, bytes(range(147)))
            assert await until(lambda: len(rb.of(3)) == 2)
            assert b.gatts_read(rx) == bytes(range(147))
            a.gattc_write(hc, rx, bytes(200))
            assert await until(lambda: len(rb.of(3)) == 3)
            assert len(b.gatts_read(rx)) == 147 and a.stats["truncated"] == 1
            # write with response raises _IRQ_GATTC_WRITE_DONE
            a.gattc_write(hc, rx, b"ack?", 1)
            assert await until(lambda: ra.of(17))
            assert ra.of(17)[-1] == (hc, rx, 0)
            # peripheral -> central notify, explicit data and local value
            b.gatts_notify(hp, tx, b"hello")
            b.gatts_write(tx, b"value")
            b.gatts_notify(hp, tx)
            assert await until(lambda: len(ra.of(18)) == 2)
            assert ra.of(18) == [(hc, tx, b"hello"), (hc, tx, b"value")]
            b.gatts_notify(hp, tx, bytes(300))
            assert await until(lambda: len(ra.of(18)) == 3)
            assert len(ra.of(18)[-1][2]) == 147 and b.stats["truncated"] == 1
            # indicate: the server hears the acknowledgement
            b.gatts_indicate(hp, tx)
            assert await until(lambda: rb.of(20) and ra.of(19))
            st = m.stats()
            assert st["nodes"]["a"]["conns"] == [{"handle": hc, "peer": "b", "role": "central", "mtu": 150}]
            assert st["links"] == [["a", "b"]]
        finally:
            close_all([(a, ra), (b, rb)])

    with Medium("a b\n", "--mtu", 200, "--latency-ms", 2) as m:
        asyncio.run(run(m))


def test_append_buffer_and_memoryview_lifetime():
    async def run(m):
        (a, ra), (b, rb) = radios(m, "a", "b")
        kept = []
        try:
            ((rx, tx),) = b.gatts_register_services(SERVICES)
            b.gatts_set_buffer(rx, 8, True)
            hc, hp = await connect(a, ra, b, rb)
            for part in (b"abc", b"def", b"ghijk"):
                a.gattc_write(hc, rx, part)
            assert await until(lambda: len(rb.of(3)) == 3)
            assert b.gatts_read(rx) == b"abcdefgh"     # appended, capped at 8
            assert b.gatts_read(rx) == b""             # cleared by the read
            # notify_data is only valid during the handler
            a.irq(lambda e, d: kept.append(d[2]) if e == 18 else None)
            b.gatts_notify(hp, tx, b"live")
            assert await until(lambda: kept)
            assert bytes(kept[0]) != b"live"
            with pytest.raises(TypeError):
                kept[0][0] = 1                          # read-only view
        finally:
            close_all([(a, ra), (b, rb)])

    with Medium("a b\n") as m:
        asyncio.run(run(m))


def test_scan_range_advertising_rules_and_busy_errors():
    async def run(m):
        (a, ra), (b, rb), (c, rc) = radios(m, "a", "b", "c")
        try:
            b.gap_advertise(50000, b"\x02\x01\x06\x03\xff\x01\x02", resp_data=b"\x04\x09bbb")
            a.gap_advertise(50000, b"\x02\x01\x06")
            c.gap_scan(0, 100000, 50000, True)
            with pytest.raises(OSError) as e:
                c.gap_scan(0)
            assert e.value.args[0] == 114                      # EALREADY
            assert await until(lambda: len(rc.of(5)) >= 4)
            addrs = {d[1] for d in rc.of(5)}
            assert addrs == {b.config("mac")[1]}               # a is out of c's range
            types = {d[2] for d in rc.of(5)}
            assert types == {0, 4}                             # ADV_IND + SCAN_RSP (active scan)
            assert {d[4] for d in rc.of(5) if d[2] == 4} == {b"\x04\x09bbb"}
            with pytest.raises(OSError) as e:
                b.gatts_register_services(SERVICES)
            assert e.value.args[0] == 16                       # EBUSY while advertising
            with pytest.raises(OSError):
                b.gap_advertise(100000, bytes(32))             # > 31 bytes
            # gap_connect stops the scan (SCAN_DONE) and blocks a new scan
            n5 = len(rc.of(5))
            c.gap_connect(1, b.config("mac")[1])
            with pytest.raises(OSError) as e:
                c.gap_scan(0)
            assert e.value.args[0] == 16
            with pytest.raises(OSError) as e:
                c.gap_connect(1, b.config("mac")[1])
            assert e.value.args[0] == 114
            assert await until(lambda: rc.of(6) and rc.of(7))
            assert len(rc.of(5)) <= n5 + 2
            # b's connectable advertising ended with the connection: a no longer hears it
            a.gap_scan(0)
            await asyncio.sleep(0.4)
            assert not [d for d in ra.of(5) if d[1] == b.config("mac")[1]]
            # connecting to a radio out of range times out with the documented event
            a.gap_scan(None)
            assert await until(lambda: ra.of(6))
            c.gap_advertise(50000, b"\x02\x01\x06")
            a.gap_connect(1, c.config("mac")[1], 300)
            assert await until(lambda: ra.of(8), 2.0)
            assert ra.of(8)[-1] == (0xFFFF, 0xFF, bytes(6))
            assert not ra.of(7)
            # cancelling an attempt raises PERIPHERAL_DISCONNECT too
            a.gap_connect(1, c.config("mac")[1], 5000)
            a.gap_connect(None)
            assert await until(lambda: len(ra.of(8)) == 2)
        finally:
            close_all([(a, ra), (b, rb), (c, rc)])

    with Medium("a b c\n") as m:
        asyncio.run(run(m))


def test_disconnect_events_and_closed_connection_errors():
    async def run(m):
        (a, ra), (b, rb) = radios(m, "a", "b")
        try:
            ((rx, tx),) = b.gatts_register_services(SERVICES)
            hc, hp = await connect(a, ra, b, rb)
            assert a.gap_disconnect(hc) is True
            assert await until(lambda: ra.of(8) and rb.of(2))
            assert ra.of(8)[-1] == (hc, 1, b.config("mac")[1])
            assert rb.of(2)[-1] == (hp, 1, a.config("mac")[1])
            assert a.gap_disconnect(hc) is False
            for call in (lambda: a.gattc_write(hc, rx, b"x"), lambda: b.gatts_notify(hp, tx, b"x"),
                         lambda: a.gattc_exchange_mtu(hc)):
                with pytest.raises(OSError) as e:
                    call()
                assert e.value.args[0] == 107                  # ENOTCONN
            # out of range: both sides see the link drop after the supervision timeout
            hc, hp = await connect(a, ra, b, rb)
            t0 = time.monotonic()
            m.ctl("cut a b")
            assert await until(lambda: len(ra.of(8)) == 2 and len(rb.of(2)) == 2, 3.0)
            assert time.monotonic() - t0 >= 0.25
            b.gap_advertise(50000, b"\x02\x01\x06")
            a.gap_connect(1, b.config("mac")[1], 300)
            assert await until(lambda: len(ra.of(8)) == 3)     # no connection while out of range
            assert ra.of(8)[-1][0] == 0xFFFF
            m.ctl("link a b")
            a.gap_connect(1, b.config("mac")[1], 2000)
            assert await until(lambda: len(ra.of(7)) == 3)
            # a radio that goes away: its peer sees a disconnect
            b.active(False)
            assert await until(lambda: len(ra.of(8)) == 4, 3.0)
        finally:
            close_all([(a, ra), (b, rb)])

    with Medium("a b\n", "--supervision-ms", 300) as m:
        asyncio.run(run(m))


def test_connection_limit():
    async def run(m):
        rs = radios(m, "hub", "s1", "s2", "s3", maxconn=2)
        (hub, rh), (s1, r1), (s2, r2), (s3, r3) = rs
        try:
            hub.gap_advertise(50000, b"\x02\x01\x06")
            for i, (s, r) in enumerate(((s1, r1), (s2, r2))):
                s.gap_connect(1, hub.config("mac")[1])
                assert await until(lambda: len(r.of(7)) == 1)
                if i == 0:
                    hub.gap_advertise(50000)                   # re-advertise after the first
            # the hub is full: it cannot advertise connectable, and a third central times out
            with pytest.raises(OSError) as e:
                hub.gap_advertise(50000)
            assert e.value.args[0] == 12
            s3.gap_connect(1, hub.config("mac")[1], 400)
            assert await until(lambda: r3.of(8), 2.0)
            assert not r3.of(7)
            # nor can the full hub connect out
            s3.gap_advertise(50000, b"\x02\x01\x06")
            with pytest.raises(OSError) as e:
                hub.gap_connect(1, s3.config("mac")[1])
            assert e.value.args[0] == 12
            assert len(m.stats()["nodes"]["hub"]["conns"]) == 2
        finally:
            close_all(rs)

    with Medium("s1 hub s2\nhub s3\n") as m:
        asyncio.run(run(m))


def test_tx_buffers_run_out_then_recover():
    async def run(m):
        (a, ra), (b, rb) = radios(m, "a", "b", txbuf=3)
        try:
            ((rx, tx),) = b.gatts_register_services(SERVICES)
            hc, hp = await connect(a, ra, b, rb)
            for i in range(3):
                b.gatts_notify(hp, tx, bytes([i]))
            with pytest.raises(OSError) as e:
                b.gatts_notify(hp, tx, b"x")
            assert e.value.args[0] == 12                       # ENOMEM
            assert await until(lambda: len(ra.of(18)) == 3)
            await asyncio.sleep(0.05)
            b.gatts_notify(hp, tx, b"again")                   # buffers came back
            assert await until(lambda: len(ra.of(18)) == 4)
            assert [d[2] for d in ra.of(18)] == [b"\x00", b"\x01", b"\x02", b"again"]
        finally:
            close_all([(a, ra), (b, rb)])

    with Medium("a b\n", "--latency-ms", 50) as m:
        asyncio.run(run(m))


def test_loss_is_retransmitted_in_order():
    async def run(m):
        (a, ra), (b, rb) = radios(m, "a", "b", txbuf=64)
        try:
            ((rx, tx),) = b.gatts_register_services(SERVICES)
            hc, hp = await connect(a, ra, b, rb)
            sent = 0
            while sent < 200:
                try:
                    b.gatts_notify(hp, tx, struct.pack(">H", sent))
                    sent += 1
                except OSError:
                    await asyncio.sleep(0.01)
            assert await until(lambda: len(ra.of(18)) == 200, 10.0)
            assert [struct.unpack(">H", d[2])[0] for d in ra.of(18)] == list(range(200))
            g = m.stats()["global"]
            assert g.get("retransmissions", 0) > 50
        finally:
            close_all([(a, ra), (b, rb)])

    with Medium("a b\n", "--loss", 0.4, "--conn-interval-ms", 2, "--max-retries", 60) as m:
        asyncio.run(run(m))


def test_medium_survives_bad_clients_and_rejects_duplicate_names():
    async def run(m):
        (a, ra), = radios(m, "a")
        try:
            with pytest.raises(OSError):
                bt.Radio(m.addr, "a").active(True)             # name taken
            s = socket.create_connection(("127.0.0.1", m.port))
            s.sendall(b"\x00\x00\x00garbage")
            s.settimeout(3)
            d = s.recv(1000)
            assert d[2] == 0x8F                                # ERROR, then closed
            s.close()
            s = socket.create_connection(("127.0.0.1", m.port))
            s.sendall(struct.pack(">HB", 3, 1) + b"zz" + struct.pack(">HB", 3, 12) + b"\x00\x01")
            s.close()                                          # short WRITE: counted, not fatal
            await asyncio.sleep(0.2)
            assert m.stats()["ok"] is True
            assert m.proc.poll() is None
        finally:
            close_all([(a, ra)])

    with Medium("a b\n") as m:
        asyncio.run(run(m))
    with pytest.raises(OSError):
        bt.Radio("127.0.0.1:1", "x").active(True)             # no medium there


def test_radio_without_medium_configured(monkeypatch):
    monkeypatch.delenv("SNAKEMESH_BLE_MEDIUM", raising=False)
    monkeypatch.delenv("SNAKEMESH_BLE_NAME", raising=False)
    r = bt.Radio()
    with pytest.raises(OSError) as e:
        r.active(True)
    assert "SNAKEMESH_BLE_MEDIUM" in str(e.value)
    assert r.active() is False
    with pytest.raises(OSError):
        r.gap_scan(0)                                          # not active: ENODEV


def test_medium_cli_errors_are_one_line():
    p = subprocess.run([PY, "-m", "host_tools.blemu.medium", "--topology", "/nonexistent/t.txt"],
                       cwd=ROOT, capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and p.stderr.startswith("error: cannot read topology")
    assert "Traceback" not in p.stderr
    p = subprocess.run([PY, "-m", "host_tools.blemu.medium", "--topology", __file__, "--mtu", "1000"],
                       cwd=ROOT, capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "--mtu" in p.stderr and "Traceback" not in p.stderr


def test_topology_tags():
    from host_tools.blemu.medium import load_topology
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("# comment\na b c\n@wifi c d\n@ble d e\n\nb b\n")
    try:
        t = load_topology(f.name)
    finally:
        os.unlink(f.name)
    assert t["a"] == {"b"} and t["b"] == {"a", "c"} and t["c"] == {"b"}
    assert t["d"] == {"e"} and t["e"] == {"d"}
