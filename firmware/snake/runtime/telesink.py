# Telemetry over the mesh: the node's telemetry records as datagrams to a
# sink, a gateway (`snakemesh gateway`, docs/guides/GATEWAY.md, which
# describes the bytes for users; host_tools/gateway.py reads them).
#
# Cold code: Node.telemetry_to_sink (snake/runtime/node.py) loads this
# module for one period and lets go of it, so a node holds its code only
# while a period builds and sends.
#
# Small on the air: every record of a period goes in one datagram where it
# fits (one frame and one datagram header per period, not per record), in
# a binary form (CBOR, RFC 8949: field names as indices into NAMES, keys as
# 32 raw bytes, numbers as 1-9 bytes), and only what changed: a field whose
# bytes are unchanged since they were last handed to the mesh stays home
# (the record says it is a delta; the gateway merges it into the node's
# last record of that kind, objects entry by entry). A record goes whole
# when its shape (the names of its fields, nested ones included) changed,
# when the sink changed, after a failed send, and every FULL_EVERY periods
# (each kind in a different period), so that a gateway that lost a
# datagram or restarted is whole again soon. A `state` record goes every
# period (the gateway's "last heard", a few bytes when nothing changed); a
# `counters` or `peers` record with nothing changed does not.
#
# Small in the heap: no datagram layer on the sending side (a telemetry
# datagram is one fragment without ack: its 17-byte header, the layout of
# docs/reference/DATAGRAMS.md, is written here and the frame goes straight
# to router.send), and between periods the node keeps two bytes per value
# sent (a 16-bit digest of its bytes; a collision keeps a changed value
# home until its record goes whole again) in one bytearray per kind.
#
# Payload: FORMAT, `up` (CBOR uint), then records: a flags byte (F_DELTA,
# F_MORE: more parts of this record follow in the next datagram), the
# kind (a name), the fields as an indefinite-length CBOR map (0xBF .. 0xFF)
# without `v`, `node` and `t` (the gateway knows the source key and when
# it heard it), and with `up` only when it differs from the datagram's. Map keys are a name: a CBOR uint indexing NAMES, or
# text for a name not in NAMES. A byte string is hex text in the record
# (every 64-digit lowercase hex string goes as its 32 bytes). A record
# larger than one datagram is cut into parts between its fields, and goes
# only as the first record of a period. The bytes one period sends are
# bounded by the profile's telemetry_bytes: a record that does not fit
# waits for the next period (counted `deferred`); the first record of a
# period always goes, and a different record goes first each period.
import binascii

from snake import platform
from snake.platform import const
from snake.wire import DGRAM_HDR     # not snake.profile: unloaded after boot

SERVICE = 30
FULL_EVERY = 10
FORMAT = 1              # first payload byte (an older node's JSON starts with "{")
F_DELTA = 1
F_MORE = 2
SKIP = ("v", "kind", "node", "t", "up")
GATEWAY_PREFIX = b"\xff\xff"   # host_tools/keystore.py ROOT_PREFIX: a gateway's key

# The names of records and fields, sent as their index. Append only: a
# gateway reads the indices of nodes on older firmware by the same table
# (host_tools/gateway.py imports it). A name missing here goes as text.
NAMES = (
    "state", "counters", "peers", "event", "up",
    # state
    "root", "root_seq", "parent", "coords", "depth", "desc", "routes", "profile",
    # peers
    "port", "key", "link",
    # counters
    "rx", "tx", "drops", "tx_bytes", "tx_link", "tx_bytes_link", "verify_done", "verify_skipped",
    "verify_cached", "delivered", "forwarded", "originated", "relay_shed", "evictions", "occupancy",
    "capacity", "mem_free", "defence", "datagrams", "telemetry",
    # frame types, links, tables
    "keepalive", "announcement", "bootstrap", "traffic", "wakeup",
    "local", "wifi", "bonjour", "remote", "ble", "espnow",
    "hops", "sigcache", "wakeups",
    # drops
    "malformed", "oversize", "unknown_port", "unknown_type", "hop_limit", "loop", "watermark",
    "no_route", "queue_full", "bootstrap_root", "bootstrap_replay", "bootstrap_self", "bad_signature",
    "route_table_full", "wakeup_root", "wakeup_dup", "wakeup_hop_limit", "sanity", "no_buffer",
    "too_deep", "no_memory", "wakeup_budget",
    # defence
    "hs_source_limit", "hs_evicted", "hs_deadline", "hs_backoff", "rx_stall", "rx_slow",
    # datagrams
    "sent", "failed_no_route", "failed_timeout", "failed_too_big", "failed_no_memory", "failed_busy",
    "retries", "fragments_sent", "fragments_received", "received", "duplicates", "reasm_refused",
    "reasm_too_big", "reasm_expired", "acks_sent", "acks_received", "acks_unmatched", "acks_dropped",
    "pending", "reassembling", "no_listener", "app_dropped",
    # telemetry
    "sink", "bytes", "deferred", "failed", "too_big", "no_sink",
    # events
    "detail",
)


