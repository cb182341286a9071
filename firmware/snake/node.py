# The asyncio node runtime around the sans-I/O router core.
#
# Node owns: the Router, the real clock (snake.platform.ticks_ms), a tick
# task (router.tick every TICK_MS <= 250 ms), the switch ports' links and
# their bounded send queues, ping/trace (snake.probe), counters of the
# runtime itself, and the transports (wifi.py, ble.py) and the console.
#
# Send queues (back-pressure without unbounded buffering): one node-wide
# pool of profile.tx_buffers preallocated frame buffers (bytearray(frame_max)
# each), and per port a ring of at most `limit` buffer references.
# router.tx takes a free buffer, copies the frame into it and queues it, or
# returns False when the port's ring holds `limit` frames or the pool is
# empty (the router counts the drop as queue_full). limit =
# profile.wifi_queue for TCP links, profile.ble_queue for Bluetooth (link
# type 4). A writer task per link (stream.py) sends the oldest buffer and
# returns it to the pool only after link.send returned, so a buffer is never
# overwritten while on its way out. Memory is fixed at boot (tx_buffers x
# frame_max), whatever the number of ports or the traffic; a busy port
# cannot take more than its ring's share.
#
# Read buffers: one bytearray(frame_max) per live link, taken from a free
# list (allocated on first need, reused after), at most max_peers + 2 at
# once (links still in their handshake count); a further link is refused
# ("busy"), and so is one whose buffer the heap cannot give ("no_memory").
import asyncio
import sys

from snake import platform, wire
from snake.platform import ticks_ms, ticks_diff, copy_into
from snake import crypto
from snake.router import Router
from snake import probe
from snake import stream     # at boot, not at the first link (stream.py: nothing new after boot)

TICK_MS = 100
LINK_BLE = 4
HANDSHAKE_TIMEOUT_MS = 10000
EXTRA_HANDSHAKES = 2


def _sleep_ms(ms):
    return asyncio.sleep(ms / 1000)


class FramePool:
    """Node-wide free list of preallocated frame buffers."""

    def __init__(self, count, frame_max):
        self.free = [bytearray(frame_max) for _ in range(count)]
        self.size = count
        self.empty = 0        # times a frame found no free buffer

    def take(self):
        if self.free:
            return self.free.pop()
        self.empty += 1
        return None

    def give(self, buf):
        self.free.append(buf)


class SendQueue:
    """Bounded ring of buffer references for one port (buffers: FramePool)."""

    def __init__(self, limit, pool):
        self.pool = pool
        self.slots = [None] * limit
        self.lens = [0] * limit
        self.limit = limit
        self.head = 0
        self.count = 0
        self.high = 0         # highest fill seen
        self.full = 0         # frames refused (ring full or pool empty)
        self.ev = asyncio.Event()

    def grow(self, limit):
        while len(self.slots) < limit:
            self.slots.append(None)
            self.lens.append(0)

    def reset(self, limit):
        while self.count:
            self.pop()
        self.head = 0
        self.limit = limit
        self.ev = asyncio.Event()   # a fresh event: no stale waiter

    def put(self, buf, n):
        c = self.count
        if c >= self.limit:
            self.full += 1
            return False
        b = self.pool.take()
        if b is None:
            self.full += 1
            return False
        i = self.head + c
        if i >= self.limit:
            i -= self.limit
        if len(buf) == len(b):
            b[:] = buf      # same-size buffers: one native copy, no allocation
        else:
            copy_into(b, 0, buf, 0, n)
        self.slots[i] = b
        self.lens[i] = n
        c += 1
        self.count = c
        if c > self.high:
            self.high = c
        self.ev.set()
        return True

    def pop(self):
        if self.count:
            i = self.head
            b = self.slots[i]
            self.slots[i] = None
            if b is not None:
                self.pool.give(b)
            h = i + 1
            if h >= self.limit:
                h = 0
            self.head = h
            self.count -= 1


