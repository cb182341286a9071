"""Regression: `make soak` nodes with a BLE link went silent on the console.

Cause: a new qstr after boot. MicroPython interns every name of a module it
loads, and a new qstr can need its next qstr pool: one block of twice the
last pool (1280 entries, ~14 KB on the 64-bit unix port). The firmware used
to load snake.runtime.stream at the first link and asyncio's lazy parts (wait_for,
Event, Lock) at the first handshake / BLE link; with the ESP32 profile in a
400K heap the pool was nearly full after boot, and by the time a BLE link
came up its traffic had fragmented the heap (largest free block 6.5 KB with
144 KB free). The pool could not grow, so every later new qstr raised
MemoryError ("allocating 1280 bytes": entries, not bytes): BleLink() killed
the BLE manager task, and console requests failed with an id-less
"out of memory" line the host never matched.

1. A node (ESP32_GENERIC, .mpy, 400K heap) with a TCP and a BLE link to the
   same peer (bravo/charlie in demo-mixed) interns no qstr after its boot
   line while both links come up, handshake, converge and carry pings and
   console commands. The firmware runs under a test entry script that prints
   micropython.qstr_info(1) right after boot (first scheduler pass after the
   boot line) and when asked (a trigger file). Its module list then holds
   no boot-only or console-command module (snake.runtime.boot, config, profile,
   cmds, report, probing, ble_cold, guard, crypto_backends, datagram_cold: loaded when
   needed and dropped, so their code is not in the heap; crypto_host: CPython's backends,
   wire_host: the codec's host half, never loaded there).
   Requests carry "#ID"s of letters, digits and "_.-" (the console checks
   them as bytes: iterating a str would intern each 1-character str).
2. A MemoryError inside the BLE manager (one pass, or the link hand-over)
   is counted and survived instead of ending the manager task.
3. NodeProcess.request, timing out, names the id-less error replies it saw
   (the soak only said "no reply").
"""
import asyncio
import hashlib
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blemu_harness import Medium, MICROPYTHON  # noqa: E402

from host_tools.procmesh.nodeproc import NodeProcess, build_mpy, free_port  # noqa: E402

ENTRY = r'''
import sys, os, micropython, asyncio
from snake.runtime import console as _console
from snake.runtime import node as _node

TRIGGER = os.getenv("QSTR_DUMP_TRIGGER")


def _dump(tag):
    # the one-line summary (counts) first, then every qstr; the long list
    # may lose lines on the non-blocking pty, the summary does not
    print("@@MODULES " + tag + " " + " ".join(sorted(k for k in sys.modules if k.startswith("snake"))))
    print("@@QSTRS " + tag)
    micropython.qstr_info()
    print("@@QSTRS-BEGIN " + tag)
    micropython.qstr_info(1)
    print("@@QSTRS-END " + tag)


async def _watch():
    # first run: the scheduler's first pass after the boot line (the
    # console reads stdin, listeners and dials are waiting on sockets)
    _dump("boot")
    while True:
        await asyncio.sleep(0.05)
        try:
            os.stat(TRIGGER)
        except OSError:
            continue
        os.remove(TRIGGER)
        _dump("now")


_boot = _console.Console.boot


def _boot_and_dump(self):
    _boot(self)
    asyncio.create_task(_watch())


_console.Console.boot = _boot_and_dump
_node.main(sys.argv[1:])
'''


def seed_of(name):
    return hashlib.sha256(b"heap-after-boot:" + name.encode()).digest()




_ids = [0]


def ask(node, cmd, timeout=20.0):
    """A console command with a fresh request id (every digit, letters and
    "_.-" over the run: none may intern a qstr); its reply."""
    _ids[0] += 1
    rid = "Z%d.%d-_" % (_ids[0], 9876543 - _ids[0])     # <= 16 characters
    node.write_line("#%s %s" % (rid, cmd))
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for o in node.read_objects(0.2):
            if o.get("id") == rid:
                return o
    raise AssertionError("no reply to %r%s" % (cmd, node._tail()))


