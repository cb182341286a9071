"""Simulated links: per-edge latency, bandwidth (serialisation delay, FIFO
per direction), loss, and the bounded send queue of each direction.

A connection (an edge whose both ends are up and have a port for it) has two
`Endpoint`s, one per direction. Frames sent on a direction are serialised
one after another (FIFO) at `bw` bytes/s and arrive `latency` later, so a
direction never reorders frames (TCP and GATT streams are ordered). When the
connection closes its endpoints are marked dead and frames still in flight
are dropped on arrival.

ESP-NOW links carry a frame as 243-byte messages that the firmware's port
resends until acked (snake/runtime/espnow_port.py: go-back-N after a 120 ms
timeout), so their loss is not a lost frame: each lost message delays the
frame (and the frames behind it) by one resend timeout.
"""
from collections import deque

# Link type names in the router's numbering (docs/reference/PROTOCOL_NOTES.md "Link types"):
# the firmware's list
from snake.telemetry import LINK_NAMES as LINK_TYPES  # noqa: E402
LINK_IDS = {name: i for i, name in enumerate(LINK_TYPES)}
DEFAULT_LINK = "wifi"

# Per link type: one-way latency (ms), bandwidth (bytes/s, 0 = unlimited),
# loss probability per frame.
LINK_DEFAULTS = {
    "local": {"latency_ms": 0.1, "bw": 0, "loss": 0.0},
    "wifi": {"latency_ms": 5.0, "bw": 1000000, "loss": 0.0},
    "bonjour": {"latency_ms": 5.0, "bw": 1000000, "loss": 0.0},
    "remote": {"latency_ms": 40.0, "bw": 500000, "loss": 0.0},
    "ble": {"latency_ms": 20.0, "bw": 20000, "loss": 0.0},
    # ESP-NOW at its default 1 Mbit/s rate: a message each way and its ack
    # per 243 bytes; the per-hop figures of `make bench` (docs/reports/BENCH.md)
    "espnow": {"latency_ms": 4.0, "bw": 40000, "loss": 0.0},
}

# ESP-NOW: stream bytes per message and the resend timeout (snake/runtime/espnow_port.py)
ESPNOW_CHUNK = 243
ESPNOW_RTO_US = 120000
ESPNOW_MAX_RESENDS = 30


def link_params(edge, overrides=None):
    """(latency_us, bw, loss) for a topology Edge: the edge's own settings,
    else `overrides[link_type]` / `overrides` (flat keys apply to every
    type), else LINK_DEFAULTS."""
    d = dict(LINK_DEFAULTS[edge.link])
    if overrides:
        for k in ("latency_ms", "bw", "loss"):
            if k in overrides:
                d[k] = overrides[k]
        per = overrides.get(edge.link)
        if per:
            d.update(per)
    if edge.latency_ms is not None:
        d["latency_ms"] = edge.latency_ms
    if edge.bw is not None:
        d["bw"] = edge.bw
    if edge.loss is not None:
        d["loss"] = edge.loss
    return int(round(d["latency_ms"] * 1000)), int(d["bw"]), float(d["loss"])


def check_overrides(overrides):
    """Validate a link_defaults dict; raises ValueError with a clear message."""
    if overrides is None:
        return
    if not isinstance(overrides, dict):
        raise ValueError("link_defaults must be a dict")
    for k, v in overrides.items():
        if k in LINK_IDS:
            if not isinstance(v, dict):
                raise ValueError("link_defaults[%r] must be a dict" % k)
            for kk, vv in v.items():
                _check_param(kk, vv)
        else:
            _check_param(k, v)


def _check_param(k, v):
    if k not in ("latency_ms", "bw", "loss"):
        raise ValueError("unknown link parameter %r (latency_ms, bw, loss, or a link type)" % k)
    if not isinstance(v, (int, float)) or v < 0 or (k == "loss" and v > 1):
        raise ValueError("bad value for link parameter %s: %r" % (k, v))


class Endpoint:
    """One direction of a live connection: frames from `src` to `dst`."""

    __slots__ = ("link", "src", "dst", "dst_port", "latency", "bw", "loss",
                 "busy_until", "queue", "qcap", "alive", "peer", "arq")

    def __init__(self, link, src, dst, dst_port, latency_us, bw, loss, qcap):
        self.link = link            # the sim's Link (edge state)
        self.src = src              # sending NodeState
        self.dst = dst              # receiving NodeState
        self.dst_port = dst_port    # port number at the receiver
        self.latency = latency_us
        self.bw = bw                # bytes/s, 0 = unlimited
        self.loss = loss
        self.busy_until = 0         # end of the last serialisation (us)
        self.queue = deque()        # serialisation end times of queued frames
        self.qcap = qcap            # frames waiting for the wire, at most
        self.alive = True
        self.peer = None            # the opposite direction
        # loss is resent by the link (ESP-NOW), not a dropped frame
        self.arq = link is not None and getattr(link, "link_id", -1) == LINK_IDS["espnow"]

    def resend_delay(self, n, rng):
        """ESP-NOW: the extra delay (us) of an n-byte frame whose messages are
        each lost with probability loss and resent after the timeout; it
        also holds the frames behind it (one ordered stream)."""
        extra = 0
        k = (n + ESPNOW_CHUNK - 1) // ESPNOW_CHUNK
        loss = self.loss
        while k:
            tries = 0
            while rng.random() < loss and tries < ESPNOW_MAX_RESENDS:
                extra += ESPNOW_RTO_US
                tries += 1
            k -= 1
        if extra:
            self.busy_until += extra
            if self.queue:
                self.queue[-1] += extra
        return extra

    def schedule(self, now, n):
        """Arrival time (us) of an n-byte frame sent now, or -1 when the
        send queue of this direction is full."""
        bw = self.bw
        if not bw:
            return now + self.latency
        q = self.queue
        while q and q[0] <= now:
            q.popleft()
        if len(q) >= self.qcap:
            return -1
        start = self.busy_until if self.busy_until > now else now
        end = start + (n * 1000000 + bw - 1) // bw
        self.busy_until = end
        q.append(end)
        return end + self.latency


class Link:
    """The sim's state of one topology edge."""

    __slots__ = ("index", "edge", "a", "b", "link_id", "latency", "bw", "loss",
                 "up", "cut", "blocked", "ep_ab", "ep_ba", "pending", "epoch")

    def __init__(self, index, edge, a, b, latency_us, bw, loss):
        self.index = index
        self.edge = edge
        self.a = a                  # NodeState
        self.b = b
        self.link_id = LINK_IDS[edge.link]
        self.latency = latency_us
        self.bw = bw
        self.loss = loss
        self.up = True              # physically present (link-down/link-up)
        self.cut = False            # crossing an active partition
        self.blocked = False        # refused (port_up False or no free port)
        self.ep_ab = None           # Endpoint a->b while connected
        self.ep_ba = None
        self.pending = False        # a connect attempt is scheduled
        self.epoch = 0              # bumps on every connect

    @property
    def connected(self):
        return self.ep_ab is not None

    def other(self, node):
        return self.b if node is self.a else self.a

    def usable(self):
        return self.up and not self.cut and self.a.alive and self.b.alive
