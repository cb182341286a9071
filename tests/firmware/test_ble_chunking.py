# snake.runtime.ble without a radio: ring buffer, advertisement format, chunking and
# reassembly through the real IRQ / Link code paths (a fake `bluetooth.BLE`
# object that behaves like NimBLE: truncates to MTU-3, runs out of tx
# buffers), link limit, who initiates. Runs under CPython and MicroPython.
import asyncio

from snake.runtime import ble
from snake.runtime.ble_cold import STAT_NAMES
from snake.profile import Profile
from fwtest import Lcg, counter_names_follow, pattern


def _stat(m, name):
    # BleManager.stats is a list indexed in STAT_NAMES order
    return m.stats[STAT_NAMES.index(name)]


def test_stat_indices_follow_the_names():
    # ble.py counts by its _S_* indices (const: only CPython keeps them as
    # names), ble_cold.STAT_NAMES names them in that order
    counter_names_follow(ble, "_S_", STAT_NAMES)

KEY_LO = bytes([0x10] * 32)
KEY_HI = bytes([0x20] * 32)
ADDR_LO = bytes([0xC1, 1, 1, 1, 1, 1])
ADDR_HI = bytes([0xC2, 2, 2, 2, 2, 2])


class FakeBle:
    """Just enough of bluetooth.BLE for a BleManager, NimBLE-like limits."""

    def __init__(self, mtu=23, txbuf=6):
        self.mtu = mtu
        self.txbuf = txbuf
        self.inflight = 0
        self.peer = None          # the other FakeBle (the air)
        self.mgr = None
        self.values = {}
        self.queue = []           # packets on the air towards self.peer
        self.chunks = []          # lengths actually sent
        self.truncated = 0
        self.enomem = 0
        self.disconnected = []
        self.connects = []
        self.adv = []
        self.scans = []
        self.mtu_req = []

    # GAP
    def gap_advertise(self, interval_us, adv_data=None, *a, **kw):
        self.adv.append((interval_us, adv_data))

    def gap_scan(self, duration_ms, *a):
        self.scans.append(duration_ms)

    def gap_connect(self, addr_type, addr=None, *a):
        self.connects.append((addr_type, None if addr is None else bytes(addr)))

    def gap_disconnect(self, conn):
        self.disconnected.append(conn)
        return True

    # GATT
    def gatts_read(self, h):
        return self.values.get(h, b"")

    def gattc_exchange_mtu(self, conn):
        self.mtu_req.append(conn)

    def gattc_discover_services(self, conn, uuid=None):
        pass

    def gattc_discover_characteristics(self, conn, start, end, uuid=None):
        pass

    def _tx(self, kind, data):
        if self.inflight >= self.txbuf:
            self.enomem += 1
            raise OSError(12)
        b = bytes(data)
        if len(b) > self.mtu - 3:
            self.truncated += 1
            b = b[:self.mtu - 3]      # what NimBLE does
        self.chunks.append(len(b))
        self.inflight += 1
        self.queue.append((kind, b))

    def gattc_write(self, conn, h, data, mode=0):
        self._tx("w", data)

    def gatts_notify(self, conn, h, data=None):
        self._tx("n", data)

    def air(self, budget):
        """Deliver up to `budget` packets to the peer's IRQ handler."""
        k = 0
        while self.queue and k < budget:
            kind, b = self.queue.pop(0)
            self.inflight -= 1
            pm = self.peer.mgr
            if kind == "w":
                self.peer.values[pm.rx_handle] = b
                pm._irq(3, (0, pm.rx_handle))
            else:
                pm._irq(18, (0, 99, memoryview(b)))
            k += 1
        return k


def profile(links=4, queue=4, frame_max=1024):
    return Profile({"ble": True, "ble_links": links, "ble_queue": queue, "frame_max": frame_max})


def manager(key, fake, links=4, queue=4, addr=ADDR_LO):
    got = []
    m = ble.BleManager(profile(links, queue), key, got.append, ble=fake)
    m.rx_handle = 12
    m.tx_handle = 14
    m._uuids = ("svc", "rx", "tx")
    m.addr = addr
    m.running = True
    fake.mgr = m
    return m, got


