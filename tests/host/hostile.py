"""Helpers to craft hostile frames and to put them on a live link of a
virtual-time Mesh (host_tools.sim.harness).

An attacker is a node joined to the mesh next to its victim (``attach``):
it runs an ordinary router (so it holds a real link, a switch port at the
victim and a place in the tree), and the tests put crafted frames on its
link with ``inject`` / ``blast`` exactly as its router would send them:
they are serialised at the link's bandwidth, queued in its bounded send
queue and arrive one link latency later, then go through the victim's
Router.receive like any other frame.
"""
import hashlib

from snake import wire
from snakehost import wire_host
from snake.crypto import Signer

FAKE_SIG = b"\x5a" * 64


def junk_sig(tag=b""):
    d = hashlib.sha256(b"hostile" + bytes(tag)).digest()
    return d + d


def attach(mesh, victim, name="evil", link="wifi"):
    """Join an attacker node linked only to `victim`; returns its NodeState."""
    return mesh.join(name, [victim], link=link)


def node_signer(mesh, name):
    return mesh.node(name).signer


def fresh_signers(count, tag="attacker"):
    """`count` Signers for keys the attacker made up (not mesh nodes)."""
    out = []
    for i in range(count):
        out.append(Signer(hashlib.sha256(("%s:%d" % (tag, i)).encode()).digest()))
    return out


# ---- sending on a link ------------------------------------------------------
def inject(mesh, sender, receiver, frame):
    """Put `frame` on the live link sender -> receiver as if the sender's
    router had sent it. Returns False when the link is down or its send
    queue is full (like Router.tx)."""
    n = mesh.node(sender)
    port = mesh.port_of(sender, receiver)
    if not port:
        return False
    buf = bytearray(frame)
    return mesh._tx(n, port, buf, len(buf))


def blast(mesh, sender, receiver, frames, step_s=0.0005, on_step=None, max_s=600.0):
    """Send every frame of the iterable as fast as the link takes them (a
    full send queue waits step_s of virtual time). Calls on_step(i) after
    every frame handed to the link. Returns (sent, virtual seconds taken);
    stops early when the link goes away for longer than a reconnect."""
    t0 = mesh.now
    sent = 0
    for frame in frames:
        while not inject(mesh, sender, receiver, frame):
            mesh.run(step_s)
            if mesh.now - t0 > max_s:
                return sent, mesh.now - t0
        sent += 1
        if on_step is not None:
            on_step(sent)
    return sent, mesh.now - t0


# ---- announcements ------------------------------------------------------------
def decode(frame, max_hops=64):
    f = wire.Frame(max_hops)
    f.decode(frame, len(frame))
    return f


def announcement_of(mesh, name, to):
    """The announcement `name`'s router would send to `to` right now
    (correctly signed for that link)."""
    r = mesh.router(name)
    buf = bytearray(r.frame_max)
    n = r.tree.build(buf, mesh.port_of(name, to))
    return bytes(buf[:n])


def hops_of(frame):
    """[(port, key, sig)] of an announcement, plus (root, root_seq)."""
    f = decode(frame)
    out = []
    for i in range(f.nhops):
        ko, so = f.hop_key_off[i], f.hop_sig_off[i]
        out.append((f.hop_port[i], bytes(frame[ko:ko + 32]), bytes(frame[so:so + 64])))
    return bytes(frame[f.root_off:f.root_off + 32]), f.root_seq, out


def extend(frame, port, signer):
    """Append a hop (port, signer's key) signed over the whole announcement,
    as a relay does."""
    f = decode(frame)
    buf = bytearray(len(frame) + 200)
    sig = signer.sign(wire_host.announcement_signed(frame, f))
    n = wire_host.extend_announcement(buf, frame, f, port, signer.public, sig)
    return bytes(buf[:n])


def append_hop(frame, port, key, sig):
    """Append a hop with an arbitrary key and signature."""
    f = decode(frame)
    buf = bytearray(len(frame) + 200)
    n = wire_host.extend_announcement(buf, frame, f, port, key, sig)
    return bytes(buf[:n])