# What the node keeps between periods (node.tele): a plain list, so that
# it holds no code of this module, and a small one (a list of ints, not a
# dict of names). counters_fields (snake/runtime/cmds.py, its copies of
# these indices) shows every entry but the digests and the periods in the
# `counters` record, by the names of FIELDS.
FIELDS = ("n", "sink", "digests", "sent", "bytes", "deferred", "failed", "too_big", "no_sink")
_T_N = const(0)          # periods
_T_SINK = const(1)       # the sink's key in use
_T_DIGESTS = const(2)    # per kind (NAMES index < _KINDS): shape digest, then one per value as last sent
_T_SENT = const(3)       # datagrams handed to the mesh
_T_BYTES = const(4)      # their payload bytes
_T_DEFERRED = const(5)   # records left for a later period (budget)
_T_FAILED = const(6)     # sends that failed at once (no route, queue full, too big)
_T_TOO_BIG = const(7)    # fields larger than one datagram (left out)
_T_NO_SINK = const(8)    # periods without a sink (auto found none)
_KINDS = const(3)        # state, counters, peers: the kinds remembered (another goes whole)


def new_state():
    return [0, None, [None] * _KINDS, 0, 0, 0, 0, 0, 0]


def find_sink(node, sink):
    """The key telemetry goes to: the configured one, or (auto) the tree
    root when it holds a gateway's key (a gateway made by `keygen --profile
    GATEWAY` is the root by the provisioning policy); else None."""
    if sink is not None:
        return sink
    root = bytes(node.router.tree.root_key())
    if root[:2] == GATEWAY_PREFIX and root != node.key:
        return root
    return None


class _Full(Exception):
    pass


_FULL = _Full()


def _digest(b, i, j):
    h = 0
    while i < j:
        h = (h * 31 + b[i]) & 0xFFFF
        i += 1
    return h


def _shape(d, top):
    """(values, shape digest) of a record: how many values the walk meets
    and a digest of the names it meets, nested ones included."""
    n = 0
    h = 0
    for k in d:
        if top and k in SKIP:
            continue
        try:
            h = (h * 31 + NAMES.index(k) + 1) & 0xFFFF
        except ValueError:
            for c in k:
                h = (h * 31 + ord(c)) & 0xFFFF
        v = d[k]
        if type(v) is dict:
            m, g = _shape(v, False)
            n += m
            h = (h * 37 + g + 7) & 0xFFFF
        else:
            n += 1
    return n, h


