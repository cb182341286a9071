"""Hostile load (issue 29), process mesh: three attacks by the project's own
hostile peer (test_node_fakepeer.FakePeer and raw sockets: the wire format
of docs PROTOCOL) over real TCP sockets against real node processes.

Mesh: a - t - b (ProcessMesh, static TCP links); the target t in the middle,
so every A->B ping crosses it. The attacker connects to t's listener from
other loopback addresses (127.0.0.2 ...) than the honest nodes (127.0.0.1),
as a peer on another host would. Targets:

- UNIX: every node the UNIX profile on the venv's MicroPython;
- ESP32: every node ESP32_GENERIC on the 32-bit frozen build at 110K
  (build/mp32/micropython-frozen, `make mp32`): one small and one shared
  large receive buffer, pure-Python signature checks;
- for the wakeup storm also a UNIX t with ESP32_GENERIC neighbours a and b
  on the 32-bit frozen build (slow neighbours behind a fast target).

Attacks (node.py "Admission", "Receiving"; router.py wakeup budgets):

1. stalled handshakes: the attacker keeps SOCKETS connections open to t
   from SOURCES addresses, sends nothing on them, and reopens each one t
   closes at once; meanwhile an honest peer (127.0.0.1) tries a handshake
   every ~1.5 s: every try must be in within 5 s (retrying while refused).
2. trickling links: two authenticated attacker links (two sources) each
   start a frame (one small, one large) and trickle a byte every 250 ms,
   reconnecting at once whenever t closes them; A->B pings >= 95 %.
3. wakeup storm: an authenticated attacker link sends valid wakeups from
   fresh keys (current root) as fast as t reads them; A->B pings >= 95 %,
   every console keeps answering, and once the storm stops no send queue
   of t holds more than its limit of frames (the ring bounds it; no backlog
   of hundreds of relayed wakeups).

Figures (tries and waits, delivery, defence counters) are printed: pytest -s.
"""
import asyncio
import os
import socket
import threading
import time

import pytest

from host_tools.procmesh import mp32
from host_tools.errors import CliError
from host_tools.procmesh.mesh import ProcessMesh
from host_tools.procmesh.nodeproc import micropython_binary
from snake import wire
from snakehost import wire_host
from snake.crypto import Signer

from test_node_fakepeer import FakePeer

pytestmark = pytest.mark.skipif(micropython_binary() is None, reason="micropython binary missing")

TOPOLOGY = "a t b\n"
TARGET = "t"
REQ_TIMEOUT = 15.0

TARGETS = {
    # name: (mesh profile, node profiles, interpreter, heap)
    "UNIX": ("UNIX", None, None, None),
    "ESP32": ("ESP32_GENERIC", None, "frozen", "110K"),
}


def _frozen():
    """The 32-bit frozen build, brought up to date with the firmware (make mp32-frozen)."""
    return mp32.binary("frozen")


def _mesh(tmp_path, target, node_profiles=None):
    profile, _np, interp, heap = TARGETS[target]
    p = tmp_path / "topology.txt"
    p.write_text(TOPOLOGY)
    mp = _frozen() if interp == "frozen" else None
    return ProcessMesh(str(p), str(tmp_path / "mesh"), seed=1, profile=profile, heapsize=heap,
                       micropython=mp, node_profiles=node_profiles)


def _req(m, name, cmd):
    try:
        r = m.request(name, cmd, timeout=REQ_TIMEOUT)
    except CliError as e:
        raise AssertionError("node %s stopped answering its console (%s): %s" % (name, cmd, e.message[:300]))
    assert r.get("ok") is True, (name, cmd, r)
    return r


class Attacker(object):
    """An asyncio loop in a thread running one attack coroutine until stop."""

    def __init__(self, coro_fn):
        self.coro_fn = coro_fn
        self.stop = threading.Event()
        self.error = None
        self.stats = {}
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self):
        try:
            asyncio.run(self.coro_fn(self))
        except Exception as e:     # reported by the test
            self.error = e

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(15)

    def count(self, k, n=1):
        self.stats[k] = self.stats.get(k, 0) + n


async def _open_from(src, port):
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(src, 0))


def _ping_run(m, seconds, count=5, timeout=20):
    """A->B pings for about `seconds`: (sent, received, rtts)."""
    sent = got = 0
    rtts = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        r = m.ping("a", "b", count=count, timeout=timeout)
        sent += count
        got += r.get("received", 0) if r.get("ok") else 0
        rtts += r.get("rtts_ms") or []
    return sent, got, rtts


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


