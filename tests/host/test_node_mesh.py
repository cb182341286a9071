"""Real unix-port firmware nodes forming meshes.

- three nodes in a private network namespace find each other by multicast
  beacons, peer over TCP, agree on the root, build the snake (every node's
  descending entry is the next-lower key), ping each other by key and trace;
- a static line A - B - C (--connect, no multicast): trace A -> C lists
  B then C with round-trip times; a restarted relay is re-dialled;
- two nodes that --connect each other keep exactly one link.

Multicast between processes needs its own network namespace (`unshare -n`,
root): if that is unavailable the multicast test fails with a clear message.
"""
import os
import shutil
import subprocess
import time

import pytest

from host_tools.procmesh.nodeproc import NodeProcess, free_port, micropython_binary, _pdeathsig

pytestmark = pytest.mark.skipif(micropython_binary() is None, reason="micropython binary missing")


class Netns(object):
    """A network namespace held by a sleeping process; nodes join it with
    nsenter. Loopback up, multicast routed over it."""

    def __init__(self):
        if shutil.which("unshare") is None or shutil.which("nsenter") is None:
            pytest.fail("multicast test needs `unshare` and `nsenter` (util-linux) to make a private "
                        "network namespace; neither may be missing")
        script = ("ip link set lo up && ip link set lo multicast on && "
                  "ip route add 224.0.0.0/4 dev lo src 127.0.0.1 && echo ready && exec sleep 3600")
        self.proc = subprocess.Popen(["unshare", "-n", "--", "sh", "-c", script], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True,
                                     preexec_fn=_pdeathsig)
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            err = self.proc.stderr.read().decode("utf-8", "replace").strip()
            self.close()
            pytest.fail("cannot create a network namespace for the multicast test "
                        "(unshare -n needs root or CAP_SYS_ADMIN): %s" % (err or "no output"))
        self.pid = self.proc.pid

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class Mesh(object):
    def __init__(self, tmp_path):
        self.nodes = []
        self.tmp = tmp_path

    def start(self, i, **kw):
        n = NodeProcess(seed=bytes([0x60 + i]) * 32, stderr=str(self.tmp / ("node%d.err" % i)), **kw)
        self.nodes.append(n)
        n.start()
        return n

    def stop(self):
        for n in self.nodes:
            n.stop()

    def stderr_text(self):
        out = []
        for f in sorted(self.tmp.glob("node*.err")):
            out.append("%s: %s" % (f.name, f.read_text(errors="replace")[-2000:]))
        return "\n".join(out)


@pytest.fixture
def mesh(tmp_path):
    m = Mesh(tmp_path)
    yield m
    m.stop()


def expected_desc(keys, key):
    s = sorted(keys)
    i = s.index(key)
    return s[i - 1] if i > 0 else None


def wait_converged(nodes, timeout, peers=1):
    """Every node agrees on the root, has its true descending entry and at
    least `peers` peers (a line of links already converges a triangle, so a
    test of the full triangle waits for it)."""
    keys = [n.pubkey for n in nodes]
    deadline = time.monotonic() + timeout
    st = None
    while time.monotonic() < deadline:
        st = [n.request("status") for n in nodes]
        if (all(s["root"] == max(keys) for s in st)
                and all(s["desc"] == expected_desc(keys, s["key"]) for s in st)
                and all(s["peers"] >= peers for s in st)):
            return st
        time.sleep(0.5)
    raise AssertionError("no convergence within %g s: %s" % (
        timeout, [(s["key"][:8], s["root"][:8], (s["desc"] or "-")[:8], s["peers"]) for s in st]))


def test_three_nodes_multicast_converge_ping_trace(mesh):
    ns = Netns()
    try:
        nodes = [mesh.start(i, netns_pid=ns.pid) for i in range(3)]
        keys = [n.pubkey for n in nodes]
        for n in nodes:
            assert "multicast" in n.boot["listen"]
        st = wait_converged(nodes, 30, peers=2)
        # full triangle, one link per pair, all discovered by multicast
        for n, s in zip(nodes, st):
            peers = n.request("peers")["peers"]
            assert sorted(p["key"] for p in peers) == sorted(k for k in keys if k != n.pubkey), peers
            assert all(p["link"] == "wifi" for p in peers)
            assert s["root"] == max(keys)
        roots = set(n.request("tree")["root"] for n in nodes)
        assert roots == {max(keys)}
        for a in nodes:
            for b in nodes:
                if a is b:
                    continue
                r = a.request("ping %s 2" % b.pubkey, timeout=15)
                assert r["ok"] is True and r["dst"] == b.pubkey
                assert r["sent"] == 2 and r["received"] >= 1, r
                assert all(isinstance(x, float) and x >= 0 for x in r["rtts_ms"])
                t = a.request("trace %s" % b.pubkey, timeout=30)
                assert t["ok"] is True and t["reached"] is True, t
                assert t["hops"][-1]["key"] == b.pubkey
                assert all(h["key"] in keys for h in t["hops"])
                assert all(isinstance(h["rtt_ms"], float) for h in t["hops"])
        for n in nodes:
            s = n.request("stats")
            assert s["handshake_failures"] == {} or set(s["handshake_failures"]) <= {"eof"}
            assert s["probes"]["replies_sent"] >= 4
    except AssertionError:
        print(mesh.stderr_text())
        raise
    finally:
        mesh.stop()
        ns.close()


