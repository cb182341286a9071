# Console line protocol (snake/runtime/console.py): request parsing, argument
# checks, and every reply line being "@sm " + one valid JSON object, against
# a real Node (no links) on both interpreters.
import asyncio
import json

from snake.runtime import console
from snake.runtime.console import Console
from snake.runtime.cmds import ConsoleError, parse_request, parse_key, parse_count, parse_interval, COMMANDS
from snake.crypto import Signer
from snake.runtime.node import Node
from snake.profile import Profile

SEED = bytes([0x5A]) * 32


class Out:
    def __init__(self):
        self.data = bytearray()

    def write(self, b):
        self.data += b
        return len(b)

    def objects(self):
        out = []
        for line in bytes(self.data).split(b"\n"):
            if not line:
                continue
            if line.startswith(b"@sm "):
                out.append(json.loads(line[4:].decode()))
            else:
                assert line.startswith(b"snakemesh: "), line
        return out

    def clear(self):
        self.data = bytearray()


_node = []


def node():
    if not _node:
        p = Profile({"max_peers": 3, "max_routes": 4, "coord_cache": 2, "sig_cache": 4, "max_hops": 4,
                     "frame_max": 512, "wakeup_filter": 2, "wifi_queue": 2, "ble_queue": 1})
        _node.append(Node(p, Signer(SEED)))
    return _node[0]


def raises(fn, *a):
    try:
        fn(*a)
    except ConsoleError as e:
        return str(e)
    raise AssertionError("no ConsoleError for %r" % (a,))


def test_parse_request():
    assert parse_request(b"status") == (None, "status", [])
    assert parse_request(b"#7 ping ab 3") == ("7", "ping", ["ab", "3"])
    assert parse_request(b"  #a-b.c_d   tree  ") == ("a-b.c_d", "tree", [])
    assert parse_request(b"   ") is None
    assert parse_request(b"") is None
    raises(parse_request, b"#")
    raises(parse_request, b"#17")
    raises(parse_request, b"#bad!id status")
    raises(parse_request, b"#" + b"x" * 17 + b" status")
    msg = raises(parse_request, b"\xff\xfe status")
    assert "UTF-8" in msg


def test_parse_args():
    assert parse_key("0f" * 32) == b"\x0f" * 32
    assert parse_key("AB" * 32) == b"\xab" * 32
    for bad in ("", "0f" * 31, "0f" * 33, "zz" * 32, "0f" * 31 + "0"):
        raises(parse_key, bad)
    assert parse_count("1") == 1 and parse_count("100") == 100
    for bad in ("0", "-1", "101", "x", "1.5"):
        raises(parse_count, bad)
    assert parse_interval("off") is None
    assert parse_interval("2") == 2.0 and parse_interval("0.5") == 0.5
    for bad in ("0", "-1", "fast", "1e9", ""):
        raises(parse_interval, bad)


def test_every_command_one_json_line():
    out = Out()
    c = Console(node(), out=out)
    for cmd in ("help", "version", "status", "peers", "tree", "snake", "routes", "stats", "mem",
                "telemetry off"):
        out.clear()
        c.handle(("#i1 " + cmd).encode())
        objs = out.objects()
        assert len(objs) == 1, (cmd, out.data)
        o = objs[0]
        assert o["ok"] is True and o["id"] == "i1" and o["re"] == cmd.split()[0], o
    out.clear()
    c.handle(b"status")
    st = out.objects()[0]
    key = st["key"]
    assert len(key) == 64 and st["root"] == key and st["peers"] == 0 and "id" not in st
    for k in ("version", "root_seq", "parent", "coords", "depth", "desc", "routes", "uptime_s", "mem_free"):
        assert k in st


