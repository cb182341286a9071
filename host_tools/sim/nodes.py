"""The simulator's per-node state and its input error, shared by `Mesh`
(harness.py) and the parts it is assembled from (transport, probing,
faults, sampling)."""
import collections

from host_tools.sim.keys import hexkey
from host_tools.sim.links import LINK_TYPES


class MeshError(ValueError):
    """Bad harness input (unknown node, no such link, ...)."""


class NodeState:
    __slots__ = ("mesh", "name", "index", "key", "hex", "signer", "router", "alive",
                 "incarnation", "ports", "links", "phase", "last_peers", "inbox",
                 "restarts", "carried_bytes", "carried_frames", "carried_link_bytes",
                 "profile", "peers_dirty", "dg")

    def __init__(self, mesh, name, index, key, signer, profile):
        self.mesh = mesh
        self.name = name
        self.index = index
        self.key = key
        self.hex = hexkey(key)
        self.signer = signer
        self.profile = profile                  # this node's board Profile
        self.router = None
        self.alive = False
        self.incarnation = 0
        self.ports = [None] * (profile.max_peers + 1)   # outgoing Endpoint per port
        self.links = []                         # Links touching this node
        self.phase = 0
        self.last_peers = None
        self.peers_dirty = True     # the peer list may have changed since the last sample
        self.dg = None              # snake.datagram.Datagrams, built on first use (per incarnation)
        self.inbox = collections.deque(maxlen=1000)
        self.restarts = 0
        # what this node's links accepted from it, counted by the simulator
        # (not the router) for the whole run, across restarts: bytes and
        # frames per frame type (byte 5 of the header), bytes per link type
        self.carried_bytes = [0] * 5
        self.carried_frames = [0] * 5
        self.carried_link_bytes = [0] * len(LINK_TYPES)

    def free_port(self):
        ports = self.ports
        for i in range(1, len(ports)):
            if ports[i] is None:
                return i
        return 0

    def __repr__(self):
        return "<node %s %s%s>" % (self.name, self.hex[:8], "" if self.alive else " dead")

