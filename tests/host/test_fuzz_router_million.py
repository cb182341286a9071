"""Router fuzzing under CPython (Hardening, item 1): 1,000,000 random and
mutated frames through Router.receive with the real nacl ed25519 backend,
plus a hypothesis-driven run of well-formed frames with arbitrary field
values.

The engine is tests/firmware/test_fuzz_router.py (the same rig runs 100,000
frames under MicroPython there, with a stand-in hash "signature" backend).
Here the crypto is real: the node under test is B of the wire-vector line
A - B - C, so the reference implementation's captured frames (announcement
from A, bootstrap and SNEK traffic from C, tree traffic from A, wakeups)
are genuinely valid for it and their signatures verify; mutations of them
fail exactly where a forgery would. The bootstrap verification policy
cycles through all / on-change / off every 10,000 frames (so a third of
the run skips bootstrap signatures by policy, as a slow board would).

Measured frame rate is printed (pytest -s) and recorded as a property.
"""
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import test_fuzz_router as F
from snake import crypto, crypto_backends, wire
from snake import report

MILLION = int(os.environ.get("SNAKEMESH_FUZZ_FRAMES", "1000000"))


class FastRng:
    """random.Random behind the fwtest.Rng interface (the xorshift PRNG in
    pure Python costs ~20 % of the run under CPython)."""

    def __init__(self, seed):
        r = random.Random(seed)
        f = r.random
        g = r.getrandbits
        self.below = lambda n: int(f() * n)
        self.next = lambda: g(32)
        self.bytes = r.randbytes


@pytest.fixture
def nacl():
    prev = crypto.BACKEND
    try:
        crypto_backends.use_backend("nacl")
    except ValueError:
        pytest.fail("PyNaCl backend not available (pip install pynacl)")
    yield
    crypto_backends.use_backend(prev)


def test_vector_frames_are_legitimate_for_the_node_under_test(nacl):
    # with real crypto the captured reference frames pass every check:
    # otherwise mutating them would not reach past the signature checks
    rig = F.Rig(1)
    rig.lossy = False
    r = rig.r
    assert report.parent_port(r) == 1 and report.root_key(r) == rig.A.public
    drops0 = sum(r.counters.drops)
    # (vector id, port it arrives on, port B must relay it to: 0 = consumed)
    for fid, port, out in (("bootstrap_C_to_B", 2, 0), ("traffic_snek_C_to_B_originated", 2, 1),
                           ("traffic_tree_A_to_B_originated", 1, 2)):
        rig.sent = []
        rig.feed(port, F.unhex([v for v in F.vectors()["frames"] if v["id"] == fid][0]["hex"]))
        assert [p for p, fr in rig.sent if fr[5] != wire.T_KEEPALIVE] == ([out] if out else []), fid
    assert sum(r.counters.drops) == drops0, r.counters.as_dict()["drops"]
    assert report.desc_key(r) == rig.C.public
    assert r.counters.forwarded == 2


def test_router_survives_a_million_fuzzed_frames_with_real_crypto(nacl, record_property):
    rig, dt = F.run_fuzz(MILLION, 0xF022, FastRng(0xF022))
    s = F.summary(rig, dt)
    print("\nfuzz_router cpython nacl", s)
    record_property("fuzz_frames", rig.frames)
    record_property("fuzz_frames_per_s", s["frames_per_s"])
    assert rig.frames >= MILLION
    # the run went deep: a good share of frames passed the decoder and
    # reached the tree, the snake and the forwarding code
    c = rig.r.counters
    assert sum(c.rx) > MILLION // 5
    assert c.verify_done > 1000


# ---- hypothesis: well-formed frames, arbitrary field values ----------------
keys = st.one_of(st.binary(min_size=32, max_size=32),
                 st.sampled_from([b"\x00" * 32, b"\xff" * 32]))
u64 = st.one_of(st.integers(0, 3), st.integers(0, (1 << 64) - 1))
ports = st.lists(st.integers(0, (1 << 21) - 1), max_size=4)


@st.composite
def frames(draw, rig):
    t = draw(st.integers(0, 4))
    signers = rig.signers
    use_root = draw(st.booleans())
    root = report.root_key(rig.r) if use_root else draw(keys)
    rseq = report.root_seq(rig.r) if draw(st.booleans()) else draw(u64)
    if t == 0:
        return F.keepalive()
    if t == 1:
        hops = []
        for _ in range(draw(st.integers(1, 4))):
            s = signers[draw(st.integers(0, len(signers) - 1))]
            hops.append((draw(st.integers(0, 300)), s if draw(st.booleans()) else None, s.public))
        return F.build_announcement(root, rseq, hops)
    if t == 2:
        s = signers[draw(st.integers(0, len(signers) - 1))]
        return F.build_bootstrap(s, draw(u64), root, rseq, draw(keys), draw(u64), draw(st.booleans()))
    if t == 3:
        dc = wire.encode_coords_body(draw(ports))
        return F.build_traffic(draw(keys), draw(keys), draw(st.binary(max_size=64)), dc,
                               wire.encode_coords_body(draw(ports)), draw(keys), draw(u64),
                               draw(st.integers(0, 255)))
    s = signers[draw(st.integers(0, len(signers) - 1))]
    return F.build_wakeup(s, draw(u64), root, rseq, draw(st.integers(0, 255)), draw(st.booleans()))


def _feed_examples(rig):
    @settings(max_examples=400, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data):
        for _ in range(data.draw(st.integers(1, 8))):
            frame = data.draw(frames(rig))
            port = data.draw(st.sampled_from([1, 2, 3, 4, 5, 6, 0, 7]))
            rig.frames += 1
            rig.feed(port, frame)
            rig.advance(data.draw(st.integers(0, 3000)))
            if rig.dropped_peer:
                rig.dropped_peer = False
                rig.bring_up()
        rig.check()
    run()


def test_hypothesis_frames_never_break_the_router_and_it_still_routes(nacl):
    rig = F.Rig(7)
    _feed_examples(rig)
    assert rig.frames >= 400
    rig.check()
    rig.heal_and_check_routing()