class _Frame:
    """One datagram being built in a bytearray: the datagram header, FORMAT,
    `up`, records. Writing past the end raises _Full."""

    def __init__(self, limit, up):
        self.b = bytearray(DGRAM_HDR + limit)
        self.end = len(self.b) - 1     # the last byte: room to close the open record
        self.up = up
        self.leaf = 0
        self.reset()

    def reset(self):
        self.pos = DGRAM_HDR
        self.byte(FORMAT)
        self.head(0, self.up)
        self.start = self.pos

    def room(self, n):
        if self.pos + n > self.end:
            raise _FULL

    def byte(self, x):
        if self.pos >= self.end:
            raise _FULL
        self.b[self.pos] = x
        self.pos += 1

    def head(self, major, n):
        m = major << 5
        if n < 24:
            self.byte(m | n)
            return
        if n < 0x100:
            k = 1
            self.byte(m | 24)
        elif n < 0x10000:
            k = 2
            self.byte(m | 25)
        elif n < 0x100000000:
            k = 4
            self.byte(m | 26)
        else:
            k = 8
            self.byte(m | 27)
        self.room(k)
        b = self.b
        p = self.pos + k
        self.pos = p
        while k:
            p -= 1
            b[p] = n & 0xFF
            n >>= 8
            k -= 1

    def raw(self, data):
        n = len(data)
        self.room(n)
        platform.copy_into(self.b, self.pos, data, 0, n)
        self.pos += n

    def name(self, k):
        try:
            self.head(0, NAMES.index(k))
        except ValueError:
            self.text(k)

    def text(self, s):
        s = s.encode()
        self.head(3, len(s))
        self.raw(s)

    def value(self, v):
        t = type(v)
        if v is None:
            self.byte(0xF6)
        elif v is True:
            self.byte(0xF5)
        elif v is False:
            self.byte(0xF4)
        elif t is int:
            if v >= 0:
                self.head(0, v)
            else:
                self.head(1, -1 - v)
        elif t is str:
            k = None
            if len(v) == 64:
                try:
                    k = binascii.unhexlify(v)
                    if platform.hexstr(k) != v:
                        k = None
                except ValueError:
                    k = None
            if k is None:
                self.text(v)
            else:
                self.head(2, 32)
                self.raw(k)
        elif t is list or t is tuple:
            self.head(4, len(v))
            for x in v:
                self.value(x)
        elif t is dict:
            self.head(5, len(v))
            for k in v:
                self.name(k)
                self.value(v[k])
        elif t is float:
            import struct
            self.byte(0xFB)
            self.room(8)
            struct.pack_into(">d", self.b, self.pos, v)
            self.pos += 8
        else:
            self.text(str(v))

    def field(self, k, v, old, new):
        """Field k: v (its name, then its value, or for an object its
        entries); True when something was written, False when it was left
        out (unchanged since `old`, the last digests; None: whole)."""
        p0 = self.pos
        self.name(k)
        if type(v) is dict:
            self.byte(0xBF)
            n = 0
            for kk in v:
                if self.field(kk, v[kk], old, new):
                    n += 1
            if n == 0 and old is not None:
                self.pos = p0
                return False
            self.byte(0xFF)
            return True
        p1 = self.pos
        self.value(v)
        i = 2 + 2 * self.leaf
        self.leaf += 1
        h = _digest(self.b, p1, self.pos)
        new[i] = h >> 8
        new[i + 1] = h & 0xFF
        if old is not None and old[i] == new[i] and old[i + 1] == new[i + 1]:
            self.pos = p0
            return False
        return True

    def close(self):
        # the end of the open record's map: always has room (self.end)
        self.b[self.pos] = 0xFF
        self.pos += 1


class _Failed(Exception):
    pass


def _count(v):
    return _shape(v, False)[0] if type(v) is dict else 1


def _send(node, key, f, st):
    """Frame f as one datagram to `key`: one fragment, no ack (the header
    of docs/reference/DATAGRAMS.md), straight to the router."""
    b = f.b
    n = f.pos - DGRAM_HDR
    i = st[_T_N] & 0xFFFF
    b[0] = 0x53           # "SD": a datagram
    b[1] = 0x44
    b[2] = 1              # version
    b[3] = 1              # DATA
    b[4] = 0              # no ack asked
    b[5] = SERVICE >> 8
    b[6] = SERVICE & 0xFF
    b[7] = 0              # source service
    b[8] = 0
    b[9] = i >> 8         # id
    b[10] = i & 0xFF
    b[11] = 1             # one fragment, the first
    b[12] = 0
    b[13] = n >> 8        # stride = total = payload length
    b[14] = n & 0xFF
    b[15] = n >> 8
    b[16] = n & 0xFF
    try:
        ok = node.router.send(key, memoryview(b)[:f.pos], platform.ticks_ms())
    except ValueError:    # wire.WireError: larger than this node's frames
        ok = False
    if not ok:
        st[_T_FAILED] += 1
        raise _Failed()
    st[_T_SENT] += 1
    st[_T_BYTES] += n


