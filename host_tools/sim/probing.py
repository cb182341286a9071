"""Traffic a `Mesh` originates and answers: pings (probes) between nodes
with their path and round trip, application payloads (``send``/``inbox``),
and the replies to ping requests (the wire format and the ground truth are
in probes.py).

`ProbingMixin` is one part of `Mesh` (harness.py); it uses the mesh's
engine, rng, ``_node``, ``_virtual``, ``_run``, ``components`` and
``_router_exception`` from the other parts."""
from host_tools.sim import probes as P
from host_tools.sim import telemetry as TM
from host_tools.sim.engine import US_PER_S
from host_tools.sim.keys import hexkey


class ProbingMixin:
    # ------------------------------------------------------------------ delivery
    def _deliver(self, n, src_key, payload):
        if len(payload) > 1 and payload[0] == 0x53 and payload[1] == 0x44:
            # a datagram: the node's layer takes it (datagrams.py; acks
            # leave after the router call that delivered it, as on a node)
            dg = self._datagrams(n)
            if dg.receive(bytes(src_key), payload, self._now_ms()):
                if dg.a_n:
                    self.engine.after(0, self._dg_flush, n, n.incarnation)
                return
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

    def inbox(self, name):
        """(src name or hex, payload) received by node `name` (non-probe traffic)."""
        return [(self.names.get(hexkey(k), hexkey(k)), p) for k, p in self._node(name).inbox]