class Node:
    def __init__(self, profile, signer, config=None):
        self.profile = profile
        self.signer = signer
        self.config = config
        self.key = bytes(signer.public)
        self.started = ticks_ms()
        r = Router(profile, signer, self.started)
        self.router = r
        r.tx = self._tx
        r.disconnect = self._disconnect
        r.deliver = self._deliver
        r.expired = self._expired
        r.on_event = self._event
        P = profile.max_peers + 1
        self.links = [None] * P
        self.queues = [None] * P
        self.pool = FramePool(profile.tx_buffers, profile.frame_max)
        self.tasks = [None] * P
        self.link_since = [0] * P
        self.rx_free = []
        self.rx_out = 0
        self.rx_max = profile.max_peers + EXTRA_HANDSHAKES
        self.hop_limit = getattr(profile, "traffic_hop_limit", wire.HOP_LIMIT_TRAFFIC)
        hs_ms = getattr(config, "hs_timeout_ms", None) if config is not None else None
        self.hs_timeout_ms = hs_ms or HANDSHAKE_TIMEOUT_MS
        self.hs = bytearray(wire.HANDSHAKE_LEN)
        wire.encode_handshake(self.hs, self.key, signer.sign(wire.handshake_signed(self.key)))
        self.probes = probe.Prober(self)
        # runtime counters (fixed keys; the console's `stats` shows them)
        self.stats = {"links_up": 0, "links_down": 0, "hs_ok": 0, "duplicate": 0,
                      "no_port": 0, "framing": 0, "core_disconnect": 0, "app_rx": 0,
                      "dials": 0, "dial_fail": 0, "accepts": 0, "oom": 0}
        self.hs_fail = {}
        self.listeners = {}      # name -> "host:port" (for status/boot)
        self.warnings = []       # start-up problems (boot line)
        self.console = None      # set by the console (events -> telemetry)
        self.on_app = None       # optional fn(src, payload) for other payloads
        self.log_fn = None
        self.ticker = None
        self.wifi = None         # snake.wifi.Wifi, when started
        self.ble = None          # snake.ble.BleManager, when started

    # ---- helpers ------------------------------------------------------
    def log(self, msg):
        if self.log_fn is not None:
            self.log_fn(msg)

    def oom(self):
        """A MemoryError was caught and survived (counted in stats)."""
        self.stats["oom"] += 1
        import gc
        gc.collect()

    def warn(self, msg):
        """A start-up problem the node runs on with (shown in the boot line)."""
        self.warnings.append(msg)
        self.log(msg)

    def stat(self, name, n=1):
        self.stats[name] = self.stats.get(name, 0) + n

    def hs_failed(self, reason, link):
        self.hs_fail[reason] = self.hs_fail.get(reason, 0) + 1
        self.log("handshake failed (%s) on %s" % (reason, link.name))

    def verify(self, pub, msg, sig):
        return crypto.verify(pub, msg, sig)

    def now(self):
        return ticks_ms()

    def uptime_s(self):
        return ticks_diff(ticks_ms(), self.started) // 1000

    def rxbuf_get(self):
        if self.rx_free:
            self.rx_out += 1
            return self.rx_free.pop()
        if self.rx_out >= self.rx_max:
            return None
        try:
            buf = bytearray(self.profile.frame_max)
        except MemoryError:
            # a fragmented heap: collect once and try again, else the link
            # is refused (counted as a no_memory handshake failure)
            self.oom()
            try:
                buf = bytearray(self.profile.frame_max)
            except MemoryError:
                return None
        self.rx_out += 1
        return buf

    def rxbuf_put(self, buf):
        self.rx_out -= 1
        self.rx_free.append(buf)

    # ---- links (called by stream.run) --------------------------------
    def find_link(self, key, link_type):
        """Port of the live link to `key` with that link type, or 0."""
        r = self.router
        p = 1
        while p < len(self.links):
            lk = self.links[p]
            if lk is not None and lk.link_type == link_type and r.port_key[p] == key:
                return p
            p += 1
        return 0

    def has_link(self, key, link_type=None):
        r = self.router
        p = 1
        while p < len(self.links):
            lk = self.links[p]
            if lk is not None and r.port_key[p] == key and (link_type is None or lk.link_type == link_type):
                return True
            p += 1
        return False

    def _keep_new(self, old, new, peer_key):
        # Duplicate link to the same key and link type: keep the older one,
        # except when the two were dialled from opposite ends at once: then
        # both ends keep the link dialled by the lower key, so they agree.
        o_out = getattr(old, "outbound", None)
        n_out = getattr(new, "outbound", None)
        if o_out is None or n_out is None or o_out == n_out:
            return False
        lower_is_us = self.key < peer_key
        # the new link was dialled by the lower key?
        return n_out == lower_is_us

    def link_up(self, link, peer_key):
        """A handshake completed: give the link a port (0 = refused)."""
        r = self.router
        peer_key = bytes(peer_key)
        if peer_key == self.key:
            self.hs_failed("self", link)
            return 0
        old = self.find_link(peer_key, link.link_type)
        if old:
            if not self._keep_new(self.links[old], link, peer_key):
                self.stat("duplicate")
                self.log("duplicate link to %s on %s closed" % (_short(peer_key), link.name))
                return 0
            self.stat("duplicate")
            self._disconnect(old, "duplicate")
            r.port_down(old, ticks_ms())
        port = r.free_port()
        if not port or self.links[port] is not None:
            self.stat("no_port")
            r.peer_refused()
            self.log("no free port for %s" % link.name)
            return 0
        limit = self.profile.ble_queue if link.link_type == LINK_BLE else self.profile.wifi_queue
        q = self.queues[port]
        if q is None:
            q = SendQueue(limit, self.pool)
            self.queues[port] = q
        else:
            q.grow(limit)
        q.reset(limit)
        self.links[port] = link
        try:
            self.tasks[port] = asyncio.current_task()
        except RuntimeError:
            self.tasks[port] = None
        now = ticks_ms()
        self.link_since[port] = now
        if not r.port_up(port, peer_key, link.link_type, now):
            self.links[port] = None
            self.tasks[port] = None
            self.stat("no_port")
            return 0
        self.stats["hs_ok"] += 1
        self.stats["links_up"] += 1
        self.log("peer up: port %d %s via %s" % (port, _short(peer_key), link.name))
        self.after_receive()
        return port

    def link_down(self, port, link=None, reason="eof"):
        if port < 1 or port >= len(self.links):
            return
        if link is not None and self.links[port] is not link:
            return   # already taken down (router disconnect, duplicate)
        self._release(port)
        self.log("peer down: port %d (%s)" % (port, reason))
        self.router.port_down(port, ticks_ms())

    def _release(self, port):
        """Forget the port's link and task, return its queued buffers."""
        self.links[port] = None
        self.tasks[port] = None
        q = self.queues[port]
        if q is not None:
            q.reset(q.limit)
        self.stats["links_down"] += 1

    def start_link(self, link):
        """Serve a connected link in its own task (handshake, frames)."""
        return asyncio.create_task(stream.run(self, link))

    # ---- router outputs ---------------------------------------------
    def _tx(self, port, buf, n):
        if port < 1 or port >= len(self.links) or self.links[port] is None:
            return False
        return self.queues[port].put(buf, n)

    def _disconnect(self, port, reason):
        link = self.links[port]
        if link is None:
            return
        self.stats["core_disconnect"] += 1
        task = self.tasks[port]
        self._release(port)
        self.log("link closed: port %d (%s)" % (port, reason))
        link.close()
        if task is not None:
            try:
                cur = asyncio.current_task()
            except RuntimeError:
                cur = None
            if task is not cur:
                task.cancel()

    def _deliver(self, src, payload):
        if self.probes.on_deliver(src, payload):
            return
        self.stats["app_rx"] += 1
        if self.on_app is not None:
            self.on_app(src, payload)

    def _expired(self, buf, f):
        self.probes.on_expired(buf, f)

    def _event(self, kind, detail):
        c = self.console
        if c is not None:
            c.on_event(kind, detail)

    def after_receive(self):
        if self.probes.p_count:
            self.probes.flush()

    # ---- tasks ------------------------------------------------------------
    async def _tick(self):
        r = self.router
        while True:
            try:
                r.tick(ticks_ms())
                self.after_receive()
            except MemoryError:
                self.oom()
            await _sleep_ms(TICK_MS)

    def start(self):
        """Start the tick task (the transports and console start their own)."""
        if self.ticker is None:
            self.ticker = asyncio.create_task(self._tick())
        return self.ticker

    def close_all(self):
        p = 1
        while p < len(self.links):
            if self.links[p] is not None:
                self._disconnect(p, "shutdown")
                self.router.port_down(p, ticks_ms())
            p += 1

    # ---- introspection (console) -------------------------------------
    def queue_info(self):
        out = []
        p = 1
        while p < len(self.links):
            q = self.queues[p]
            if q is not None and self.links[p] is not None:
                out.append({"port": p, "len": q.count, "limit": q.limit, "high": q.high, "full": q.full})
            p += 1
        return out


