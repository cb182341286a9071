# Router counters and telemetry records.
#
# Counters are preallocated lists indexed by constants, so counting on the
# hot path allocates nothing. Records (dicts) are only built when the console
# or the telemetry stream asks for them.
from snake.platform import const
from snake.wire import TYPE_NAMES

# Link types in the reference's numbering (docs/reference/PROTOCOL_NOTES.md "Link types"); the
# names are those of `peers` records.
LINK_NAMES = ("local", "wifi", "bonjour", "remote", "ble", "espnow")

# Byte counters are kept as (low, high) pairs: low stays below BYTES_CARRY
# and every BYTES_CARRY bytes move into high. A 32-bit MicroPython small int
# ends at 2^30 (about 1 GB: a few hours of a busy relay), and counting past
# it would allocate a big int on every frame; as_dict() joins the halves.
BYTES_CARRY = 0x10000000

# Drop reasons: the index of a counter in Counters.drops. Every dropped
# frame increments exactly one. Their names and meanings (records, console):
# snake/report.py DROP_NAMES, kept out of the running node's heap.
D_MALFORMED = const(0)
D_OVERSIZE = const(1)
D_UNKNOWN_PORT = const(2)
D_UNKNOWN_TYPE = const(3)
D_HOP_LIMIT = const(4)
D_LOOP = const(5)
D_WATERMARK = const(6)
D_NO_ROUTE = const(7)
D_QUEUE_FULL = const(8)
D_BOOTSTRAP_ROOT = const(9)
D_BOOTSTRAP_REPLAY = const(10)
D_BOOTSTRAP_SELF = const(11)
D_BAD_SIGNATURE = const(12)
D_ROUTE_TABLE_FULL = const(13)
D_WAKEUP_ROOT = const(14)
D_WAKEUP_DUP = const(15)
D_WAKEUP_HOP_LIMIT = const(16)
D_SANITY = const(17)
D_NO_BUFFER = const(18)
D_TOO_DEEP = const(19)
D_NO_MEMORY = const(20)
D_WAKEUP_BUDGET = const(21)
N_DROPS = const(22)


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
        self.drops = [0] * N_DROPS
        self.verify_done = 0      # signature verifications actually computed
        self.verify_skipped = 0   # bootstrap verifications skipped by policy
        self.verify_cached = 0    # answered by the signature cache
        self.delivered = 0        # traffic frames delivered locally
        self.forwarded = 0        # traffic frames relayed
        self.originated = 0       # traffic frames we sent
        self.relay_shed = 0       # wakeup relays not sent: the link had frames queued

    def as_dict(self):
        # the record (names, not indices): snake/report.py, cold code
        from snake.platform import cold
        return cold("snake.report").counters(self)
