"""`snakemesh console` driven as a user at a terminal drives it (a pty):
a prompt with the node's short key, pretty replies (tables, rounded
numbers), line editing and history (readline, kept in a file), key
prefixes and names for ping/trace, what the node says on its own (a peer
coming up) printed above the prompt while the user types, --json for raw
replies. Against real unix-port firmware nodes."""
import json
import re
import os
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ptyproc import snakemesh  # noqa: E402

from host_tools.procmesh.nodeproc import NodeProcess, free_port  # noqa: E402

SEED_A, SEED_B = b"\x01" * 32, b"\x02" * 32


@pytest.fixture
def pair(tmp_path):
    port = free_port()
    a = NodeProcess(seed=SEED_A, listen=("127.0.0.1", port), multicast=False).start()
    b = None
    try:
        def connect_b():
            nonlocal b
            b = NodeProcess(seed=SEED_B, connect=[("127.0.0.1", port)], multicast=False).start()
            return b
        yield a, connect_b
    finally:
        a.stop()
        if b is not None:
            b.stop()


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, SNAKEMESH_HISTORY=str(tmp_path / "history"))
    e.pop("SNAKEMESH_NAMES", None)
    return e


def test_prompt_history_prefix_and_events(pair, env, tmp_path):
    a, connect_b = pair
    prompt = a.pubkey[:8] + "> "
    with snakemesh("console", "--port", a.pty_path, env=env) as t:
        t.expect(r"connected to %s: node %s, root %s, 0 peers" % (a.pty_path, a.pubkey[:16], a.pubkey[:16]))
        t.expect(prompt)
        # the node's own lines appear above the prompt, and what was typed is kept
        t.send("sta")
        b = connect_b()
        t.expect(r"snakemesh: peer up: port 1 %s via tcp" % b.pubkey[:8])
        t.expect(prompt + "sta")
        t.send("tux\x7f\x7f\x7ftus\r")            # line editing: three backspaces
        m = t.expect(r"(?s)key +(\w+)\n.*?mem_free +(\d+).*?\n" + prompt)
        assert m.group(1) == a.pubkey
        # a key prefix as the tables show it, floats rounded
        time.sleep(3)                                 # b's bootstrap reached a: the snake is complete
        t.sendline("ping %s 2" % b.pubkey[:8])
        m = t.expect(r"ping (\w+)\n  reply 1: rtt ([\d.]+) ms\n  reply 2: rtt ([\d.]+) ms\n"
                     r"2 probes sent, 2 received, 0% loss\nrtt min/avg/max/mdev = [\d./]+ ms\n" + prompt)
        assert m.group(1) == b.pubkey
        for rtt in m.group(2, 3):
            assert len(rtt.split(".")[-1]) <= 3, rtt       # no 0.6860000000000001
        t.sendline("stats")
        m = t.expect(r"(?s)frames\n(.*)\n" + prompt)
        body = m.group(1)
        for section in ("\ntraffic\n", "\ndrops by reason\n", "\ncrypto (signature checks)\n",
                        "\nlinks and handshakes\n", "\ntables\n", "\nmemory\n"):
            assert section in body, body
        assert "handshake failures: none" in body
        t.sendline("mem")
        t.expect(r"heap +\d+ B \([\d.]+ KiB\)\n(.*\n)*heap by part \(measured at boot\):\n +PART +BYTES +SHARE\n"
                 r"(.*\n)+" + prompt)
        # history: up-arrow three times brings back the ping
        t.send("\x1b[A\x1b[A\x1b[A\r")
        t.expect(r"ping %s 2\n" % b.pubkey[:8])
        t.expect(r"2 probes sent, 2 received, 0% loss\n(.*\n)?" + prompt)
        t.sendline("trace 81zz")
        t.expect(r"error: unknown key format: '81zz' \(expected a public key of 64 hex digits, a prefix "
                 r"of at least 8, or a node name with --names FILE\)\n" + prompt)
        t.sendline("bogus")
        t.expect(r"error: bogus: unknown command \(try help\)\n" + prompt)
        t.sendline("quit")
        assert t.wait() == 0
    hist = open(tmp_path / "history").read().splitlines()
    ping = "ping %s 2" % b.pubkey[:8]
    assert hist == ["status", ping, "stats", "mem", ping, "trace 81zz", "bogus", "quit"], hist


