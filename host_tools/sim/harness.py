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
"""
import collections
import functools
import heapq
import os
import sys

from host_tools.sim import probes as P
from host_tools.sim import profiles as PR
from host_tools.sim.engine import Engine, US_PER_MS, US_PER_S
from host_tools.sim.keys import make_signer, hexkey, policy_in_force
from host_tools.keystore import ROOT_CANDIDATE_PROFILES, is_root_candidate
from host_tools.sim.links import (Endpoint, Link, LINK_TYPES, LINK_IDS, link_params,
                                  check_overrides)
from host_tools.sim import topology as T
from host_tools.sim import telemetry as TM
from snake import report

TICKS_MASK = (1 << 30) - 1
WALL_EPOCH_MS = 1700000000000     # virtual Unix-ms clock starts here


class MeshError(ValueError):
    """Bad harness input (unknown node, no such link, ...)."""


class NodeState:
    __slots__ = ("mesh", "name", "index", "key", "hex", "signer", "router", "alive",
                 "incarnation", "ports", "links", "phase", "last_peers", "inbox",
                 "restarts", "carried_bytes", "carried_frames", "carried_link_bytes",
                 "profile", "peers_dirty")

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


class Mesh:
    def __init__(self, topology, seed=1, profile=None, link_defaults=None, telemetry=None,
                 crash_detect_ms=0, reconnect_ms=2000, start_spread_ms=500, tick_ms=250,
                 tick_base_ms=0, probe_timeout_ms=5000, hop_limit=None, strict=True,
                 router_class=None, hub_profile=None, node_profiles=None, verify_memo=True,
                 joins=(), gateway_root=False):
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
            "router_exceptions"))
        self.events = collections.deque(maxlen=10000)   # (t_s, node name, kind, detail)
        self.router_events = collections.Counter()
        self._probes = {}
        self._next_probe = 1
        self.results = []                  # finished ProbeResults, in finish order
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
        self._topology_changed()

    # ------------------------------------------------------------------ model
    def _add_node(self, name):
        if name in self.nodes_by_name:
            raise MeshError("node %s exists already" % name)
        prof = self.node_profiles.get(name, self.profile)
        signer = make_signer(self.seed, name,
                             is_root_candidate(prof) if self.root_policy else None)
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
            n.router.tick((eng.now // US_PER_MS + self.tick_base_ms) & TICKS_MASK)
        except Exception as e:
            self._router_exception(n, "tick", e)
        eng._seq += 1                   # = eng.at(now + tick, ...) without the call
        heapq.heappush(eng._heap, (eng.now + self.tick_us, eng._seq, self._tick, n, inc))

    # ------------------------------------------------------------------ links
    def _schedule_connect(self, link, delay_us):
        if link.pending or link.connected:
            return
        link.pending = True
        self.engine.after(delay_us, self._connect, link, None)

    def _connect(self, link, _):
        link.pending = False
        if link.connected or not link.usable():
            return
        a, b = link.a, link.b
        pa = a.free_port()
        pb = b.free_port()
        if not pa or not pb:
            self.stats["port_full"] += 1
            for n in ((a,) if not pa else ()) + ((b,) if not pb else ()):
                if n.alive and n.router is not None and hasattr(n.router, "peer_refused"):
                    n.router.peer_refused()
            self._block(link, "port_full %s" % (a.name if not pa else b.name))
            return
        ep_ab = Endpoint(link, a, b, pb, link.latency, link.bw, link.loss, self._qcap(link, a))
        ep_ba = Endpoint(link, b, a, pa, link.latency, link.bw, link.loss, self._qcap(link, b))
        ep_ab.peer = ep_ba
        ep_ba.peer = ep_ab
        a.ports[pa] = ep_ab
        b.ports[pb] = ep_ba
        a.peers_dirty = b.peers_dirty = True
        link.ep_ab = ep_ab
        link.ep_ba = ep_ba
        link.epoch += 1
        now = self._now_ms()
        who = a
        ok = self._port_up(a, pa, b, link)
        if ok:
            who = b
            ok = self._port_up(b, pb, a, link)
            if not ok:
                try:
                    a.router.port_down(pa, now)
                except Exception as e:
                    self._router_exception(a, "port_down", e)
        if not ok:
            self._teardown(link)
            if ok is None:          # port_up raised (non-strict): try again later
                self._schedule_connect(link, self._reconnect_delay())
            else:
                self.stats["refused"] += 1
                self._block(link, "refused by %s" % who.name)
            return
        self.stats["connects"] += 1
        self._topo_version += 1
        if link.blocked:
            link.blocked = False
            self._topology_changed()

    def _port_up(self, n, port, peer, link):
        """True/False from the router's port_up; None when it raised."""
        try:
            return bool(n.router.port_up(port, peer.key, link.link_id, self._now_ms()))
        except Exception as e:
            self._router_exception(n, "port_up", e)
            return None

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

    def _qcap(self, link, sender):
        """Send queue of one direction: the sending node's profile."""
        p = sender.profile
        return p.ble_queue if link.link_id == LINK_IDS["ble"] else p.wifi_queue

    def _block(self, link, why):
        if not link.blocked:
            link.blocked = True
            self._topo_version += 1
            self._sim_event("link_blocked", "%s %s %s" % (link.a.name, link.b.name, why), link.a)
            self._topology_changed()

    def _teardown(self, link):
        """Forget a connection (no router calls); returns the old ports."""
        ep_ab, ep_ba = link.ep_ab, link.ep_ba
        if ep_ab is None:
            return 0, 0
        ep_ab.alive = False
        ep_ba.alive = False
        pa = ep_ba.dst_port
        pb = ep_ab.dst_port
        if link.a.ports[pa] is ep_ab:
            link.a.ports[pa] = None
        if link.b.ports[pb] is ep_ba:
            link.b.ports[pb] = None
        link.a.peers_dirty = link.b.peers_dirty = True
        link.ep_ab = link.ep_ba = None
        self._topo_version += 1
        return pa, pb

    def _close(self, link, reconnect_us=None):
        """Close a connection, calling port_down on the ends whose router is
        running; then maybe reconnect and retry links blocked by full ports."""
        if not link.connected:
            return
        pa, pb = self._teardown(link)
        self.stats["closes"] += 1
        now = self._now_ms()
        for n, p in ((link.a, pa), (link.b, pb)):
            if n.alive and n.router is not None:
                try:
                    n.router.port_down(p, now)
                except Exception as e:
                    self._router_exception(n, "port_down", e)
        if reconnect_us is not None and link.usable():
            self._schedule_connect(link, reconnect_us)
        for n in (link.a, link.b):
            if n.alive:
                self._retry_blocked(n)

    def _retry_blocked(self, n):
        for link in n.links:
            if link.blocked and not link.connected and link.usable():
                self._schedule_connect(link, self._reconnect_delay())

    def _reconnect_delay(self):
        return self.reconnect_us + self.rng.randrange(self.reconnect_us // 4 + 1)

    def _on_disconnect(self, n, port, reason):
        ports = n.ports
        ep = ports[port] if 0 < port < len(ports) else None
        if ep is None:
            return
        self.stats["disconnects"] += 1
        self._sim_event("disconnect", "%s %s %s" % (n.name, ep.dst.name, reason), n)
        # close after the router call that asked for it has returned
        self.engine.after(0, self._do_disconnect, ep, None)

    def _do_disconnect(self, ep, _):
        if ep.alive:
            self._close(ep.link, self._reconnect_delay())

    # ------------------------------------------------------------------ frames
    def _tx(self, n, port, buf, length):
        ports = n.ports
        ep = ports[port] if 0 < port < len(ports) else None
        if ep is None or not ep.alive:
            self.stats["tx_no_link"] += 1
            return False
        eng = self.engine
        now = eng.now
        arrive = ep.schedule(now, length)
        if arrive < 0:
            self.stats["queue_full"] += 1
            return False
        st = self.stats
        st["frames"] += 1
        st["bytes"] += length
        t = buf[5]
        if t < 5:
            n.carried_bytes[t] += length
            n.carried_frames[t] += 1
        n.carried_link_bytes[ep.link.link_id] += length
        if ep.loss and self.rng.random() < ep.loss:
            st["lost"] += 1
            return True
        # a copy of the frame (the router reuses buf); = eng.at(arrive, ...)
        frame = buf[:length] if type(buf) is bytearray else bytes(memoryview(buf)[:length])
        eng._seq += 1
        heapq.heappush(eng._heap, (arrive if arrive > now else now, eng._seq, self._arrive, ep,
                                   frame))
        return True

    def _arrive(self, ep, frame):
        if not ep.alive:
            self.stats["dropped_in_flight"] += 1
            return
        n = ep.dst
        r = n.router
        if not n.alive or r is None:
            self.stats["dropped_dead"] += 1
            return
        length = len(frame)
        t = frame[5]
        if t == 1:                  # an announcement: a peer's root/sequence may change
            n.peers_dirty = True
        elif t == 3 and self._probes and P.REQ in frame:
            self._observe(n, frame, length)
        rx = self._rxbuf
        rx[:length] = frame
        try:
            r.receive(ep.dst_port, rx, length, self._now_ms())
        except Exception as e:
            self._router_exception(n, "receive", e)

    def _observe(self, n, frame, length):
        f = self._frame
        try:
            f.decode(frame, length)
        except self._wire_error:
            return
        if f.type != 3 or f.payload_len != 8:
            return
        kind, pid = P.parse_payload(frame[f.payload_off:f.payload_off + 8])
        if kind != "req":
            return
        pr = self._probes.get(pid)
        if pr is not None and not pr.reached:
            pr.path.append(n)

    # ------------------------------------------------------------------ delivery
    def _deliver(self, n, src_key, payload):
        kind, pid = P.parse_payload(payload)
        if kind == "req":
            # answer after the router call that delivered it has returned
            self.engine.after(0, self._reply, n, (bytes(src_key), pid))
            pr = self._probes.get(pid)
            if pr is not None and pr.dst is n:
                pr.reached = True
            return
        if kind == "rep":
            pr = self._probes.get(pid)
            if pr is not None and pr.src is n and not pr.done:
                pr.reply_from = bytes(src_key)
                pr.ok = pr.reply_from == pr.dst.key
                if not pr.ok:
                    pr.reason = "reply from wrong key"
                pr.rtt_us = self.engine.now - pr.t_sent
                self._finish(pr)
            return
        n.inbox.append((bytes(src_key), bytes(payload)))

    def _reply(self, n, arg):
        src_key, pid = arg
        if n.alive and n.router is not None:
            try:
                n.router.send(src_key, P.reply_payload(pid), self._now_ms(),
                              self._hop_limit_of(n))
            except Exception as e:
                self._router_exception(n, "send", e)

    # ------------------------------------------------------------------ probes
    def start_ping(self, a, b, timeout=None):
        """Start a ping from a to b now; returns the Probe (see ping())."""
        src, dst = self._node(a), self._node(b)
        pid = self._next_probe
        self._next_probe += 1
        pr = P.Probe(pid, src, dst, self.engine.now, P.shortest_hops(src, dst))
        timeout_us = self.probe_timeout_us if timeout is None else int(timeout * US_PER_S)
        if not src.alive:
            pr.reason = "source down"
            self._finish(pr)
            return pr
        self._probes[pid] = pr
        with self._virtual():
            try:
                sent = src.router.send(dst.key, P.request_payload(pid), self._now_ms(),
                                       self._hop_limit_of(src))
            except Exception as e:
                self._router_exception(src, "send", e)
                sent = False
        if not sent:
            pr.reason = "send refused"
            self._finish(pr)
            return pr
        self.engine.after(timeout_us, self._probe_timeout, pr, None)
        return pr

    def _probe_timeout(self, pr, _):
        if not pr.done:
            pr.reason = "timeout" if pr.reached is False else "reply lost"
            self._finish(pr)

    def _finish(self, pr):
        pr.done = True
        self._probes.pop(pr.id, None)
        res = P.ProbeResult(pr, TM.t_seconds(pr.t_sent))
        if self.keep_results:
            self.results.append(res)
        if self.telemetry is not None:
            self.telemetry.write("probe", self.engine.now, pr.src.hex, res.telemetry_fields())
        return res

    def ping(self, a, b, timeout=None):
        """Ping b from a and run the mesh until the reply arrives or the
        timeout (default probe_timeout_ms) passes. Returns a ProbeResult:
        ok, rtt_ms, hops (request path), path (node names, source first)."""
        pr = self.start_ping(a, b, timeout)
        if not pr.done:
            limit = self.engine.now + (self.probe_timeout_us if timeout is None
                                       else int(timeout * US_PER_S)) + 1
            self._run(limit, stop=lambda: pr.done)
        return self._result_of(pr)

    def _result_of(self, pr):
        for res in reversed(self.results):
            if res.id == pr.id:
                return res
        return P.ProbeResult(pr, TM.t_seconds(pr.t_sent))

    def pick_pairs(self, count, same_component=True):
        """`count` seeded random (src, dst) name pairs of alive nodes,
        src != dst, from the same reachable component when asked."""
        if same_component:
            groups = [c for c in self.components() if len(c) > 1]
        else:
            alive = [n for n in self._nodes if n.alive]
            groups = [alive] if len(alive) > 1 else []
        if not groups:
            return []
        weights = [len(c) for c in groups]
        total = sum(weights)
        pairs = []
        for _ in range(count):
            x = self.rng.randrange(total)
            for c in groups:
                if x < len(c):
                    break
                x -= len(c)
            a, b = self.rng.sample(range(len(c)), 2)
            pairs.append((c[a].name, c[b].name))
        return pairs

    def ping_pairs(self, n=None, pairs=None, timeout=None, spacing_ms=10):
        """Ping n random pairs (or the given name pairs), one every
        spacing_ms, and run until all finished; returns the ProbeResults."""
        if pairs is None:
            pairs = self.pick_pairs(n or 0)
        probes = []
        for i, (a, b) in enumerate(pairs):
            if i:
                self.run(spacing_ms / 1000.0)
            probes.append(self.start_ping(a, b, timeout))
        limit = self.engine.now + (self.probe_timeout_us if timeout is None
                                   else int(timeout * US_PER_S)) + 1
        self._run(limit, stop=lambda: all(p.done for p in probes))
        return [self._result_of(p) for p in probes]

    def send(self, a, b, payload):
        """Originate application traffic from a to b (delivered payloads
        land in ``mesh.inbox(b)``); returns the router's send() result."""
        src, dst = self._node(a), self._node(b)
        if not src.alive:
            return False
        with self._virtual():
            return src.router.send(dst.key, bytes(payload), self._now_ms(),
                                   self._hop_limit_of(src))

    def _hop_limit_of(self, n):
        """Hop limit of traffic node n originates: the mesh's hop_limit when
        set, else its router's traffic_hop_limit (the profile's; 10 for a
        reference-timing router, as the reference originates)."""
        h = self.hop_limit
        if h is not None:
            return h
        r = n.router
        return r.traffic_hop_limit if r is not None else n.profile.traffic_hop_limit

    def carried(self, name):
        """What node `name`'s links accepted from it over the whole run
        (counted by the simulator, independently of the router's own
        counters; not reset by a restart): {"bytes": {frame type: bytes},
        "frames": {frame type: frames}, "link_bytes": {link type: bytes}}."""
        from snake.wire import TYPE_NAMES
        n = self._node(name)
        return {"bytes": dict(zip(TYPE_NAMES, n.carried_bytes)),
                "frames": dict(zip(TYPE_NAMES, n.carried_frames)),
                "link_bytes": dict(zip(LINK_TYPES, n.carried_link_bytes))}

    def inbox(self, name):
        """(src name or hex, payload) received by node `name` (non-probe traffic)."""
        return [(self.names.get(hexkey(k), hexkey(k)), p) for k, p in self._node(name).inbox]

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

    def kill(self, name):
        """Crash a node (see the module docstring for how neighbours notice)."""
        n = self._node(name)
        if not n.alive:
            return
        self._sim_event("crash", n.name, n)
        with self._virtual():
            n.alive = False
            n.incarnation += 1
            n.router = None
            self._topo_version += 1
            for link in n.links:
                if not link.connected:
                    continue
                if self.crash_detect_us == 0:
                    self._close(link)
                elif self.crash_detect_us is not None:
                    self.engine.after(self.crash_detect_us, self._crash_notice, link.ep_ab, None)
        self._topology_changed()

    def _crash_notice(self, ep, _):
        if ep.alive:
            self._close(ep.link)

    def restart(self, name):
        """Restart a node: a fresh Router with the same key (crashing it
        first if it is running)."""
        n = self._node(name)
        if n.alive:
            self.kill(name)
        self._sim_event("restart", n.name, n)
        n.restarts += 1
        with self._virtual():
            for link in n.links:
                if link.connected:      # stale: the peer still holds it
                    self._close(link)
            self._boot(n)
            for link in n.links:
                if link.usable():
                    self._schedule_connect(link, link.latency)
        self._topology_changed()

    def link_down(self, a, b):
        link = self._link(a, b)
        self._sim_event("link_down", "%s %s" % (link.a.name, link.b.name), link.a)
        link.up = False
        self._topo_version += 1
        with self._virtual():
            self._close(link)
        self._topology_changed()

    def link_up(self, a, b):
        link = self._link(a, b)
        self._sim_event("link_up", "%s %s" % (link.a.name, link.b.name), link.a)
        link.up = True
        link.blocked = False
        self._topo_version += 1
        if link.usable():
            self._schedule_connect(link, link.latency)
        self._topology_changed()

    def set_link(self, a, b, latency_ms=None, bw=None, loss=None):
        """Change a link's latency/bandwidth/loss (also on a live connection)."""
        link = self._link(a, b)
        if latency_ms is not None:
            link.latency = int(round(latency_ms * 1000))
        if bw is not None:
            link.bw = int(bw)
        if loss is not None:
            link.loss = float(loss)
        for ep in (link.ep_ab, link.ep_ba):
            if ep is not None:
                ep.latency, ep.bw, ep.loss = link.latency, link.bw, link.loss
        self._sim_event("set_link", "%s %s latency_us=%d bw=%d loss=%r"
                        % (link.a.name, link.b.name, link.latency, link.bw, link.loss), link.a)

    def partition(self, group_a, group_b=None):
        """Cut every link between group_a and group_b (default: all other
        nodes) until heal()."""
        ga = set(self._node(x).index for x in group_a)
        gb = (set(self._node(x).index for x in group_b) if group_b is not None
              else set(n.index for n in self._nodes) - ga)
        if not ga or not gb:
            raise MeshError("partition needs two non-empty groups")
        if ga & gb:
            raise MeshError("partition groups overlap")
        self._sim_event("partition", "%s | %s" % (
            " ".join(self._nodes[i].name for i in sorted(ga)),
            " ".join(self._nodes[i].name for i in sorted(gb))), self._nodes[min(ga)])
        with self._virtual():
            for link in self._links:
                ia, ib = link.a.index, link.b.index
                if (ia in ga and ib in gb) or (ia in gb and ib in ga):
                    if not link.cut:
                        link.cut = True
                        self._topo_version += 1
                    self._close(link)
        self._topology_changed()

    def heal(self):
        """Undo every partition."""
        self._sim_event("heal", "", None)
        for link in self._links:
            if link.cut:
                link.cut = False
                self._topo_version += 1
                if link.usable():
                    self._schedule_connect(link, link.latency)
        self._topology_changed()

    def join(self, name, neighbours=(), link="wifi"):
        """Add a new node linked to existing `neighbours` (names)."""
        if link not in LINK_IDS:
            raise MeshError("unknown link type %r (one of %s)" % (link, ", ".join(LINK_TYPES)))
        if name in self.nodes_by_name:
            raise MeshError("node %s exists already" % name)
        for m in neighbours:
            self._node(m)
        if (name not in self._node_profile_names and self._hub is not None
                and len(set(neighbours) - {name}) > self.profile.max_peers):
            self.node_profiles[name] = self._hub        # the hub rule, for a joining node
        with self._virtual():
            self.topology.add_node(name)
            n = self._add_node(name)
            self._boot(n)
            for m in neighbours:
                e = self.topology.add_edge(name, m, link)
                if e is None:
                    continue
                lk = self._add_link(e)
                self._schedule_connect(lk, lk.latency)
        self._sim_event("join", "%s %s" % (name, " ".join(neighbours)), n)
        self._topology_changed()
        return n

    # ------------------------------------------------------------------ sampling
    def start_sampling(self, state_s=1.0, counters_s=5.0):
        """Write `state` (and `peers` when changed) records for every
        running node every state_s, and `counters` every counters_s virtual
        seconds (needs a telemetry writer)."""
        if self.telemetry is None:
            raise MeshError("start_sampling needs a telemetry writer")
        step = int(round(state_s * US_PER_S))
        if step <= 0:
            raise MeshError("state interval must be > 0")
        every = max(1, int(round(counters_s / state_s)))
        self.engine.at(self.engine.now - self.engine.now % step + step, self._sample,
                       (step, every), 1)

    def _sample(self, cfg, k):
        step, every = cfg
        tel = self.telemetry
        t = self.engine.now
        do_counters = k % every == 0
        for n in self._nodes:
            if not n.alive:
                continue
            r = n.router
            # a router's peer list (ports up, each peer's last announced
            # root and sequence) changes only with its links and the
            # announcements it receives: peers_dirty (test_sim_profiles checks
            # the records equal those of reading it at every sample)
            check = n.peers_dirty or self.peers_every_sample
            try:
                snap = report.snapshot(r)
                peers = TM.peers_list(r, lambda n=n: self._sim_peers(n)) if check else None
                counters = TM.counters_fields(r) if do_counters else None
            except Exception as e:
                self._router_exception(n, "snapshot", e)
                continue
            st = TM.state_fields(snap)
            st["profile"] = n.profile.name
            tel.write("state", t, n.hex, st)
            n.peers_dirty = False
            if check and peers != n.last_peers:
                n.last_peers = peers
                tel.write("peers", t, n.hex, {"peers": peers})
            if do_counters:
                tel.write("counters", t, n.hex, counters)
        self.engine.at(t + step, self._sample, cfg, k + 1)

    def _sim_peers(self, n):
        out = []
        for port in range(1, len(n.ports)):
            ep = n.ports[port]
            if ep is not None and ep.alive:
                out.append({"port": port, "key": ep.dst.hex,
                            "link": LINK_TYPES[ep.link.link_id], "root": None, "root_seq": None})
        return out

    def track_convergence(self, interval_ms=250):
        """Check the ground truth every interval_ms of virtual time; record
        when it first holds, every change, and for every scenario event the
        time until it holds again (see ``convergence``). The snake alone
        (every descending entry right) is tracked too."""
        self._truth = {"first": None, "converged": None, "interval_ms": interval_ms,
                       "transitions": [], "events": [],
                       "snake_first": None, "snake": None, "snake_transitions": []}
        self.engine.at(self.engine.now, self._truth_check, int(interval_ms * US_PER_MS), None)

    def track_capacity(self, interval_s=5.0):
        """Read every running node's ``report.capacity(router)`` ({table: [used,
        capacity, refused]}) every interval_s of virtual time and at
        ``capacity_warnings()``; see there."""
        self._cap = {}
        step = max(1, int(round(interval_s * US_PER_S)))
        self.engine.at(self.engine.now, self._capacity_check, step, None)

    def _capacity_check(self, step, _):
        self._capacity_read()
        self.engine.at(self.engine.now + step, self._capacity_check, step, None)

    def _capacity_read(self):
        cap = self._cap
        for n in self._nodes:
            r = n.router
            if not n.alive or r is None or not hasattr(r, "snake"):
                continue
            try:
                tables = report.capacity(r)
            except Exception as e:
                self._router_exception(n, "capacity", e)
                continue
            for table, v in tables.items():
                used, capacity, refused = v[0], v[1], v[2]
                k = (n.index, table)
                st = cap.get(k)
                if st is None:
                    # [last used, capacity, refused growth, last refused, full seen]
                    st = cap[k] = [used, capacity, 0, 0, False]
                if refused >= st[3]:
                    st[2] += refused - st[3]
                else:                       # a restart reset the counter: a new series
                    st[2] += refused
                st[3] = refused
                st[0] = used
                st[1] = capacity
                if used >= capacity:
                    st[4] = True

    def capacity_warnings(self):
        """analyze's `capacity_warnings` rule (docs/reports/CAPACITY.md) from the
        simulator's own readings (track_capacity): every node and table whose
        `refused` grew during the run or whose `used` reached `capacity` at
        a reading: [{"node", "name", "table", "used", "capacity",
        "refused"}] (used = last reading, refused = growth over the run),
        in node then table order."""
        if getattr(self, "_cap", None) is None:
            return None
        self._capacity_read()
        out = []
        for (idx, table) in sorted(self._cap):
            used, capacity, grown, _, full = self._cap[(idx, table)]
            if grown > 0 or full:
                n = self._nodes[idx]
                out.append({"node": n.hex, "name": n.name, "table": table, "used": used,
                            "capacity": capacity, "refused": grown})
        return out

    @property
    def convergence(self):
        """{"first": s|None, "held_from": s|None, "transitions": [{"t",
        "converged"}], "events": [{"t", "event", "detail", "reconverged_s"}],
        "snake_first", "snake_held_from", "snake_transitions",
        "interval_ms"} or None. "first": the first check at which the tree
        agreed and every descending entry was right; "held_from": the start
        of the last such stretch when it still holds at the last check (else
        None); "snake_*": the same for the descending entries alone (the
        snake converged at snake_held_from)."""
        if self._truth is None:
            return None
        d = dict(self._truth)
        d.pop("converged")
        d.pop("snake")
        for key, trans in (("held_from", d["transitions"]),
                           ("snake_held_from", d["snake_transitions"])):
            last = trans[-1] if trans else None
            d[key] = last["t"] if last is not None and last["converged"] else None
        return d

    def _truth_check(self, step, _):
        tr = self._truth
        t = self.engine.now
        comps = self.components()
        snake = all(P.snake_ok(c) for c in comps)
        ok = snake and all(P.tree_ok(c) for c in comps)
        ts = TM.t_seconds(t)
        if snake != tr["snake"]:
            tr["snake"] = snake
            tr["snake_transitions"].append({"t": ts, "converged": snake})
            if snake and tr["snake_first"] is None:
                tr["snake_first"] = ts
        if ok != tr["converged"]:
            tr["converged"] = ok
            tr["transitions"].append({"t": ts, "converged": ok})
            if ok and tr["first"] is None:
                tr["first"] = ts
        if ok:
            for ev in tr["events"]:
                if ev["reconverged_s"] is None:
                    ev["reconverged_s"] = round(ts - ev["t"], 3)
        self.engine.at(t + step, self._truth_check, step, None)

    # ------------------------------------------------------------------ events
    _MARKED = ("crash", "restart", "link_down", "link_up", "partition", "heal", "join",
               "set_link")

    def _sim_event(self, kind, detail, n):
        if self._truth is not None and kind in self._MARKED:
            self._truth["events"].append({"t": TM.t_seconds(self.engine.now), "event": kind,
                                          "detail": detail, "reconverged_s": None})
        self.events.append((self.now, n.name if n is not None else "", kind, detail))
        if self.telemetry is not None:
            # records about the whole mesh carry the first node's key
            self.telemetry.write("event", self.engine.now,
                                 (n if n is not None else self._nodes[0]).hex,
                                 {"event": kind, "detail": detail})

    def _on_router_event(self, n, kind, detail):
        kind = str(kind)
        detail = "" if detail is None else (detail if isinstance(detail, str) else str(detail))
        self.router_events[kind] += 1
        self.events.append((self.now, n.name, kind, detail))
        if self.telemetry is not None:
            self.telemetry.write("event", self.engine.now, n.hex, {"event": kind, "detail": detail})

    def _topology_changed(self):
        """Write a `topology` record when the usable edge set changed: the
        first one at start, then one per change (crash, restart, link
        up/down, partition, heal, join, a link refused), so a consumer can
        treat each as the topology epoch starting at its time."""
        if self.telemetry is None:
            return
        edges = [[l.a.hex, l.b.hex, l.edge.link] for l in self._links
                 if l.up and not l.cut and not l.blocked and l.a.alive and l.b.alive]
        if edges == self._last_topology:
            return
        self._last_topology = edges
        self.telemetry.write("topology", self.engine.now, self._nodes[0].hex,
                             {"edges": edges, "names": {n.hex: n.name for n in self._nodes}})

    # ------------------------------------------------------------------ platform
    def _virtual(self):
        return _Virtual(self)

    def _wall_ms(self):
        return WALL_EPOCH_MS + self.engine.now // US_PER_MS

    def _urandom(self, n):
        return self._plat_rng.randbytes(n)


from hashlib import blake2b as _blake2b


class VerifyMemo:
    """snake.crypto.verify with memory, shared by every node of a mesh.

    In a simulation every node checks the same signatures (an announcement
    signed at the root is verified by every node below it, a bootstrap by
    every node on its path): the same (key, message, signature) triple is
    verified ~8 times on average, and the ed25519 check was a quarter of the
    simulator's time. verify is a pure function, so answering a repeated
    triple from memory changes no outcome: every router still makes the
    same call and counts it (verify_done / verify_cached) as before.
    A triple is remembered by a 128-bit BLAKE2b digest of key, signature
    and message (messages of deep announcements run to kilobytes).
    Bounded: two generations of `size` entries (a hit in the older one
    moves to the newer one; when the newer one is full the older one is
    dropped)."""

    def __init__(self, verify, size=32768):
        self.verify = verify
        self.size = size
        self.new = {}
        self.old = {}
        self.calls = 0
        self.backend = 0

    def __call__(self, pub, msg, sig):
        self.calls += 1
        try:
            if len(pub) != 32 or len(sig) != 64:
                raise TypeError
            key = _blake2b(b"".join((pub, sig, msg)), digest_size=16).digest()
        except TypeError:               # not bytes-like: the real check says why
            self.backend += 1
            return self.verify(pub, msg, sig)
        new = self.new
        ok = new.get(key)
        if ok is None:
            ok = self.old.get(key)
            if ok is None:
                self.backend += 1
                ok = self.verify(pub, msg, sig)
            if len(new) >= self.size:
                self.old = new
                self.new = new = {}
            new[key] = ok
        return ok


class _Virtual:
    """While active, snake.platform's wall_ms / urandom / ticks_ms (and any
    snake.* module's own binding of them) are the mesh's virtual versions,
    and snake.crypto's verify is the mesh's VerifyMemo."""

    NAMES = ("wall_ms", "urandom", "ticks_ms", "verify")

    def __init__(self, mesh):
        self.mesh = mesh
        self.saved = None

    def __enter__(self):
        m = self.mesh
        if m._patched is not None:       # nested
            return self
        import snake.platform as plat
        import snake.crypto as crypto
        repl = {"wall_ms": m._wall_ms, "urandom": m._urandom, "ticks_ms": m._now_ms}
        orig = {k: getattr(plat, k) for k in self.NAMES if k in repl}
        if m.verify_memo:
            orig["verify"] = crypto.verify
            if m._verify_memo is None or m._verify_memo.verify is not crypto.verify:
                m._verify_memo = VerifyMemo(crypto.verify)
            repl["verify"] = m._verify_memo
        saved = []
        for modname in list(sys.modules):
            if modname != "snake" and not modname.startswith("snake."):
                continue
            mod = sys.modules.get(modname)
            if mod is None:
                continue
            for k in orig:
                if getattr(mod, k, None) is orig[k]:
                    saved.append((mod, k, orig[k]))
                    setattr(mod, k, repl[k])
        m._patched = saved
        self.saved = saved
        return self

    def __exit__(self, *exc):
        if self.saved is None:
            return False
        for mod, k, v in self.saved:
            setattr(mod, k, v)
        self.mesh._patched = None
        return False
