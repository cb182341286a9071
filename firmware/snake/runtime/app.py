# The board API for applications: datagrams to and from keys, by service.
#
#   from snake.runtime import app
#   mesh = app.mesh()                 # the node's, once built (an app's main() gets it)
#   h = mesh.send(key, b"21.5", service=7, ack=True)
#   state = await h                   # "delivered" | "failed" ("sent" without ack)
#   h.reason                          # "no_route" | "timeout" | "too_big" | "no_memory" | "busy"
#   src, src_service, data = await mesh.recv(7)          # awaitable form
#   mesh.on(7, lambda src, src_service, data: ...)      # callback form
#
# A program given as the node's app (config.json "app", `snakemesh node
# --app FILE`) is imported after boot and its `main(mesh, conf)` coroutine
# runs beside the node (conf: config.json "app_config", a dict).
# docs/guides/DATAGRAMS.md describes the API for users, and
# docs/reference/DATAGRAMS.md the header and the rules.
#
# Loaded on first use: the node builds its datagram layer
# (snake/runtime/dglink.py over snake/datagram.py) when the console's
# send/recv or an incoming datagram first needs it, and this module on top
# only when an application asks (Node.mesh), so a node that never carries
# datagrams holds neither, and one whose console does holds no Mesh. Received data is copied out of the
# datagram layer's buffers (it is valid only during its callback) into one
# bytes object per datagram, queued per service (at most RX_QUEUE, then
# the oldest is dropped and counted) and handed to the application from a
# task: a callback never runs inside the router's receive, so it may send.
import asyncio

from snake import datagram as dgm
from snake.platform import ticks_ms, ticks_diff

RX_QUEUE = 4            # datagrams held per service until the application takes them

_mesh = None


def mesh():
    """The running node's Mesh once its datagram layer is built (an app's
    main() gets it as its argument), else None."""
    return _mesh


def state_name(s):
    return dgm.STATE_NAMES[s] if 0 < s < len(dgm.STATE_NAMES) else None


def reason_name(r):
    return dgm.REASON_NAMES[r] if 0 < r < len(dgm.REASON_NAMES) else None


def _bytes(data):
    if isinstance(data, str):
        return data.encode()
    return data


class Handle:
    """A datagram sent: state "pending", then "sent" (no ack asked),
    "delivered" (the destination acknowledged it) or "failed" (reason).
    Await it (or its wait()) for the final state."""

    def __init__(self, hid, dst, service, n, t0):
        self.id = hid
        self.dst = dst
        self.service = service
        self.len = n
        self.state = "pending"
        self.reason = None
        self.rtt_ms = None        # send to final state, ms (delivered: the ack's round trip)
        self.t0 = t0
        self._ev = None

    def done(self):
        return self.state != "pending"

    def _final(self, state, reason, now):
        self.state = state_name(state)
        self.reason = reason_name(reason)
        self.rtt_ms = ticks_diff(now, self.t0)
        ev = self._ev
        if ev is not None:
            ev.set()

    async def wait(self, timeout_ms=None):
        """The final state (or "pending" when timeout_ms passed first)."""
        if self.state == "pending":
            if self._ev is None:
                self._ev = asyncio.Event()
            if timeout_ms is None:
                await self._ev.wait()
            else:
                try:
                    await _wait_for_ms(self._ev.wait(), timeout_ms)
                except asyncio.TimeoutError:
                    pass
        return self.state

    def __await__(self):
        # CPython wants an iterator from the coroutine; MicroPython's
        # coroutines are generators already
        c = self.wait()
        a = getattr(c, "__await__", None)
        return a() if a is not None else c

    __iter__ = __await__

    def info(self):
        return {"id": self.id, "service": self.service, "len": self.len, "state": self.state,
                "reason": self.reason, "rtt_ms": self.rtt_ms}


async def _wait_for_ms(aw, ms):
    f = getattr(asyncio, "wait_for_ms", None)
    if f is not None:
        return await f(aw, ms)
    return await asyncio.wait_for(aw, ms / 1000)


class _Service:
    def __init__(self):
        self.q = []               # (src, src_service, data)
        self.fn = None
        self.ev = None
        self.dropped = 0


