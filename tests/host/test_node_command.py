"""`snakemesh node` as a user runs it: a --listen port that is taken is one
error line and exit 3 (not a warning and then "running" with no listener);
a static peer that refuses the connection is a counted, logged dial
failure (dial_fail), not a handshake failure."""
import os
import socket
import subprocess
import sys
import time

import pytest

from host_tools.procmesh.nodeproc import NodeProcess, free_port

SEED_A = "a1" * 32


def cli(*argv, timeout=60):
    return subprocess.run([sys.executable, "-m", "host_tools.cli"] + list(argv), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_listen_port_in_use_is_one_error_line():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        r = cli("node", "--seed", SEED_A, "--listen", "127.0.0.1:%d" % port, "--no-multicast")
    finally:
        holder.close()
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stderr.strip() == ("snakemesh: error: cannot listen on 127.0.0.1:%d: address already in use "
                                "(another program or node listens there)" % port)
    assert "running" not in r.stdout


def test_console_port_in_use_is_one_error_line():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        r = cli("node", "--seed", SEED_A, "--console-port", str(port), "--no-multicast")
    finally:
        holder.close()
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert r.stderr.strip() == ("snakemesh: error: cannot listen on 127.0.0.1:%d (console port): address "
                                "already in use (another program or node listens there)" % port)
    assert "running" not in r.stdout


def test_dial_to_a_closed_port_is_a_counted_dial_failure():
    port = free_port()            # nothing listens there
    with NodeProcess(seed=bytes.fromhex(SEED_A), connect=[("127.0.0.1", port)], multicast=False) as n:
        deadline = time.monotonic() + 20
        while True:
            st = n.request("stats")
            if st["links"]["dial_fail"] >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        logs = [l.decode() for l in n.lines]
    assert st["links"]["dial_fail"] >= 2 and st["links"]["dials"] >= st["links"]["dial_fail"], st["links"]
    assert st["handshake_failures"] == {}, st["handshake_failures"]      # was {"send": N}
    fails = [l for l in logs if l.startswith("snakemesh: dial 127.0.0.1:%d failed: ECONNREFUSED" % port)]
    assert len(fails) >= 2, logs
    assert fails[0].endswith("; retry in 1 s") and fails[1].endswith("; retry in 2 s"), fails


# ----------------------------------------------------------- as a user sees it --

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ptyproc import snakemesh as at_terminal  # noqa: E402

SEED_B = "b2" * 32
KEY_A = "bc7cbcb5636375fa1d82434d466724d92377f53b980695dd49d26d0ce12205a5"     # of SEED_A: the root
KEY_B = "55154f42065ea5a1bea05463826be2684eb92df92c100027aabaae57ca554207"


def test_node_prints_peers_dials_and_root_changes(tmp_path):
    port = free_port()
    names = tmp_path / "names.txt"
    names.write_text("alpha %s\nbravo %s\n" % (KEY_A, KEY_B))
    with at_terminal("node", "--seed", SEED_B, "--connect", "127.0.0.1:%d" % port, "--no-multicast",
                     "--names", str(names)) as b:
        b.expect(r"node %s\nconsole (/dev/pts/\d+)\nrunning; Ctrl-C stops the node\n" % KEY_B)
        # nothing listens yet: a counted, visible dial failure
        b.expect(r"\d\d:\d\d:\d\d dial 127.0.0.1:%d failed: connection refused; retry in 1 s\n" % port)
        b.expect(r"root       %s \(bravo\) seq 1; this node is the root\n" % KEY_B[:16])
        with at_terminal("node", "--seed", SEED_A, "--listen", "127.0.0.1:%d" % port, "--no-multicast") as a:
            con = a.expect(r"console (/dev/pts/\d+)\n").group(1)
            a.expect(r"running; Ctrl-C stops the node\n")
            b.expect(r"peer up    %s \(alpha\)  port 1 via tcp 127.0.0.1:%d\n" % (KEY_A[:8], port), 30)
            b.expect(r"root changed  %s \(alpha\) seq 1 \(was %s \(bravo\)\); parent %s \(alpha\), depth 1\n"
                     % (KEY_A[:16], KEY_B[:16], KEY_A[:16]))
            a.expect(r"peer up    %s  port 1 via tcp 127.0.0.1:\d+ \(in\)\n" % KEY_B[:8])
            # the printed console serves clients meanwhile (the tap passes everything on)
            time.sleep(3)
            r = cli("ping", "--port", con, KEY_B[:8], "-c", "2")
            assert r.returncode == 0 and "2 probes sent, 2 received, 0% loss" in r.stdout, (r.stdout, r.stderr)
            r = cli("peers", "--port", con)
            assert r.returncode == 0 and KEY_B[:16] in r.stdout, r.stderr
            r = cli("mem", "--port", con)
            assert r.returncode == 0 and "heap by part (measured at boot):" in r.stdout, r.stderr
            a.interrupt()
            assert a.wait() == 0
            assert "stopping node %s" % KEY_A[:16] in a.text
        b.expect(r"peer down  %s \(alpha\)  port 1 \(eof\)\n" % KEY_A[:8])
        b.expect(r"root changed  %s \(bravo\) seq 1 \(was %s \(alpha\)\); this node is the root\n"
                 % (KEY_B[:16], KEY_A[:16]))
        b.interrupt()
        assert b.wait() == 0


def test_quiet_node_prints_no_events():
    port = free_port()
    with at_terminal("node", "--seed", SEED_B, "--connect", "127.0.0.1:%d" % port, "--no-multicast",
                     "-q") as b:
        b.expect(r"running; Ctrl-C stops the node\n")
        time.sleep(2.5)
        b.interrupt()
        assert b.wait() == 0
        assert "dial" not in b.text and "root" not in b.text


# ------------------------------------ a board: the refusal shows at the first write --

class RefusedLink(object):
    """A TCP link we dialled whose connect was refused, as a board's socket
    shows it: no error until the first write."""
    link_type = 3
    outbound = True
    name = "tcp 10.0.0.5:7000"

    def __init__(self, outbound=True, link_type=3):
        self.outbound = outbound
        self.link_type = link_type
        self.closed = False

    async def recv_into(self, mv):
        return 0

    async def send(self, buf, n):
        raise OSError(104, "ECONNRESET")

    def close(self):
        self.closed = True


@pytest.mark.parametrize("outbound,link_type,dial_fail,hs_fail", [
    (True, 3, 1, {}),                  # we dialled: the dial failed
    (False, 3, 0, {"send": 1}),        # accepted, then the write failed: a handshake failure
    (True, 4, 0, {"send": 1}),         # BLE: not a TCP dial
])
def test_first_write_failing_on_a_dialled_link_is_a_dial_failure(outbound, link_type, dial_fail, hs_fail):
    import asyncio
    import host_tools  # noqa: F401  (firmware on sys.path)
    from snake.runtime import stream
    from snake.crypto import Signer
    from snake.runtime.node import Node
    from snake.profile import Profile

    async def main():
        n = Node(Profile({"max_peers": 4, "frame_max": 1024, "max_routes": 8}), Signer(bytes([0x55]) * 32))
        logs = []
        n.log_fn = logs.append
        link = RefusedLink(outbound, link_type)
        await stream.run(n, link)
        return n, logs, link
    n, logs, link = asyncio.run(main())
    assert n.stats["dial_fail"] == dial_fail and n.hs_fail == hs_fail, (n.stats, n.hs_fail)
    assert link.closed
    if dial_fail:
        assert logs == ["dial failed: tcp 10.0.0.5:7000 refused the connection"]


# ------------------------------------ a newcomer's first `snakemesh node` (issue 30) --

def test_node_without_a_key_says_how_to_make_one():
    r = cli("node", "--no-multicast")
    assert r.returncode == 2, r
    assert r.stderr.strip() == ("snakemesh: error: a node needs a key: --key-file FILE (make one with "
                                "`snakemesh keygen --out FILE`) or --seed HEX")


def test_listen_on_a_bare_port_says_it_is_every_interface():
    port = free_port()
    with at_terminal("node", "--seed", SEED_A, "--listen", str(port), "--no-multicast", "-q") as a:
        a.expect(r"listen static 0\.0\.0\.0:%d \(every interface: other machines can connect; --listen "
                 r"127\.0\.0\.1:%d keeps it to this machine\)\n" % (port, port))
        a.expect(r"running; Ctrl-C stops the node\n")
        a.interrupt()
        assert a.wait() == 0
    port = free_port()
    with at_terminal("node", "--seed", SEED_A, "--listen", "127.0.0.1:%d" % port, "--no-multicast", "-q") as a:
        a.expect(r"running; Ctrl-C stops the node\n")
        a.interrupt()
        assert a.wait() == 0
        assert "listen static 127.0.0.1:%d\n" % port in a.text and "every interface" not in a.text


def test_a_full_key_no_node_has_and_a_peer_port_given_as_console():
    port = free_port()
    with at_terminal("node", "--seed", SEED_A, "--listen", "127.0.0.1:%d" % port, "--no-multicast", "-q") as a:
        con = a.expect(r"console (/dev/pts/\d+)\n").group(1)
        a.expect(r"running; Ctrl-C stops the node\n")
        # a well-formed key that no node has: not "100% loss" alone, but why
        nobody = "c0ffee" + "00" * 29
        r = cli("ping", "--port", con, nobody, "-c", "1")
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert ("no node answered for %s: the node has never heard of this key (no peer, route or tree node "
                "has it), so it may belong to no node in this mesh; check the key" % nobody[:16]) in r.stdout, \
            r.stdout
        # the peer port is not a console: said at once, not after a 5 s timeout
        t0 = time.monotonic()
        r = cli("status", "--port", "socket://127.0.0.1:%d" % port)
        assert r.returncode != 0
        assert r.stderr.startswith("snakemesh: error: socket://127.0.0.1:%d is not a console: it is a Pinecone "
                                   "peer port" % port), r.stderr
        assert time.monotonic() - t0 < 4.5, "waited for a timeout instead of reading the handshake"
        a.interrupt()
        assert a.wait() == 0


def test_no_answer_tells_unknown_from_unreachable():
    from host_tools import names
    k = "ab" * 32
    assert "unreachable now" in names.no_answer(k, {k: "route"})
    assert "never heard of this key" in names.no_answer(k, {})
    assert names.no_answer(k, None) == "no node answered for %s" % k[:16]
