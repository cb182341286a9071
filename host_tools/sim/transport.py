"""How frames move between the routers of a `Mesh`: links connect and
close (ports, refusals, reconnects), `tx` queues a copy of a frame on its
link, and the copy arrives at the peer's router after serialisation and
latency unless the link's loss draw drops it (the model is in the module
docstring of harness.py).

`TransportMixin` is one part of `Mesh` (harness.py); it uses the mesh's
engine, rng, stats, profile data and ``_now_ms``/``_router_exception``/
``_sim_event``/``_topology_changed``/``_node`` from the other parts."""
import heapq

from host_tools.sim import probes as P
from host_tools.sim.links import Endpoint, LINK_IDS, LINK_TYPES


class TransportMixin:
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


    def _qcap(self, link, sender):
        """Send queue of one direction: the sending node's profile."""
        p = sender.profile
        # radio links (BLE, ESP-NOW) get the short queue, as node.py does
        return p.ble_queue if link.link_id >= LINK_IDS["ble"] else p.wifi_queue

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
        if ep.loss:
            if ep.arq:
                d = ep.resend_delay(length, self.rng)
                if d:
                    st["resent"] += 1
                    arrive += d
            elif self.rng.random() < ep.loss:
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


    # ------------------------------------------------------------------ accounting
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
