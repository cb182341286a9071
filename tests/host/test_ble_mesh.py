"""Acceptance: firmware nodes (MicroPython unix port, host_tools.procmesh.nodeproc)
linked only by the emulated BLE medium.

1. Four nodes in a line converge (one root, every node's descending entry
   is the next-lower key) and ping end to end in both directions.
2. Mixed Wi-Fi + BLE: a-b have both a TCP link and a BLE link, b-c only
   BLE. The BLE medium is slow (80 ms per packet one way), TCP on loopback is
   not, so round-trip times show which link carried the traffic: a<->b and
   the a-b hop of a<->c must go over TCP (next-hop step 7 prefers the lower
   link type: 3 remote/static TCP before 4 Bluetooth). The Wi-Fi side uses
   static TCP peering, not multicast discovery, so parallel test runs on the
   same host cannot join this mesh.
"""
import hashlib
import json
import os
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blemu_harness import Medium, MICROPYTHON  # noqa: E402

from host_tools.procmesh.nodeproc import NodeProcess, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(MICROPYTHON), reason="micropython binary missing")


def seed_of(name):
    return hashlib.sha256(b"ble-mesh-test:" + name.encode()).digest()


class Mesh:
    """Nodes started on one medium; all stopped on exit, even on failure."""

    def __init__(self, medium, profile):
        self.m = medium
        self.profile = profile
        self.nodes = {}
        self.dir = tempfile.TemporaryDirectory()

    def start(self, name, **kw):
        p = NodeProcess(seed=seed_of(name), ble_medium=self.m.addr, ble_name=name, profile=self.profile,
                        multicast=False, stderr=os.path.join(self.dir.name, name + ".err"), **kw)
        self.nodes[name] = p
        p.start()
        return p

    def status(self):
        return {n: p.request("status") for n, p in self.nodes.items()}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.nodes.values():
            p.stop()
        if exc[0] is not None:
            for n in self.nodes:
                path = os.path.join(self.dir.name, n + ".err")
                if os.path.exists(path):
                    with open(path) as f:
                        tail = f.read()[-800:]
                    if tail.strip():
                        print("--- %s stderr ---\n%s" % (n, tail))
        self.dir.cleanup()
        return False


def profile_file(d, **kw):
    prof = {"name": "UNIX", "wifi": False, "ble": True, "multicast": False}
    prof.update(kw)
    path = os.path.join(d, "profile.json")
    with open(path, "w") as f:
        json.dump(prof, f)
    return path


def converged(mesh, peers_expected):
    st = mesh.status()
    keys = sorted(p.pubkey for p in mesh.nodes.values())
    root = keys[-1]
    for n, s in st.items():
        if s.get("root") != root or s.get("peers") != peers_expected[n]:
            return False, st
        me = mesh.nodes[n].pubkey
        lower = [k for k in keys if k < me]
        want = lower[-1] if lower else None
        if s.get("desc") != want:
            return False, st
    return True, st


def wait_converged(mesh, peers_expected, timeout):
    t0 = time.monotonic()
    st = None
    while time.monotonic() - t0 < timeout:
        ok, st = converged(mesh, peers_expected)
        if ok:
            return time.monotonic() - t0
        time.sleep(0.5)
    pytest.fail("no convergence within %ds: %s" % (timeout, json.dumps(st)[:1500]))


def ping(src, dst, count=3, timeout=30):
    r = src.request("ping %s %d" % (dst.pubkey, count), timeout=timeout)
    assert r.get("ok"), r
    return r


def test_four_nodes_on_ble_line_converge_and_ping():
    with tempfile.TemporaryDirectory() as d:
        prof = profile_file(d)
        with Medium("a b c d\n", "--latency-ms", 5) as m, Mesh(m, prof) as mesh:
            t_start = time.monotonic()
            for n in "abcd":
                mesh.start(n)
            t_conv = wait_converged(mesh, {"a": 1, "b": 2, "c": 2, "d": 1}, 60)
            # every link is BLE, exactly the line's three
            assert m.stats()["links"] == [["a", "b"], ["b", "c"], ["c", "d"]]
            for n, p in mesh.nodes.items():
                peers = p.request("peers")["peers"]
                assert peers and all(x["link"] == "ble" for x in peers), peers
            a, dnode = mesh.nodes["a"], mesh.nodes["d"]
            r1 = ping(a, dnode)
            r2 = ping(dnode, a)
            assert r1["received"] == 3 and r2["received"] == 3, (r1, r2)
            print("4-node BLE line: converged %.1f s after the last node booted (%.1f s from first start);"
                  " a->d rtt %s ms, d->a rtt %s ms"
                  % (t_conv, time.monotonic() - t_start, r1.get("rtts_ms"), r2.get("rtts_ms")))


def test_mixed_wifi_and_ble_prefers_the_faster_link():
    latency = 80
    with tempfile.TemporaryDirectory() as d:
        prof = profile_file(d, wifi=True)
        port = free_port()
        with Medium("a b c\n", "--latency-ms", latency) as m, Mesh(m, prof) as mesh:
            mesh.start("a", listen=("127.0.0.1", port))
            mesh.start("b", connect=[("127.0.0.1", port)])
            mesh.start("c")
            wait_converged(mesh, {"a": 2, "b": 3, "c": 1}, 90)
            links_a = sorted(x["link"] for x in mesh.nodes["a"].request("peers")["peers"])
            assert links_a == ["ble", "remote"], links_a
            assert m.stats()["links"] == [["a", "b"], ["b", "c"]]
            a, b, c = mesh.nodes["a"], mesh.nodes["b"], mesh.nodes["c"]
            ab = ping(a, b, 5)
            bc = ping(b, c, 3)
            ac = ping(a, c, 3)
            ca = ping(c, a, 3)
            for r in (ab, bc, ac, ca):
                assert r["received"] == r["sent"], r
            one_ble_hop = 2 * latency          # there and back over one BLE link
            # control: the BLE-only pair pays the medium's latency
            assert min(bc["rtts_ms"]) >= one_ble_hop, bc
            # a<->b: both ways over TCP
            assert max(ab["rtts_ms"]) < one_ble_hop / 2, ab
            # a<->c: one BLE hop (b-c), the a-b hop over TCP both ways
            for r in (ac, ca):
                assert one_ble_hop <= min(r["rtts_ms"]) and max(r["rtts_ms"]) < 2 * one_ble_hop, r
            print("mixed: rtt a-b (tcp) %s, b-c (ble) %s, a-c %s, c-a %s ms"
                  % (ab["rtts_ms"], bc["rtts_ms"], ac["rtts_ms"], ca["rtts_ms"]))
