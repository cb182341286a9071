"""The serial console of a real unix-port node, end to end: every command
answers one valid JSON line; garbage gets an error reply and the node keeps
running; ping/trace do not block other commands; telemetry streams records;
the private key never appears; the console works through host_tools'
ConsoleClient on the printed pty path and on socket://; `snakemesh node`
starts and stops a node cleanly; a node without a key says so and keeps its
console up."""
import binascii
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import host_tools
from host_tools.procmesh.nodeproc import NodeProcess, micropython_binary, PREFIX

pytestmark = pytest.mark.skipif(micropython_binary() is None, reason="micropython binary missing")

SEED = bytes(range(32))
OTHER = "ab" * 32
LOWEST = "00" * 32


@pytest.fixture(scope="module")
def node():
    n = NodeProcess(seed=SEED, multicast=False, console_port=0)
    n.start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def pair():
    """Two linked nodes: probes from the first are really sent (and a probe
    to a key nobody has waits for its timeout)."""
    import socket
    so = socket.socket()
    so.bind(("127.0.0.1", 0))
    port = so.getsockname()[1]
    so.close()
    a = NodeProcess(seed=bytes([0x31]) * 32, multicast=False, listen=("127.0.0.1", port))
    b = NodeProcess(seed=bytes([0x32]) * 32, multicast=False, connect=[("127.0.0.1", port)])
    try:
        a.start()
        b.start()
        # the higher key is the root; its probes to the lowest possible key
        # go out through the other node (its route), which drops them
        hi, lo = max((a, b), key=lambda n: n.pubkey), min((a, b), key=lambda n: n.pubkey)
        deadline = time.monotonic() + 15
        while hi.request("status")["desc"] != lo.pubkey and time.monotonic() < deadline:
            time.sleep(0.2)
        assert hi.request("status")["desc"] == lo.pubkey
        yield hi, lo
    finally:
        b.stop()
        a.stop()


def _next_object(n, timeout=5.0):
    for obj in n._objects(time.monotonic() + timeout):
        return obj
    raise AssertionError("no @sm line within %g s" % timeout)


def test_every_command_answers_json(node):
    replies = {}
    for cmd in ("help", "version", "status", "peers", "tree", "snake", "routes", "stats", "mem",
                "telemetry off"):
        r = node.request(cmd)
        assert r["ok"] is True, r
        assert r["re"] == cmd.split()[0]
        replies[cmd.split()[0]] = r
    assert set(replies["help"]["commands"]) >= {"help", "status", "peers", "tree", "snake", "routes",
                                                 "stats", "ping", "trace", "telemetry", "version"}
    st = replies["status"]
    for k in ("key", "version", "root", "root_seq", "parent", "coords", "depth", "desc", "peers",
              "routes", "uptime_s", "mem_free"):
        assert k in st, k
    assert st["key"] == node.pubkey and st["root"] == node.pubkey and st["parent"] is None
    assert isinstance(st["mem_free"], int) and st["mem_free"] > 0
    assert replies["peers"]["peers"] == []
    tr = replies["tree"]
    assert set(tr) >= {"root", "root_seq", "parent", "coords", "depth", "ancestors"}
    assert replies["snake"]["desc"] is None and replies["snake"]["routes"] == 0
    assert replies["routes"]["routes"] == []
    s = replies["stats"]
    for k in ("rx", "tx", "tx_bytes", "tx_link", "tx_bytes_link", "drops", "verify_done",
              "verify_skipped", "verify_cached", "evictions", "occupancy", "mem_free"):
        assert k in s, k
    assert set(s["tx_link"]) == set(s["tx_bytes_link"]) == {"local", "wifi", "bonjour", "remote", "ble", "espnow"}
    assert s["occupancy"]["peers"][1] >= 1
    v = replies["version"]
    assert v["board"] == "UNIX" and v["platform"].startswith("micropython") and v["version"]
    # where the heap went: the parts measured at boot and the rest add up
    m = replies["mem"]
    assert m["used"] + m["free"] == m["heap"] and 0 < m["largest_free"] <= m["free"] and m["links"] == 0
    parts = m["parts"]
    assert set(parts) >= {"code", "crypto", "router", "tx_pool", "rx_pool", "node", "wifi", "console",
                          "links_and_runtime"}
    assert sum(parts.values()) == m["used"]
    assert parts["code"] > 10000 and parts["router"] > 5000 and parts["rx_pool"] >= 8 * 8192
    # ping / trace to a key nobody has: answered, nothing received
    p = node.request("ping %s 2" % OTHER, timeout=10)
    assert p["ok"] is True and p["sent"] == 2 and p["received"] == 0 and p["rtts_ms"] == []
    t = node.request("trace %s" % OTHER, timeout=20)
    assert t["re"] == "trace" and t["ok"] is False and t["reached"] is False and t["hops"] == []
    # ping our own key: delivered locally
    p = node.request("ping %s 1" % node.pubkey, timeout=10)
    assert p["received"] == 1


