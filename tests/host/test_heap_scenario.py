"""bench/heap_scenario.py's sampling loop against a scripted mesh in virtual
time: on a loaded machine a node's tables fill late (the wakeup filter only
at the scripted peers' next wakeup round); the scenario waits for them
instead of reporting a table that "never" filled, and still stops, naming
the table, when one never fills. No processes: the mesh, the scripted peers
and the clock are fakes, so this runs in the fast tier.
"""
import threading

import pytest

import heap_scenario

TABLES = heap_scenario.TABLES
CAP = {"peers": 8, "routes": 160, "coords": 8, "sigcache": 32, "wakeups": 16}


class Clock(object):
    def __init__(self):
        self.t = 1000.0

    def monotonic(self):
        return self.t

    def sleep(self, s):
        self.t += s

    def time(self):
        return self.t


class FakeNode(object):
    def __init__(self, port):
        self.listen = ("127.0.0.1", port)
        self.lines = []

    def alive(self):
        return True


class FakeMesh(object):
    """Three nodes whose tables are full from the start, except the wakeup
    filter: 14 of 16 until `wakeups_full_at` seconds after the mesh
    started (None: never)."""

    def __init__(self, clock, wakeups_full_at):
        self.clock = clock
        self.t0 = clock.t
        self.wakeups_full_at = wakeups_full_at
        self.names = ["a", "b", "c"]
        self.nodes = dict((n, FakeNode(7000 + i)) for i, n in enumerate(self.names))

    def __call__(self, *a, **kw):      # stands in for the ProcessMesh class
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def wait_converged(self, **kw):
        pass

    def hexkey(self, n):
        return "%02x" % self.names.index(n) * 32

    def ping(self, a, b, count=1, timeout=30):
        return {"received": 1}

    def request(self, name, cmd, timeout=30):
        el = self.clock.t - self.t0
        if cmd == "peers":
            return {"ok": True, "peers": [{"link": l} for l in ("ble", "ble", "remote", "remote")]}
        if cmd == "stats":
            occ = dict((t, [CAP[t], CAP[t]]) for t in TABLES)
            if self.wakeups_full_at is None or el < self.wakeups_full_at:
                occ["wakeups"] = [14, 16]
            return {"ok": True, "occupancy": occ, "links": {"oom": 0}, "console": {"oom": 0},
                    "drops": {}}
        if cmd == "mem":
            return {"ok": True, "free": 60000, "heap": 112640, "used": 52640, "parts": {}}
        if cmd == "status":
            return {"ok": True, "uptime_s": int(el)}
        raise AssertionError(cmd)


class FakeFiller(object):
    def __init__(self, *a, **kw):
        self.stop = threading.Event()
        self.error = None
        self.sent = {"bootstrap": 0, "wakeup": 0, "traffic": 0}
        self.thread = threading.Thread(target=lambda: None)

    def start(self):
        self.thread.start()


def _run(monkeypatch, tmp_path, wakeups_full_at):
    clock = Clock()
    mesh = FakeMesh(clock, wakeups_full_at)
    monkeypatch.setattr(heap_scenario, "time", clock)
    monkeypatch.setattr(heap_scenario, "ProcessMesh", mesh)
    monkeypatch.setattr(heap_scenario, "Filler", FakeFiller)
    monkeypatch.setattr(heap_scenario.mp32, "binary", lambda variant: "/nonexistent/micropython")
    return heap_scenario.run("ESP32_GENERIC", "frozen", "110K", 20, str(tmp_path)), clock, mesh


def test_waits_for_a_table_that_fills_late(monkeypatch, tmp_path):
    # full 45 s after the start: after the run's 20 s, within the grace
    res, clock, mesh = _run(monkeypatch, tmp_path, 45)
    assert res.errors == []
    waited = clock.t - mesh.t0
    assert 45 <= waited < 20 + heap_scenario.FILL_GRACE_S, waited
    assert all(res.peak[(n, "wakeups")] == 16 for n in res.names)


def test_stops_and_names_the_table_that_never_fills(monkeypatch, tmp_path):
    res, clock, mesh = _run(monkeypatch, tmp_path, None)
    waited = clock.t - mesh.t0
    assert waited <= 20 + heap_scenario.FILL_GRACE_S + 10, waited
    assert sorted(res.errors) == ["%s: table wakeups never full (peak 14 of 16)" % n for n in "abc"]


def test_does_not_stop_before_the_runs_seconds(monkeypatch, tmp_path):
    res, clock, mesh = _run(monkeypatch, tmp_path, 0)
    assert res.errors == []
    assert 20 <= clock.t - mesh.t0 < 30


@pytest.mark.parametrize("peak,expect", [(14, False), (16, True)])
def test_finished_needs_every_table(peak, expect):
    res = heap_scenario.Result()
    res.names, res.seconds, res.cap = ["a"], 20, dict(CAP)
    res.peak = dict((("a", t), CAP[t]) for t in TABLES)
    res.peak[("a", "wakeups")] = peak
    occ = dict((t, [CAP[t], CAP[t]]) for t in TABLES)
    res.samples = {"a": [(25.0, 60000, 112640, occ)]}
    assert heap_scenario.finished(res, 25.0) is expect
    assert heap_scenario.finished(res, 20.0 + heap_scenario.FILL_GRACE_S) is True
    assert heap_scenario.finished(res, 19.0) is False


def test_telemetry_reaching_the_scripted_sink_is_decoded_and_counted():
    # what heap_scenario.run(telemetry=S) counts per node: datagrams of
    # service 30 that decode as the gateway decodes them
    from snake.runtime import telesink

    class _Peer(object):
        def __init__(self, traffic):
            self.traffic = traffic

    class _Filler(object):
        pass
    a, b = b"\xaa" * 32, b"\xbb" * 32
    hdr = bytes([0x53, 0x44, 1, 1, 0, 0, telesink.SERVICE, 0, 0, 0, 1, 1, 0, 0, 5, 0, 5])
    good = hdr + bytes([telesink.FORMAT, 7, 0, 0, 0xBF, 0xFF])       # up 7, a state record, no fields
    bad = hdr + bytes([telesink.FORMAT, 7, 0, 0x1F])          # the kind is no name (a bad CBOR head)
    other = bytes([0x53, 0x44, 1, 1, 0, 0, 40]) + bytes(10) + b"x"  # another service
    f = _Filler()
    f.peers = [(0, 0, _Peer([(a, good), (b, good), (a, other)]))]
    f.retired = [_Peer([(a, good), (b, bad), (b, b"SM ping")])]
    got, nbad = heap_scenario.telemetry_received(f, {a.hex(): "a"})
    assert got == {"a": 2, "bb" * 4: 1} and nbad == 1


@pytest.mark.parametrize("parts,expect", [
    ({"code": 90000, "radio_emulation": 2784, "ble": 7488}, 60000 + 2784),
    ({"code": 90000, "ble": 7488}, 60000),
    (None, 60000),
])
def test_a_boards_free_heap_leaves_out_only_the_emulated_radios_import(parts, expect):
    # the emulations of `bluetooth`/`espnow` are Python modules on the host
    # and C modules on a board: their import is not a board's heap, the
    # rest (their running state among it) is
    mem = {"free": 60000, "heap": 200064, "used": 140064}
    if parts is not None:
        mem["parts"] = parts
    assert heap_scenario.board_free(mem) == expect
