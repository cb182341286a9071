# Wi-Fi / TCP ports: access point, LAN multicast discovery, listeners,
# dialling, static peers.
#
#   - On a board (a `network` module with WLAN): join the access point from
#     the config (/config.json "wifi": {"ssid", "password"}) before anything
#     else; keep retrying in the background if it fails.
#   - Multicast discovery (profile.multicast, docs/reference/PROTOCOL_NOTES.md "LAN discovery"):
#     every 2 s send the 34-byte beacon  public key[32] | u16 BE tcp port  to
#     224.0.0.114:60606, and listen there. Our own beacons and beacons
#     shorter than 34 bytes are ignored. On a beacon from a key we have no
#     multicast link to (and are not dialling), dial the sender's address and
#     advertised port: at once when our key is the lower one, else only when
#     that key keeps beaconing without a link for _DIAL_GRACE_MS (so two
#     nodes normally do not dial each other at the same moment; the
#     duplicate rule in node.link_up settles it when they do).
#   - Two TCP listeners, as in the reference implementation: the multicast
#     listener (port = profile.listen_port, 0 = a free port; its port goes
#     in the beacon; links are link type 1) and, when configured, the static
#     listener (--listen HOST:PORT / config "listen"; link type 3, remote).
#   - Static peers (--connect HOST:PORT / config "peers"): dialled at boot and
#     re-dialled with backoff (1 s doubling to 16 s) whenever the link ends;
#     link type 3.
#   - TCP_NODELAY on every TCP link. One link per (key, link type): node.link_up
#     refuses the second after its handshake.
#
# Bringing it up (joining the access point, the listeners, the multicast
# socket) runs once: snake/runtime/boot.py start_wifi, dropped with the boot code
# (docs/reports/MEMORY.md); this module keeps what runs while the node does.
import asyncio

from snake import platform
from snake.runtime import stream
from snake.platform import const, ticks_ms, ticks_diff
from snake.runtime.link import (TcpLink, LINK_MULTICAST, LINK_REMOTE, set_nodelay, host_port,
                        open_tcp, close_stream)

GROUP = "224.0.0.114"
MCAST_PORT = 60606
# Wifi.stats indices (a list of counters)
_W_BEACONS_TX = const(0)
_W_BEACONS_RX = const(1)
_W_BEACONS_SHORT = const(2)
_W_BEACONS_OWN = const(3)
_W_BEACON_TX_FAIL = const(4)
_W_N = const(5)

_BEACON_LEN = const(34)
_BEACON_MS = const(2000)
_POLL_MS = const(100)
_DIAL_GRACE_MS = const(6000)     # the higher key dials only after hearing this long
_DIAL_RETRY_MS = const(5000)     # after a failed dial to a key
_DIAL_TIMEOUT_S = const(5)
_SEEN_MAX = const(16)            # remembered beacon senders
STATIC_BACKOFF_MS = (1000, 2000, 4000, 8000, 16000)


def _err(e):
    try:
        import errno
        code = e.args[0]
        name = errno.errorcode.get(code) if hasattr(errno, "errorcode") else None
        return "%s (errno %d)" % (name, code) if name else "errno %s" % (code,)
    except (AttributeError, IndexError, TypeError):
        return str(e)


async def _nothing():
    pass