def test_static_line_trace_and_redial(mesh):
    pa, pb = free_port(), free_port()
    a = mesh.start(1, multicast=False, listen=("127.0.0.1", pa))
    b = mesh.start(2, multicast=False, listen=("127.0.0.1", pb), connect=[("127.0.0.1", pa)])
    c = mesh.start(3, multicast=False, connect=[("127.0.0.1", pb)])
    nodes = [a, b, c]
    wait_converged(nodes, 20)
    assert a.request("status")["peers"] == 1 and b.request("status")["peers"] == 2
    assert [p["link"] for p in b.request("peers")["peers"]] == ["remote", "remote"]
    t = a.request("trace %s" % c.pubkey, timeout=30)
    assert t["ok"] is True
    assert [h["key"] for h in t["hops"]] == [b.pubkey, c.pubkey], t
    assert t["hops"][0]["rtt_ms"] <= t["hops"][1]["rtt_ms"] * 10
    t = c.request("trace %s" % a.pubkey, timeout=30)
    assert [h["key"] for h in t["hops"]] == [b.pubkey, a.pubkey], t
    p = c.request("ping %s 3" % a.pubkey, timeout=15)
    assert p["received"] == 3, p
    sb = b.request("stats")
    assert sb["probes"]["trace_expired"] >= 2
    # bytes per frame type and per link type: the relay's links are "remote"
    assert sb["tx_bytes"]["traffic"] > 0 and sb["tx_bytes"]["announcement"] > 0
    assert sum(sb["tx_bytes"].values()) == sum(sb["tx_bytes_link"].values()) == sb["tx_bytes_link"]["remote"]
    assert sum(sb["tx_link"].values()) == sum(sb["tx"].values()) == sb["tx_link"]["remote"]
    # the relay restarts: both ends re-dial it (static peers back off and retry)
    b.stop()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (a.request("status")["peers"] or c.request("status")["peers"]):
        time.sleep(0.3)
    assert a.request("status")["peers"] == 0 and c.request("status")["peers"] == 0
    b2 = mesh.start(2, multicast=False, listen=("127.0.0.1", pb), connect=[("127.0.0.1", pa)])
    wait_converged([a, b2, c], 25)
    p = a.request("ping %s 2" % c.pubkey, timeout=15)
    assert p["received"] >= 1, p


def test_mutual_connect_keeps_one_link(mesh):
    pa, pb = free_port(), free_port()
    a = mesh.start(4, multicast=False, listen=("127.0.0.1", pa), connect=[("127.0.0.1", pb)])
    b = mesh.start(5, multicast=False, listen=("127.0.0.1", pb), connect=[("127.0.0.1", pa)])
    wait_converged([a, b], 15)
    time.sleep(3)
    up = [n.request("stats")["links"]["links_up"] for n in (a, b)]
    time.sleep(4)
    for n, u in zip((a, b), up):
        assert n.request("status")["peers"] == 1
        s = n.request("stats")["links"]
        assert s["links_up"] == u, "links keep flapping: %s" % s


def test_ble_medium_line(mesh, tmp_path):
    """`--ble-medium`: three nodes in a BLE line a - b - c (emulated radio
    medium, host_tools/blemu) link over Bluetooth only, converge and trace
    through the middle node; the BLE queue limit is the profile's ble_queue."""
    import sys
    topo = tmp_path / "topo.txt"
    topo.write_text("@ble a b c\n")
    med = subprocess.Popen([sys.executable, "-m", "host_tools.blemu.medium", "--topology", str(topo),
                            "--port", "0"], stdout=subprocess.PIPE, text=True, start_new_session=True,
                           preexec_fn=_pdeathsig,
                           cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        line = med.stdout.readline()
        assert "listening on" in line, line
        addr = line.split()[-1]
        nodes = [mesh.start(10 + i, multicast=False, ble_medium=addr, ble_name=name)
                 for i, name in enumerate("abc")]
        wait_converged(nodes, 40)
        a, b, c = nodes
        assert [p["link"] for p in b.request("peers")["peers"]] == ["ble", "ble"]
        assert a.request("status")["peers"] == 1 and c.request("status")["peers"] == 1
        t = a.request("trace %s" % c.pubkey, timeout=30)
        assert [h["key"] for h in t["hops"]] == [b.pubkey, c.pubkey], t
        import json
        import host_tools
        with open(os.path.join(host_tools.BOARDS_DIR, "UNIX", "profile.json")) as f:
            prof = json.load(f)
        sb = b.request("stats")
        q = sb["queues"]
        assert [x["limit"] for x in q] == [prof["ble_queue"]] * 2
        assert sb["tx_link"]["ble"] == sum(sb["tx"].values()) > 0
        assert sb["tx_bytes_link"]["ble"] == sum(sb["tx_bytes"].values()) > 0
        assert prof["ble_queue"] < prof["wifi_queue"]
    finally:
        med.kill()
        med.wait()