def test_errors_are_replies():
    out = Out()
    c = Console(node(), out=out)
    bad = [b"nosuch", b"#9 nosuch", b"\xff\x00\x80", b"#", b"ping", b"ping 12", b"trace",
           b"telemetry", b"telemetry x", b"status now", b"ping " + b"00" * 32 + b" 0", b"\x1b[A"]
    for line in bad:
        out.clear()
        c.handle(line)
        objs = out.objects()
        assert len(objs) == 1, (line, out.data)
        assert objs[0]["ok"] is False and objs[0]["error"], objs[0]
    out.clear()
    c.handle(b"#9 nosuch")
    o = out.objects()[0]
    assert o["id"] == "9" and o["re"] == "nosuch"
    out.clear()
    c.handle(b"\x01\x02 \x03")
    o = out.objects()[0]
    assert o["re"] == "??"   # control characters never reach the output
    assert c.bad_lines >= 3


def test_node_not_running():
    out = Out()
    c = Console(None, boot_error="no key: give --key-file", out=out)
    c.boot()
    c.handle(b"#1 status")
    c.handle(b"#2 help")
    c.handle(b"#3 version")
    boot, st, hl, ver = out.objects()
    assert boot["re"] == "boot" and boot["ok"] is False and "no key" in boot["error"]
    assert st["ok"] is False and "not running" in st["error"]
    assert hl["ok"] is True and ver["ok"] is True


class ByteReader:
    """An asyncio reader that returns the given bytes, then EOF."""

    def __init__(self, data):
        self.data = data
        self.i = 0

    async def read(self, n):
        await asyncio.sleep(0)
        b = self.data[self.i:self.i + n]
        self.i += n
        return b


def test_line_reader_overlong_and_crlf():
    out = Out()
    c = Console(node(), out=out)
    data = (b"#1 help\r\n" + b"x" * (console.MAX_LINE + 50) + b"\r\n" + b"\n\r\n" +
            b"#2 version\n#3 nosuch\r#4 snake")     # the last line has no end: not handled
    asyncio.run(c.run(ByteReader(data)))
    objs = out.objects()
    assert [o.get("id") for o in objs] == ["1", None, "2", "3"], objs
    assert "too long" in objs[1]["error"]
    assert objs[2]["ok"] is True and objs[3]["ok"] is False


def test_private_key_not_in_output():
    out = Out()
    c = Console(node(), out=out)
    c.boot()
    for cmd in COMMANDS:
        c.handle(cmd.encode())
    c.set_telemetry(None)
    text = bytes(out.data).lower()
    import binascii
    assert binascii.hexlify(SEED) not in text and SEED not in bytes(out.data)


def test_telemetry_records():
    out = Out()
    c = Console(node(), out=out)
    st, co, pe = c.records()
    for rec, kind in ((st, "state"), (co, "counters"), (pe, "peers")):
        assert rec["v"] == 1 and rec["kind"] == kind and rec["node"] == st["node"] and "up" in rec
        c.emit(rec)
    assert "occupancy" in co and "drops" in co and "mem_free" in co
    assert pe["peers"] == [] and "root" in st and "desc" in st
    assert st["profile"] == "UNIX"  # the board profile's name (telemetry contract 3)
    assert len(out.objects()) == 3


class ShortOut(Out):
    """A non-blocking output that takes at most `chunk` bytes per write and
    has no room (returns None, as MicroPython's stream write does on EAGAIN)
    every other call; `full` makes it take nothing at all."""

    def __init__(self, chunk):
        Out.__init__(self)
        self.chunk = chunk
        self.calls = 0
        self.full = False

    def write(self, b):
        self.calls += 1
        if self.full or self.calls % 2 == 0:
            return None
        k = min(self.chunk, len(b))
        self.data += bytes(b[:k])
        return k


def test_long_reply_on_a_short_writing_output_arrives_whole():
    out = ShortOut(100)
    c = Console(node(), out=out)
    c.reply("x", "1", {"blob": "ab" * 3000})
    c.handle(b"#2 status")
    objs = out.objects()
    assert [o.get("id") for o in objs] == ["1", "2"]
    assert objs[0]["blob"] == "ab" * 3000 and c.dropped == 0


