"""A datagram written by an independent program is received by `snakemesh
recv`, and one sent by `snakemesh send` is read by it (issue 25).

The program is a scripted Pinecone peer (bench/fakepeer.py FakePeer: the
handshake, the tree, traffic frames) that writes and reads the datagram
header from docs/reference/DATAGRAMS.md with struct, not with the
project's datagram code: DATA with ACK_REQ | ACK_NOW to the node, the
node's ACK read back; then the node's DATA read and acknowledged by hand,
so the node's `send --ack` ends delivered.
"""
import asyncio
import json
import struct
import subprocess
import sys
import time

import pytest

from host_tools.procmesh.nodeproc import NodeProcess, free_port, micropython_binary
from fakepeer import FakePeer

pytestmark = pytest.mark.skipif(micropython_binary() is None, reason="micropython binary missing")

# DATA: magic "SD", version 1, type 1, flags, dst service, src service, id,
# fragment count, index, stride, total (17 bytes, big-endian)
DATA = struct.Struct(">2sBBBHHHBBHH")
# ACK: magic, version, type 2, flags, dst service, src service, id, count (12 bytes)
ACK = struct.Struct(">2sBBBHHHB")


def cli(*args, timeout=60):
    r = subprocess.run([sys.executable, "-m", "host_tools.cli"] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_independent_program_exchanges_datagrams_with_send_and_recv():
    port = free_port()
    with NodeProcess(seed=bytes([0x31]) * 32, listen=("127.0.0.1", port), multicast=False) as node:
        asyncio.run(_exchange(node, port))


async def _exchange(node, port):
    loop = asyncio.get_running_loop()
    x = FakePeer(bytes([0x52]) * 32, "127.0.0.1", port)
    await x.connect()
    x.start()
    for _ in range(100):
        if x.root is not None:
            break
        await asyncio.sleep(0.05)
    assert x.root is not None
    nkey = bytes.fromhex(node.pubkey)
    try:
        # 1. the program's datagram, read by `recv`
        rp = subprocess.Popen([sys.executable, "-m", "host_tools.cli", "recv", "--port", node.pty_path,
                               "--service", "9", "--count", "1", "--timeout", "20", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        await asyncio.sleep(2.0)
        body = b"from an independent program"
        dg = DATA.pack(b"SD", 1, 1, 0x03, 9, 5, 0x0102, 1, 0, len(body), len(body)) + body
        assert await x.traffic_from(x.key, nkey, dg)
        out, err = await loop.run_in_executor(None, rp.communicate, None, 30)
        assert rp.returncode == 0, err
        d = json.loads(out.splitlines()[0])
        assert d["src"] == x.key.hex() and d["service"] == 9 and d["text"] == body.decode()
        assert d["len"] == len(body) and bytes.fromhex(d["data_hex"]) == body
        # the node acknowledged it: ACK, services and id copied, count 1, bitmap 80
        ack = await _wait_payload(x, lambda p: p[:4] == b"SD\x01\x02")
        assert ACK.unpack(ack[:12]) == (b"SD", 1, 2, 0, 9, 5, 0x0102, 1) and ack[12:] == b"\x80"

        # 2. `send --ack` to the program: it reads the DATA and acknowledges by hand
        acked = []

        async def answer():
            seen = len(x.traffic)
            while True:
                while len(x.traffic) > seen:
                    src, p = x.traffic[seen]
                    seen += 1
                    if p[:4] == b"SD\x01\x01":
                        magic, v, t, fl, dsvc, ssvc, hid, count, k, stride, total = DATA.unpack(p[:17])
                        acked.append((dsvc, fl, p[17:]))
                        if fl & 0x01:
                            await x.traffic_from(x.key, src, ACK.pack(b"SD", 1, 2, 0, dsvc, ssvc, hid, count)
                                                 + b"\x80")
                await asyncio.sleep(0.01)
        t = asyncio.ensure_future(answer())
        rc, out, err = await loop.run_in_executor(
            None, lambda: cli("send", x.key.hex(), "to the program", "--service", 5, "--ack",
                              "--port", node.pty_path))
        t.cancel()
        assert rc == 0 and out.startswith("delivered"), (rc, out, err)
        assert acked and acked[0][0] == 5 and acked[0][2] == b"to the program" and acked[0][1] & 0x03 == 0x03
    finally:
        x.close()


async def _wait_payload(x, pred, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for _, p in x.traffic:
            if pred(p):
                return p
        await asyncio.sleep(0.05)
    raise AssertionError("no such payload within %g s: %r" % (timeout, [p[:12] for _, p in x.traffic]))