def _record(node, key, st, f, kind, rec, old, new, parts):
    """Record `rec` into frame f at f.pos: how many fields went (a delta
    of nothing has none). parts: f holds nothing else, and a record larger
    than it goes in parts (every part but the last sent from here); else
    _Full when it does not fit."""
    flags = F_DELTA if old is not None else 0
    fl = f.pos
    f.byte(flags)
    f.name(kind)
    f.byte(0xBF)
    f.leaf = 0
    n = 0
    up = rec.get("up")
    if up is not None and up != f.up:
        f.name("up")
        f.value(up)
        n += 1
    for k in rec:
        if k in SKIP:
            continue
        v = rec[k]
        while True:
            p0 = f.pos
            l0 = f.leaf
            try:
                if f.field(k, v, old, new):
                    n += 1
                break
            except _Full:
                f.pos = p0
                f.leaf = l0
                if not parts:
                    raise
            if not n:
                # alone in a datagram and still too large: left out
                st[_T_TOO_BIG] += 1
                f.leaf = l0 + _count(v)
                break
            f.b[fl] |= F_MORE
            f.close()
            _send(node, key, f, st)
            f.reset()
            fl = f.pos
            f.byte(flags)
            f.name(kind)
            f.byte(0xBF)
            n = 0
    f.close()
    return n


def _forget(st):
    d = st[_T_DIGESTS]
    i = 0
    while i < _KINDS:
        d[i] = None
        i += 1


def period(node, sink):
    st = node.tele
    if st is None:
        st = node.tele = new_state()
    key = find_sink(node, sink)
    if key is None or key == node.key:
        st[_T_NO_SINK] += 1
        return
    c = node.console
    if c is None:
        st[_T_FAILED] += 1
        return
    if key != st[_T_SINK]:
        _forget(st)
        st[_T_SINK] = key
    n0 = st[_T_N]
    st[_T_N] = n0 + 1
    digests = st[_T_DIGESTS]
    budget = node.profile.telemetry_bytes
    recs = c.records()
    k = len(recs)
    if not k:
        return
    f = _Frame(node.profile.dgram_frag, recs[0].get("up") or 0)
    used = 0
    i = 0
    try:
        while i < k:
            rec = recs[(n0 + i) % k]      # a different record first each period: none starves
            i += 1
            kind = rec["kind"]
            cnt, sig = _shape(rec, True)
            new = bytearray(2 + 2 * cnt)
            new[0] = sig >> 8
            new[1] = sig & 0xFF
            try:
                ki = NAMES.index(kind)
            except ValueError:
                ki = _KINDS
            old = digests[ki] if ki < _KINDS else None
            if old is not None and (len(old) != len(new) or old[0] != new[0] or old[1] != new[1]
                                    or (n0 + 3 * ki) % FULL_EVERY == 0):
                old = None
            r0 = f.pos
            try:
                w = _record(node, key, st, f, kind, rec, old, new, False)
            except _Full:
                f.pos = r0
                if r0 != f.start:
                    # with the records before it it does not fit: they go first
                    _send(node, key, f, st)
                    f.reset()
                    r0 = f.pos
                    try:
                        w = _record(node, key, st, f, kind, rec, old, new, False)
                    except _Full:
                        f.pos = r0
                        w = -1
                else:
                    w = -1
                if w < 0:
                    # larger than a datagram: in parts, as a period's first record only
                    if used:
                        st[_T_DEFERRED] += 1
                        continue
                    _record(node, key, st, f, kind, rec, old, new, True)
                    used = budget
                    if ki < _KINDS:
                        digests[ki] = new
                    continue
            if not w and old is not None and kind != "state":
                f.pos = r0                # nothing changed
            elif used and used + f.pos - r0 > budget:
                f.pos = r0
                st[_T_DEFERRED] += 1
                continue
            else:
                used += f.pos - r0
            if ki < _KINDS:
                digests[ki] = new
        if f.pos != f.start:
            _send(node, key, f, st)
    except _Failed:
        # what this period handed over is unsure: the next one goes whole
        _forget(st)
