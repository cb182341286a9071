"""A scripted Pinecone peer (CPython, asyncio): one TCP link to a real
unix-port node, speaking the protocol from a script. Every frame is built
with the firmware's own codec (snake.wire) and signed with snake.crypto
(PyNaCl backend under CPython).

Used by heap_scenario.py (it fills a node's tables) and by the link-level
tests (tests/host/test_node_fakepeer.py, test_node_heap.py, test_flood_process.py).
"""
import asyncio
import struct

import host_tools  # noqa: F401  (firmware/ and lib/ on sys.path)
from snake import wire
from snakehost import wire_host
from snake.crypto import Signer, verify

FULL_KEY = b"\xff" * 32


class FakePeer(object):
    """One TCP link to a node, speaking the protocol from a script."""

    def __init__(self, seed, host, port, link_port=1):
        self.signer = Signer(seed)
        self.key = bytes(self.signer.public)
        self.host = host
        self.port = port
        self.link_port = link_port      # our switch port towards the node
        self.reader = None
        self.writer = None
        self.peer_key = None
        self.root = None
        self.root_seq = None
        self.coords = b""                # our coordinates (varu64 body)
        self.ann_sent = None
        self.rx = {}                     # frame type -> count
        self.traffic = []                # (src key, payload) of traffic frames to us
        self.closed = False
        self.task = None

    async def connect(self, hs=None):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        if hs is None:
            hs = self.handshake()
        self.writer.write(hs)
        await self.writer.drain()
        data = await asyncio.wait_for(self.reader.readexactly(wire.HANDSHAKE_LEN), 10)
        pub, signed, sig = wire.parse_handshake(data)
        assert verify(pub, signed, sig), "node sent a handshake with a bad signature"
        self.peer_key = pub
        return pub

    def handshake(self):
        buf = bytearray(wire.HANDSHAKE_LEN)
        wire.encode_handshake(buf, self.key, self.signer.sign(wire.handshake_signed(self.key)))
        return bytes(buf)

    def start(self):
        self.task = asyncio.ensure_future(self.read_loop())
        return self.task

    async def read_loop(self):
        f = wire.Frame(64)
        try:
            while True:
                hdr = await self.reader.readexactly(10)
                n = struct.unpack(">H", hdr[8:10])[0]
                body = await self.reader.readexactly(n - 10)
                frame = hdr + body
                f.decode(frame, n)
                self.rx[f.type] = self.rx.get(f.type, 0) + 1
                if f.type == wire.T_ANNOUNCEMENT:
                    await self._announcement(frame, f)
                elif f.type == wire.T_TRAFFIC:
                    self.traffic.append((bytes(frame[f.src_off:f.src_off + 32]),
                                         bytes(frame[f.payload_off:f.payload_off + f.payload_len])))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            self.closed = True

    async def _announcement(self, frame, f):
        root = bytes(frame[f.root_off:f.root_off + 32])
        if root == self.root and f.root_seq == self.root_seq:
            return
        self.root, self.root_seq = root, f.root_seq
        # our coordinates: the ports of every hop of our parent's announcement
        ports = [f.hop_port[i] for i in range(f.nhops)]
        self.coords = wire.encode_coords_body(ports)
        # answer with the node's announcement extended by our own hop: we are
        # its child, so the node never picks us as its parent (we carry its key)
        sig = self.signer.sign(wire_host.announcement_signed(frame, f))
        out = bytearray(len(frame) + 200)
        n = wire_host.extend_announcement(out, frame, f, self.link_port, self.key, sig)
        await self.send(bytes(out[:n]))

    async def send(self, data):
        if self.closed:
            return False
        try:
            self.writer.write(data)
            await self.writer.drain()
            return True
        except (ConnectionError, OSError):
            self.closed = True
            return False

    async def keepalive(self):
        buf = bytearray(10)
        n = wire.encode_keepalive(buf)
        return await self.send(bytes(buf[:n]))

    # synthetic traffic from other identities (signed by them)
    async def bootstrap_for(self, signer, seq):
        if self.root is None:
            return False
        sig = signer.sign(wire.bootstrap_signed(seq, self.root, self.root_seq))
        buf = bytearray(512)
        n = wire.encode_bootstrap(buf, signer.public, FULL_KEY, 0, seq, self.root, self.root_seq, sig)
        return await self.send(bytes(buf[:n]))

    async def wakeup_for(self, signer, seq):
        if self.root is None:
            return False
        sig = signer.sign(wire_host.wakeup_signed(seq, self.root, self.root_seq))
        buf = bytearray(512)
        n = wire.encode_wakeup(buf, signer.public, seq, self.root, self.root_seq, sig)
        return await self.send(bytes(buf[:n]))

    async def traffic_from(self, src_key, dst_key, payload, hop_limit=10):
        buf = bytearray(1024 if len(payload) < 700 else 2048)
        n = wire.encode_traffic(buf, b"", self.coords, dst_key, src_key, FULL_KEY, 0, payload, hop_limit)
        return await self.send(bytes(buf[:n]))

    async def wait_closed(self, timeout):
        """True when the node closed the connection within `timeout` s."""
        try:
            while True:
                data = await asyncio.wait_for(self.reader.read(4096), timeout)
                if not data:
                    return True
        except asyncio.TimeoutError:
            return False
        except (ConnectionError, OSError):
            return True

    def close(self):
        if self.task is not None:
            self.task.cancel()
        if self.writer is not None:
            self.writer.close()
