"""The emulated `espnow` module against the ESP-NOW medium (CPython, in
process), checked against MicroPython's documented API: peer registration
and its errors, the 250-byte limit, the 20-peer limit, unicast with a
radio-level ack, broadcast once registered, range and channel, loss, a full
receive buffer that drops although the sender saw an ack, irecv's reused
pair, peers_table, irq callbacks, aioespnow, bad input to the medium."""
import asyncio
import os
import socket
import struct
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blemu_harness import Medium  # noqa: E402

from host_tools.espnowemu import espnow as E  # noqa: E402
from host_tools.espnowemu.medium import mac_for  # noqa: E402

MOD = "host_tools.espnowemu.medium"
BCAST = b"\xff" * 6


def medium(topo, *args):
    return Medium(topo, *args, module=MOD)


def radio(m, name, **kw):
    r = E.ESPNow(medium=m.addr, name=name, **kw)
    r.active(True)
    return r


def recv_all(r, timeout_ms=300):
    out = []
    while True:
        mac, msg = r.recv(timeout_ms)
        if mac is None:
            return out
        out.append((bytes(mac), bytes(msg)))
        timeout_ms = 100


def test_constants_and_errors():
    assert E.MAX_DATA_LEN == 250 and E.MAX_TOTAL_PEER_NUM == 20 and E.KEY_LEN == 16
    with medium("a b @espnow\n") as m:
        a = radio(m, "a")
        b = radio(m, "b")
        try:
            mb = mac_for("b")
            assert b._wlan_mac() == mb
            with pytest.raises(OSError) as ei:
                a.send(mb, b"x")
            assert ei.value.args[1] == "ESP_ERR_ESPNOW_NOT_FOUND"
            a.add_peer(mb)
            with pytest.raises(OSError) as ei:
                a.add_peer(mb)
            assert ei.value.args[1] == "ESP_ERR_ESPNOW_EXIST"
            with pytest.raises(ValueError):
                a.send(mb, b"x" * 251)
            with pytest.raises(ValueError):
                a.add_peer(b"short")
            assert a.send(mb, b"y" * 250) is True
            assert recv_all(b) == [(a._wlan_mac(), b"y" * 250)]
            assert a.get_peer(mb)[0] == mb
            a.del_peer(mb)
            with pytest.raises(OSError) as ei:
                a.del_peer(mb)
            assert ei.value.args[1] == "ESP_ERR_ESPNOW_NOT_FOUND"
            for i in range(20):
                a.add_peer(bytes([2, 0, 0, 0, 0, i]))
            assert a.peer_count() == (20, 0)
            with pytest.raises(OSError) as ei:
                a.add_peer(bytes([2, 0, 0, 0, 1, 0]))
            assert ei.value.args[1] == "ESP_ERR_ESPNOW_FULL"
            a.active(False)
            with pytest.raises(OSError) as ei:
                a.send(mb, b"z")
            assert ei.value.args[1] == "ESP_ERR_ESPNOW_NOT_INIT"
        finally:
            a.active(False)
            b.active(False)


def test_range_broadcast_sync_status_and_channel():
    with medium("a b c @espnow\na d\n") as m:
        rs = {n: radio(m, n) for n in "abcd"}
        a = rs["a"]
        try:
            a.add_peer(BCAST)
            assert a.send(BCAST, b"hello") is True
            got = {n: recv_all(rs[n], 300) for n in "bcd"}
            assert got["b"] == [(a._wlan_mac(), b"hello")]
            assert got["c"] == [] and got["d"] == []      # c: 2 hops; d: a Wi-Fi edge, not ESP-NOW
            # unicast to a radio out of range: no ack
            a.add_peer(mac_for("c"))
            assert a.send(mac_for("c"), b"far") is False
            assert a.stats()[2] >= 1
            # another channel: b no longer hears a
            rs["b"]._set_channel(6)
            time.sleep(0.1)     # b's radio and a's reach the medium on different sockets
            a.add_peer(mac_for("b"))
            assert a.send(mac_for("b"), b"ch") is False
            rs["b"]._set_channel(1)
            time.sleep(0.1)     # b's radio and a's reach the medium on different sockets
            assert a.send(mac_for("b"), b"ch") is True
            assert recv_all(rs["b"]) == [(a._wlan_mac(), b"ch")]
            # a cut edge
            m.ctl("cut a b")
            assert a.send(mac_for("b"), b"cut") is False
            m.ctl("link a b")
            assert a.send(mac_for("b"), b"back") is True
        finally:
            for r in rs.values():
                r.active(False)


