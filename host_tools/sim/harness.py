"""`Mesh`: many sans-I/O router cores on one virtual clock.

This is the harness the router tests use and the engine behind
``snakemesh sim``::

    from host_tools.sim.harness import Mesh
    m = Mesh("a b c\\nc d @ble\\n", seed=1)      # topology text, path or Topology
    t = m.converge(timeout=60)                  # virtual seconds, None on timeout
    assert m.tree_converged() and m.snake_correct()
    res = m.ping("a", "d")                      # ProbeResult: ok, rtt_ms, hops, path
    m.kill("c"); m.restart("c"); m.link_down("a", "b"); m.link_up("a", "b")
    m.run(10)                                   # advance 10 virtual seconds

Model (all times virtual):
- Every node is a fresh ``snake.router.Router`` with a key derived from the
  run seed and its name (host_tools.sim.keys). Each node ticks every 250 ms,
  phase-shifted by a seeded offset.
- Every topology edge is a link; when it is usable (up, not cut by a
  partition, both ends alive) it connects: each end gets the lowest free port
  number (1..profile.max_peers) and ``port_up`` is called on both ends. At
  start links connect at seeded times within ``start_spread_ms``; after
  link-up / restart / heal they connect one link latency later (handshake).
- A frame passed to ``tx`` is copied and delivered to the peer after its
  serialisation (bandwidth, FIFO per direction, bounded send queue: ``tx``
  returns False when it is full) plus the link latency, unless the link's
  loss draw drops it. Frames in flight on a link that closes are dropped.
- When a router calls ``disconnect``, the link closes on both ends and
  reconnects after ``reconnect_ms`` (+ up to 25 % seeded jitter) if still
  usable, as LAN discovery would redo it. A link refused by ``port_up`` or
  by a full port table is retried when that node frees a port.
- ``kill``: the node stops. With ``crash_detect_ms=0`` (default) its
  neighbours get ``port_down`` at once; with a number they get it that many
  ms later; with None only their own dead-peer timeout (``disconnect``)
  closes the links. ``restart``: a new Router with the same key; stale links
  are closed and all usable links reconnect.
- Routers run with snake.platform's ``wall_ms``/``urandom``/``ticks_ms``
  replaced by virtual-time, seeded versions while the mesh runs, so a run is
  reproducible bit for bit.

Code layout: this module assembles ``Mesh`` from the node model, the clock
and the ground-truth queries (here) and four parts by concern, which import
nothing of this module: transport.py (links and frames), probing.py (pings
and traffic), faults.py (crash, restart, link changes, partition, join),
sampling.py (telemetry records, convergence and capacity tracking);
nodes.py has the per-node state, virtual.py the virtual platform.
"""
import collections
import functools
import heapq
import os

from host_tools.sim import probes as P
from host_tools.sim import profiles as PR
from host_tools.sim import topology as T
from host_tools.sim.engine import Engine, US_PER_MS, US_PER_S
from host_tools.sim.datagrams import DatagramsMixin
from host_tools.sim.faults import FaultsMixin
from host_tools.sim.keys import make_signer, hexkey, policy_in_force
from host_tools.keystore import ROOT_CANDIDATE_PROFILES, is_root_candidate
from host_tools.sim.links import Link, check_overrides, link_params
from host_tools.sim.nodes import MeshError, NodeState
from host_tools.sim.probing import ProbingMixin
from host_tools.sim.sampling import SamplingMixin
from host_tools.sim.transport import TransportMixin
from host_tools.sim.virtual import VerifyMemo, _Virtual

__all__ = ["Mesh", "MeshError", "NodeState", "VerifyMemo", "load_profile", "as_topology"]

TICKS_MASK = (1 << 30) - 1
WALL_EPOCH_MS = 1700000000000     # virtual Unix-ms clock starts here


def load_profile(profile):
    """Profile from None (UNIX board), a Profile, a dict, a board name or a path."""
    try:
        return PR.load(profile)
    except PR.ProfileSpecError as e:
        raise MeshError(str(e))


def as_topology(topology):
    if isinstance(topology, T.Topology):
        return topology
    if isinstance(topology, (list, tuple)):
        topo = T.Topology()
        for item in topology:
            if isinstance(item, str):
                topo.add_node(item)
            else:
                topo.add_edge(*item)
        return topo
    if isinstance(topology, str):
        if "\n" not in topology and os.path.isfile(topology):
            return T.load(topology)
        return T.parse(topology)
    raise MeshError("topology must be a Topology, text, a path or a list of edges")


