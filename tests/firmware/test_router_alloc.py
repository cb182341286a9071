# The forwarding hot path allocates nothing on MicroPython: receive a traffic
# frame, decide (SNEK or tree), rewrite the watermark, hand it to the queue.
import gc
from snake import wire, platform
from snakehost import wire_host
from routertest import Node, signer, keys_sorted, announcement
from snake import report

K = keys_sorted(list(range(41, 46)))  # lo, me, mid, hi, root


def _relay():
    n = Node(K[1], frame_max=1024)
    out = bytearray(1024)

    def tx(port, buf, m):
        platform.copy_into(out, 0, buf, 0, m)
        n.sent_count += 1
        return True
    n.sent_count = 0
    n.r.tx = tx
    n.r.port_up(1, signer(K[4]).public, 1, 0)
    n.r.port_up(2, signer(K[0]).public, 1, 0)
    n.r.receive(1, bytearray(announcement(K[4], 1, [(K[4], 1)])), len(announcement(K[4], 1, [(K[4], 1)])), 1)
    assert report.parent_port(n.r) == 1
    return n


def _measure(n, frame, count):
    buf = bytearray(1024)
    m = len(frame)
    for _ in range(50):
        platform.copy_into(buf, 0, frame, 0, m)
        n.r.receive(2, buf, m, 10)
    sent0 = n.sent_count
    gc.collect()
    a0 = gc.mem_alloc() if platform.MICROPYTHON else 0
    for _ in range(count):
        platform.copy_into(buf, 0, frame, 0, m)
        n.r.receive(2, buf, m, 10)
    a1 = gc.mem_alloc() if platform.MICROPYTHON else 0
    assert n.sent_count - sent0 == count
    return a1 - a0


def test_snek_forwarding_allocates_nothing():
    n = _relay()
    fb = bytearray(1024)
    k = wire.encode_traffic(fb, b"", b"\x01\x02", signer(K[3]).public, signer(K[0]).public,
                            wire.FULL_KEY, 0, b"p" * 200, 64)
    assert _measure(n, bytes(fb[:k]), 500) == 0


def test_tree_forwarding_allocates_nothing():
    n = _relay()
    fb = bytearray(1024)
    k = wire.encode_traffic(fb, wire_host.encode_coords([3])[2:], b"\x01\x02", signer(K[3]).public,
                            signer(K[0]).public, wire.FULL_KEY, 0, b"p" * 200, 64)
    assert _measure(n, bytes(fb[:k]), 500) == 0