def test_full_receive_buffer_drops_after_the_ack():
    with medium("a b @espnow\n") as m:
        a = radio(m, "a")
        b = radio(m, "b")
        try:
            mb = mac_for("b")
            a.add_peer(mb)
            # the default buffer holds two 250-byte messages (526 bytes)
            assert b.config("rxbuf") == 526
            oks = [a.send(mb, bytes([i]) * 250) for i in range(5)]
            assert oks == [True] * 5                      # every one acked by b's radio
            time.sleep(0.2)
            got = recv_all(b)
            assert [g[1][0] for g in got] == [0, 1]       # only what fitted
            st = b.stats()
            assert st[3] == 5 and st[4] == 3              # rx_packets, dropped
            # a bigger buffer (effective at the next activation) holds more
            b.active(False)
            b.config(rxbuf=4 * 263)
            b.active(True)
            for i in range(4):
                assert a.send(mb, bytes([i]) * 250)
            assert len(recv_all(b)) == 4
        finally:
            a.active(False)
            b.active(False)


def test_irecv_reuses_its_pair_and_peers_table_grows_per_sender():
    with medium("a b c @espnow\n") as m:
        a, b, c = radio(m, "a"), radio(m, "b"), radio(m, "c")
        try:
            a.add_peer(mac_for("b"))
            c.add_peer(mac_for("b"))
            a.send(mac_for("b"), b"one")
            c.send(mac_for("b"), b"two")
            p1 = b.irecv(500)
            first = (bytes(p1[0]), bytes(p1[1]))
            p2 = b.irecv(500)
            assert p1 is p2                      # callee-owned, reused
            assert {first[1], bytes(p2[1])} == {b"one", b"two"}
            assert set(b.peers_table) == {mac_for("a"), mac_for("c")}
            assert b.peers_table[mac_for("a")][0] < 0
            assert b.irecv(0) == [None, None]
        finally:
            for r in (a, b, c):
                r.active(False)


def test_loss_is_seen_as_failed_sends():
    with medium("a b @espnow\n", "--loss", "0.5", "--retries", "0", "--seed", "3") as m:
        a, b = radio(m, "a"), radio(m, "b")
        try:
            a.add_peer(mac_for("b"))
            res = [a.send(mac_for("b"), b"%d" % i) for i in range(60)]
            got = recv_all(b)
            # 50 % frames and 50 % acks lost: ~25 % acked, ~50 % delivered
            assert 3 <= res.count(True) <= 30
            assert len(got) > res.count(True)
            assert 10 <= len(got) <= 50
        finally:
            a.active(False)
            b.active(False)


def test_irq_and_aioespnow():
    import importlib
    sys.path.insert(0, os.path.dirname(E.__file__))
    try:
        aio = importlib.import_module("aioespnow")
    finally:
        sys.path.pop(0)
    with medium("a b @espnow\n") as m:
        async def main():
            a = radio(m, "a")
            b = aio.AIOESPNow(medium=m.addr, name="b")
            b.active(True)
            seen = []
            b.irq(lambda e: seen.append(e.any()))
            a.add_peer(mac_for("b"))
            b.add_peer(mac_for("a"))
            a.send(mac_for("b"), b"ping", False)
            mac, msg = await asyncio.wait_for(b.airecv(), 3)
            assert bytes(msg) == b"ping" and seen and seen[0] is True
            assert await b.asend(mac_for("a"), b"pong") is True
            assert a.recv(500)[1] == b"pong"
            m.ctl("cut a b")
            assert await b.asend(mac_for("a"), b"lost") is False
            a.active(False)
            b.active(False)
        asyncio.run(main())


def test_medium_rejects_bad_input_and_injects():
    with medium("a b @espnow\n") as m:
        b = radio(m, "b")
        try:
            s = socket.create_connection(("127.0.0.1", m.port), timeout=5)
            s.sendall(struct.pack(">HB", 1 + 2, E.OP_HELLO) + b"\x01x")
            s.recv(100)
            # a send with a 300-byte message and one with no address: counted, not crashed
            s.sendall(E.frame(E.OP_SEND, struct.pack(">HB", 1, 1) + mac_for("b") + b"q" * 300))
            s.sendall(E.frame(E.OP_SEND, b"\x00"))
            time.sleep(0.2)
            st = m.ctl("stats")
            assert st["nodes"]["x"]["bad_messages"] == 2
            assert m.ctl("inject 020000000001 b 00ff")["ok"]
            assert b.recv(500) == [b"\x02\x00\x00\x00\x00\x01", b"\x00\xff"]
            s.close()
        finally:
            b.active(False)
