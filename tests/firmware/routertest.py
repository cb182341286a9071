# Helpers for router rule tests: a node under test with captured outputs and
# scripted fake peers that build signed frames with the real codec and
# crypto. Runs under MicroPython and CPython.
from snake import wire
from snakehost import wire_host
from snake.crypto import Signer
from snake.profile import Profile
from snake.router import Router

_signers = {}


def signer(i):
    """Deterministic key i (seed = i repeated 32 times), cached: signing with
    the pure-Python backend is slow, key derivation too."""
    s = _signers.get(i)
    if s is None:
        s = Signer(bytes([i]) * 32)
        _signers[i] = s
    return s


def keys_sorted(ids):
    """The ids ordered by their public key (ascending)."""
    return sorted(ids, key=lambda i: signer(i).public)


class Node:
    """A Router under test plus everything it emitted."""

    def __init__(self, i, now=0, **profile):
        d = {"max_peers": 6, "max_routes": 8, "coord_cache": 4, "sig_cache": 32,
             "max_hops": 8, "frame_max": 1024, "wakeup_filter": 4}
        d.update(profile)
        self.signer = signer(i)
        self.key = self.signer.public
        self.r = Router(Profile(d), self.signer, now)
        self.sent = []           # (port, frame bytes)
        self.delivered = []      # (src, payload)
        self.closed = []         # (port, reason)
        self.events = []
        self.r.tx = self._tx
        self.r.deliver = lambda src, payload: self.delivered.append((src, payload))
        self.r.disconnect = lambda port, reason: self.closed.append((port, reason))
        self.r.on_event = lambda kind, detail: self.events.append((kind, detail))
        self.seq_clock = 1000
        self.r.wall_ms = self._clock
        self.queue_ok = True

    def _clock(self):
        self.seq_clock += 1
        return self.seq_clock

    def _tx(self, port, buf, n):
        if not self.queue_ok:
            return False
        self.sent.append((port, bytes(buf[:n])))
        return True

    def frames(self, ftype=None, port=None):
        out = []
        for p, b in self.sent:
            if (ftype is None or b[5] == ftype) and (port is None or p == port):
                out.append((p, b))
        return out

    def clear(self):
        self.sent = []

    def rx(self, port, frame, now):
        buf = bytearray(2048)
        buf[0:len(frame)] = frame
        self.r.receive(port, buf, len(frame), now)


def decode(frame, max_hops=16):
    f = wire.Frame(max_hops)
    f.decode(frame, len(frame))
    return f


def announcement(root_id, root_seq, path, to_port=1):
    """A tree announcement rooted at root_id travelling along `path`: a list
    of (node_id, port) where port is that node's port towards the next hop;
    the last entry is the sender. Every hop is properly signed."""
    buf = bytearray(2048)
    root = signer(root_id).public
    hops = []
    for node_id, port in path:
        s = signer(node_id)
        tmp = bytearray(2048)
        n = wire_host.encode_announcement(tmp, root, root_seq, hops + [(port, s.public, b"\x00" * 64)])
        f = decode(bytes(tmp[:n]))
        signed = bytes(tmp[f.ann_off:f.hop_off[len(hops)]])
        hops.append((port, s.public, s.sign(signed)))
    n = wire_host.encode_announcement(buf, root, root_seq, hops)
    return bytes(buf[:n])


def bootstrap(origin_id, seq, root_id, root_seq, wm_key=None, wm_seq=0, sig=None):
    s = signer(origin_id)
    root = signer(root_id).public
    if sig is None:
        sig = s.sign(wire.bootstrap_signed(seq, root, root_seq))
    buf = bytearray(512)
    n = wire.encode_bootstrap(buf, s.public, wm_key or root, wm_seq, seq, root, root_seq, sig)
    return bytes(buf[:n])


def wakeup(origin_id, seq, root_id, root_seq, hop_limit=5, sig=None):
    s = signer(origin_id)
    root = signer(root_id).public
    if sig is None:
        sig = s.sign(wire.bootstrap_signed(seq, root, root_seq))
    buf = bytearray(512)
    n = wire.encode_wakeup(buf, s.public, seq, root, root_seq, sig, hop_limit)
    return bytes(buf[:n])


def traffic(dst_key, src_key, payload, dcoords=b"", scoords=b"", wm_key=None, wm_seq=0, hop_limit=10):
    buf = bytearray(1024)
    n = wire.encode_traffic(buf, dcoords, scoords, dst_key, src_key,
                            wm_key or wire.FULL_KEY, wm_seq, payload, hop_limit)
    return bytes(buf[:n])