class Mesh(TransportMixin, ProbingMixin, DatagramsMixin, FaultsMixin, SamplingMixin):
    def __init__(self, topology, seed=1, profile=None, link_defaults=None, telemetry=None,
                 crash_detect_ms=0, reconnect_ms=2000, start_spread_ms=500, tick_ms=250,
                 tick_base_ms=0, probe_timeout_ms=5000, hop_limit=None, strict=True,
                 router_class=None, hub_profile=None, node_profiles=None, verify_memo=True,
                 joins=(), gateway_root=False, root_node=None):
        self.topology = as_topology(topology)
        self.seed = seed
        self.profile = load_profile(profile)
        adj = self.topology.adjacency()
        try:
            specs = PR.assign(self.topology.names, lambda x: len(adj[x]), self.profile,
                              hub_profile, node_profiles, joins)
        except PR.ProfileSpecError as e:
            raise MeshError(str(e))
        loaded = {}
        self.node_profiles = {}            # name -> Profile, nodes not on the base profile
        for name, spec in specs.items():
            k = spec if isinstance(spec, str) else id(spec)
            if k not in loaded:
                loaded[k] = load_profile(spec)
            self.node_profiles[name] = loaded[k]
        self.hub_profile = hub_profile
        if hub_profile is not None:
            k = hub_profile if isinstance(hub_profile, str) else id(hub_profile)
            if k not in loaded:
                loaded[k] = load_profile(hub_profile)
            self._hub = loaded[k]
        else:
            self._hub = None
        self._node_profile_names = set(node_profiles or ())
        # gateway_root: keys by the provisioning policy "a gateway is the
        # root" (sim/keys.py), which needs a root-candidate profile (GATEWAY)
        self.root_policy = bool(gateway_root)
        # root_node: keys by the same policy with one named node as the only
        # root candidate (a profile map's root, as `snakemesh plan` places it)
        self.root_node = root_node
        if root_node is not None and root_node not in self.topology.names:
            raise MeshError("profile map: the root %r is no node of the topology" % (root_node,))
        if gateway_root and not policy_in_force([self.profile, self._hub] +
                                                list(self.node_profiles.values())):
            raise MeshError("--gateway-root needs a root-candidate profile (%s) in the mesh: "
                            "--hub-profile GATEWAY or --node-profile NAME=GATEWAY"
                            % ", ".join(ROOT_CANDIDATE_PROFILES))
        try:
            check_overrides(link_defaults)
        except ValueError as e:
            raise MeshError(str(e))
        self.link_defaults = link_defaults
        self.telemetry = telemetry
        if crash_detect_ms is not None and crash_detect_ms < 0:
            raise MeshError("crash_detect_ms must be >= 0 or None")
        self.crash_detect_us = None if crash_detect_ms is None else int(crash_detect_ms * 1000)
        self.reconnect_us = int(reconnect_ms * 1000)
        self.start_spread_us = int(start_spread_ms * 1000)
        if not 0 < tick_ms <= 250:
            raise MeshError("tick_ms must be within (0, 250]")
        self.tick_us = int(tick_ms * 1000)
        self.tick_base_ms = int(tick_base_ms)
        self.probe_timeout_us = int(probe_timeout_ms * 1000)
        self.strict = strict
        if router_class is None:
            from snake.router import Router as router_class
        self.router_class = router_class
        from snake.wire import Frame, WireError
        if hop_limit is not None and not 1 <= hop_limit <= 255:
            raise MeshError("hop_limit must be within 1..255")
        self.hop_limit = hop_limit         # None: each sender's traffic_hop_limit
        self._frame = Frame(max([self.profile.max_hops] +
                                [p.max_hops for p in self.node_profiles.values()]))
        self._wire_error = WireError

        self.engine = Engine(seed)
        self.rng = self.engine.rng
        self._plat_rng = __import__("random").Random("platform:%s" % (seed,))
        self._rxbuf = bytearray(65536 + 64)
        self.stats = collections.OrderedDict((k, 0) for k in (
            "frames", "bytes", "lost", "queue_full", "dropped_in_flight", "dropped_dead",
            "tx_no_link", "connects", "closes", "port_full", "refused", "disconnects",
            "router_exceptions", "resent"))
        self.events = collections.deque(maxlen=10000)   # (t_s, node name, kind, detail)
        self.router_events = collections.Counter()
        self._probes = {}
        self._next_probe = 1
        self.results = []                  # finished ProbeResults, in finish order
        self.datagrams = []                # finished send_datagram() records, in finish order
        self.dgram_delivered = {}          # datagram token -> deliveries
        self._dg_sends = {}                # (node index, incarnation, id) -> record
        self._dg_pending_recs = []         # every send_datagram() record
        self._dg_seq = 0
        self.keep_results = True
        self._comp_cache = None
        self._topo_version = 0
        self._patched = None
        self._verify_memo = None
        self._cap = None
        self.verify_memo = verify_memo     # share signature checks between nodes (VerifyMemo)
        self.peers_every_sample = False    # True: report.peers(router) at every sample (tests)
        self._truth = None

        self.nodes_by_name = {}
        self._nodes = []
        self._links = []
        self._link_by_pair = {}
        self.names = {}                    # hex key -> name
        with self._virtual():
            for name in self.topology.names:
                self._add_node(name)
            for e in self.topology.edges:
                self._add_link(e)
            for n in self._nodes:
                self._boot(n)
            for link in self._links:
                self._schedule_connect(link, self.rng.randrange(self.start_spread_us + 1))
        self._last_topology = None
        self._last_topology_names = None
        self._topology_changed()

    # ------------------------------------------------------------------ model
    def _add_node(self, name):
        if name in self.nodes_by_name:
            raise MeshError("node %s exists already" % name)
        prof = self.node_profiles.get(name, self.profile)
        if self.root_node is not None:
            root = name == self.root_node
        else:
            root = is_root_candidate(prof) if self.root_policy else None
        signer = make_signer(self.seed, name, root)
        key = bytes(signer.public)
        if key in self.names:
            raise MeshError("key collision between %s and %s" % (name, self.names[key]))
        n = NodeState(self, name, len(self._nodes), key, signer, prof)
        n.phase = self.rng.randrange(self.tick_us)
        self._nodes.append(n)
        self.nodes_by_name[name] = n
        self.names[n.hex] = name
        return n

    def _add_link(self, edge):
        a = self.nodes_by_name[edge.a]
        b = self.nodes_by_name[edge.b]
        lat, bw, loss = link_params(edge, self.link_defaults)
        link = Link(len(self._links), edge, a, b, lat, bw, loss)
        self._links.append(link)
        self._link_by_pair[(a.index, b.index)] = link
        self._link_by_pair[(b.index, a.index)] = link
        a.links.append(link)
        b.links.append(link)
        self._topo_version += 1
        return link

    def _now_ms(self):
        return (self.engine.now // US_PER_MS + self.tick_base_ms) & TICKS_MASK

    def _boot(self, n):
        """Start a fresh router on node n (its links connect separately)."""
        n.incarnation += 1
        n.ports = [None] * (n.profile.max_peers + 1)
        n.last_peers = None
        n.peers_dirty = True
        r = self.router_class(n.profile, n.signer, self._now_ms())
        n.router = r
        n.dg = None               # a restarted node remembers no datagram
        n.alive = True
        inc = n.incarnation
        mesh = self

        tx = functools.partial(self._tx, n)     # the hot path: no Python frame of its own

        def deliver(src_key, payload, n=n, inc=inc):
            if n.incarnation == inc:
                mesh._deliver(n, src_key, payload)

        def disconnect(port, reason, n=n, inc=inc):
            if n.incarnation == inc:
                mesh._on_disconnect(n, port, reason)

        def on_event(kind, detail, n=n):
            mesh._on_router_event(n, kind, detail)

        r.tx = tx
        r.deliver = deliver
        r.disconnect = disconnect
        r.on_event = on_event
        # first tick at the node's phase within the next tick period
        now = self.engine.now
        t0 = now - now % self.tick_us + n.phase
        if t0 <= now:
            t0 += self.tick_us
        self.engine.at(t0, self._tick, n, inc)
        self._topo_version += 1

    def _tick(self, n, inc):
        if n.incarnation != inc or not n.alive:
            return
        eng = self.engine
        try:
            now = (eng.now // US_PER_MS + self.tick_base_ms) & TICKS_MASK
            n.router.tick(now)
            if n.dg is not None:
                n.dg.tick(now)
        except Exception as e:
            self._router_exception(n, "tick", e)
        eng._seq += 1                   # = eng.at(now + tick, ...) without the call
        heapq.heappush(eng._heap, (eng.now + self.tick_us, eng._seq, self._tick, n, inc))

    def _router_exception(self, n, where, e):
        """A router call raised. strict (tests): re-raise. Otherwise count it,
        record an event and carry on (the node keeps running)."""
        if self.strict:
            raise
        self.stats["router_exceptions"] += 1
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        loc = "%s:%d" % (os.path.basename(tb.tb_frame.f_code.co_filename), tb.tb_lineno)
        self._sim_event("router_exception", "%s %s: %s: %s at %s"
                        % (n.name, where, type(e).__name__, e, loc), n)

    # ------------------------------------------------------------------ running
    @property
    def now(self):
        """Virtual time in seconds."""
        return self.engine.now / US_PER_S

    def run(self, seconds):
        self._run(self.engine.now + int(round(seconds * US_PER_S)))

    def run_until(self, t):
        """Run until virtual time t (seconds since the start)."""
        self._run(int(round(t * US_PER_S)))

    def _run(self, t_us, stop=None):
        with self._virtual():
            return self.engine.run_until(t_us, stop)

    def converge(self, timeout=60.0, step=0.25):
        """Run until tree_converged() and snake_correct() both hold; returns
        the virtual seconds that took (0.0 if they already hold), or None
        after `timeout` virtual seconds."""
        t0 = self.engine.now
        end = t0 + int(timeout * US_PER_S)
        step_us = max(1, int(step * US_PER_S))
        while True:
            if self.converged():
                return (self.engine.now - t0) / US_PER_S
            if self.engine.now >= end:
                return None
            self._run(min(end, self.engine.now + step_us))

    # ------------------------------------------------------------------ truth
    def components(self):
        """Reachable components (lists of NodeState), from the sim's view."""
        if self._comp_cache is None or self._comp_cache[0] != self._topo_version:
            self._comp_cache = (self._topo_version, P.components(self._nodes))
        return self._comp_cache[1]

    def tree_converged(self):
        """Every node of each reachable component agrees on the root = the
        highest key of the component, with the same root sequence."""
        return all(P.tree_ok(c) for c in self.components())

    def snake_correct(self):
        """Every node's descending key is the next-lower key of its
        component; the lowest key of a component has none."""
        return all(P.snake_ok(c) for c in self.components())

    def snake_correct_ratio(self):
        """Fraction of the running nodes whose descending entry is the true
        next-lower key of their component (1.0 = snake_correct())."""
        comps = self.components()
        total = sum(len(c) for c in comps)
        if not total:
            return None
        return sum(P.snake_correct_count(c) for c in comps) / float(total)

    def converged(self):
        comps = self.components()
        return all(P.tree_ok(c) for c in comps) and all(P.snake_ok(c) for c in comps)

    def problems(self, limit=10):
        """Human-readable list of what is not converged (for test messages)."""
        out = []
        for c in self.components():
            out.extend(P.tree_problems(c, limit))
            out.extend(P.snake_problems(c, limit))
            if len(out) >= limit:
                break
        return out[:limit]

    def expected_root(self, name):
        for c in self.components():
            if self._node(name) in c:
                return max(c, key=lambda n: n.key).name
        return None

    # ------------------------------------------------------------------ control
    def _node(self, name):
        if isinstance(name, NodeState):
            return name
        n = self.nodes_by_name.get(name)
        if n is None:
            raise MeshError("no node named %r" % (name,))
        return n

    def _link(self, a, b):
        na, nb = self._node(a), self._node(b)
        link = self._link_by_pair.get((na.index, nb.index))
        if link is None:
            raise MeshError("no link %s-%s in the topology" % (na.name, nb.name))
        return link

    @property
    def nodes(self):
        """Node names in topology order."""
        return [n.name for n in self._nodes]

    def node(self, name):
        return self._node(name)

    def router(self, name):
        """The node's current Router (None while it is down)."""
        return self._node(name).router

    def key(self, name):
        return self._node(name).key

    def name_of(self, key):
        if isinstance(key, (bytes, bytearray)):
            key = hexkey(bytes(key))
        return self.names.get(key)

    def links(self):
        return list(self._links)

    def port_of(self, a, b):
        """Port number of link a-b at node a (0 when not connected)."""
        link = self._link(a, b)
        if not link.connected:
            return 0
        na = self._node(a)
        return link.ep_ba.dst_port if na is link.a else link.ep_ab.dst_port

    # ------------------------------------------------------------------ platform
    def _virtual(self):
        return _Virtual(self)

    def _wall_ms(self):
        return WALL_EPOCH_MS + self.engine.now // US_PER_MS

    def _urandom(self, n):
        return self._plat_rng.randbytes(n)
