# Wi-Fi / TCP ports: access point, LAN multicast discovery, listeners,
# dialling, static peers.
#
#   - On a board (a `network` module with WLAN): join the access point from
#     the config (/config.json "wifi": {"ssid", "password"}) before anything
#     else; keep retrying in the background if it fails.
#   - Multicast discovery (profile.multicast, docs/PROTOCOL_NOTES.md "LAN discovery"):
#     every 2 s send the 34-byte beacon  public key[32] | u16 BE tcp port  to
#     224.0.0.114:60606, and listen there. Our own beacons and beacons
#     shorter than 34 bytes are ignored. On a beacon from a key we have no
#     multicast link to (and are not dialling), dial the sender's address and
#     advertised port: at once when our key is the lower one, else only when
#     that key keeps beaconing without a link for DIAL_GRACE_MS (so two
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
import asyncio

from snake import platform, stream
from snake.platform import ticks_ms, ticks_diff
from snake.link import (TcpLink, LINK_MULTICAST, LINK_REMOTE, set_nodelay, peer_name, host_port,
                        open_tcp, close_stream)

GROUP = "224.0.0.114"
MCAST_PORT = 60606
BEACON_LEN = 34
BEACON_MS = 2000
POLL_MS = 100
DIAL_GRACE_MS = 6000     # the higher key dials only after hearing this long
DIAL_RETRY_MS = 5000     # after a failed dial to a key
DIAL_TIMEOUT_S = 5
SEEN_MAX = 16            # remembered beacon senders
STATIC_BACKOFF_MS = (1000, 2000, 4000, 8000, 16000)
WLAN_TIMEOUT_MS = 20000
RANDOM_PORT_TRIES = 20


def _sleep_ms(ms):
    return asyncio.sleep(ms / 1000)


def _addr(host, port):
    import socket
    return socket.getaddrinfo(host, port)[0][-1]


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


def _ip_bytes(dotted):
    parts = dotted.split(".")
    if len(parts) != 4:
        raise ValueError("not an IPv4 address: " + dotted)
    return bytes([int(p) for p in parts])


