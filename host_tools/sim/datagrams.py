"""Application datagrams in a `Mesh`: every node runs the datagram layer
(firmware/snake/datagram.py) as the node runtime drives it (receive from
deliver, flush after the router call, tick with the router), built on a
node's first use and forgotten when it restarts; send_datagram() and the
scenario action dgram-set send them and record each outcome.

`DatagramsMixin` is one part of `Mesh` (harness.py); it uses the mesh's
engine, rng, ``_node``, ``_virtual``, ``_now_ms``, ``_hop_limit_of``,
``telemetry`` and ``_router_exception`` from the other parts."""
from host_tools.sim.engine import US_PER_S


class DatagramsMixin:
    # send_datagram() records every send's outcome in self.datagrams (and a
    # probe telemetry record, probe "datagram"); each datagram carries
    # (sender index, sequence) in its first 8 bytes, so a delivery twice is
    # seen (self.dgram_delivered counts per token).
    def _datagrams(self, n):
        dg = n.dg
        if dg is None:
            from snake import datagram as D
            dg = D.Datagrams(n.profile, n.key, self.rng.randrange(65536))
            dg.tx = D.via_router(n.router, self._hop_limit_of(n) or 0)
            inc = n.incarnation

            def on_datagram(src, dsvc, ssvc, data, n=n, inc=inc):
                if n.incarnation == inc and len(data) >= 8:
                    tok = bytes(data[:8])
                    self.dgram_delivered[tok] = self.dgram_delivered.get(tok, 0) + 1

            def on_state(h, state, reason, n=n, inc=inc):
                rec = self._dg_sends.pop((n.index, inc, h), None)
                if rec is not None:
                    self._dg_final(rec, state, reason)
            dg.on_datagram = on_datagram
            dg.on_state = on_state
            n.dg = dg
        return dg

    def _dg_flush(self, n, inc):
        if n.incarnation == inc and n.alive and n.dg is not None:
            with self._virtual():
                n.dg.flush(self._now_ms())

    def send_datagram(self, a, b, size=64, service=1, ack=True):
        """Send a datagram of `size` bytes (>= 8) from a to b now; its
        record (a dict: id, src, dst, t_s, state, reason, rtt_ms) is appended to
        self.datagrams once final (states: sent, delivered, failed)."""
        from snake import datagram as D
        src, dst = self._node(a), self._node(b)
        self._dg_seq += 1
        rec = {"src": src.name, "dst": dst.name, "t_s": round(self.engine.now / US_PER_S, 6),
               "len": max(8, size), "ack": bool(ack), "state": "pending", "reason": None, "rtt_ms": None,
               "_t": self.engine.now, "_inc": None, "id": self._dg_seq}
        if not src.alive:
            self._dg_final(rec, D.S_FAILED, D.NO_ROUTE)
            return rec
        data = bytearray(rec["len"])
        data[0:8] = (src.index & 0xFFFFFFFF).to_bytes(4, "big") + (self._dg_seq & 0xFFFFFFFF).to_bytes(4, "big")
        with self._virtual():
            dg = self._datagrams(src)
            h = dg.next_id
            key = (src.index, src.incarnation, h)
            self._dg_sends[key] = rec
            rec["_inc"] = src.incarnation
            try:
                dg.send(dst.key, service, data, self._now_ms(), ack)
            except Exception as e:
                self._dg_sends.pop(key, None)
                self._router_exception(src, "send", e)
                self._dg_final(rec, D.S_FAILED, D.NO_MEMORY)
            if dg.a_n:
                dg.flush(self._now_ms())
        self._dg_pending_recs.append(rec)
        return rec

    def _dg_final(self, rec, state, reason):
        from snake import datagram as D
        if rec["state"] != "pending":
            return
        rec["state"] = D.STATE_NAMES[state]
        rec["reason"] = D.REASON_NAMES[reason] if reason else None
        if state == D.S_DELIVERED:
            rec["rtt_ms"] = round((self.engine.now - rec["_t"]) / 1000.0, 3)
        self.datagrams.append(rec)
        if self.telemetry is not None:
            # a probe record (probe "datagram"): ok = delivered, rtt_ms = the
            # ack's round trip; `analyze` reads application delivery from it
            self.telemetry.write("probe", self.engine.now, self._node(rec["src"]).hex,
                                 {"probe": "datagram", "id": rec["id"],
                                  "src": self._node(rec["src"]).hex, "dst": self._node(rec["dst"]).hex,
                                  "ok": rec["state"] == "delivered", "rtt_ms": rec["rtt_ms"],
                                  "hops": None, "path": None, "state": rec["state"],
                                  "reason": rec["reason"], "len": rec["len"], "ack": rec["ack"]})

    def datagram_summary(self):
        """Outcomes of send_datagram()s: counts by state and failure
        reason, still pending (a send whose node crashed ends with it:
        failed, reason "crashed"), deliveries twice."""
        out = {"sent": 0, "delivered": 0, "failed": {}, "pending": 0, "delivered_twice": 0}
        for rec in self._dg_pending_recs:
            st = rec["state"]
            if st == "pending":
                n = self._node(rec["src"])
                if n.incarnation != rec["_inc"]:
                    rec["state"], rec["reason"] = "failed", "crashed"
                    st = "failed"
                else:
                    out["pending"] += 1
                    continue
            if st == "failed":
                out["failed"][rec["reason"]] = out["failed"].get(rec["reason"], 0) + 1
            else:
                out[st] += 1
        out["delivered_twice"] = sum(1 for v in self.dgram_delivered.values() if v > 1)
        rtts = sorted(r["rtt_ms"] for r in self._dg_pending_recs if r["rtt_ms"] is not None)
        out["ack_rtt_ms_p50"] = rtts[len(rtts) // 2] if rtts else None
        out["ack_rtt_ms_p95"] = rtts[min(len(rtts) - 1, int(len(rtts) * 0.95))] if rtts else None
        return out
