# The board API for applications (snake/runtime/app.py): a send's handle is
# awaitable and ends delivered / failed (with the reason) / sent; receive by
# service, awaitable (with a timeout) and as a callback run from a task (so
# it may send); bounded queues; bad service numbers refused. Two Meshes
# over Datagrams joined by a queue the test's pump task delivers. Runs
# under CPython and MicroPython.
import asyncio

from snake.runtime import app
from snake.datagram import Datagrams, NO_ROUTE

OK = 0     # a tx's answer: handed to the router (snake/datagram.py)
from snake.profile import Profile

KA = b"\xa1" * 32
KB = b"\xb1" * 32
KX = b"\xee" * 32          # no node has this key


class FakeNode:
    def __init__(self, key):
        self.key = key
        self.logs = []

    def log(self, msg):
        self.logs.append(msg)


class Pair:
    def __init__(self):
        p = Profile({"dgram_max": 2000, "dgram_frag": 200, "dgram_reasm": 1, "dgram_pending": 4,
                     "dgram_acks": 4, "dgram_dedup": 8})
        self.q = []
        self.meshes = {}
        for k in (KA, KB):
            dg = Datagrams(p, k, 7)
            dg.tx = lambda dst, buf, n, now, body=None, k=k: self._tx(k, dst, buf, n, body)
            self.meshes[k] = app.Mesh(FakeNode(k), dg)

    def _tx(self, src, dst, buf, n, body):
        if bytes(dst) not in self.meshes:
            return NO_ROUTE
        self.q.append((src, bytes(dst), bytes(buf[:n]) + (bytes(body) if body is not None else b"")))
        return OK

    async def pump(self):
        from snake.platform import ticks_ms
        while True:
            while self.q:
                src, dst, p = self.q.pop(0)
                dg = self.meshes[dst].dg
                assert dg.receive(src, p, ticks_ms())
                dg.flush(ticks_ms())
            for m in self.meshes.values():
                m.dg.tick(ticks_ms())
            await asyncio.sleep_ms(2) if hasattr(asyncio, "sleep_ms") else await asyncio.sleep(0.002)


def run(coro_fn):
    async def main():
        pr = Pair()
        t = asyncio.create_task(pr.pump())
        try:
            return await coro_fn(pr.meshes[KA], pr.meshes[KB])
        finally:
            t.cancel()
    return asyncio.run(main())


def test_send_with_ack_is_awaitable_and_delivered():
    async def go(a, b):
        b.listen(7)
        h = a.send(KB, b"21.5", service=7, ack=True, src_service=3)
        assert h.state == "pending" and not h.done()
        state = await h
        assert state == "delivered" and h.state == "delivered" and h.reason is None and h.rtt_ms >= 0
        got = await b.recv(7, timeout_ms=1000)
        assert got == (KA, 3, b"21.5")
        # str data is sent as UTF-8; without ack a send ends "sent", never delivered
        h2 = a.send(KB, "caf\u00e9", service=7)
        assert (await h2.wait()) == "sent"
        assert (await b.recv(7, timeout_ms=1000))[2] == "caf\u00e9".encode()
    run(go)


def test_failures_have_reasons():
    async def go(a, b):
        h = a.send(KX, b"x", service=1, ack=False)
        assert h.state == "failed" and h.reason == "no_route" and (await h) == "failed"
        h = a.send(KB, bytes(5000), service=1, ack=True)
        assert (await h) == "failed" and h.reason == "too_big"
        for bad in (-1, 65536):
            try:
                a.send(KB, b"x", service=bad)
            except ValueError:
                pass
            else:
                raise AssertionError("service %d accepted" % bad)
            try:
                b.listen(bad)
            except ValueError:
                pass
            else:
                raise AssertionError("listen %d accepted" % bad)
        assert not a.handles
    run(go)


def test_recv_times_out_with_none_and_queues_are_bounded():
    async def go(a, b):
        assert (await b.recv(9, timeout_ms=50)) is None
        for i in range(app.RX_QUEUE + 2):
            assert (await a.send(KB, bytes([i]) * 3, service=9, ack=True)) == "delivered"
        got = []
        while True:
            x = await b.recv(9, timeout_ms=30)
            if x is None:
                break
            got.append(x[2][0])
        # the oldest were dropped and counted
        assert got == list(range(2, app.RX_QUEUE + 2)) and b.stats()["app_dropped"] == 2
        # a datagram to a service nobody listens to is counted
        assert (await a.send(KB, b"?", service=11, ack=True)) == "delivered"
        assert b.stats()["no_listener"] == 1
    run(go)


def test_callback_runs_from_a_task_and_may_send():
    async def go(a, b):
        def echo(src, ssvc, data):
            b.send(src, data, service=ssvc, src_service=7)
        b.on(7, echo)
        a.listen(4)
        h = a.send(KB, b"echo me", service=7, ack=True, src_service=4)
        assert (await h) == "delivered"
        assert (await a.recv(4, timeout_ms=1000)) == (KB, 7, b"echo me")

        def broken(src, ssvc, data):
            raise RuntimeError("app bug")
        b.on(8, broken)
        assert (await a.send(KB, b"x", service=8, ack=True)) == "delivered"
        await asyncio.sleep(0.05)
        assert any("service 8" in l for l in b.node.logs)
        # the task goes on after a callback's error
        assert (await a.send(KB, b"again", service=7, ack=True, src_service=4)) == "delivered"
        assert (await a.recv(4, timeout_ms=1000))[2] == b"again"
    run(go)
