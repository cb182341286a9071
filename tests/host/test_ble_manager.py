"""snake.runtime.ble.BleManager on the emulated medium, several managers per process
(tests/host/ble_driver.py), mostly under the MicroPython unix port: who
connects to whom, byte-exact streams in both directions at several MTUs and
with link-layer loss, the link limit, reconnection after a link is lost."""
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blemu_harness import Medium, LineReader, MICROPYTHON, PY, ROOT, stop  # noqa: E402

DRIVER = os.path.join(ROOT, "tests", "host", "ble_driver.py")

pytestmark = pytest.mark.skipif(not os.path.exists(MICROPYTHON), reason="micropython binary missing")


def start_driver(medium, seconds, nbytes, links, names, interp="micropython"):
    exe = [MICROPYTHON, "-X", "heapsize=16M"] if interp == "micropython" else [PY]
    proc = subprocess.Popen(exe + [DRIVER, ROOT, medium.addr, str(seconds), str(nbytes), str(links)] + names,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, LineReader(proc)


def run_driver(medium, seconds, nbytes, links, names, interp="micropython", sample=None):
    """Run to completion; returns (events, samples of medium stats)."""
    proc, rd = start_driver(medium, seconds, nbytes, links, names, interp)
    samples = []
    try:
        end = time.monotonic() + seconds + 20
        while time.monotonic() < end:
            line = rd.wait(lambda l: '"exit"' in l, 0.3 if sample else seconds + 20)
            if line is not None:
                break
            if sample:
                samples.append(medium.stats())
        assert proc.wait(10) == 0, "\n".join(rd.lines[-20:])
    finally:
        stop(proc)
    rd.drain(0.5)
    return rd.events(), samples, rd.lines


def key_order(events):
    return {e["node"]: e["key"] for e in events if e["ev"] == "start"}


def check_links(events, expected_pairs, nbytes):
    keys = key_order(events)
    ups = [e for e in events if e["ev"] == "up"]
    pairs = set()
    for e in ups:
        a, b = e["node"], e["peer"]
        pairs.add(tuple(sorted((a, b))))
        # exactly the lower key is the central (outbound) side
        assert e["outbound"] == (keys[a] < keys[b]), e
    assert pairs == set(expected_pairs)
    assert len(ups) == 2 * len(expected_pairs), ups        # one link per pair
    done = [e for e in events if e["ev"] == "done"]
    assert len(done) == 2 * len(expected_pairs)
    for e in done:
        assert e["ok"] and e["bytes"] == nbytes, e
    return ups, done


@pytest.mark.parametrize("interp", ["micropython", "cpython"])
def test_line_of_four_one_link_per_pair_and_exact_streams(interp):
    with Medium("a b c d\n") as m:
        events, _, lines = run_driver(m, 3, 30000, 4, ["a", "b", "c", "d"], interp)
        st = m.stats()
    ups, done = check_links(events, [("a", "b"), ("b", "c"), ("c", "d")], 30000)
    assert all(e["mtu"] == 247 for e in ups)     # snake/runtime/ble.py MTU
    snaps = {e["node"]: e for e in events if e["ev"] == "snapshot"}
    for n in "abcd":
        s = snaps[n]
        assert s["overflow"] == 0 and s["send_stall"] == 0 and s["setup_fail"] == 0
        assert s["radio"]["truncated"] == 0 and s["radio"]["irq_errors"] == 0
        assert s["advertising"] and s["scanning"]          # both roles at once
    # payloads up to MTU-3 were used: far fewer packets than bytes/20
    for n in "abcd":
        assert st["nodes"][n]["rx_bytes"] >= 30000
    assert st["nodes"]["b"]["rx_pkts"] < 2 * 30000 // 100


def test_mtu_23_with_loss():
    with Medium("a b\n", "--mtu", 23, "--loss", 0.2, "--conn-interval-ms", 3) as m:
        events, _, _ = run_driver(m, 3, 3000, 4, ["a", "b"])
        st = m.stats()
    ups, done = check_links(events, [("a", "b")], 3000)
    assert all(e["mtu"] == 23 for e in ups)
    # 20-byte pieces: at least 3000/20 packets each way
    assert st["nodes"]["a"]["rx_pkts"] >= 150 and st["nodes"]["b"]["rx_pkts"] >= 150
    assert st["global"]["retransmissions"] > 0


def test_link_limit_star():
    spokes = ["s1", "s2", "s3", "s4", "s5"]
    topo = "".join("hub %s\n" % s for s in spokes)
    with Medium(topo) as m:
        events, samples, _ = run_driver(m, 3, 2000, 2, ["hub"] + spokes, sample=True)
    assert samples
    for s in samples:
        assert len(s["nodes"]["hub"]["conns"]) <= 2, s["nodes"]["hub"]
    final = samples[-1]["nodes"]["hub"]["conns"]
    assert len(final) == 2
    hub_ups = [e for e in events if e["ev"] == "up" and e["node"] == "hub"]
    assert len(hub_ups) == 2
    snap = [e for e in events if e["ev"] == "snapshot" and e["node"] == "hub"][0]
    assert len(snap["links"]) == 2 and not snap["advertising"]
    for e in events:
        if e["ev"] == "done":
            assert e["ok"], e


def test_reconnect_after_link_loss():
    with Medium("a b\n", "--supervision-ms", 300) as m:
        proc, rd = start_driver(m, 9, 1000, 4, ["a", "b"])
        try:
            assert rd.wait(lambda l: '"done"' in l, 10)
            assert rd.wait(lambda l: '"done"' in l, 10)
            t_cut = time.monotonic()
            m.ctl("cut a b")
            assert rd.wait(lambda l: '"down"' in l, 5)
            assert rd.wait(lambda l: '"down"' in l, 5)
            t_down = time.monotonic()
            time.sleep(0.5)
            assert m.stats()["links"] == []             # nothing while out of range
            m.ctl("link a b")
            t_link = time.monotonic()
            up1 = rd.wait(lambda l: '"up"' in l, 10)
            up2 = rd.wait(lambda l: '"up"' in l, 10)
            assert up1 and up2
            t_up = time.monotonic()
            assert rd.wait(lambda l: '"done"' in l, 10) and rd.wait(lambda l: '"done"' in l, 10)
            assert m.stats()["links"] == [["a", "b"]]
            print("loss noticed after %.2f s, reconnected %.2f s after back in range"
                  % (t_down - t_cut, t_up - t_link))
            assert t_up - t_link < 5
        finally:
            stop(proc)
