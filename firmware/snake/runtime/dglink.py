# The node's datagram layer and what its console asks of it.
#
# Built on first use (Node.datagrams()): by the console's send/put/recv, an
# incoming datagram or an application (snake/runtime/app.py's Mesh, built
# on top of this only when an application asks: the console never needs it).
#
# Link owns the Datagrams' callbacks and hands them on: a final state to
# the console's `send` that waits for it (a reply line) or to the Mesh's
# handles; a datagram to the console's `recv` tap (a record line) and to
# the Mesh's services. A console send in flight costs one tuple here, not a
# handle and a task, and a reply is written from the callback (like a
# `recv` record: a console line is written whole, nothing is sent).
from snake import datagram
from snake.platform import ticks_ms, ticks_diff, hexstr


class Link:
    def __init__(self, node):
        import os
        try:
            first = int.from_bytes(os.urandom(2), "big")
        except (AttributeError, OSError, NotImplementedError):
            first = ticks_ms() & 0xFFFF
        dg = datagram.Datagrams(node.profile, node.key, first)
        dg.tx = datagram.via_router(node.router)
        dg.on_state = self.state
        dg.on_datagram = self.datagram
        self.dg = dg
        self.mesh = None          # the Mesh (app.py), once an application asked
        self.tap = None           # (console, service or -1): the console's `recv`
        # console sends in flight (snake/runtime/cmds.py adds them):
        # (id, console, request id, dst, service, len, t0)
        self.waits = []
        self.stage = None         # console `put`: a datagram built line by line
        self.staged = 0
        self.no_listener = 0      # datagrams for no service listened to (no Mesh, no tap)

    def state(self, h, state, reason):
        for w in self.waits:
            if w[0] == h:
                self.waits.remove(w)
                c = w[1]
                try:
                    c.reply("send", w[2], reply(w, state, reason, ticks_ms()))
                except MemoryError:
                    c.oom += 1
                return
        m = self.mesh
        if m is not None:
            m.state(h, state, reason)

    def datagram(self, src, service, src_service, data):
        # inside router.receive: the console's record, the Mesh's queue
        t = self.tap
        if t is not None and (t[1] < 0 or t[1] == service):
            c = t[0]
            try:
                d = c._record("datagram")
                d["src"] = hexstr(src)
                d["service"] = service
                d["src_service"] = src_service
                d["len"] = len(data)
                d["data_hex"] = hexstr(data)
                c.emit(d)
            except MemoryError:
                c.oom += 1
        m = self.mesh
        if m is not None:
            m.datagram(src, service, src_service, data)
        elif t is None:
            self.no_listener += 1


def reply(w, state, reason, now):
    """The console's reply to a `send` (w: its entry in Link.waits)."""
    return {"id": w[0], "service": w[4], "len": w[5], "state": datagram.STATE_NAMES[state],
            "reason": datagram.REASON_NAMES[reason], "rtt_ms": ticks_diff(now, w[6]), "dst": hexstr(w[3])}