class Mesh:
    """The datagram API of one node (snake.runtime.app.mesh())."""

    def __init__(self, node, dg, hook=True):
        self.node = node
        self.key = node.key
        self.dg = dg
        self.max_size = dg.max_size
        self.handles = {}         # datagram id -> Handle, while pending
        self.services = {}        # service -> _Service (listened to)
        self.no_listener = 0      # datagrams for a service nobody listens to
        self._ready = []          # services with callbacks owed
        self._ev = None
        self._task = None
        if hook:                  # else the node's Link hands the callbacks on (bind)
            dg.on_state = self.state
            dg.on_datagram = self.datagram

    # ---- sending ----------------------------------------------------------
    def send(self, dst, data, service=0, ack=False, src_service=0):
        """Send data (bytes, bytearray, str) to key dst (32 bytes) for
        `service` (0..65535; ValueError otherwise). Returns a Handle. The
        data must stay unchanged until the handle is done (no copy)."""
        data = _bytes(data)
        if len(dst) != 32:
            raise ValueError("a key is 32 bytes")
        dst = bytes(dst)
        dg = self.dg
        now = ticks_ms()
        hid = dg.next_id
        h = Handle(hid, dst, service, len(data), now)
        self.handles[hid] = h
        try:
            dg.send(dst, service, data, now, ack, src_service)
        except ValueError:
            self.handles.pop(hid, None)
            raise
        if dg.last_state != dgm.S_PENDING:
            self.handles.pop(hid, None)
            if h.state == "pending":
                h._final(dg.last_state, dg.last_reason, now)
        # acks owed to a local delivery (a datagram to our own key)
        dg.flush(now)
        return h

    def state(self, hid, state, reason):
        h = self.handles.pop(hid, None)
        if h is not None:
            h._final(state, reason, ticks_ms())

    # ---- receiving --------------------------------------------------------
    def on(self, service, fn):
        """Call fn(src, src_service, data) for every datagram to `service`
        (from a task, never inside the router); fn None stops."""
        s = self._service(service)
        s.fn = fn
        if fn is not None:
            self._start()

    async def recv(self, service, timeout_ms=None):
        """The next datagram to `service`: (src, src_service, data), or None
        when timeout_ms passed first."""
        s = self._service(service)
        while not s.q:
            if s.ev is None:
                s.ev = asyncio.Event()
            s.ev.clear()
            if timeout_ms is None:
                await s.ev.wait()
            else:
                try:
                    await _wait_for_ms(s.ev.wait(), timeout_ms)
                except asyncio.TimeoutError:
                    return None
        return s.q.pop(0)

    def listen(self, service):
        """Start keeping datagrams to `service` for recv() (recv does this too)."""
        self._service(service)

    def close(self, service):
        self.services.pop(service, None)

    def _service(self, service):
        if not 0 <= service <= 0xFFFF:
            raise ValueError("service numbers are 0..65535")
        s = self.services.get(service)
        if s is None:
            s = self.services[service] = _Service()
        return s

    def datagram(self, src, dsvc, ssvc, data):
        # inside router.receive: copy, queue, wake; nothing is sent from here
        s = self.services.get(dsvc)
        if s is None:
            self.no_listener += 1
            return
        if len(s.q) >= RX_QUEUE:
            s.q.pop(0)
            s.dropped += 1
        s.q.append((bytes(src), ssvc, bytes(data)))
        if s.fn is not None:
            if dsvc not in self._ready:
                self._ready.append(dsvc)
            if self._ev is not None:
                self._ev.set()
        elif s.ev is not None:
            s.ev.set()

    def _start(self):
        if self._task is None:
            self._ev = asyncio.Event()
            self._task = asyncio.create_task(self._callbacks())

    async def _callbacks(self):
        while True:
            self._ev.clear()
            while self._ready:
                svc = self._ready.pop(0)
                s = self.services.get(svc)
                while s is not None and s.q and s.fn is not None:
                    src, ssvc, data = s.q.pop(0)
                    try:
                        s.fn(src, ssvc, data)
                    except Exception as e:     # an application's bug must not stop the node
                        self.node.log("app callback for service %d failed: %r" % (svc, e))
            await self._ev.wait()

    def stats(self):
        d = {"no_listener": self.no_listener}
        dropped = 0
        for svc in self.services:
            dropped += self.services[svc].dropped
        d["app_dropped"] = dropped
        return d


def bind(node):
    """The node's Mesh over its datagram layer (node.dgl, a
    snake/runtime/dglink.py Link), built when an application first asks
    (Node.mesh)."""
    global _mesh
    ln = node.dgl
    m = Mesh(node, ln.dg, False)
    ln.mesh = m
    _mesh = m
    return m


async def run_app(node, name, conf):
    """Import the application module `name` (a module name, or a .py path
    on the unix port) and run its main(mesh, conf)."""
    import sys
    if name.endswith(".py"):
        i = name.rfind("/")
        d = name[:i] if i > 0 else "."
        if d not in sys.path:
            sys.path.append(d)
        name = name[i + 1:-3]
    try:
        mod = __import__(name)
        m = node.mesh()
        if m is None:
            node.log("app %s not started: no datagram layer (out of memory, or profile dgram_pending 0)"
                     % name)
            return
        await mod.main(m, conf or {})
    except Exception as e:
        node.log("app %s stopped: %s: %s" % (name, type(e).__name__, e))