def lines_of(node):
    return [l.decode("utf-8", "replace") for l in node.lines]


def qstr_count(node, tag, timeout=10.0):
    """n_qstr of the summary printed after marker `tag` (the last one)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = lines_of(node)
        at = [i for i, l in enumerate(lines) if l == "@@QSTRS " + tag]
        if at and at[-1] + 1 < len(lines):
            summary = lines[at[-1] + 1]
            assert summary.startswith("qstr pool:"), summary
            return int(summary.split("n_qstr=")[1].split(",")[0])
        assert time.monotonic() < deadline, "no qstr summary %r from the node%s" % (tag, node._tail())
        node.read_objects(0.1)


def qstr_names(node, tag):
    """The qstrs listed after marker `tag` (best effort: the pty may drop lines)."""
    node.read_objects(1.0)
    lines = lines_of(node)
    begin = [i for i, l in enumerate(lines) if l == "@@QSTRS-BEGIN " + tag]
    if not begin:
        return set()
    out = set()
    for l in lines[begin[-1] + 1:]:
        if l.startswith("@@QSTRS-END"):
            break
        if l.startswith("Q("):
            out.add(l)
    return out


@pytest.mark.skipif(not os.path.exists(MICROPYTHON), reason="micropython binary missing")
def test_no_qstr_interned_after_boot_with_tcp_and_ble_to_one_peer(tmp_path):
    mpy = build_mpy(str(tmp_path / "mpy"))
    entry = tmp_path / "entry.py"
    entry.write_text(ENTRY)
    nodes = {}
    with Medium("a b @ble\n") as medium:
        try:
            port_a = free_port()
            for name, kw in (("a", dict(listen=("127.0.0.1", port_a))),
                             ("b", dict(listen=("127.0.0.1", free_port()), connect=[("127.0.0.1", port_a)]))):
                trigger = str(tmp_path / ("dump-" + name))
                p = NodeProcess(seed=seed_of(name), ble_medium=medium.addr, ble_name=name, multicast=False,
                                profile="ESP32_GENERIC", heapsize="400K", mpy_dir=mpy, main=str(entry),
                                keep_lines=20000, env=dict(os.environ, QSTR_DUMP_TRIGGER=trigger),
                                stderr=str(tmp_path / (name + ".err")), **kw)
                p.trigger = trigger
                nodes[name] = p
                p.start()
            boot = {n: qstr_count(p, "boot") for n, p in nodes.items()}
            boot_names = {n: qstr_names(p, "boot") for n, p in nodes.items()}
            # both links (TCP "remote" and BLE) up on both ends
            end = time.monotonic() + 40
            while True:
                links = {n: sorted(x["link"] for x in ask(p, "peers")["peers"]) for n, p in nodes.items()}
                if all(v == ["ble", "remote"] for v in links.values()):
                    break
                assert time.monotonic() < end, "links not up: %s" % links
                time.sleep(0.5)
            for n, p in nodes.items():
                other = nodes["b" if n == "a" else "a"]
                r = ask(p, "ping %s 2" % other.pubkey)
                assert r["received"] >= 1, r
                assert ask(p, "trace %s" % other.pubkey)["reached"]
                for cmd in ("status", "stats", "tree", "snake", "routes", "peers", "telemetry 0.2"):
                    assert ask(p, cmd)["ok"]
                time.sleep(0.5)
                assert ask(p, "telemetry off")["ok"]
            for n, p in nodes.items():
                open(p.trigger, "w").close()
                now = qstr_count(p, "now")
                if now != boot[n]:
                    new = sorted(qstr_names(p, "now") - boot_names[n])
                    raise AssertionError("node %s interned %d qstrs after boot (%d -> %d), e.g. %s"
                                         % (n, now - boot[n], boot[n], now, new[:40]))
                # the running node holds no boot-only or console-command code
                mods = [l.split()[2:] for l in lines_of(p) if l.startswith("@@MODULES now")]
                assert mods, "no module list from node %s" % n
                assert "snake.router" in mods[-1] and "snake.runtime.console" in mods[-1], mods[-1]
                for cold in ("snake.runtime.boot", "snake.runtime.config", "snake.profile", "snake.runtime.cmds", "snake.runtime.probing",
                             "snake.runtime.ble_cold", "snake.report", "snake.runtime.guard", "snake.crypto_backends", "snakehost.crypto_host",
                             "snakehost.wire_host", "snake.datagram_cold"):
                    assert cold not in mods[-1], (n, cold, mods[-1])
                err = open(str(tmp_path / (n + ".err"))).read()
                assert "MemoryError" not in err, err[-2000:]
        finally:
            for p in nodes.values():
                p.stop()


# ---------------------------------------------------------------- 2. BLE manager

class _Profile:
    ble_links = 2
    ble_queue = 3
    frame_max = 1152


class _FakeBle:
    def __init__(self):
        self.disconnects = []

    def gap_disconnect(self, conn):
        self.disconnects.append(conn)
        return True

    def gap_advertise(self, *a, **kw):
        pass

    def gap_scan(self, *a, **kw):
        pass

    def gap_connect(self, *a, **kw):
        pass


def test_ble_manager_outlives_memory_error():
    from snake.runtime import ble

    async def main():
        fake = _FakeBle()

        def on_link(link):
            raise MemoryError("no task for the link")
        m = ble.BleManager(_Profile(), bytes(range(32)), on_link, ble=fake)
        m.running = True
        # a peripheral connection ready for hand-over (MTU exchanged)
        s = m.slots[0]
        m._claim(s, ble._PERIPHERAL, 7, 0, bytes(6), ble._PERIPH_WAIT)
        s.mtu_done = True
        passes = []
        step = m.step

        def flaky_step():
            passes.append(1)
            if len(passes) == 2:
                raise MemoryError("one pass")
            step()
        m.step = flaky_step
        task = asyncio.create_task(m._run())
        # the manager keeps passing after the MemoryError: wait for more
        # passes (a loaded machine makes each pass slower; no fixed window)
        deadline = time.monotonic() + 10
        while len(passes) <= 4 and not task.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not task.done(), task
        assert len(passes) > 4
        from snake.runtime.ble_cold import STAT_NAMES
        assert m.stats[STAT_NAMES.index("oom")] == 2     # the pass and the hand-over
        # the link nobody serves was closed: the stack was asked to drop it
        assert fake.disconnects == [7]
        m._irq(ble._IRQ_CENTRAL_DISCONNECT, (7, 0, bytes(6)))
        await asyncio.sleep(0.2)
        assert s.state == ble._FREE
        m.running = False
        await task

    asyncio.run(main())


# ---------------------------------------------------------------- 3. host side

FAKE_NODE = r'''
import os, select, sys
os.write(1, b'@sm {"re": "boot", "ok": true}\n')
while True:
    select.select([0], [], [])
    data = os.read(0, 4096)
    if not data:
        break
    for _ in range(data.count(b"\n")):
        os.write(1, b'@sm {"re": "", "ok": false, "error": "out of memory"}\n')
'''


def test_request_timeout_names_error_replies_without_id(tmp_path):
    """The soak's symptom read "no reply": say what came back instead."""
    from host_tools.errors import CliError
    script = tmp_path / "fake_node.py"
    script.write_text(FAKE_NODE)
    p = NodeProcess(seed=bytes(32), multicast=False)
    p.command = lambda: [sys.executable, str(script)]
    p.start(timeout=10)
    try:
        with pytest.raises(CliError) as e:
            p.request("status", timeout=1.0)
        assert "error replies without id meanwhile: out of memory" in e.value.message
    finally:
        p.stop()