def _short(key):
    import binascii
    return binascii.hexlify(bytes(key[0:4])).decode()


# ------------------------------------------------------------------ boot
def _log_line(msg):
    out = getattr(sys.stdout, "buffer", sys.stdout)
    try:
        out.write(("snakemesh: " + msg + "\n").encode())
        if hasattr(out, "flush"):
            out.flush()
    except (OSError, TypeError):
        pass


async def run_node(cfg, profile, seed):
    """Boot everything from a config; runs until cancelled."""
    from snake.console import Console
    console = Console(None, boot_error=None)
    node = None
    if seed is None:
        console.boot_error = cfg.key_error or "no key"
    else:
        try:
            node = Node(profile, crypto.Signer(seed), cfg)
        except MemoryError:
            console.boot_error = "out of memory building the router (profile %s)" % profile.name
            node = None
        seed = None
    if node is not None:
        console.attach(node)
        node.log_fn = console.log
        node.start()
        if profile.wifi:
            from snake import wifi
            await wifi.Wifi(node, cfg).start()
        if profile.ble or getattr(cfg, "ble_medium", None):
            start_ble(node, console)
    console.boot()
    await console.run()
    # stdin closed: keep routing (a board without a host, a detached node)
    while True:
        await _sleep_ms(3600000)


def start_ble(node, console):
    """Bluetooth LE links (snake/ble.py) when this platform has a radio: a
    board's `bluetooth` module, or the host emulation (host_tools/blemu on
    the module path, SNAKEMESH_BLE_MEDIUM set: `snakemesh node --ble-medium`)."""
    if platform.try_import("bluetooth") is None:
        node.warn("ble: no bluetooth module on this platform: BLE off")
        return None
    try:
        from snake.ble import BleManager
        mgr = BleManager(node.profile, node.key, node.start_link)
        mgr.start()
    except (ImportError, OSError, ValueError, AttributeError) as e:
        node.warn("ble: cannot start: %s" % (e,))
        return None
    node.ble = mgr
    return mgr


