"""What a `Mesh` records as it runs: `state`/`peers`/`counters` samples,
`event` and `topology` records (telemetry.py writes them), the ground
truth checked on a clock (``convergence``) and the table readings behind
``capacity_warnings``.

`SamplingMixin` is one part of `Mesh` (harness.py); it uses the mesh's
engine, telemetry writer, nodes, links and ``components`` of the other
parts."""
from host_tools.sim import probes as P
from host_tools.sim import telemetry as TM
from host_tools.sim.engine import US_PER_MS, US_PER_S
from host_tools.sim.links import LINK_TYPES
from host_tools.sim.nodes import MeshError
from snake import report


class SamplingMixin:
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
        treat each as the topology epoch starting at its time. `names`
        ({hex: name}) is in the first record and in those where it
        changed."""
        if self.telemetry is None:
            return
        edges = [[l.a.hex, l.b.hex, l.edge.link] for l in self._links
                 if l.up and not l.cut and not l.blocked and l.a.alive and l.b.alive]
        if edges == self._last_topology:
            return
        self._last_topology = edges
        # the names only when they change (the first record, a node
        # joining): readers merge the names of every record, and a run whose
        # links come and go would otherwise repeat the whole map each time
        fields = {"edges": edges}
        names = {n.hex: n.name for n in self._nodes}
        if names != self._last_topology_names:
            fields["names"] = names
            self._last_topology_names = names
        self.telemetry.write("topology", self.engine.now, self._nodes[0].hex, fields)