def connected_pair(mtu, txbuf=6, queue=4):
    """A central (KEY_LO) and a peripheral (KEY_HI) manager with one UP link each."""
    fc = FakeBle(mtu, txbuf)
    fp = FakeBle(mtu, txbuf)
    fc.peer = fp
    fp.peer = fc
    mc, links_c = manager(KEY_LO, fc, queue=queue, addr=ADDR_LO)
    mp, links_p = manager(KEY_HI, fp, queue=queue, addr=ADDR_HI)
    # peripheral: a central connects, MTU exchanged
    mp._irq(1, (0, 1, memoryview(ADDR_LO)))
    mp._irq(21, (0, mtu))
    mp.step()
    # central: our gap_connect succeeded, then MTU, discovery
    mc.p_active = True
    mc._irq(7, (0, 1, memoryview(ADDR_HI)))
    mc.step()
    assert fc.mtu_req == [0]
    mc._irq(21, (0, mtu))
    mc.step()
    mc._irq(9, (0, 10, 15, "svc"))
    mc._irq(10, (0, 0))
    mc.step()
    mc._irq(11, (0, 11, 12, 0x0C, "rx"))
    mc._irq(11, (0, 13, 99, 0x12, "tx"))
    mc._irq(12, (0, 0))
    mc.step()
    assert len(links_c) == 1 and len(links_p) == 1
    return fc, fp, mc, mp, links_c[0], links_p[0]


async def _radio(fakes, stop):
    while not stop:
        for f in fakes:
            f.air(3)
        await asyncio.sleep(0)


async def _pump_stream(mtu, total, seed, txbuf=6):
    fc, fp, mc, mp, lc, lp = connected_pair(mtu, txbuf)
    assert lc.outbound and not lp.outbound
    assert lc.link_type == 4 and lp.link_type == 4
    data_c = pattern(total, seed)
    data_p = pattern(total, seed + 1)
    stop = []
    radio = asyncio.create_task(_radio((fc, fp), stop))

    async def sender(link, data):
        r = Lcg(seed + 7)
        i = 0
        while i < total:
            n = 1 + r.next(700)
            if n > total - i:
                n = total - i
            buf = bytearray(n)
            buf[0:n] = data[i:i + n]
            await link.send(buf, n)
            i += n

    async def receiver(link, out):
        r = Lcg(seed + 11)
        buf = bytearray(600)
        mv = memoryview(buf)
        while len(out) < total:
            want = 1 + r.next(600)
            k = await link.recv_into(mv[0:want])
            if k == 0:
                break
            out.extend(buf[0:k])

    got_p = bytearray()
    got_c = bytearray()
    t1 = asyncio.create_task(sender(lc, data_c))
    t2 = asyncio.create_task(sender(lp, data_p))
    t3 = asyncio.create_task(receiver(lp, got_p))
    t4 = asyncio.create_task(receiver(lc, got_c))
    try:
        for t in (t1, t2, t3, t4):
            await asyncio.wait_for(t, 10)
    except asyncio.TimeoutError:
        pass        # lost bytes: the comparison below reports it
    finally:
        stop.append(1)
        for t in (t1, t2, t3, t4):
            t.cancel()
    await radio
    return fc, fp, mc, mp, data_c, data_p, got_c, got_p


def _stream_at(mtu, total, seed):
    fc, fp, mc, mp, data_c, data_p, got_c, got_p = asyncio.run(_pump_stream(mtu, total, seed))
    assert got_p == data_c, "central->peripheral stream differs at MTU %d" % mtu
    assert got_c == data_p, "peripheral->central stream differs at MTU %d" % mtu
    # nothing was cut by the stack, and pieces were as big as allowed
    assert fc.truncated == 0 and fp.truncated == 0
    assert max(fc.chunks) == mtu - 3 and max(fp.chunks) == mtu - 3
    assert sum(fc.chunks) == total and sum(fp.chunks) == total
    return fc, fp, mc, mp


def test_ring_wrap_and_all_or_nothing():
    r = ble.Ring(10)
    assert r.put(b"abcdef")
    out = bytearray(4)
    assert r.get_into(out, 4) == 4 and out == bytearray(b"abcd")
    assert r.put(b"ghijkl")            # wraps
    assert r.count() == 8
    assert not r.put(b"xyz")           # 3 > 2 free: nothing written
    assert r.count() == 8
    assert r.put(b"mn")                # exactly full
    assert r.count() == 10
    big = bytearray(20)
    assert r.get_into(memoryview(big), 20) == 10
    assert big[0:10] == bytearray(b"efghijklmn")
    assert r.get_into(big, 5) == 0
    for i in range(50):                # positions keep wrapping modulo 2*size
        assert r.put(bytes([i, i + 1, i + 2]))
        assert r.get_into(out, 3) == 3 and out[0:3] == bytearray([i, i + 1, i + 2])