# ---- 1. stalled handshakes ----------------------------------------------------
async def _stall_handshakes(att, port, sources, sockets):
    per = max(1, sockets // len(sources))

    async def hold(src):
        while not att.stop.is_set():
            try:
                r, w = await _open_from(src, port)
            except OSError:
                att.count("connect_fail")
                await asyncio.sleep(0.05)
                continue
            att.count("opened")
            try:
                # never send our handshake: wait for t to give up on us
                while not att.stop.is_set():
                    try:
                        d = await asyncio.wait_for(r.read(4096), 0.5)
                    except asyncio.TimeoutError:
                        continue
                    if not d:
                        break
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()
            att.count("closed_by_target")

    await asyncio.gather(*[hold(src) for src in sources for _ in range(per)])


async def _honest_try(port, seed, budget=5.0):
    """Connect and hand-shake until in, retrying while refused: (seconds
    taken or None when not in within budget, attempts, how the last failed)."""
    t0 = time.monotonic()
    tries = 0
    why = None
    while time.monotonic() - t0 < budget:
        tries += 1
        p = FakePeer(seed, "127.0.0.1", port)
        stage = "connect"
        try:
            left = budget - (time.monotonic() - t0)
            p.reader, p.writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), left)
            stage = "handshake"
            p.writer.write(p.handshake())
            await p.writer.drain()
            left = budget - (time.monotonic() - t0)
            await asyncio.wait_for(p.reader.readexactly(wire.HANDSHAKE_LEN), max(0.01, left))
            return time.monotonic() - t0, tries, why
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError) as e:
            why = "%s: %s" % (stage, type(e).__name__)
            await asyncio.sleep(0.1)
        finally:
            p.close()
    return None, tries, why


@pytest.mark.parametrize("sources", [1, 8])
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_honest_peer_gets_in_under_sustained_stalled_handshakes(target, sources, tmp_path):
    m = _mesh(tmp_path, target)
    with m:
        m.wait_converged(timeout=90)
        port = m.nodes[TARGET].listen[1]
        srcs = ["127.0.0.%d" % (2 + i) for i in range(sources)]
        waits = []
        with Attacker(lambda a: _stall_handshakes(a, port, srcs, 32)) as att:
            time.sleep(3)          # the attack holds every slot it can
            t_end = time.monotonic() + 30
            i = 0
            while time.monotonic() < t_end:
                got = asyncio.run(_honest_try(port, bytes([0x90 + i % 8]) * 32))
                waits.append(got)
                i += 1
                time.sleep(1.0)
            assert att.error is None, att.error
            st = _req(m, TARGET, "stats")
        d = st["defence"]
        ok = [w for w, _, _ in waits if w is not None]
        print("\nstalled handshakes, %s target, %d source(s), 32 sockets: honest peer in at %d of %d tries, "
              "longest wait %.2f s, median %.2f s, most attempts in one try %d; attacker %s; t defence %s; "
              "handshake failures %s"
              % (target, sources, len(ok), len(waits), max(ok or [0]), _median(ok) or 0,
                 max(t for _, t, _ in waits), att.stats, d, st["handshake_failures"]))
        assert len(waits) >= 15
        late = [(i, w, t, why) for i, (w, t, why) in enumerate(waits) if w is None or w > 5.0]
        assert not late, ("tries not in within 5 s (try, seconds, attempts)", late)
        # the attack was real: t closed attacker sockets over and over
        assert att.stats.get("closed_by_target", 0) >= 20, att.stats
        assert d["hs_source_limit"] + d["hs_evicted"] + d["hs_deadline"] > 0, d
        assert all(n.alive() for n in m.nodes.values())
        # honest traffic still flows
        r = m.ping("a", "b", count=5, timeout=20)
        assert r.get("received", 0) >= 4, r


# ---- 2. trickling links -----------------------------------------------------------
async def _trickle(att, port, src, seed, claim):
    while not att.stop.is_set():
        p = FakePeer(seed, "127.0.0.1", port)
        try:
            p.reader, p.writer = await _open_from(src, port)
            p.writer.write(p.handshake())
            await p.writer.drain()
            await asyncio.wait_for(p.reader.readexactly(wire.HANDSHAKE_LEN), 10)
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError):
            att.count("refused")
            p.close()
            await asyncio.sleep(0.1)
            continue
        att.count("linked")
        p.start()            # reads t's frames (and answers its announcement)
        try:
            await asyncio.sleep(0.3)
            hdr = b"pine" + bytes([0, wire.T_TRAFFIC, 0, 0, claim >> 8, claim & 0xFF])
            if not await p.send(hdr):
                continue
            while not att.stop.is_set() and not p.closed:
                await asyncio.sleep(0.25)
                if not await p.send(b"\x00"):
                    break
        finally:
            p.close()
        att.count("closed_by_target")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_trickling_links_do_not_starve_honest_traffic(target, tmp_path):
    m = _mesh(tmp_path, target)
    with m:
        m.wait_converged(timeout=90)
        port = m.nodes[TARGET].listen[1]

        async def attack(att):
            await asyncio.gather(_trickle(att, port, "127.0.0.2", bytes([0xa1]) * 32, 200),
                                 _trickle(att, port, "127.0.0.3", bytes([0xa2]) * 32, 1000))

        with Attacker(attack) as att:
            time.sleep(2)
            sent, got, rtts = _ping_run(m, 40)
            assert att.error is None, att.error
            st = _req(m, TARGET, "stats")
        d = st["defence"]
        print("\ntrickling links, %s target: A->B %d/%d (%.1f %%), median RTT %s ms, max %s ms; attacker %s; "
              "t defence %s; t handshake failures %s"
              % (target, got, sent, 100.0 * got / sent, _median(rtts), max(rtts or [0]), att.stats, d,
                 st["handshake_failures"]))
        assert att.stats.get("linked", 0) >= 2, att.stats
        assert got >= 0.95 * sent, (got, sent)
        assert all(n.alive() for n in m.nodes.values())