class Wifi:
    def __init__(self, node, cfg=None):
        self.node = node
        self.cfg = cfg
        self.sock = None          # multicast UDP socket
        self.mc_port = 0          # multicast TCP listener port (in the beacon)
        self.static_port = 0
        self.servers = []
        self.beacon = bytearray(_BEACON_LEN)
        # beacon senders: key -> [first heard ticks, last heard, retry-after ticks, dialling]
        self.seen = {}
        self.tasks = []
        # multicast counters, by index (_W_*): beacons sent, heard, too
        # short, our own, failed sends (a list: no name strings in the heap)
        self.stats = [0] * _W_N
        node.wifi = self

    # ---- start: snake/runtime/boot.py (start_wifi), run once and dropped --------
    def acceptor(self, link_type):
        # the listener's callback: a plain function returning the link's
        # coroutine, which asyncio runs as the connection's task (no wrapper
        # coroutine per link); made here, not in the boot code, which
        # leaves the heap after the boot
        def cb(reader, writer):
            return self._accepted(reader, writer, link_type)
        return cb

    def _accepted(self, reader, writer, link_type):
        set_nodelay(writer)
        self.node.stat("accepts")
        try:
            link = TcpLink(reader, writer, link_type, outbound=False)
        except MemoryError:
            self.node.oom()
            close_stream(writer)
            return _nothing()
        # admission here, not in the link's task: a refused connection
        # (node.py "Admission") costs no link coroutine, and a peer that
        # reopens refused sockets at once gets through the listen queue fast
        if not self.node.admit(link):
            link.close()
            return _nothing()
        return stream.run(self.node, link, True)

    # ---- multicast --------------------------------------------------------
    async def _beacon(self):
        # one task for both directions (a task and its frame are heap a node
        # keeps): our beacon every _BEACON_MS, the group's read every _POLL_MS
        s = self.sock
        k = 0
        while True:
            if k <= 0:
                k = _BEACON_MS // _POLL_MS
                try:
                    s.sendto(self.beacon, self.group)
                    self.stats[_W_BEACONS_TX] += 1
                except OSError:
                    self.stats[_W_BEACON_TX_FAIL] += 1
            k -= 1
            while True:
                try:
                    data, addr = s.recvfrom(64)
                    self.on_beacon(data, addr)
                except OSError:
                    break
                except MemoryError:
                    self.node.oom()
                    break
            await stream.sleep_ms(_POLL_MS)

    def on_beacon(self, data, addr):
        node = self.node
        if len(data) < _BEACON_LEN:
            self.stats[_W_BEACONS_SHORT] += 1
            return
        key = bytes(data[0:32])
        if key == node.key:
            self.stats[_W_BEACONS_OWN] += 1
            return
        self.stats[_W_BEACONS_RX] += 1
        now = ticks_ms()
        e = self.seen.get(key)
        if e is None:
            if len(self.seen) >= _SEEN_MAX:
                self._forget_oldest()
            e = [now, now, now, False]
            self.seen[key] = e
        e[1] = now
        if e[3] or node.has_link(key, LINK_MULTICAST):
            return
        if ticks_diff(now, e[2]) < 0:
            return     # retry later
        if node.key > key and ticks_diff(now, e[0]) < _DIAL_GRACE_MS:
            return     # the lower key dials first
        if not node.router.free_port():
            return
        try:
            host, _ = host_port(addr)
        except (ValueError, TypeError, IndexError, OSError, AttributeError):
            return
        port = (data[32] << 8) | data[33]
        e[3] = True
        asyncio.create_task(self._dial_beacon(key, host, port))

    def _forget_oldest(self):
        oldest = None
        for k in self.seen:
            e = self.seen[k]
            if e[3]:
                continue
            if oldest is None or ticks_diff(self.seen[oldest][1], e[1]) > 0:
                oldest = k
        if oldest is not None:
            del self.seen[oldest]

    async def _dial_beacon(self, key, host, port):
        node = self.node
        e = self.seen.get(key)
        retry = _DIAL_RETRY_MS // 5
        try:
            node.stat("dials")
            try:
                link = await open_tcp(host, port, LINK_MULTICAST, _DIAL_TIMEOUT_S)
            except OSError as e:
                node.stat("dial_fail")
                node.log("dial %s:%d failed: %s" % (host, port, _err(e)))
                retry = _DIAL_RETRY_MS
                return
            await stream.run(node, link)
        finally:
            if e is not None:
                now = ticks_ms()
                e[3] = False
                e[2] = platform.ticks_add(now, retry)
                e[0] = now

    # ---- static peers -----------------------------------------------------
    async def _static(self, host, port):
        # one task per static peer for as long as the node runs, and the
        # link is served inside it (stream.run): this frame is heap the node
        # keeps per static peer, so few locals and a shallow stack (the dial
        # and its failure log are _dial_static's, whose frame goes once it
        # returns): 144 -> 80 B on a 32-bit port
        node = self.node
        fails = 0
        known = None     # the key this address answered with last time
        while True:
            if known is not None and node.has_link(known, LINK_REMOTE):
                # already linked to that key (it dialled us): do not dial again
                await stream.sleep_ms(STATIC_BACKOFF_MS[1])
                continue
            link = await _dial_static(node, host, port, fails)
            if link is not None:
                up = node.stats["links_up"]
                link.want_key = True
                await stream.run(node, link)
                known = getattr(link, "peer_key", None) or known
                if node.stats["links_up"] != up:
                    fails = 0
            link = None
            fails += 1
            await stream.sleep_ms(STATIC_BACKOFF_MS[_backoff(fails - 1)])


def _backoff(fails):
    # index into STATIC_BACKOFF_MS after `fails` failed attempts in a row
    return fails if fails < len(STATIC_BACKOFF_MS) else len(STATIC_BACKOFF_MS) - 1


async def _dial_static(node, host, port, fails):
    """A connected TcpLink to a static peer, or None (counted, logged)."""
    node.stat("dials")
    try:
        return await open_tcp(host, port, LINK_REMOTE, _DIAL_TIMEOUT_S)
    except OSError as e:
        node.stat("dial_fail")
        node.log("dial %s:%d failed: %s; retry in %d s" % (host, port, _err(e),
                                                           STATIC_BACKOFF_MS[_backoff(fails)] // 1000))
        return None
