# Board profile: which ports a node runs and how big every table is.
# Loaded from boards/<BOARD>/profile.json (on a board: /profile.json).
# Capacities are fixed at boot; nothing in the router grows past them.
import json

from snake.wire import ann_max, DGRAM_HDR, DGRAM_MAX_FRAGS

# Defaults = a host profile (simulator, CPython): deep trees allowed. Each key is documented in
# boards/README.md; unknown keys in a profile file are an error so that a
# typo does not silently fall back to a default.
DEFAULTS = {
    "name": "UNIX",
    "arch": "x64",
    "wifi": True,             # Wi-Fi/TCP ports (multicast discovery + listener)
    "ble": False,             # Bluetooth LE GATT ports
    "max_peers": 16,          # switch ports 1..max_peers (all link types)
    "ble_links": 4,           # at most this many BLE links (NimBLE on ESP32: 4)
    "espnow": False,          # ESP-NOW ports (Wi-Fi radio without an access point)
    "espnow_links": 4,        # at most this many ESP-NOW links (radio peer table: 20 with broadcast)
    "espnow_ring": 2048,      # receive ring and send window per ESP-NOW link, bytes each
    "max_routes": 64,         # snake routing table entries
    "coord_cache": 32,        # cached source coordinates for tree replies
    "sig_cache": 64,          # verified-signature cache entries
    "max_hops": 64,           # deepest tree announcement accepted (hops)
    "hop_pool": 0,            # announcement hops stored for all peers (0: 2 x max_hops + 2 x max_peers)
    "route_hints": 0,         # compact overflow entries for routes the table has no room for
    "frame_max": 8192,        # largest frame accepted/sent but a tree announcement, bytes
    "wifi_queue": 16,         # frames queued per Wi-Fi port
    "ble_queue": 4,           # frames queued per BLE port
    "tx_buffers": 48,         # send pool: large buffers (max of frame_max, ann_max)
    "tx_small": 0,            # send pool: small_frame buffers
    "rx_buffers": 8,          # receive pool: large buffers (0: the send pool's, shared)
    "rx_small": 16,           # receive pool: small_frame buffers
    "small_frame": 256,       # size of the pools' small buffers, bytes
    "ble_ring": 24576,        # receive ring per BLE link, bytes
    "wakeup_filter": 32,      # per-origin wakeup de-duplication entries
    "bootstrap_verify": "all",  # all | on-change | off
    "hop_limiting": True,     # relays decrement traffic hop limit
    "traffic_hop_limit": 255,  # hop limit of traffic we originate (reference: 10)
    "multicast": True,        # send/hear LAN beacons
    "listen_port": 0,         # TCP listener port (0 = any free port)
    "console": True,          # serial console on stdin/stdout
    # application datagrams (snake/datagram.py, docs/reference/DATAGRAMS.md)
    "dgram_max": 4096,        # largest datagram sent or reassembled, bytes
    "dgram_reasm": 4,         # reassemblies in flight (each holds a dgram_max buffer)
    "dgram_pending": 8,       # sends in flight (awaiting an ack or fragments owed)
    "dgram_acks": 8,          # acks owed, waiting for flush
    "dgram_dedup": 32,        # delivered datagrams remembered (a retry is not delivered twice)
    "dgram_frag": 0,          # fragment payload bytes (0: 880, less if frame_max holds less)
    # telemetry over the mesh to a gateway (snake/runtime/telesink.py)
    "telemetry_s": 60,        # seconds between sends to the sink (0: none)
    "telemetry_bytes": 1024,  # most bytes one period sends (the rest waits for the next)
}

VERIFY_POLICIES = ("all", "on-change", "off")

# Application datagrams: the default fragment (DGRAM_HDR and
# DGRAM_MAX_FRAGS come from snake/wire.py). A fragment frame must cross
# every relay, and the ESP32 boards accept frames up to frame_max 1152: 880
# data bytes + DGRAM_HDR + the worst traffic overhead at depth 64 (240) fit
# it.
DGRAM_FRAG_DEFAULT = 880


def traffic_overhead(max_hops):
    """Bytes of a traffic frame around its payload, worst case at this depth:
    header and payload length 12, keys 64, and either both coordinates (tree)
    or source coordinates and a watermark of 42 (SNEK); a coordinate body is
    2 + one byte per port plus one for every fourth (router.cc_max)."""
    cc = 2 + max_hops + (max_hops >> 2)
    tree = cc + cc
    snek = 2 + cc + 42
    return 12 + 64 + (tree if tree > snek else snek)


def dgram_frag(p):
    """Fragment data bytes of profile p: dgram_frag, or (0) DGRAM_FRAG_DEFAULT
    or less when p's own frames carry less."""
    f = p.dgram_frag
    if f:
        return f
    f = p.frame_max - DGRAM_HDR - traffic_overhead(p.max_hops)
    return f if f < DGRAM_FRAG_DEFAULT else DGRAM_FRAG_DEFAULT


class ProfileError(ValueError):
    pass


