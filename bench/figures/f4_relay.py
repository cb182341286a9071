"""Figure 4: relay throughput of a real node process vs a plain forwarder.

Relay: one firmware node process on the unix port (`snakemesh node`
equivalent via host_tools.procmesh.nodeproc: UNIX profile, static TCP listener on
loopback, no multicast). Two scripted peers in this (CPython) process dial
it, run the handshake and answer its tree announcement as its children: the
sender streams SNEK traffic frames (200-byte payload, addressed to the
receiver's key, hop limit 64) as fast as TCP takes them; the relay decides
each frame's next hop (SNEK, watermark rewrite, hop limit) and queues it to
the receiver. Measured: traffic frames per second the receiver gets over a
fixed window after a warm-up.

Baseline: bench/figures/baseline_forwarder.py under the same micropython:
an asyncio TCP forwarder that copies the same frames from the sender to the
receiver with no routing. Same sender, receiver, frames, window.

Each repetition measures baseline then relay back to back; the figure is the
median over repetitions of relay fps / baseline fps (target >= 0.5).
"""
import asyncio
import os
import socket
import subprocess
import time

from figures.common import FIGS, NotAvailable, row, median, micropython

TITLE = "Relay throughput vs a plain asyncio forwarder (loopback TCP)"
PAYLOAD = 200
BLOCK = 64            # frames per sender write


class Counter(object):
    """Counts traffic frames in a byte stream; answers announcements (as a
    child of the node) and sends keepalives when `peer` is set."""

    def __init__(self, peer=None):
        self.peer = peer
        self.traffic = 0
        self.other = 0
        self.buf = bytearray()

    def feed(self, data):
        b = self.buf
        b += data
        i = 0
        ln = len(b)
        anns = []
        while ln - i >= 10:
            n = (b[i + 8] << 8) | b[i + 9]
            if n < 10:
                raise RuntimeError("framing lost in the receiver stream")
            if ln - i < n:
                break
            t = b[i + 5]
            if t == 3:
                self.traffic += 1
            else:
                self.other += 1
                if t == 1 and self.peer is not None:
                    anns.append(bytes(b[i:i + n]))
            i += n
        del b[:i]
        return anns


class Peer(object):
    """A scripted Pinecone peer of the relay node (handshake, announcements
    answered by extending them with our hop, keepalives)."""

    def __init__(self, seed):
        from snake.crypto import Signer
        self.signer = Signer(seed)
        self.key = bytes(self.signer.public)
        self.reader = None
        self.writer = None
        self.counter = Counter(self)
        self.ann_root = None
        self.tasks = []

    async def connect(self, port):
        from snake import wire
        from snake.crypto import verify
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        s = self.writer.get_extra_info("socket")
        if s is not None:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hs = bytearray(wire.HANDSHAKE_LEN)
        wire.encode_handshake(hs, self.key, self.signer.sign(wire.handshake_signed(self.key)))
        self.writer.write(bytes(hs))
        await self.writer.drain()
        data = await asyncio.wait_for(self.reader.readexactly(wire.HANDSHAKE_LEN), 10)
        pub, signed, sig = wire.parse_handshake(data)
        if not verify(pub, signed, sig):
            raise RuntimeError("relay sent a bad handshake signature")
        self.tasks.append(asyncio.ensure_future(self._read()))
        self.tasks.append(asyncio.ensure_future(self._keepalive()))
        return pub

    async def _read(self):
        from snake import wire
        from snakehost import wire_host
        f = wire.Frame(64)
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    return
                for a in self.counter.feed(data):
                    f.decode(a, len(a))
                    key = (bytes(a[f.root_off:f.root_off + 32]), f.root_seq)
                    if key == self.ann_root:
                        continue
                    self.ann_root = key
                    sig = self.signer.sign(wire_host.announcement_signed(a, f))
                    out = bytearray(len(a) + 120)
                    n = wire_host.extend_announcement(out, a, f, 1, self.key, sig)
                    self.writer.write(bytes(out[:n]))
        except (ConnectionError, OSError, asyncio.CancelledError):
            return

    async def _keepalive(self):
        from snake import wire
        ka = bytearray(10)
        wire.encode_keepalive(ka)
        try:
            while True:
                await asyncio.sleep(1.0)
                self.writer.write(bytes(ka))
        except (ConnectionError, OSError, asyncio.CancelledError):
            return

    def close(self):
        for t in self.tasks:
            t.cancel()
        if self.writer is not None:
            self.writer.close()


def traffic_frame(src_key, dst_key):
    from snake import wire
    buf = bytearray(1024)
    n = wire.encode_traffic(buf, b"", b"", dst_key, src_key, wire.FULL_KEY, 0, b"\xa5" * PAYLOAD, 64)
    return bytes(buf[:n])


async def blast(writer, frame, stop):
    block = frame * BLOCK
    sent = 0
    while not stop.is_set():
        writer.write(block)
        await writer.drain()
        sent += BLOCK
    return sent


