"""A scripted Pinecone peer (CPython, asyncio) talking to real unix-port
nodes over TCP, and the link-level tests that need one: handshake failures
(bad signature, wrong capabilities, wrong version, own key, timeout) are
counted and close the link; a duplicate link to the same key is closed after
its handshake; a byte stream that loses framing is closed; an oversize frame
is skipped and counted without losing the link.

FakePeer (bench/fakepeer.py) builds every frame with the firmware's own
codec (snake.wire) and signs with snake.crypto.
"""
import asyncio
import os
import struct
import time

import pytest

import host_tools  # noqa: F401  (firmware/ and lib/ on sys.path)
from host_tools.procmesh.nodeproc import NodeProcess, free_port, micropython_binary
from snake import wire

from fakepeer import FakePeer, FULL_KEY  # noqa: F401  (bench/, on sys.path in conftest)

pytestmark = pytest.mark.skipif(micropython_binary() is None, reason="micropython binary missing")


# ---------------------------------------------------------------- tests

@pytest.fixture(scope="module")
def node():
    port = free_port()
    n = NodeProcess(seed=bytes([0x21]) * 32, listen=("127.0.0.1", port), multicast=False,
                    handshake_timeout=1.0)
    n.start()
    n.tcp = port
    yield n
    n.stop()


def unix_frame_max():
    import json
    with open(os.path.join(host_tools.BOARDS_DIR, "UNIX", "profile.json")) as f:
        return json.load(f)["frame_max"]


def _run(coro):
    return asyncio.run(coro)


def _hs_fail(node):
    return node.request("stats")["handshake_failures"]


def _seed(i):
    return bytes([0x40 + i]) * 32


def test_good_handshake_then_frames(node):
    async def go():
        p = FakePeer(_seed(1), "127.0.0.1", node.tcp)
        pub = await p.connect()
        assert pub.hex() == node.pubkey
        p.start()
        # the node announces the tree to a new peer at once
        for _ in range(50):
            if p.root is not None:
                break
            await asyncio.sleep(0.05)
        assert p.root is not None and p.root.hex() == node.pubkey
        peers = await asyncio.get_running_loop().run_in_executor(None, node.request, "peers")
        keys = [x["key"] for x in peers["peers"]]
        assert p.key.hex() in keys
        assert [x["link"] for x in peers["peers"] if x["key"] == p.key.hex()] == ["remote"]
        p.close()
    _run(go())


def _bad_hs(mutate):
    p = FakePeer(_seed(2), "127.0.0.1", 0)
    hs = bytearray(p.handshake())
    mutate(hs)
    return bytes(hs)


@pytest.mark.parametrize("reason,mutate", [
    ("bad_signature", lambda hs: hs.__setitem__(60, hs[60] ^ 1)),
    ("capabilities", lambda hs: hs.__setitem__(7, 0x3A)),
    ("version", lambda hs: hs.__setitem__(0, 2)),
])
def test_bad_handshake_counted_and_closed(node, reason, mutate):
    before = _hs_fail(node).get(reason, 0)

    async def go():
        p = FakePeer(_seed(2), "127.0.0.1", node.tcp)
        reader, writer = await asyncio.open_connection("127.0.0.1", node.tcp)
        writer.write(_bad_hs(mutate))
        await writer.drain()
        p.reader, p.writer = reader, writer
        closed = await p.wait_closed(5)
        writer.close()
        return closed
    assert _run(go()), "the node kept a link with a bad handshake open"
    assert _hs_fail(node).get(reason, 0) == before + 1
    assert node.request("status")["peers"] == 0 or all(
        x["key"] != FakePeer(_seed(2), "", 0).key.hex() for x in node.request("peers")["peers"])


def test_own_key_handshake_refused(node):
    # a peer claiming the node's own key (properly signed: same seed)
    before = _hs_fail(node).get("self", 0)

    async def go():
        p = FakePeer(bytes([0x21]) * 32, "127.0.0.1", node.tcp)
        p.reader, p.writer = await asyncio.open_connection("127.0.0.1", node.tcp)
        p.writer.write(p.handshake())
        await p.writer.drain()
        closed = await p.wait_closed(5)
        p.writer.close()
        return closed
    assert _run(go())
    assert _hs_fail(node).get("self", 0) == before + 1


def test_handshake_timeout(node):
    # the node was started with --handshake-timeout 1 (default 10 s)
    before = _hs_fail(node).get("timeout", 0)

    async def go():
        reader, writer = await asyncio.open_connection("127.0.0.1", node.tcp)
        writer.write(b"\x01\x00\x00")      # a partial handshake, then silence
        await writer.drain()
        t0 = time.monotonic()
        p = FakePeer(_seed(3), "", 0)
        p.reader, p.writer = reader, writer
        closed = await p.wait_closed(6)
        writer.close()
        return closed, time.monotonic() - t0
    closed, waited = _run(go())
    assert closed
    assert 0.8 <= waited < 4, waited
    assert _hs_fail(node).get("timeout", 0) == before + 1


def test_default_handshake_timeout_is_10s():
    from snake.runtime import config, node as nodemod
    assert nodemod.HANDSHAKE_TIMEOUT_MS == 10000
    assert config.from_argv(["--seed", "11" * 32]).hs_timeout_ms == 10000