def test_output_without_room_cuts_one_line_and_the_next_reply_survives():
    out = ShortOut(64)
    c = Console(node(), out=out)
    out.calls = 0
    out.full = False
    # room for one chunk, then none: the line is cut and counted
    real = out.write
    state = {"n": 0}

    def stall(b):
        state["n"] += 1
        if state["n"] == 1:
            k = min(64, len(b))
            out.data += bytes(b[:k])
            return k
        return None
    out.write = stall
    c.reply("x", "1", {"blob": "cd" * 500})
    assert c.dropped == 1 and c.cut
    out.write = real
    c.handle(b"#2 status")
    lines = bytes(out.data).split(b"\n")
    assert lines[0].startswith(b"@sm ") and len(lines[0]) == 64      # the cut line, alone
    st = json.loads(lines[1][4:].decode())
    assert st["re"] == "status" and st["id"] == "2" and st["ok"] is True
    assert not c.cut


def test_command_code_leaves_the_heap_after_each_request():
    # snake/runtime/cmds.py (the commands) is loaded per request and dropped after
    # it on MicroPython: the running node's heap holds only the line reader
    import sys
    mp = sys.implementation.name == "micropython"
    out = Out()
    c = Console(node(), out=out)
    c.boot()
    for cmd in (b"status", b"#7 stats", b"mem", b"routes", b"nosuch", b"ping 00"):
        c.handle(cmd)
        assert ("snake.runtime.cmds" in sys.modules) is not mp, cmd
    st, co, pe = c.records()
    assert ("snake.runtime.cmds" in sys.modules) is not mp
    objs = out.objects()
    assert [o["re"] for o in objs] == ["boot", "status", "stats", "mem", "routes", "nosuch", "ping"], objs
    assert objs[2]["id"] == "7" and objs[6]["error"] == "bad key: expected 64 hex digits"
    if mp:
        import gc
        # figures of the heap taken before the command code was loaded
        assert objs[1]["mem_free"] > 0 and co["mem_free"] > 0
        m = objs[3]
        assert m["used"] + m["free"] == m["heap"] and 0 < m["largest_free"] <= m["free"]
        # the same requests again: the heap holds nothing more than before
        out.clear()
        gc.collect()
        a0 = gc.mem_alloc()
        for i in range(5):
            c.handle(b"status")
            c.handle(b"stats")
            out.clear()
        gc.collect()
        assert gc.mem_alloc() - a0 < 256, gc.mem_alloc() - a0


def test_probe_task_replies_and_failures():
    # a ping/trace the console runs answers through its reply=(console, rid)
    # (snake/runtime/probing.py); a probe that raises is one error reply, MemoryError
    # the out-of-memory reply
    out = Out()
    c = Console(node(), out=out)
    pr = node().probes
    dst = bytes(32)      # no route to it: nothing comes back, the probe times out

    async def go(coro):
        pr.sessions += 1      # what _spawn's reserve() took; the probe gives it back
        await c._probe_task("ping", "p1", coro)

    asyncio.run(go(pr.ping(dst, 1, interval_ms=1, timeout_ms=20, reserved=True, reply=(c, "p1"))))
    o = out.objects()
    assert len(o) == 1 and o[0]["re"] == "ping" and o[0]["id"] == "p1" and o[0]["ok"] is True, o
    assert o[0]["sent"] in (0, 1) and o[0]["received"] == 0 and o[0]["dst"] == "00" * 32, o
    out.clear()

    async def go_trace():
        pr.sessions += 1
        await c._probe_task("trace", "t1", pr.trace(dst, 2, timeout_ms=20, reserved=True, reply=(c, "t1")))
    asyncio.run(go_trace())
    o = out.objects()
    assert len(o) == 1 and o[0]["re"] == "trace" and o[0]["ok"] is False and o[0]["reached"] is False, o
    assert pr.sessions == 0
    out.clear()

    async def boom():
        raise ValueError("x")

    async def oom():
        raise MemoryError()

    asyncio.run(c._probe_task("trace", "t2", boom()))
    asyncio.run(c._probe_task("ping", "p2", oom()))
    o = out.objects()
    assert [(x["re"], x["id"], x["ok"]) for x in o] == [("trace", "t2", False), ("ping", "p2", False)], o
    assert o[0]["error"] == "trace failed: ValueError" and o[1]["error"] == "out of memory", o