def test_adv_payload_and_prefix():
    adv = ble.adv_payload(KEY_HI, 3)
    assert len(adv) == 31              # fits a legacy advertisement
    off = ble.find_prefix(adv)
    assert off == 23 and adv[off:off + 8] == KEY_HI[0:8] and adv[off - 1] == 3
    # other AD structures first: still found
    other = b"\x05\x09abcd" + adv[3:]
    assert ble.find_prefix(other) == 6 + 20
    # another service's data, truncated lengths, zero padding: not found, no exception
    wrong = bytearray(adv)
    wrong[10] ^= 1
    assert ble.find_prefix(wrong) == -1
    assert ble.find_prefix(b"\x02\x01\x06\x1b\x21" + ble.SVC_UUID_LE[0:5]) == -1
    assert ble.find_prefix(b"\x02\x01") == -1
    assert ble.find_prefix(b"\x00\x00\x00") == -1
    assert ble.find_prefix(b"") == -1
    assert ble.find_prefix(b"\xff\x21") == -1


def test_lower_key_initiates():
    f = FakeBle()
    m, _ = manager(KEY_LO, f, addr=ADDR_LO)
    m._irq(5, (1, memoryview(ADDR_HI), 0, -60, memoryview(ble.adv_payload(KEY_HI, 4))))
    m.step()
    assert f.connects == [(1, ADDR_HI)], f.connects
    assert m.p_active
    f2 = FakeBle()
    m2, _ = manager(KEY_HI, f2, addr=ADDR_HI)
    m2._irq(5, (1, memoryview(ADDR_LO), 0, -60, memoryview(ble.adv_payload(KEY_LO, 4))))
    m2.step()
    assert f2.connects == []           # the higher key only advertises
    # non-connectable advertisement or a full peer: ignored
    f3 = FakeBle()
    m3, _ = manager(KEY_LO, f3, addr=ADDR_LO)
    m3._irq(5, (1, memoryview(ADDR_HI), 3, -60, memoryview(ble.adv_payload(KEY_HI, 4))))
    m3._irq(5, (1, memoryview(bytes([0xC5, 5, 5, 5, 5, 5])), 0, -60,
                memoryview(ble.adv_payload(KEY_HI, 0))))
    m3.step()
    assert f3.connects == []
    # both advertise and scan at once
    assert f3.adv and f3.adv[-1][0] == ble.ADV_INTERVAL_US and f3.scans == [0]


def test_equal_prefix_breaks_tie_by_address():
    f = FakeBle()
    m, _ = manager(KEY_LO, f, addr=ADDR_HI)
    same = bytes(KEY_LO[0:8]) + bytes([0xFF] * 24)
    m._irq(5, (1, memoryview(ADDR_LO), 0, -60, memoryview(ble.adv_payload(same, 4))))
    m.step()
    assert f.connects == []            # our address is higher: the peer initiates
    f2 = FakeBle()
    m2, _ = manager(KEY_LO, f2, addr=ADDR_LO)
    m2._irq(5, (1, memoryview(ADDR_HI), 0, -60, memoryview(ble.adv_payload(same, 4))))
    m2.step()
    assert f2.connects == [(1, ADDR_HI)]


def test_stream_mtu_23():
    _stream_at(23, 3000, 1)


def test_stream_mtu_185():
    _stream_at(185, 12000, 2)


def test_stream_mtu_512():
    fc, fp, mc, mp = _stream_at(512, 20000, 3)
    # the stack ran out of tx buffers and the link waited instead of failing
    assert fc.enomem > 0 and _stat(mc, "retries") > 0
    assert _stat(mc, "send_stall") == 0 and _stat(mc, "overflow") == 0


