# Test driver: several snake.runtime.ble.BleManager instances, each on its own
# emulated radio (host_tools/blemu/bluetooth.py), in ONE process, under the
# MicroPython unix port or CPython. Used by tests/host/test_ble_manager.py.
#
#   micropython ble_driver.py ROOT MEDIUM SECONDS BYTES LINKS NAME [NAME...]
#
# Every link runs a small stream check instead of the Pinecone handshake:
# each side sends its 32-byte key, then BYTES bytes of a pattern derived from
# its key, written in pieces of varying size; the other side reads in pieces
# of varying size and checks every byte. Events are printed as
# `@ble {json}` lines as they happen; at the end each node prints its
# manager snapshot.
import sys
import json

ROOT = sys.argv[1]
sys.path.insert(0, ROOT + "/host_tools/blemu")
sys.path.insert(0, ROOT + "/firmware")

import asyncio
import hashlib
import bluetooth
from snake.runtime import ble
from snake.profile import Profile
from snake.platform import ticks_ms, ticks_diff

MEDIUM = sys.argv[2]
SECONDS = float(sys.argv[3])
NBYTES = int(sys.argv[4])
LINKS = int(sys.argv[5])
NAMES = sys.argv[6:]

T0 = ticks_ms()


def emit(d):
    d["t"] = ticks_diff(ticks_ms(), T0)
    print("@ble " + json.dumps(d))


def key_of(name):
    return hashlib.sha256(("node:" + name).encode()).digest()


def hexs(b):
    s = ""
    for x in b:
        s += "%02x" % x
    return s


BY_KEY = {}
for n in NAMES:
    BY_KEY[key_of(n)] = n


def pat(key, i):
    return (i * 7 + key[0] + (i >> 8)) & 0xFF


class Node:
    def __init__(self, name):
        self.name = name
        self.key = key_of(name)
        prof = Profile({"ble": True, "ble_links": LINKS, "ble_queue": 4, "frame_max": 1024})
        self.radio = bluetooth.Radio(MEDIUM, name)
        self.mgr = ble.BleManager(prof, self.key, self.on_link, ble=self.radio)

    def on_link(self, link):
        asyncio.create_task(self.run_link(link))

    async def run_link(self, link):
        buf = bytearray(512)
        mv = memoryview(buf)
        try:
            await link.send(self.key, 32)
        except OSError as e:
            emit({"ev": "send_fail", "node": self.name, "err": str(e)})
            link.close()
            return
        got = 0
        while got < 32:
            k = await link.recv_into(mv[got:32])
            if k == 0:
                emit({"ev": "eof_header", "node": self.name, "link": link.name})
                link.close()
                return
            got += k
        pk = bytes(buf[0:32])
        peer = BY_KEY.get(pk, "?")
        emit({"ev": "up", "node": self.name, "peer": peer, "outbound": link.outbound,
              "mtu": link.mtu, "name": link.name})
        t = asyncio.create_task(self.sender(link))
        t1 = ticks_ms()
        ok = True
        i = 0
        step = 1
        while i < NBYTES:
            want = 1 + (step * 37) % 300
            step += 1
            if want > NBYTES - i:
                want = NBYTES - i
            k = await link.recv_into(mv[0:want])
            if k == 0:
                break
            for j in range(k):
                if buf[j] != pat(pk, i + j):
                    ok = False
            i += k
        emit({"ev": "done", "node": self.name, "peer": peer, "ok": ok and i == NBYTES, "bytes": i,
              "ms": ticks_diff(ticks_ms(), t1)})
        # stay up until the link goes away
        while True:
            k = await link.recv_into(mv)
            if k == 0:
                break
        emit({"ev": "down", "node": self.name, "peer": peer})

    async def sender(self, link):
        out = bytearray(400)
        i = 0
        step = 3
        while i < NBYTES:
            n = 1 + (step * 53) % 400
            step += 1
            if n > NBYTES - i:
                n = NBYTES - i
            for j in range(n):
                out[j] = pat(self.key, i + j)
            try:
                await link.send(out, n)
            except OSError as e:
                emit({"ev": "send_fail", "node": self.name, "err": str(e)})
                return
            i += n


async def main():
    nodes = [Node(n) for n in NAMES]
    for nd in nodes:
        nd.radio.active(True)
        nd.mgr.start()
        a = nd.radio.config("mac")[1]
        emit({"ev": "start", "node": nd.name, "key": hexs(nd.key[0:8]), "addr": hexs(a)})
    await asyncio.sleep(SECONDS)
    for nd in nodes:
        snap = nd.mgr.snapshot()
        snap["node"] = nd.name
        snap["ev"] = "snapshot"
        snap["radio"] = nd.radio.stats
        emit(snap)
    for nd in nodes:
        nd.mgr.stop()
    await asyncio.sleep(0.05)
    for nd in nodes:
        nd.radio.active(False)
    emit({"ev": "exit"})


asyncio.run(main())
