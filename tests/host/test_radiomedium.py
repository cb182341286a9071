"""The server both emulated radio media share (host_tools/radiomedium.py),
through each medium in this process: framing errors, HELLO first, one radio
per name, counters across a reconnect, the shared control commands, the
command line's checks."""
import asyncio
import json
import struct

import pytest

from host_tools.blemu import medium as BM
from host_tools.espnowemu import medium as EM

CTL, CTL_REPLY, ERROR = 32, 0xA0, 0x8F


class Kind:
    def __init__(self, name, make, hello, ack, zero_text, main, bad_hellos):
        self.name = name
        self.make = make          # topology -> Medium
        self.hello = hello        # radio name -> HELLO body
        self.ack = ack            # radio name -> HELLO_ACK body
        self.zero_text = zero_text
        self.main = main
        self.bad_hellos = bad_hellos   # HELLO bodies the medium refuses


KINDS = [
    Kind("ble", BM.Medium, lambda n: n.encode(), lambda n: b"\x01" + BM.addr_for(n),
         "blemu: zero-length message", BM.main, ()),
    Kind("espnow", EM.Medium, lambda n: b"\x01" + n.encode(), EM.mac_for,
         "zero-length message", EM.main, (b"", b"\x01")),   # channel and a name
]


@pytest.fixture(params=KINDS, ids=lambda k: k.name)
def kind(request):
    return request.param


def fr(op, body=b""):
    return struct.pack(">HB", len(body) + 1, op) + body


async def read_msg(reader):
    hdr = await asyncio.wait_for(reader.readexactly(3), 5)
    n = (hdr[0] << 8) | hdr[1]
    body = await asyncio.wait_for(reader.readexactly(n - 1), 5)
    return hdr[2], body


async def closed(reader):
    return await asyncio.wait_for(reader.read(), 5) == b""


def run_with_medium(kind, fn):
    async def main():
        m = kind.make({"a": {"b"}, "b": {"a"}})
        got = asyncio.Event()
        where = []

        def ready(addr):
            where.append(addr[1])
            got.set()

        task = asyncio.create_task(m.run("127.0.0.1", 0, ready))
        await asyncio.wait_for(got.wait(), 5)
        try:
            return await fn(m, where[0])
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
    return asyncio.run(main())


async def ctl(port, line):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(fr(CTL, line.encode()))
        op, body = await read_msg(r)
        assert op == CTL_REPLY
        return json.loads(body)
    finally:
        w.close()


def test_a_zero_length_message_ends_the_connection(kind):
    async def fn(m, port):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"\x00\x00\x01")
        assert await read_msg(r) == (ERROR, kind.zero_text.encode())
        assert await closed(r)
        w.close()
    run_with_medium(kind, fn)


def test_the_first_message_must_be_a_hello(kind):
    async def fn(m, port):
        for first in [fr(2, b"\x00\x00\x00")] + [fr(1, b) for b in kind.bad_hellos]:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(first)
            assert await read_msg(r) == (ERROR, b"first message must be HELLO")
            assert await closed(r)
            w.close()
        assert m.radios == {}
    run_with_medium(kind, fn)


def test_control_commands_both_media_have(kind):
    async def fn(m, port):
        assert await ctl(port, "topology") == {"ok": True, "range": {"a": ["b"], "b": ["a"]}}
        assert await ctl(port, "cut a b") == {"ok": True}
        assert (await ctl(port, "topology"))["range"] == {"a": [], "b": []}
        assert await ctl(port, "link b c") == {"ok": True}
        assert (await ctl(port, "topology"))["range"] == {"a": [], "b": ["c"], "c": ["b"]}
        assert await ctl(port, "kill nobody") == {"ok": False, "error": "no such radio"}
        assert await ctl(port, "   ") == {"ok": False, "error": "empty command"}
        assert await ctl(port, "cut a") == {"ok": False, "error": "unknown command: cut a"}
    run_with_medium(kind, fn)


def test_one_radio_per_name_and_its_counters_survive_a_reconnect(kind):
    async def fn(m, port):
        r1, w1 = await asyncio.open_connection("127.0.0.1", port)
        w1.write(fr(1, kind.hello("a")))
        assert await read_msg(r1) == (0x80, kind.ack("a"))     # HELLO_ACK: the name's stable address
        r2, w2 = await asyncio.open_connection("127.0.0.1", port)
        w2.write(fr(1, kind.hello("a")))
        assert await read_msg(r2) == (ERROR, b"radio name already connected: a")
        assert await closed(r2)
        w2.close()
        w1.write(fr(0x7F, b"junk"))       # no such op: counted, the radio stays
        for _ in range(100):
            st = await ctl(port, "stats")
            if st["nodes"]["a"].get("bad_messages"):
                break
            await asyncio.sleep(0.02)
        assert st["nodes"]["a"]["bad_messages"] == 1 and st["nodes"]["a"]["present"] is True
        w1.close()
        for _ in range(100):
            st = await ctl(port, "stats")
            if not st["nodes"]["a"]["present"]:
                break
            await asyncio.sleep(0.02)
        assert st["nodes"]["a"]["present"] is False and st["nodes"]["a"]["bad_messages"] == 1
        r3, w3 = await asyncio.open_connection("127.0.0.1", port)
        w3.write(fr(1, kind.hello("a")))
        assert await read_msg(r3) == (0x80, kind.ack("a"))
        st = await ctl(port, "stats")
        assert st["nodes"]["a"]["present"] is True and st["nodes"]["a"]["bad_messages"] == 1
        w3.close()
    run_with_medium(kind, fn)


@pytest.mark.parametrize("args, line", [
    (["--loss", "1"], "error: --loss must be within [0, 1)"),
    (["--kbps", "0"], None),
])
def test_bad_options_get_one_line_and_exit_2(kind, args, line, tmp_path, capsys):
    topo = tmp_path / "t.txt"
    topo.write_text("a b\n")
    assert kind.main(["--topology", str(topo)] + args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: --")
    if line:
        assert err[0] == line
    assert kind.main(["--topology", str(tmp_path / "none.txt")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot read topology %s" % (tmp_path / "none.txt"))
