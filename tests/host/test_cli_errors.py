"""Every expected failure of the console commands is one clear line on
stderr and a non-zero exit code, never a traceback; --verbose adds details.

    no such port        3      permission denied      3
    port busy           3      not a serial port      3
    timeout             4      garbage on the line    3
    board in the REPL   3      unknown key format     5
    node says ok:false  1
"""
import os
import shutil
import subprocess
import sys

import pytest
import serial

from host_tools.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "fakes"))
from fake_node import PEER_KEYS, FakeNode  # noqa: E402


def one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("snakemesh: error: ")
    return lines[0][len("snakemesh: error: "):]


def run(capfd, *argv):
    rc = main(list(argv))
    out, err = capfd.readouterr()
    return rc, out, err


@pytest.mark.parametrize("cmd", [["status"], ["peers"], ["routes"], ["ping", PEER_KEYS[0]],
                                 ["trace", PEER_KEYS[0]], ["console"]])
def test_no_such_port_device_path(cmd, capfd):
    rc, out, err = run(capfd, cmd[0], "--port", "/dev/ttyNOPE0", *cmd[1:])
    assert rc == 3
    assert one_error_line(err) == ("no such port: /dev/ttyNOPE0 (is the board plugged in? is the node "
                                   "running?)")


def test_no_such_port_url(capfd):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                      # nothing listens there now
    rc, _, err = run(capfd, "status", "--port", "socket://127.0.0.1:%d" % port)
    assert rc == 3
    assert one_error_line(err) == ("no such port: socket://127.0.0.1:%d (connection refused: nothing "
                                   "listens there)" % port)


def test_invalid_port_url(capfd):
    rc, _, err = run(capfd, "status", "--port", "bogus://x")
    assert rc == 3
    assert one_error_line(err).startswith("invalid port bogus://x")


def test_not_a_serial_port(tmp_path, capfd):
    f = tmp_path / "plainfile"
    f.write_text("")
    rc, _, err = run(capfd, "status", "--port", str(f))
    assert rc == 3
    assert one_error_line(err) == "%s is not a serial port" % f


def test_port_busy(capfd):
    with FakeNode("ok", "pty") as n:
        holder = serial.serial_for_url(n.port, exclusive=True)     # another program has it
        try:
            rc, _, err = run(capfd, "status", "--port", n.port)
        finally:
            holder.close()
    assert rc == 3
    assert one_error_line(err) == ("port %s is busy (another program has it open: a serial monitor, "
                                   "mpremote, another snakemesh command)" % n.port)