def announce(root, root_seq, hops):
    """Build an announcement; hops are (port, signer) — properly signed —
    or (port, key, sig) — taken as given."""
    tmp = bytearray(8192)
    done = []
    for h in hops:
        if len(h) == 2:
            port, s = h
            n = wire_host.encode_announcement(tmp, root, root_seq, done + [(port, s.public, FAKE_SIG)])
            f = decode(bytes(tmp[:n]))
            sig = s.sign(bytes(tmp[f.ann_off:f.hop_off[len(done)]]))
            done.append((port, s.public, sig))
        else:
            done.append(h)
    n = wire_host.encode_announcement(tmp, root, root_seq, done)
    return bytes(tmp[:n])


def reencode(frame, root=None, root_seq=None, hops=None):
    """The announcement with some fields replaced (signatures kept as they
    are, so they may no longer verify)."""
    r0, s0, h0 = hops_of(frame)
    return announce(r0 if root is None else root, s0 if root_seq is None else root_seq,
                    h0 if hops is None else hops)


def flip_sig(frame, hop):
    """Flip one bit of hop `hop`'s signature."""
    f = decode(frame)
    b = bytearray(frame)
    b[f.hop_sig_off[hop] + 7] ^= 0x10
    return bytes(b)


# ---- bootstraps, wakeups, traffic --------------------------------------------
def bootstrap(signer, seq, root, root_seq, wm_key=None, wm_seq=0, sig=None, key=None):
    """A bootstrap from `signer` (or claiming `key` with the given sig)."""
    k = key if key is not None else signer.public
    if sig is None:
        sig = signer.sign(wire.bootstrap_signed(seq, root, root_seq))
    buf = bytearray(512)
    n = wire.encode_bootstrap(buf, k, wm_key if wm_key is not None else root, wm_seq, seq,
                              root, root_seq, sig)
    return bytes(buf[:n])


def wakeup(signer, seq, root, root_seq, hop_limit=wire.HOP_LIMIT_WAKEUP, sig=None, key=None):
    k = key if key is not None else signer.public
    if sig is None:
        sig = signer.sign(wire.bootstrap_signed(seq, root, root_seq))
    buf = bytearray(512)
    n = wire.encode_wakeup(buf, k, seq, root, root_seq, sig, hop_limit)
    return bytes(buf[:n])


def traffic(dst, src, payload, wm_key=wire.FULL_KEY, wm_seq=0, dcoords=b"", scoords=b"",
            hop_limit=64):
    buf = bytearray(2048)
    n = wire.encode_traffic(buf, dcoords, scoords, dst, src, wm_key, wm_seq, payload, hop_limit)
    return bytes(buf[:n])


def key_below(key):
    """The key just below `key` (big-endian minus one)."""
    v = int.from_bytes(key, "big") - 1
    return v.to_bytes(32, "big")


# ---- observing -------------------------------------------------------------
class Spy:
    """Records every frame a node's router receives (after the link), by
    wrapping Router.receive; survives nothing (re-create after a restart)."""

    def __init__(self, mesh, name, ftype=None):
        self.r = mesh.router(name)
        self.frames = []          # (port, bytes)
        self.ftype = ftype
        orig = self.r.receive

        def receive(port, buf, n, now):
            if self.ftype is None or (n > 5 and buf[5] == self.ftype):
                self.frames.append((port, bytes(buf[:n])))
            return orig(port, buf, n, now)

        self._orig = orig
        self.r.receive = receive

    def close(self):
        self.r.receive = self._orig


class TxCount:
    """Counts frames of one type a node's router sends (wraps Router.tx)."""

    def __init__(self, mesh, name, ftype):
        self.r = mesh.router(name)
        self.n = 0
        orig = self.r.tx

        def tx(port, buf, n):
            if buf[5] == ftype:
                self.n += 1
            return orig(port, buf, n)

        self._orig = orig
        self.r.tx = tx

    def close(self):
        self.r.tx = self._orig


def route_ports(r):
    """{key bytes: (src_port, dst_port)} of a router's snake routes."""
    s = r.snake
    t = s.routes
    out = {}
    for i in range(t.capacity):
        if t.used(i):
            out[t.key(i)] = (s.src(i), s.dst(i))
    return out


def disconnects(mesh, victim, attacker):
    """Disconnect events (reason strings) the victim raised for the attacker."""
    out = []
    for _t, who, kind, detail in mesh.events:
        if kind == "disconnect" and who == victim:
            parts = detail.split(" ", 2)
            if len(parts) == 3 and parts[1] == attacker:
                out.append(parts[2])
    return out