# ---- 3. wakeup storm ----------------------------------------------------------------
async def _storm(att, port, frames_for):
    p = FakePeer(bytes([0xb1]) * 32, "127.0.0.1", port)
    p.reader, p.writer = await _open_from("127.0.0.2", port)
    p.writer.write(p.handshake())
    await p.writer.drain()
    await asyncio.wait_for(p.reader.readexactly(wire.HANDSHAKE_LEN), 10)
    p.start()
    t0 = time.monotonic()
    while p.root is None and time.monotonic() - t0 < 10:
        await asyncio.sleep(0.05)
    frames = frames_for(p.root, p.root_seq)
    att.stats["ready"] = 1
    i = 0
    last_ka = 0.0
    while not att.stop.is_set() and not p.closed:
        if att.stats.get("go"):
            chunk = b"".join(frames[i:i + 32])
            i += 32
            if i >= len(frames):
                i = 0     # replays are duplicates to t: the fresh ones come first
            if not await p.send(chunk):
                break
            att.count("sent", 32)
        elif time.monotonic() - last_ka > 1:
            await p.keepalive()
            last_ka = time.monotonic()
        else:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0)
    att.stats["closed"] = p.closed
    p.close()


def _wakeups(root, rseq, n=6000):
    out = []
    seq = int(time.time() * 1000)
    buf = bytearray(512)
    for i in range(n):
        s = Signer(i.to_bytes(4, "big") * 8)
        sig = s.sign(wire_host.wakeup_signed(seq, root, rseq))
        k = wire.encode_wakeup(buf, s.public, seq, root, rseq, sig)
        out.append(bytes(buf[:k]))
    return out


STORM_CASES = {
    # case: (mesh target, node profiles)
    "UNIX": ("UNIX", None),
    "ESP32": ("ESP32", None),
    "UNIX_t_ESP32_neighbours": ("NEIGHBOURS", None),
}


@pytest.mark.parametrize("case", sorted(STORM_CASES))
def test_wakeup_storm_does_not_starve_honest_traffic(case, tmp_path):
    if case == "UNIX_t_ESP32_neighbours":
        p = tmp_path / "topology.txt"
        p.write_text(TOPOLOGY)
        m = ProcessMesh(str(p), str(tmp_path / "mesh"), seed=1, profile="ESP32_GENERIC",
                        micropython=_frozen(), node_profiles={TARGET: "UNIX"})
    else:
        m = _mesh(tmp_path, case)
    with m:
        m.wait_converged(timeout=90)
        port = m.nodes[TARGET].listen[1]
        s0 = {n: _req(m, n, "stats") for n in m.names}
        with Attacker(lambda a: _storm(a, port, _wakeups)) as att:
            t0 = time.monotonic()
            while not att.stats.get("ready") and time.monotonic() - t0 < 30 and att.error is None:
                time.sleep(0.1)
            assert att.stats.get("ready"), att.error
            att.stats["go"] = 1
            sent, got, rtts = _ping_run(m, 30)
            during = {n: _req(m, n, "stats") for n in m.names}
            assert att.error is None, att.error
        time.sleep(1)
        after = _req(m, TARGET, "stats")
        queued = sum(q["len"] for q in after["queues"])
        limits = sum(q["limit"] for q in after["queues"])

        def dd(n, k):
            return during[n]["drops"].get(k, 0) - s0[n]["drops"].get(k, 0)

        print("\nwakeup storm, %s: %d wakeups sent; A->B %d/%d (%.1f %%), median RTT %s ms, max %s ms; "
              "t: rx wakeups %d, verified %d, over budget %d, relay_shed %d, queued after %d (limits %d); "
              "a/b over budget %s"
              % (case, att.stats.get("sent", 0), got, sent, 100.0 * got / sent, _median(rtts), max(rtts or [0]),
                 during[TARGET]["rx"]["wakeup"] - s0[TARGET]["rx"]["wakeup"],
                 during[TARGET]["verify_done"] - s0[TARGET]["verify_done"],
                 dd(TARGET, "wakeup_budget"), during[TARGET]["defence"]["relay_shed"], queued, limits,
                 [dd(n, "wakeup_budget") for n in ("a", "b")]))
        assert att.stats.get("sent", 0) >= 2000, att.stats
        assert got >= 0.95 * sent, (got, sent)
        assert dd(TARGET, "wakeup_budget") > 0
        # no backlog of relayed control frames once the storm stopped
        assert queued <= 8, after["queues"]
        for n in ("a", "b"):
            _req(m, n, "status")       # the neighbours' consoles answer
        assert all(n.alive() for n in m.nodes.values())