def _unprivileged_prefix():
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("running as root without setpriv: cannot provoke EACCES")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_permission_denied(capfd):
    with FakeNode("ok", "pty") as n:
        os.chmod(n.port, 0o600)          # owned by us; the CLI runs as another user
        prefix = _unprivileged_prefix()
        if not prefix:
            os.chmod(n.port, 0o000)
        r = subprocess.run(prefix + [sys.executable, "-m", "host_tools.cli", "status", "--port", n.port],
                           cwd=REPO, capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert r.returncode == 3, r.stderr
    assert one_error_line(r.stderr) == ("permission denied on %s (add your user to the dialout group, then "
                                        "log in again)" % n.port)
    assert r.stdout == ""


def test_permission_denied_mapping():
    """The same mapping without a second user: pyserial's own exception."""
    from host_tools.console_client import map_open_error
    e = serial.SerialException(13, "could not open port /dev/ttyUSB0: [Errno 13] Permission denied: "
                                    "'/dev/ttyUSB0'")
    assert map_open_error("/dev/ttyUSB0", e).message.startswith("permission denied on /dev/ttyUSB0")


@pytest.mark.parametrize("transport", ["pty", "socket"])
def test_timeout(transport, capfd):
    with FakeNode("silent", transport) as n:
        rc, _, err = run(capfd, "status", "--port", n.port, "--timeout", "0.4")
    assert rc == 4
    assert one_error_line(err) == ("timeout: no reply to 'status' from %s within 0.4 s (is the snakemesh "
                                   "firmware running? reset the board or retry with a larger --timeout)" % n.port)


def test_echo_only_is_a_timeout_not_garbage(capfd):
    """A unix-port node on a cooked pty echoes our request; if it then says
    nothing, that is a timeout."""
    with FakeNode("echosilent", "pty") as n:
        rc, _, err = run(capfd, "status", "--port", n.port, "--timeout", "0.4")
    assert rc == 4
    assert one_error_line(err).startswith("timeout: no reply to 'status' from %s" % n.port)


def test_garbage_on_the_line(capfd):
    with FakeNode("garbage", "pty") as n:
        rc, _, err = run(capfd, "peers", "--port", n.port, "--timeout", "0.4")
    assert rc == 3
    assert one_error_line(err) == "no snakemesh console on %s (garbage on the line)" % n.port


def test_garbage_verbose_shows_the_bytes(capfd):
    with FakeNode("garbage", "pty") as n:
        rc, _, err = run(capfd, "peers", "--port", n.port, "--timeout", "0.4", "--verbose")
    assert rc == 3
    assert err.splitlines()[0] == "snakemesh: error: no snakemesh console on %s (garbage on the line)" % n.port
    assert "first bytes received: b'\\xff\\xfe" in err
    assert len(err.strip().splitlines()) == 2


def test_verbose_before_the_subcommand_too(capfd):
    rc, _, err = run(capfd, "--verbose", "status", "--port", "/dev/ttyNOPE0")
    assert rc == 3
    assert err.splitlines()[0].startswith("snakemesh: error: no such port: /dev/ttyNOPE0")
    assert "No such file or directory" in err          # pyserial's own message, as detail


@pytest.mark.parametrize("mode", ["repl", "rawrepl"])
def test_board_busy_in_the_repl(mode, capfd):
    with FakeNode(mode, "pty") as n:
        rc, _, err = run(capfd, "status", "--port", n.port, "--timeout", "2")
    assert rc == 3
    assert one_error_line(err) == ("board on %s is in the MicroPython REPL, not running snakemesh; press "
                                   "Ctrl-D or reset it" % n.port)


@pytest.mark.parametrize("key,msg", [
    ("zz", "unknown key format: 'zz' (expected a public key of 64 hex digits, a prefix of at least 8, or a "
           "node name with --names FILE)"),
    ("12345", "key prefix '12345' is too short: give at least 8 hex digits (or all 64)"),
    ("g" * 64, "unknown key format: %r (expected a public key of 64 hex digits, a prefix of at least 8, or "
               "a node name with --names FILE)" % ("g" * 64)),
    ("ab" * 33, "unknown key format: %r (66 hex digits: a public key has 64)" % ("ab" * 33)),
])
@pytest.mark.parametrize("cmd", ["ping", "trace"])
def test_unknown_key_format(cmd, key, msg, capfd):
    with FakeNode("ok", "pty") as n:
        rc, _, err = run(capfd, cmd, "--port", n.port, key)
        assert n.received == []          # rejected before anything is sent
    assert rc == 5
    assert one_error_line(err) == msg


def test_node_error_reply(capfd):
    with FakeNode("error", "pty") as n:
        rc, _, err = run(capfd, "routes", "--port", n.port)
    assert rc == 1
    assert one_error_line(err) == "%s: 'routes' failed on the node: no route to destination" % n.port


def test_disconnect_mid_session(capfd):
    n = FakeNode("silent", "socket")
    n.start()
    import threading
    threading.Timer(0.3, n.stop).start()
    rc, _, err = run(capfd, "status", "--port", n.port, "--timeout", "3")
    assert rc == 3
    assert one_error_line(err).startswith("%s disconnected" % n.port)


def test_real_entry_point_exit_code_and_single_line():
    """Through the installed entry module, as a user runs it."""
    r = subprocess.run([sys.executable, "-m", "host_tools.cli", "status", "--port", "/dev/ttyNOPE2"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    assert r.stderr == ("snakemesh: error: no such port: /dev/ttyNOPE2 (is the board plugged in? is the node "
                        "running?)\n")
    assert r.stdout == ""
