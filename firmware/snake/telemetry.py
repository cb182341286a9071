# Router counters and telemetry records.
#
# Counters are preallocated lists indexed by constants, so counting on the
# hot path allocates nothing. Records (dicts) are only built when the console
# or the telemetry stream asks for them.
from snake.wire import TYPE_NAMES

# Link types in the reference's numbering (docs/PROTOCOL_NOTES.md "Link types"); the
# names are those of `peers` records.
LINK_NAMES = ("local", "wifi", "bonjour", "remote", "ble")

# Byte counters are kept as (low, high) pairs: low stays below BYTES_CARRY
# and every BYTES_CARRY bytes move into high. A 32-bit MicroPython small int
# ends at 2^30 (about 1 GB: a few hours of a busy relay), and counting past
# it would allocate a big int on every frame; as_dict() joins the halves.
BYTES_CARRY = 0x10000000

# Drop reasons: index -> name. Every dropped frame increments exactly one.
DROP_NAMES = (
    "malformed",         # codec rejected the frame (WireError)
    "oversize",          # larger than the profile's frame_max
    "unknown_port",      # frame from a port that is not up
    "unknown_type",      # frame type we do not handle
    "hop_limit",         # traffic hop limit exhausted at a relay
    "loop",              # next hop is the port the frame came in on
    "watermark",         # new watermark worse than the frame's
    "no_route",          # traffic reached a dead end not addressed to us
    "queue_full",        # output queue of the next hop full
    "bootstrap_root",    # bootstrap for another root / root sequence
    "bootstrap_replay",  # bootstrap sequence not higher than the route's
    "bootstrap_self",    # our own bootstrap came back
    "bad_signature",     # bootstrap / wakeup / announcement signature failed
    "route_table_full",  # (not counted since such bootstraps are relayed: see capacity routes)
    "wakeup_root",       # wakeup for another root
    "wakeup_dup",        # wakeup repeated or too soon from that origin
    "wakeup_hop_limit",  # wakeup not relayed at hop limit 1
    "sanity",            # announcement failed a sanity check (peer dropped)
    "no_buffer",         # no frame buffer free
    "too_deep",          # announcement deeper than the profile's max_hops
    "no_memory",         # MemoryError while handling the frame
)
(D_MALFORMED, D_OVERSIZE, D_UNKNOWN_PORT, D_UNKNOWN_TYPE, D_HOP_LIMIT, D_LOOP,
 D_WATERMARK, D_NO_ROUTE, D_QUEUE_FULL, D_BOOTSTRAP_ROOT, D_BOOTSTRAP_REPLAY,
 D_BOOTSTRAP_SELF, D_BAD_SIGNATURE, D_ROUTE_TABLE_FULL, D_WAKEUP_ROOT,
 D_WAKEUP_DUP, D_WAKEUP_HOP_LIMIT, D_SANITY, D_NO_BUFFER, D_TOO_DEEP, D_NO_MEMORY) = range(len(DROP_NAMES))


class Counters:
    def __init__(self):
        self.rx = [0] * len(TYPE_NAMES)
        self.tx = [0] * len(TYPE_NAMES)
        # bytes sent per frame type, frames and bytes sent per link type
        # (counted in Router._tx for every frame a link accepted)
        self.tx_bytes = [0] * len(TYPE_NAMES)
        self.tx_bytes_hi = [0] * len(TYPE_NAMES)
        self.tx_link = [0] * len(LINK_NAMES)
        self.tx_bytes_link = [0] * len(LINK_NAMES)
        self.tx_bytes_link_hi = [0] * len(LINK_NAMES)
        self.drops = [0] * len(DROP_NAMES)
        self.verify_done = 0      # signature verifications actually computed
        self.verify_skipped = 0   # bootstrap verifications skipped by policy
        self.verify_cached = 0    # answered by the signature cache
        self.delivered = 0        # traffic frames delivered locally
        self.forwarded = 0        # traffic frames relayed
        self.originated = 0       # traffic frames we sent

    def as_dict(self):
        rx = {}
        tx = {}
        txb = {}
        for i in range(len(TYPE_NAMES)):
            rx[TYPE_NAMES[i]] = self.rx[i]
            tx[TYPE_NAMES[i]] = self.tx[i]
            txb[TYPE_NAMES[i]] = self.tx_bytes_hi[i] * BYTES_CARRY + self.tx_bytes[i]
        txl = {}
        txbl = {}
        for i in range(len(LINK_NAMES)):
            txl[LINK_NAMES[i]] = self.tx_link[i]
            txbl[LINK_NAMES[i]] = self.tx_bytes_link_hi[i] * BYTES_CARRY + self.tx_bytes_link[i]
        drops = {}
        for i in range(len(DROP_NAMES)):
            if self.drops[i]:
                drops[DROP_NAMES[i]] = self.drops[i]
        return {
            "rx": rx, "tx": tx, "drops": drops,
            "tx_bytes": txb, "tx_link": txl, "tx_bytes_link": txbl,
            "verify_done": self.verify_done,
            "verify_skipped": self.verify_skipped,
            "verify_cached": self.verify_cached,
            "delivered": self.delivered,
            "forwarded": self.forwarded,
            "originated": self.originated,
        }