GARBAGE = [
    b"frobnicate",
    b"#12 frobnicate now",
    b"\xff\xfe\x00garbage\x80",
    b"#",
    b"#bad!id status",
    b"#17",
    b"ping",
    b"ping nothex",
    b"ping " + b"zz" * 32,
    b"ping " + OTHER.encode() + b" 0",
    b"ping " + OTHER.encode() + b" many",
    b"trace " + b"00" * 31,
    b"telemetry",
    b"telemetry -1",
    b"telemetry fast",
    b"status extra args",
    b"\x1b[A\x1b[B\x03",
    b"x" * 5000,                                   # overlong line
    b'{"re": "status", "ok": true}',               # looks like a reply
]


def test_garbage_gets_error_reply_and_node_keeps_running(node):
    for g in GARBAGE:
        node.write(g + b"\r\n")
        obj = _next_object(node)
        assert obj["ok"] is False, (g, obj)
        assert isinstance(obj["error"], str) and obj["error"], obj
        assert "re" in obj
    # empty lines are ignored (no reply); the node still answers
    node.write(b"\r\n\n\r\n")
    r = node.request("status")
    assert r["ok"] is True and r["key"] == node.pubkey
    assert node.request("stats")["console"]["bad_lines"] >= 3
    assert node.alive()


def test_id_echoed_and_unknown_command_named(node):
    node.write(b"#abc-1.x status\n")
    obj = _next_object(node)
    assert obj["id"] == "abc-1.x" and obj["re"] == "status" and obj["ok"] is True
    node.write(b"#q7 nosuch\n")
    obj = _next_object(node)
    assert obj == {"re": "nosuch", "id": "q7", "ok": False, "error": obj["error"]}


def test_trace_does_not_block_console(pair):
    # a trace to an unreachable key takes seconds; status answers meanwhile
    node = pair[0]
    node.write(("#tr trace %s\n" % LOWEST).encode())
    time.sleep(0.1)
    t0 = time.monotonic()
    r = node.request("status", timeout=3)
    assert r["ok"] and time.monotonic() - t0 < 1.5
    # the trace reply still comes, with its id
    deadline = time.monotonic() + 20
    got = None
    for obj in node._objects(deadline):
        if obj.get("id") == "tr":
            got = obj
            break
    assert got is not None and got["re"] == "trace" and got["reached"] is False
    assert time.monotonic() - t0 > 3, "the trace was not really waiting for answers"


def test_probe_commands_limited(pair):
    node = pair[0]
    # at most 2 ping/trace commands at once; a third is refused, not queued
    node.write(("#p1 trace %s\n#p2 trace %s\n#p3 trace %s\n" % (LOWEST, LOWEST, LOWEST)).encode())
    seen = {}
    for obj in node._objects(time.monotonic() + 25):
        if obj.get("id") in ("p1", "p2", "p3"):
            seen[obj["id"]] = obj
            if len(seen) == 3:
                break
    assert seen["p3"]["ok"] is False and "busy" in seen["p3"]["error"]
    assert "hops" in seen["p1"] and "hops" in seen["p2"]


