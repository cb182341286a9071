"""`snakemesh node` as a user runs it: a --listen port that is taken is one
error line and exit 3 (not a warning and then "running" with no listener);
a static peer that refuses the connection is a counted, logged dial
failure (dial_fail), not a handshake failure."""
import os
import socket
import subprocess
import sys
import time

from host_tools.nodeproc import NodeProcess, free_port

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