def test_duplicate_link_closed_keeps_older(node):
    async def go():
        a = FakePeer(_seed(4), "127.0.0.1", node.tcp)
        await a.connect()
        a.start()
        b = FakePeer(_seed(4), "127.0.0.1", node.tcp)   # same key, same link type
        await b.connect()
        closed_b = await b.wait_closed(5)
        await asyncio.sleep(0.3)
        alive_a = not a.closed
        peers = await asyncio.get_running_loop().run_in_executor(None, node.request, "peers")
        a.close()
        b.close()
        return closed_b, alive_a, [x["key"] for x in peers["peers"]].count(a.key.hex())
    dup0 = node.request("stats")["links"]["duplicate"]
    closed_b, alive_a, n = _run(go())
    assert closed_b and alive_a and n == 1
    assert node.request("stats")["links"]["duplicate"] == dup0 + 1


def test_lost_framing_closes_link(node):
    async def go():
        p = FakePeer(_seed(5), "127.0.0.1", node.tcp)
        await p.connect()
        await p.send(b"XXXX" + b"\x00" * 6)        # not "pine": stream out of sync
        closed = await p.wait_closed(5)
        p.close()
        return closed
    f0 = node.request("stats")["links"]["framing"]
    assert _run(go())
    assert node.request("stats")["links"]["framing"] == f0 + 1


def test_oversize_frame_skipped_link_kept(node):
    async def go():
        p = FakePeer(_seed(6), "127.0.0.1", node.tcp)
        await p.connect()
        p.start()
        big = unix_frame_max() + 100
        hdr = b"pine" + bytes([0, wire.T_TRAFFIC, 0, 10]) + struct.pack(">H", big)
        await p.send(hdr + b"\x00" * (big - 10))
        await p.keepalive()
        await asyncio.sleep(0.5)
        alive = not p.closed
        peers = await asyncio.get_running_loop().run_in_executor(None, node.request, "peers")
        p.close()
        return alive, p.key.hex() in [x["key"] for x in peers["peers"]]
    d0 = node.request("stats")["drops"].get("oversize", 0)
    alive, listed = _run(go())
    assert alive and listed
    assert node.request("stats")["drops"].get("oversize", 0) == d0 + 1


def test_node_answers_after_link_abuse(node):
    # after all of the above the node still runs and answers
    st = node.request("status")
    assert st["ok"] is True and st["key"] == node.pubkey
    assert node.alive()


# ------------------------------------------- reference implementation bytes

def _vectors():
    import json
    with open(os.path.join(host_tools.REPO_ROOT, "tests", "data", "pinecone_wire_vectors.json")) as f:
        return json.load(f)


def test_reference_pinecone_stream_replay(tmp_path):
    """A node with the seed of reference node A (line capture, seed 11*32)
    sends byte-identical handshake and first tree announcement to what the
    Go reference sent, and accepts the byte stream that reference node B
    sent to A: handshake, announcements, bootstrap, relayed traffic."""
    v = _vectors()
    hs = dict((h["node"], bytes.fromhex(h["hex"])) for h in v["handshakes"])
    fr = dict((f["id"], bytes.fromhex(f["hex"])) for f in v["frames"])
    seed_a = bytes.fromhex(v["nodes"]["A"]["seed"])
    key_b = v["nodes"]["B"]["public_key"]
    key_a = v["nodes"]["A"]["public_key"]
    port = free_port()
    n = NodeProcess(seed=seed_a, listen=("127.0.0.1", port), multicast=False,
                    stderr=str(tmp_path / "node.err"))
    n.start()
    try:
        assert n.pubkey == key_a

        async def go():
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(hs["B"])
            await writer.drain()
            got_hs = await asyncio.wait_for(reader.readexactly(104), 5)
            hdr = await asyncio.wait_for(reader.readexactly(10), 5)
            ann = hdr + await reader.readexactly(struct.unpack(">H", hdr[8:10])[0] - 10)
            # B's stream to A, in capture order
            for fid in ("tree_announcement_B_as_root_to_A", "tree_announcement_2hop_B_to_A_port1",
                        "bootstrap_B_to_A", "traffic_snek_B_to_A_relayed", "keepalive_A_to_B"):
                writer.write(fr[fid])
                await writer.drain()
                await asyncio.sleep(0.2)
            loop = asyncio.get_running_loop()
            res = {}
            for cmd in ("peers", "snake", "routes", "stats"):
                res[cmd] = await loop.run_in_executor(None, n.request, cmd)
            writer.close()
            return got_hs, ann, res
        got_hs, ann, res = asyncio.run(go())
        assert got_hs == hs["A"], "handshake differs from the reference's"
        assert ann == fr["tree_announcement_root_A_to_B_port1"], "first announcement differs from the reference's"
        peers = res["peers"]["peers"]
        assert [p["key"] for p in peers] == [key_b]
        assert peers[0]["root"] == key_a and peers[0]["coords"] == [1]
        assert res["snake"]["desc"]["key"] == key_b
        assert [r["key"] for r in res["routes"]["routes"]] == [key_b]
        st = res["stats"]
        assert st["links"]["app_rx"] == 1 and st["delivered"] == 1
        assert st["drops"].get("sanity", 0) == 0 and st["drops"].get("bad_signature", 0) == 0
        assert st["handshake_failures"] == {}
    finally:
        n.stop()
