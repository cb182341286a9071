# Figure 10's driver (MicroPython unix port): two link managers of one radio
# kind in this process, each on its own emulated radio (host_tools/blemu or
# host_tools/espnowemu) attached to a running medium, with the firmware's
# own transport code (snake.runtime.ble / espnow_port). Once the link is up:
#   rtt   64 bytes a -> b, b echoes them, 30 times: the link's round trip
#   tput  BYTES bytes a -> b as fast as the link takes them: bytes/s at b,
#         from its first byte to its last
# Prints one JSON line: {"rtt_ms": [...], "bytes": n, "ms": t, "snapshot": {...}}.
#
#   micropython mp_radio_link.py ROOT ble|espnow MEDIUM BYTES RING
import sys
import json

ROOT = sys.argv[1]
KIND = sys.argv[2]
MEDIUM = sys.argv[3]
NBYTES = int(sys.argv[4])
RING = int(sys.argv[5])
sys.path.insert(0, ROOT + ("/host_tools/blemu" if KIND == "ble" else "/host_tools/espnowemu"))
sys.path.insert(0, ROOT + "/firmware")

import asyncio
from snake.profile import Profile
from snake.platform import ticks_ms, ticks_diff

KEYS = (bytes([0x10] * 32), bytes([0x20] * 32))
links = [None, None]


def make(i, name):
    def on_link(link):
        links[i] = link
    if KIND == "ble":
        import bluetooth
        from snake.runtime import ble
        prof = Profile({"ble": True, "ble_links": 1, "ble_ring": RING})
        radio = bluetooth.Radio(MEDIUM, name)
        radio.active(True)
        return ble.BleManager(prof, KEYS[i], on_link, ble=radio)
    import espnow
    from snake.runtime import espnow_port
    prof = Profile({"espnow": True, "espnow_links": 1, "espnow_ring": RING})
    return espnow_port.EspNowManager(prof, KEYS[i], on_link, espnow.ESPNow(medium=MEDIUM, name=name), None)


async def read_exact(link, mv, n):
    got = 0
    while got < n:
        k = await link.recv_into(mv[got:n])
        if k == 0:
            raise OSError("link closed")
        got += k


async def main():
    mgrs = [make(0, "a"), make(1, "b")]
    for m in mgrs:
        m.start()
    t0 = ticks_ms()
    while (links[0] is None or links[1] is None) and ticks_diff(ticks_ms(), t0) < 20000:
        await asyncio.sleep(0.05)
    if links[0] is None or links[1] is None:
        print(json.dumps({"error": "no link within 20 s"}))
        return
    a, b = links
    buf = bytearray(64)
    rb = bytearray(2048)
    mv = memoryview(rb)

    async def echo():
        while True:
            await read_exact(b, mv, 64)
            await b.send(rb, 64)
    et = asyncio.create_task(echo())
    rtts = []
    for i in range(30):
        buf[0] = i
        t = ticks_ms()
        await a.send(buf, 64)
        await read_exact(a, memoryview(bytearray(64)), 64)
        rtts.append(ticks_diff(ticks_ms(), t))
    et.cancel()
    await asyncio.sleep(0.1)
    done = [0, 0]

    async def sink():
        got = 0
        t1 = None
        while got < NBYTES:
            k = await b.recv_into(mv)
            if k == 0:
                break
            if t1 is None:
                t1 = ticks_ms()
            got += k
        done[0] = got
        done[1] = ticks_diff(ticks_ms(), t1) if t1 is not None else 0
    st = asyncio.create_task(sink())
    out = bytearray(1024)
    sent = 0
    while sent < NBYTES:
        n = NBYTES - sent if NBYTES - sent < 1024 else 1024
        await a.send(out, n)
        sent += n
    t = ticks_ms()
    while done[0] < NBYTES and ticks_diff(ticks_ms(), t) < 60000:
        await asyncio.sleep(0.02)
    snap = mgrs[0].snapshot()
    for m in mgrs:
        m.stop()
    print(json.dumps({"rtt_ms": rtts, "bytes": done[0], "ms": done[1], "counters": snap.get("counters")}))


asyncio.run(main())