def test_telemetry_stream(node):
    recs = []
    r = node.request("telemetry 0.2", records=recs)
    assert r["ok"] is True and r["telemetry"] == 0.2
    for obj in node._objects(time.monotonic() + 1.5):
        if "v" in obj:
            recs.append(obj)
    r = node.request("telemetry off", records=recs)
    assert r["telemetry"] == "off"
    kinds = [x["kind"] for x in recs]
    for k in ("state", "counters", "peers"):
        assert kinds.count(k) >= 3, kinds
    for x in recs:
        assert x["v"] == 1 and x["node"] == node.pubkey and isinstance(x["up"], int)
        assert abs(x["t"] - time.time()) < 60
    st = [x for x in recs if x["kind"] == "state"][0]
    for k in ("root", "root_seq", "parent", "coords", "depth", "desc", "peers", "routes"):
        assert k in st
    co = [x for x in recs if x["kind"] == "counters"][0]
    for k in ("rx", "tx", "drops", "verify_done", "verify_skipped", "verify_cached", "evictions",
              "occupancy", "mem_free"):
        assert k in co
    # stopped: nothing more arrives
    time.sleep(0.3)
    later = [o for o in node.read_objects(0.8) if "v" in o]
    assert later == []


def test_private_key_never_printed(node):
    seed_hex = binascii.hexlify(SEED).decode()
    seen = []
    for cmd in ("status", "stats", "version", "tree", "snake", "peers", "routes", "help"):
        node.write_line(cmd)
    for line in node._lines(time.monotonic() + 2):
        seen.append(line)
    text = b"\n".join(seen + node.lines)
    assert len(seen) >= 8
    assert seed_hex.encode() not in text.lower() and SEED not in text
    # nor on the command line of the process (the seed goes in the environment)
    with open("/proc/%d/cmdline" % node.proc.pid, "rb") as f:
        assert seed_hex.encode() not in f.read()


def test_console_client_on_pty_and_socket(node):
    from host_tools.console_client import ConsoleClient
    # the socket relay (console_port=0 picked a free port)
    assert node.console_url.startswith("socket://127.0.0.1:")
    with ConsoleClient(node.console_url, timeout=5) as c:
        r = c.request("status")
        assert r["key"] == node.pubkey
        r = c.request("peers")
        assert r["peers"] == []


