"""What a scenario does to a running `Mesh`: crash and restart nodes,
take links down and up, change a link's latency/bandwidth/loss, partition
and heal, add a node (how neighbours notice a crash is in the module
docstring of harness.py).

`FaultsMixin` is one part of `Mesh` (harness.py); it uses the model
(``_node``, ``_link``, ``_add_node``, ``_add_link``, ``_boot``), the
transport (``_close``, ``_schedule_connect``) and the records
(``_sim_event``, ``_topology_changed``) of the other parts."""
from host_tools.sim.links import LINK_IDS, LINK_TYPES
from host_tools.sim.nodes import MeshError


class FaultsMixin:
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