def test_names_completion_and_json(pair, env, tmp_path):
    a, connect_b = pair
    b = connect_b()
    names = tmp_path / "nodes.json"
    names.write_text(json.dumps({"gateway": {"key": a.pubkey}, "hut": {"key": b.pubkey}}))
    with snakemesh("console", "--port", a.pty_path, "--names", str(names), env=env) as t:
        t.expect(r"node %s \(gateway\)" % a.pubkey[:16])
        t.expect("gateway> ")
        time.sleep(3)
        t.send("tra\t")                               # tab completes the command ...
        t.expect(r"\Atrace \Z")                        # (right after the prompt matched above)
        t.send("h\t")                                 # ... and the node name
        t.expect(r"\Ahut \Z")
        t.send("\r")
        t.expect(r"trace %s \(hut\)\n   1  %s \(hut\)  [\d.]+ ms\nreached\ngateway> " % (b.pubkey, b.pubkey[:16]))
        t.sendline("quit")
        assert t.wait() == 0
    with snakemesh("console", "--port", a.pty_path, "--json", env=env) as t:
        t.expect("> ")
        t.sendline("peers")
        m = t.expect(r'(\{"id": "c\d+", "ok": true, "peers": .*\})\n')
        reply = json.loads(m.group(1))
        assert reply["re"] == "peers" and reply["peers"][0]["key"] == b.pubkey
        t.expect("> ")                                # back at the prompt, then
        t.send(b"\x04")                               # Ctrl-D leaves
        assert t.wait() == 0


def test_disconnect_ends_the_session_with_one_error(tmp_path, env):
    n = NodeProcess(seed=SEED_A, multicast=False).start()
    try:
        with snakemesh("console", "--port", n.pty_path, env=env) as t:
            t.expect(n.pubkey[:8] + "> ")
            n.stop()
            t.expect(r"\(press Enter to leave\)")
            t.send("\r")
            assert t.wait() == 3
            assert t.text.strip().splitlines()[-1].startswith("snakemesh: error: %s disconnected" % n.pty_path)
    finally:
        n.stop()


def test_help_lists_commands_with_descriptions_and_typos_get_a_suggestion(env):
    """A newcomer at the console: `help` says what each command does, `help
    ping` how to use it, a typo gets "did you mean", and `telemetry 1`
    prints its records above the prompt, never after it on the same line."""
    a = NodeProcess(seed=SEED_A, multicast=False).start()
    try:
        prompt = a.pubkey[:8] + "> "
        with snakemesh("console", "--port", a.pty_path, env=env) as t:
            t.expect(prompt)
            t.sendline("help")
            m = t.expect(r"commands \(help COMMAND for one\):\n((?:  .*\n)+)" + prompt)
            lines = m.group(1).splitlines()
            assert any(re.match(r"  ping KEY \[COUNT\] +send COUNT probes", x) for x in lines), lines
            assert any(re.match(r"  status +this node: key, root", x) for x in lines), lines
            assert lines[-1].split()[0] == "quit" and all(len(x.split()) > 2 for x in lines), lines
            t.sendline("help ping")
            t.expect(r"ping KEY \[COUNT\]\n  send COUNT probes \(default 3\) to KEY.*\n" + prompt)
            t.sendline("stauts")
            t.expect(r"error: stauts: unknown command; did you mean status\? \(help lists commands\)\n" + prompt)
            t.sendline("help pnig")
            t.expect(r"error: help: no command pnig; did you mean ping\? \(help lists commands\)\n" + prompt)
            t.sendline("telemetry 1")
            t.expect(r"telemetry every 1 s\n")
            t.expect(r"peers %s none\n" % a.pubkey[:16], 10)
            t.expect(r"peers %s none\n" % a.pubkey[:16], 10)
            t.sendline("telemetry off")
            t.expect(r"telemetry off\n")
            t.sendline("quit")
            assert t.wait() == 0
            for line in t.text.splitlines():
                rest = line[len(prompt):] if line.startswith(prompt) else ""
                assert not rest.startswith(("state ", "counters ", "peers ")), repr(line)
    finally:
        a.stop()