def main(argv=None):
    """Entry point of firmware/main.py."""
    try:
        return _main(argv)
    except MemoryError:
        _unload("snake.config")
        _log_line("error: out of memory while booting")
        try:
            _boot_fail("out of memory while booting")
        except MemoryError:
            pass    # not even the console fits: the line above says it all
        return 3


def _main(argv):
    from snake import config as cfgmod
    from snake.profile import Profile, ProfileError
    if argv is None:
        argv = sys.argv[1:]
    try:
        if platform.BOARD:
            cfg = cfgmod.from_board()
        else:
            cfg = cfgmod.from_argv(argv, argv0=sys.argv[0] if sys.argv else None)
    except cfgmod.ConfigError as e:
        _log_line("error: " + str(e))
        _boot_fail(str(e))
        return 2
    try:
        profile = Profile.load(cfg.profile_path) if cfg.profile_path else Profile()
    except ProfileError as e:
        _log_line("error: " + str(e))
        _boot_fail(str(e))
        return 2
    if cfg.multicast is not None:
        profile.multicast = cfg.multicast
    seed = cfg.take_seed()
    cfg = _settings(cfg)
    # the config parser is not needed after boot: give its memory back
    cfgmod = None
    _unload("snake.config")
    try:
        asyncio.run(run_node(cfg, profile, seed))
    except KeyboardInterrupt:
        pass
    return 0


class Settings:
    """What the running node keeps of its config (snake.config is unloaded)."""
    pass


SETTINGS = ("key_error", "listen", "connect", "multicast", "ble_medium", "ssid", "password",
            "hs_timeout_ms")


def _settings(cfg):
    s = Settings()
    for k in SETTINGS:
        setattr(s, k, getattr(cfg, k))
    return s


def _unload(name):
    try:
        del sys.modules[name]
    except KeyError:
        pass
    pkg, _, attr = name.rpartition(".")
    mod = sys.modules.get(pkg)
    if mod is not None:
        try:
            delattr(mod, attr)
        except (AttributeError, KeyError):  # MicroPython raises KeyError
            pass
    import gc
    gc.collect()


def _boot_fail(msg):
    # one parseable line, then keep answering the console with the error
    from snake.console import Console
    c = Console(None, boot_error=msg)
    c.boot()
    try:
        asyncio.run(c.run())
    except KeyboardInterrupt:
        pass