async def measure_window(counter, warm, window):
    await asyncio.sleep(warm)
    c0 = counter.traffic
    t0 = time.monotonic()
    await asyncio.sleep(window)
    c1 = counter.traffic
    return (c1 - c0) / (time.monotonic() - t0)


async def run_baseline(warm, window, frame):
    mp = micropython()
    recv_counter = Counter()
    got = asyncio.Event()

    async def on_recv(reader, writer):
        got.set()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                recv_counter.feed(data)
        except (ConnectionError, OSError):
            pass
        writer.close()
    server = await asyncio.start_server(on_recv, "127.0.0.1", 0)
    rport = server.sockets[0].getsockname()[1]
    from host_tools.procmesh.nodeproc import free_port
    lport = free_port()
    proc = await asyncio.create_subprocess_exec(
        mp, os.path.join(FIGS, "baseline_forwarder.py"), str(lport), "127.0.0.1", str(rport),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 10)
        if not line.startswith(b"ready"):
            err = await proc.stderr.read()
            raise RuntimeError("baseline forwarder did not start: %r %r" % (line, err[-300:]))
        _, w = await asyncio.open_connection("127.0.0.1", lport)
        stop = asyncio.Event()
        sender = asyncio.ensure_future(blast(w, frame, stop))
        fps = await measure_window(recv_counter, warm, window)
        stop.set()
        await asyncio.wait_for(sender, 10)
        w.close()
        await asyncio.wait_for(proc.wait(), 10)
        return {"fps": fps, "received": recv_counter.traffic}
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.close()


async def run_relay(NodeProcess, warm, window, profile):
    from host_tools.procmesh.nodeproc import free_port
    lport = free_port()
    node = NodeProcess(seed=b"\x5e" * 32, listen=("127.0.0.1", lport), multicast=False, profile=profile)
    await asyncio.get_running_loop().run_in_executor(None, node.start)
    recv = Peer(b"\x52" * 32)
    send = Peer(b"\x53" * 32)
    try:
        await recv.connect(lport)
        await send.connect(lport)
        frame = traffic_frame(send.key, recv.key)
        # the path works before timing starts
        deadline = time.monotonic() + 15
        while recv.counter.traffic == 0:
            if time.monotonic() > deadline:
                st = await asyncio.get_running_loop().run_in_executor(None, node.request, "stats")
                raise RuntimeError("relay delivers no traffic (drops %s)" % st.get("drops"))
            send.writer.write(frame)
            await asyncio.sleep(0.2)
        stop = asyncio.Event()
        sender = asyncio.ensure_future(blast(send.writer, frame, stop))
        fps = await measure_window(recv.counter, warm, window)
        stop.set()
        sent = await asyncio.wait_for(sender, 10)
        await asyncio.sleep(0.3)
        st = await asyncio.get_running_loop().run_in_executor(None, node.request, "stats")
        return {"fps": fps, "received": recv.counter.traffic, "sent": sent,
                "forwarded": st.get("forwarded"), "drops": st.get("drops"),
                "queues": st.get("queues")}
    finally:
        recv.close()
        send.close()
        await asyncio.get_running_loop().run_in_executor(None, node.stop)


def node_process():
    """host_tools' NodeProcess (a firmware node on the unix port), or NotAvailable."""
    try:
        from host_tools.procmesh.nodeproc import NodeProcess
    except ImportError as e:
        raise NotAvailable("node runtime missing (host_tools.procmesh.nodeproc: %s)" % e)
    if micropython() is None:
        raise NotAvailable("micropython (unix port) not found; run `make setup`")
    return NodeProcess


def run(ctx):
    NodeProcess = node_process()
    warm, window = (0.5, 2.0) if ctx.quick else (1.0, 3.0)
    reps = ctx.reps if ctx.reps_given else (3 if ctx.quick else 5)
    from snake.crypto import Signer
    fr = traffic_frame(Signer(b"\x53" * 32).public, Signer(b"\x52" * 32).public)
    base, rel, ratios = [], [], []
    last = None
    for i in range(reps):
        b = asyncio.run(run_baseline(warm, window, fr))
        r = asyncio.run(run_relay(NodeProcess, warm, window, "UNIX"))
        last = r
        base.append(b["fps"])
        rel.append(r["fps"])
        ratios.append(r["fps"] / b["fps"] if b["fps"] else None)
        ctx.log("rep %d: baseline %.0f fps, relay %.0f fps (drops %s)" % (
            i + 1, b["fps"], r["fps"], r.get("drops")))
    ratio = median(ratios)
    ctx.shared["f4"] = {"baseline_fps": base, "relay_fps": rel, "ratios": ratios, "last_relay": last}
    note = "baseline %.0f fps, relay %.0f fps (medians of %d); relay drops %s" % (
        median(base), median(rel), reps, (last or {}).get("drops"))
    return [
        row("relay / plain forwarder, 200 B frames", round(ratio, 3), "x", ">= 0.5", ratio >= 0.5, note),
        row("relay node frames/s (loopback, unix port)", round(median(rel)), "fps", "report", None,
            "ratio above is the machine-independent form", ratio=round(ratio, 3)),
    ]