def test_overflow_drops_the_link():
    fc, fp, mc, mp, lc, lp = connected_pair(247, queue=1)
    cap = lp.slot.size
    # the reader never reads: deliver more than the ring holds
    async def flood():
        sent = 0
        while sent <= cap + 244:
            await lc.send(bytearray(244), 244)
            fc.air(10)
            sent += 244
    asyncio.run(flood())
    assert _stat(mp, "overflow") == 1
    mv = memoryview(bytearray(64))
    assert asyncio.run(lp.recv_into(mv)) == 0      # a stream with a hole ends
    mp.step()
    assert fp.disconnected == [0]


def test_link_limit_refuses_and_stops_advertising():
    f = FakeBle()
    m, got = manager(KEY_HI, f, links=2)
    m.step()
    assert f.adv[-1][0] == ble.ADV_INTERVAL_US
    m._irq(1, (0, 1, memoryview(bytes([0xC3, 0, 0, 0, 0, 1]))))
    m._irq(1, (1, 1, memoryview(bytes([0xC3, 0, 0, 0, 0, 2]))))
    m._irq(1, (2, 1, memoryview(bytes([0xC3, 0, 0, 0, 0, 3]))))
    assert f.disconnected == [2] and _stat(m, "refused_full") == 1
    m._irq(21, (0, 100))
    m._irq(21, (1, 100))
    nadv = len(f.adv)
    m.step()
    assert len(got) == 2
    # full: the stack ended advertising when the central connected, and the
    # manager does not restart it
    assert len(f.adv) == nadv and not m.advertising
    # full with an outgoing link too: advertising is stopped explicitly
    f4 = FakeBle()
    m4, got4 = manager(KEY_LO, f4, links=1, addr=ADDR_LO)
    m4.step()
    m4._irq(5, (1, memoryview(ADDR_HI), 0, -60, memoryview(ble.adv_payload(KEY_HI, 4))))
    m4.step()
    assert f4.connects and f4.adv[-1][0] is None    # the pending attempt fills the node
    # a full node does not initiate either
    m._irq(5, (1, memoryview(bytes([0xC9, 9, 9, 9, 9, 9])), 0, -60,
               memoryview(ble.adv_payload(bytes([0xFF] * 32), 4))))
    m.step()
    assert f.connects == []
    # one link lost: slot freed, advertising again
    m._irq(2, (1, 1, memoryview(bytes([0xC3, 0, 0, 0, 0, 2]))))
    mv = memoryview(bytearray(8))
    assert asyncio.run(got[1].recv_into(mv)) == 0
    m.step()
    # the freed slot goes to the peer heard while full (we hold the lower key)
    assert f.connects == [(1, bytes([0xC9, 9, 9, 9, 9, 9]))] and m._used() == 2
    m._irq(8, (0xFFFF, 0xFF, memoryview(bytes(6))))   # that attempt fails
    m.step()
    assert m._used() == 1 and f.adv[-1][0] == ble.ADV_INTERVAL_US
    try:
        asyncio.run(got[1].send(bytearray(4), 4))
        raised = False
    except OSError:
        raised = True
    assert raised


def test_failed_connect_backs_off_then_retries():
    f = FakeBle()
    m, _ = manager(KEY_LO, f, addr=ADDR_LO)
    adv = memoryview(ble.adv_payload(KEY_HI, 4))
    m._irq(5, (1, memoryview(ADDR_HI), 0, -60, adv))
    m.step()
    assert len(f.connects) == 1
    m._irq(8, (0xFFFF, 0xFF, memoryview(bytes(6))))   # attempt failed
    m._irq(5, (1, memoryview(ADDR_HI), 0, -60, adv))
    m.step()
    assert _stat(m, "connect_fail") == 1 and not m.p_active
    m.step()
    assert len(f.connects) == 1        # backing off
    m.c_wait[0] = m.c_seen[0]          # back-off elapsed
    m.step()
    assert len(f.connects) == 2


def test_closed_link_disconnects_and_duplicate_central_replaces_old():
    fc, fp, mc, mp, lc, lp = connected_pair(100)
    lp.close()
    mp.step()
    assert fp.disconnected == [0]
    mv = memoryview(bytearray(8))
    assert asyncio.run(lp.recv_into(mv)) == 0
    # the same central connects again on another handle before the old one ended
    mp._irq(1, (3, 1, memoryview(ADDR_LO)))
    assert _stat(mp, "duplicate") == 1
