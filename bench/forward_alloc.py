# Heap allocated per forwarded traffic frame on MicroPython (gc.mem_alloc
# delta over N forwarded frames after warm-up), SNEK-routed and
# tree-routed. Runs under micropython (and CPython, where it only checks
# that forwarding works). Prints one JSON line.
import sys
import gc
import json

sys.path.insert(0, "firmware")
sys.path.insert(0, "lib")
from snake import wire, platform
from snakehost import wire_host
from snake.crypto import Signer
from snake.profile import Profile
from snake.router import Router
from snake import report

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000


def sign_chain(root_s, seq, path):
    hops = []
    tmp = bytearray(2048)
    for s, port in path:
        n = wire_host.encode_announcement(tmp, root_s.public, seq, hops + [(port, s.public, b"\0" * 64)])
        f = wire.Frame(16)
        f.decode(tmp, n)
        hops.append((port, s.public, s.sign(bytes(tmp[f.ann_off:f.hop_off[len(hops)]]))))
    n = wire_host.encode_announcement(tmp, root_s.public, seq, hops)
    return bytes(tmp[:n])


def main():
    signers = sorted([Signer(bytes([i]) * 32) for i in range(1, 6)], key=lambda s: s.public)
    lo, me_s, mid, hi, root = signers   # keys ascending
    prof = Profile.load("boards/ESP32_GENERIC/profile.json")
    r = Router(prof, me_s, 0)
    out = bytearray(prof.frame_max)
    sent = [0]

    def tx(port, buf, n):
        platform.copy_into(out, 0, buf, 0, n)   # the runtime's queue copy
        sent[0] += 1
        return True
    r.tx = tx
    r.port_up(1, root.public, 1, 0)     # parent: root
    r.port_up(2, lo.public, 1, 0)       # child: lo
    r.receive(1, bytearray(sign_chain(root, 1, [(root, 1)])), len(sign_chain(root, 1, [(root, 1)])), 1)
    assert report.parent_port(r) == 1
    # SNEK: traffic from lo towards hi (above us -> to the parent)
    buf = bytearray(prof.frame_max)
    payload = b"x" * 200
    snek = bytearray(prof.frame_max)
    n_snek = wire.encode_traffic(snek, b"", b"\x01\x02", hi.public, lo.public, wire.FULL_KEY, 0, payload, 64)
    # tree: traffic from lo to the root's coordinates [] -> not useful; use
    # coordinates of a sibling under the root: [1, 7]
    tree = bytearray(prof.frame_max)
    n_tree = wire.encode_traffic(tree, wire_host.encode_coords([3])[2:], b"\x01\x02", hi.public, lo.public,
                                 wire.FULL_KEY, 0, payload, 64)
    # an application datagram (docs/reference/DATAGRAMS.md: DATA, ack
    # asked, one fragment of 200 bytes): relays forward it as any traffic
    dpay = bytes([0x53, 0x44, 1, 1, 3, 0, 7, 0, 9, 1, 2, 1, 0, 0, 200, 0, 200]) + payload
    dgram = bytearray(prof.frame_max)
    n_dgram = wire.encode_traffic(dgram, b"", b"\x01\x02", hi.public, lo.public, wire.FULL_KEY, 0, dpay, 64)
    res = {}
    for name, frame, n in (("snek", snek, n_snek), ("tree", tree, n_tree), ("dgram", dgram, n_dgram)):
        for i in range(200):     # warm-up
            platform.copy_into(buf, 0, frame, 0, n)
            r.receive(2, buf, n, 10)
        before_sent = sent[0]
        gc.collect()
        a0 = gc.mem_alloc() if platform.MICROPYTHON else 0
        for i in range(N):
            platform.copy_into(buf, 0, frame, 0, n)
            r.receive(2, buf, n, 10)
        a1 = gc.mem_alloc() if platform.MICROPYTHON else 0
        fwd = sent[0] - before_sent
        res[name] = {"frames": N, "forwarded": fwd,
                     "bytes_per_frame": (a1 - a0) / N if platform.MICROPYTHON else None}
    res["interpreter"] = sys.implementation.name
    print(json.dumps(res))


main()