def test_console_client_on_pty_path():
    from host_tools.console_client import ConsoleClient
    n = NodeProcess(seed=bytes([7]) * 32, multicast=False)
    n.start()
    try:
        assert n.pty_path.startswith("/dev/")
        with ConsoleClient(n.pty_path, timeout=5) as c:
            assert c.request("status")["key"] == n.pubkey
            assert c.request("tree")["root"] == n.pubkey
    finally:
        n.stop()


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def _children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_snakemesh_node_cli_start_and_clean_stop(sig, tmp_path):
    key = tmp_path / "me.key"
    key.write_bytes(bytes([9]) * 32)
    os.chmod(key, 0o600)
    exe = os.path.join(os.path.dirname(sys.executable), "snakemesh")
    cmd = [exe, "node", "--key-file", str(key), "--no-multicast", "--console-port", "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            if line.startswith("running"):
                break
        from host_tools import keystore
        pub = binascii.hexlify(keystore.public_key(bytes([9]) * 32)).decode()
        assert "node %s" % pub in lines, lines
        pty = [l.split()[1] for l in lines if l.startswith("console /dev/")]
        url = [l.split()[1] for l in lines if l.startswith("console socket://")]
        assert pty and url, lines
        from host_tools.console_client import ConsoleClient
        with ConsoleClient(url[0], timeout=5) as c:
            assert c.request("status")["key"] == pub
        with ConsoleClient(pty[0], timeout=5) as c:
            assert c.request("version")["board"] == "UNIX"
        kids = _children(p.pid)
        assert kids, "no firmware child process"
        p.send_signal(sig)
        rc = p.wait(10)
        assert rc == 0, p.stderr.read()
        time.sleep(0.2)
        assert not any(_pid_alive(k) for k in kids), "firmware process left behind"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_node_without_key_reports_and_keeps_console(tmp_path):
    env = dict(os.environ)
    env["MICROPYPATH"] = ":".join([".frozen", host_tools.FIRMWARE_DIR, host_tools.LIB_DIR])
    env.pop("SNAKEMESH_SEED", None)
    cmd = [micropython_binary(), os.path.join(host_tools.FIRMWARE_DIR, "main.py"),
           "--key-file", str(tmp_path / "missing.key"), "--no-multicast"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        p.stdin.write(b"#1 status\n#2 help\n")
        p.stdin.flush()
        objs = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(objs) < 3:
            line = p.stdout.readline()
            if not line:
                break
            if line.startswith(PREFIX):
                objs.append(json.loads(line[len(PREFIX):]))
        boot = [o for o in objs if o.get("re") == "boot"]
        assert boot and boot[0]["ok"] is False and "key" in boot[0]["error"], objs
        st = [o for o in objs if o.get("id") == "1"]
        assert st and st[0]["ok"] is False and "not running" in st[0]["error"]
        hl = [o for o in objs if o.get("id") == "2"]
        assert hl and hl[0]["ok"] is True
        assert p.poll() is None, "the node must keep its console running"
    finally:
        p.kill()
        p.wait()


def test_busy_listen_port_is_a_boot_warning():
    import socket
    so = socket.socket()
    so.bind(("127.0.0.1", 0))
    so.listen(1)
    port = so.getsockname()[1]
    n = NodeProcess(seed=bytes([8]) * 32, multicast=False, listen=("127.0.0.1", port))
    try:
        n.start()
        assert any("cannot listen on 127.0.0.1:%d" % port in w and "EADDRINUSE" in w
                   for w in n.boot.get("warnings", [])), n.boot
        assert "static" not in n.boot["listen"]
        assert n.request("status")["ok"] is True     # the node runs on
    finally:
        n.stop()
        so.close()


@pytest.mark.parametrize("heap", ["48K", "110K", "150K"])
def test_heap_too_small_is_one_error_line_not_a_traceback(heap, tmp_path):
    """A heap too small for the firmware (.mpy, as on a board) fails with
    one clear line: while loading the modules (exit status 3), while
    booting (exit status 3), or while building the router (the console
    stays up and says so), never a traceback."""
    from host_tools.procmesh.nodeproc import build_mpy
    mpy = build_mpy(str(tmp_path / "mpy"))
    env = dict(os.environ)
    env["MICROPYPATH"] = ":".join([".frozen", mpy, os.path.join(mpy, "lib")])
    prof = os.path.join(host_tools.REPO_ROOT, "boards", "ESP32_GENERIC", "profile.json")
    cmd = [micropython_binary(), "-X", "heapsize=" + heap, os.path.join(mpy, "main.py"),
           "--seed", "11" * 32, "--profile", prof, "--no-multicast"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env)
    try:
        p.stdin.write(b"#1 status\n")
        p.stdin.flush()
        try:
            out, err = p.communicate(timeout=8)
            running = False
        except subprocess.TimeoutExpired:
            running = True
            p.kill()
            out, err = p.communicate()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = (out + err).decode("utf-8", "replace")
    assert "Traceback" not in text, text
    if running:
        boot = [json.loads(l[len(PREFIX):]) for l in out.splitlines() if l.startswith(PREFIX)]
        assert boot and boot[0]["re"] == "boot" and boot[0]["ok"] is False, text
        assert "out of memory" in boot[0]["error"], text
        st = [o for o in boot if o.get("id") == "1"]
        assert st and st[0]["ok"] is False, text
    else:
        assert p.returncode == 3, (p.returncode, text)
        lines = [l for l in text.splitlines() if l.strip()]
        assert lines and lines[0].startswith("snakemesh: error: out of memory"), text