class Profile:
    def __init__(self, d=None):
        for k in DEFAULTS:
            setattr(self, k, DEFAULTS[k])
        if d:
            for k in d:
                if k.startswith("_"):
                    continue  # comments
                if k not in DEFAULTS:
                    raise ProfileError("unknown profile key: " + k)
                setattr(self, k, d[k])
        self.check()

    def check(self):
        for k in ("max_peers", "ble_links", "max_routes", "coord_cache", "sig_cache",
                  "max_hops", "frame_max", "wifi_queue", "ble_queue", "tx_buffers", "wakeup_filter",
                  "small_frame", "ble_ring"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise ProfileError("profile %s must be a positive integer" % k)
        for k in ("tx_small", "rx_small", "rx_buffers"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 0:
                raise ProfileError("profile %s must be a non-negative integer" % k)
        if self.tx_buffers + self.tx_small > 255 or self.rx_buffers + self.rx_small > 255:
            raise ProfileError("profile buffer pools hold at most 255 buffers each")
        if self.small_frame < 64:
            raise ProfileError("profile small_frame must be at least 64")
        if not isinstance(self.espnow_links, int) or not 1 <= self.espnow_links <= 19:
            raise ProfileError("profile espnow_links must be within 1..19 (the radio's 20 peers, one the broadcast address)")
        if not isinstance(self.espnow_ring, int) or not 250 <= self.espnow_ring <= 16384:
            raise ProfileError("profile espnow_ring must be within 250..16384 (one ESP-NOW message at least)")
        if self.ble_ring < 512:
            raise ProfileError("profile ble_ring must be at least 512 (two BLE packets)")
        if self.max_peers > 255:
            raise ProfileError("profile max_peers must be at most 255")
        if self.max_hops > 255:
            raise ProfileError("profile max_hops must be at most 255")
        if not isinstance(self.hop_pool, int) or self.hop_pool < 0 or self.hop_pool > 65534:
            raise ProfileError("profile hop_pool must be within 0..65534 (0: automatic)")
        if not isinstance(self.route_hints, int) or self.route_hints < 0 or self.route_hints > 65536:
            raise ProfileError("profile route_hints must be within 0..65536")
        if self.max_routes > 65534:
            raise ProfileError("profile max_routes must be at most 65534")
        if not isinstance(self.traffic_hop_limit, int) or not 2 <= self.traffic_hop_limit <= 255:
            raise ProfileError("profile traffic_hop_limit must be within 2..255")
        if self.frame_max > 65535 or self.frame_max < 256:
            raise ProfileError("profile frame_max must be within 256..65535")
        for k in ("dgram_pending", "dgram_acks", "dgram_dedup"):
            v = getattr(self, k)
            if not isinstance(v, int) or not 1 <= v <= 255:
                raise ProfileError("profile %s must be within 1..255" % k)
        if not isinstance(self.dgram_reasm, int) or not 0 <= self.dgram_reasm <= 255:
            raise ProfileError("profile dgram_reasm must be within 0..255")
        if not isinstance(self.dgram_frag, int) or self.dgram_frag < 0:
            raise ProfileError("profile dgram_frag must be a non-negative integer")
        fr = dgram_frag(self)
        if fr < 64 or fr + DGRAM_HDR + traffic_overhead(self.max_hops) > self.frame_max:
            raise ProfileError("profile dgram_frag must be at least 64 and fit a frame of frame_max"
                               " with both coordinates at max_hops (at most %d)"
                               % (self.frame_max - DGRAM_HDR - traffic_overhead(self.max_hops)))
        if (not isinstance(self.dgram_max, int) or not 1 <= self.dgram_max <= 65535
                or self.dgram_max > DGRAM_MAX_FRAGS * fr):
            raise ProfileError("profile dgram_max must be within 1..65535 and at most %d fragments"
                               " (%d bytes)" % (DGRAM_MAX_FRAGS, DGRAM_MAX_FRAGS * fr))
        # resolved, so snake/datagram.py reads it without this module
        # (unloaded after boot: importing it again would load its code)
        self.dgram_frag = fr
        if not isinstance(self.telemetry_s, (int, float)) or not 0 <= self.telemetry_s <= 86400:
            raise ProfileError("profile telemetry_s must be within 0..86400 seconds (0: none)")
        if not isinstance(self.telemetry_bytes, int) or not 64 <= self.telemetry_bytes <= 65535:
            raise ProfileError("profile telemetry_bytes must be within 64..65535")
        if self.bootstrap_verify not in VERIFY_POLICIES:
            raise ProfileError("profile bootstrap_verify must be one of all, on-change, off")
        # A tree announcement's size follows from its depth, not frame_max:
        # only announcements grow with the tree (ann_max), every other frame
        # is bounded by frame_max. large = the size of the buffers that take
        # any frame (receive pool, transmit pool: announcements are built
        # straight into a transmit buffer, node.py).
        self.ann_max = ann_max(self.max_hops)
        self.large = self.frame_max if self.frame_max > self.ann_max else self.ann_max

    def as_dict(self):
        d = {}
        for k in DEFAULTS:
            d[k] = getattr(self, k)
        return d

    @staticmethod
    def load(path):
        try:
            with open(path) as f:
                d = json.load(f)
        except OSError:
            raise ProfileError("cannot read profile " + path)
        except ValueError as e:
            # CPython says where ("Expecting ',' delimiter: line 3 column 1")
            raise ProfileError("profile is not valid JSON: %s (%s)" % (path, e))
        return Profile(d)