class Wifi:
    def __init__(self, node, cfg=None):
        self.node = node
        self.cfg = cfg
        self.sock = None          # multicast UDP socket
        self.mc_port = 0          # multicast TCP listener port (in the beacon)
        self.static_port = 0
        self.servers = []
        self.beacon = bytearray(BEACON_LEN)
        # beacon senders: key -> [first heard ticks, last heard, retry-after ticks, dialling]
        self.seen = {}
        self.tasks = []
        self.stats = {"beacons_tx": 0, "beacons_rx": 0, "beacons_short": 0, "beacons_own": 0,
                      "beacon_tx_fail": 0}
        node.wifi = self

    # ---- start ----------------------------------------------------------
    async def start(self):
        """Bring up what the config asks for; each part on its own, so a
        failing one (a busy port, no multicast route) leaves the others up.
        Returns the list of failures (strings, also in node.warnings)."""
        cfg = self.cfg
        node = self.node
        errors = []
        await self.join_ap()
        prof = node.profile
        host = "0.0.0.0"
        if cfg is not None and cfg.listen is not None:
            host = cfg.listen[0]
            # static listener first: an explicit port must not be taken by a
            # randomly chosen multicast port
            try:
                srv, port = await self._listen(cfg.listen[0], cfg.listen[1], LINK_REMOTE)
                self.static_port = port
                node.listeners["static"] = "%s:%d" % (cfg.listen[0], port)
            except OSError as e:
                errors.append("cannot listen on %s:%d: %s" % (cfg.listen[0], cfg.listen[1], _err(e)))
        if prof.multicast:
            try:
                srv, port = await self._listen(host, prof.listen_port, LINK_MULTICAST)
                self.mc_port = port
                node.listeners["multicast"] = "%s:%d" % (host, port)
                self._open_multicast()
                self.tasks.append(asyncio.create_task(self._beacon_tx()))
                self.tasks.append(asyncio.create_task(self._beacon_rx()))
            except OSError as e:
                errors.append("multicast discovery off: %s" % _err(e))
        if cfg is not None:
            for hp in cfg.connect:
                self.tasks.append(asyncio.create_task(self._static(hp[0], hp[1])))
        for e in errors:
            node.warn("wifi: " + e)
        return errors

    async def join_ap(self):
        """Join the configured access point (boards with network.WLAN only)."""
        network = platform.try_import("network")
        cfg = self.cfg
        if network is None or not hasattr(network, "WLAN") or cfg is None or not cfg.ssid:
            return False
        sta = network.WLAN(network.STA_IF)
        sta.active(True)
        if sta.isconnected():
            return True
        self.node.log("wifi: joining %s" % cfg.ssid)
        try:
            sta.connect(cfg.ssid, cfg.password or "")
        except OSError as e:
            self.node.log("wifi: connect failed: %s" % (e,))
            return False
        t0 = ticks_ms()
        while not sta.isconnected():
            if ticks_diff(ticks_ms(), t0) > WLAN_TIMEOUT_MS:
                self.node.log("wifi: no connection to %s yet (continuing)" % cfg.ssid)
                return False
            await _sleep_ms(200)
        try:
            self.node.log("wifi: connected, address %s" % sta.ifconfig()[0])
        except (OSError, AttributeError, IndexError):
            pass
        return True

    async def _listen(self, host, port, link_type):
        def cb_factory(lt):
            # a plain function returning the link's coroutine: asyncio runs
            # it as the connection's task (no wrapper coroutine per link)
            def cb(reader, writer):
                return self._accepted(reader, writer, lt)
            return cb
        cb = cb_factory(link_type)
        if port:
            srv = await asyncio.start_server(cb, host, port)
            self.servers.append(srv)
            return srv, port
        # a free port: MicroPython sockets have no getsockname(), so pick
        # random ports until one binds
        err = None
        i = 0
        while i < RANDOM_PORT_TRIES:
            p = 20000 + (int.from_bytes(platform.urandom(2), "big") % 40000)
            try:
                srv = await asyncio.start_server(cb, host, p)
                self.servers.append(srv)
                return srv, p
            except OSError as e:
                err = e
            i += 1
        raise err

    def _accepted(self, reader, writer, link_type):
        set_nodelay(writer)
        self.node.stat("accepts")
        try:
            link = TcpLink(reader, writer, link_type, outbound=False)
        except MemoryError:
            self.node.oom()
            close_stream(writer)
            return _nothing()
        return stream.run(self.node, link)

    # ---- multicast --------------------------------------------------------
    def _open_multicast(self):
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        except (OSError, AttributeError):
            pass
        reuseport = getattr(socket, "SO_REUSEPORT", None)
        if reuseport is not None:
            try:
                s.setsockopt(socket.SOL_SOCKET, reuseport, 1)
            except OSError:
                pass
        s.bind(_addr("0.0.0.0", MCAST_PORT))
        mreq = _ip_bytes(GROUP) + _ip_bytes("0.0.0.0")
        # MicroPython (unix) has IP_ADD_MEMBERSHIP but no IPPROTO_IP constant
        s.setsockopt(platform.IPPROTO_IP, platform.IP_ADD_MEMBERSHIP, mreq)
        try:
            s.setsockopt(platform.IPPROTO_IP, platform.IP_MULTICAST_LOOP, 1)
        except OSError:
            pass
        s.setblocking(False)
        self.sock = s
        self.group = _addr(GROUP, MCAST_PORT)
        b = self.beacon
        k = self.node.key
        i = 0
        while i < 32:
            b[i] = k[i]
            i += 1
        b[32] = (self.mc_port >> 8) & 0xFF
        b[33] = self.mc_port & 0xFF

    async def _beacon_tx(self):
        while True:
            try:
                self.sock.sendto(self.beacon, self.group)
                self.stats["beacons_tx"] += 1
            except OSError:
                self.stats["beacon_tx_fail"] += 1
            await _sleep_ms(BEACON_MS)

    async def _beacon_rx(self):
        s = self.sock
        while True:
            while True:
                try:
                    data, addr = s.recvfrom(64)
                    self.on_beacon(data, addr)
                except OSError:
                    break
                except MemoryError:
                    self.node.oom()
                    break
            await _sleep_ms(POLL_MS)

    def on_beacon(self, data, addr):
        node = self.node
        if len(data) < BEACON_LEN:
            self.stats["beacons_short"] += 1
            return
        key = bytes(data[0:32])
        if key == node.key:
            self.stats["beacons_own"] += 1
            return
        self.stats["beacons_rx"] += 1
        now = ticks_ms()
        e = self.seen.get(key)
        if e is None:
            if len(self.seen) >= SEEN_MAX:
                self._forget_oldest()
            e = [now, now, now, False]
            self.seen[key] = e
        e[1] = now
        if e[3] or node.has_link(key, LINK_MULTICAST):
            return
        if ticks_diff(now, e[2]) < 0:
            return     # retry later
        if node.key > key and ticks_diff(now, e[0]) < DIAL_GRACE_MS:
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
        retry = DIAL_RETRY_MS // 5
        try:
            node.stat("dials")
            try:
                link = await open_tcp(host, port, LINK_MULTICAST, DIAL_TIMEOUT_S)
            except OSError as e:
                node.stat("dial_fail")
                node.log("dial %s:%d failed: %s" % (host, port, _err(e)))
                retry = DIAL_RETRY_MS
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
        node = self.node
        fails = 0
        known = None     # the key this address answered with last time
        while True:
            if known is not None and node.has_link(known, LINK_REMOTE):
                # already linked to that key (it dialled us): do not dial again
                await _sleep_ms(STATIC_BACKOFF_MS[1])
                continue
            node.stat("dials")
            i = fails if fails < len(STATIC_BACKOFF_MS) else len(STATIC_BACKOFF_MS) - 1
            try:
                link = await open_tcp(host, port, LINK_REMOTE, DIAL_TIMEOUT_S)
            except OSError as e:
                node.stat("dial_fail")
                node.log("dial %s:%d failed: %s; retry in %d s" % (host, port, _err(e),
                                                                   STATIC_BACKOFF_MS[i] // 1000))
                link = None
            if link is not None:
                up0 = node.stats["links_up"]
                link.want_key = True
                await stream.run(node, link)
                known = getattr(link, "peer_key", None) or known
                if node.stats["links_up"] != up0:
                    fails = 0
                    i = 0
            fails += 1
            await _sleep_ms(STATIC_BACKOFF_MS[i])
