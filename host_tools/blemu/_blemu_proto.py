# Message format between an emulated radio (bluetooth.py, running inside a
# node: MicroPython unix port or CPython) and the radio medium (medium.py).
# Plain struct code so both interpreters import it.
#
# Every message: u16 length (big-endian, counts op + body) | u8 op | body.
import struct

# radio -> medium
HELLO = 1          # name (utf-8)
CFG = 2            # u16 mtu | u8 max_connections
ADV = 3            # u8 on | u8 connectable | u32 interval_us | u8 adv_len | adv | resp
SCAN = 4           # u8 on | u8 active | u32 duration_ms (0 = forever)
CONNECT = 5        # u8 addr_type | addr[6] | u32 timeout_ms
CONNECT_CANCEL = 6
DISCONNECT = 7     # u16 conn
SERVICES = 8       # entries: u8 kind(1 svc, 2 chr) | u16 a | u16 b | u8 props | u8 uuid_len | uuid
MTU_REQ = 9        # u16 conn
DISC_SVC = 10      # u16 conn | uuid (empty = all)
DISC_CHR = 11      # u16 conn | u16 start | u16 end | uuid (empty = all)
WRITE = 12         # u16 conn | u16 handle | u8 mode | data      (GATT client write)
NOTIFY = 13        # u16 conn | u16 handle | u8 indicate | data  (GATT server notify)
ECHO = 14          # a complete medium->radio message, sent straight back (events the
                   # radio raises itself, kept in order with everything else)
CTL = 32           # control client: utf-8 command line

# medium -> radio
HELLO_ACK = 0x80   # u8 addr_type | addr[6]
EVENT = 0x81       # u8 irq | fields (see encode/decode below)
TXDONE = 0x82      # u16 count: packets the radio may count as sent (tx buffers freed)
ERROR = 0x8F       # utf-8 text; the medium closes the connection after it
CTL_REPLY = 0xA0   # utf-8 JSON

CONN_NONE = 0xFFFF

# IRQ numbers (MicroPython docs, library/bluetooth.rst)
IRQ_CENTRAL_CONNECT = 1
IRQ_CENTRAL_DISCONNECT = 2
IRQ_GATTS_WRITE = 3
IRQ_SCAN_RESULT = 5
IRQ_SCAN_DONE = 6
IRQ_PERIPHERAL_CONNECT = 7
IRQ_PERIPHERAL_DISCONNECT = 8
IRQ_GATTC_SERVICE_RESULT = 9
IRQ_GATTC_SERVICE_DONE = 10
IRQ_GATTC_CHARACTERISTIC_RESULT = 11
IRQ_GATTC_CHARACTERISTIC_DONE = 12
IRQ_GATTC_WRITE_DONE = 17
IRQ_GATTC_NOTIFY = 18
IRQ_GATTC_INDICATE = 19
IRQ_GATTS_INDICATE_DONE = 20
IRQ_MTU_EXCHANGED = 21


def frame(op, body=b""):
    return struct.pack(">HB", len(body) + 1, op) + bytes(body)


class Parser:
    """Incremental splitter: feed() bytes, next() -> (op, body) or None.

    The bytes live in one buffer that is reused (grown only for a longer
    message): inside an emulated node it shares the MicroPython heap with
    the firmware, and copying the rest of the buffer for every message (a
    new bytes object per message and per read) fragments a small heap in a
    way the real, native stack does not."""

    def __init__(self, size=2048):
        self.buf = bytearray(size)
        self.n = 0          # bytes held
        self.pos = 0        # the next message starts here

    def _compact(self):
        if self.pos:
            # move the unfinished message (if any) to the front
            rest = self.n - self.pos
            if rest:
                self.buf[0:rest] = self.buf[self.pos:self.n]
            self.pos = 0
            self.n = rest

    def space(self, want):
        """A memoryview of free room behind the held bytes (at least `want`
        bytes, growing the buffer if it must), to read into; then filled(k)."""
        self._compact()
        if len(self.buf) - self.n < want:
            nb = bytearray(self.n + want)
            nb[0:self.n] = self.buf[0:self.n]
            self.buf = nb
        return memoryview(self.buf)[self.n:]

    def filled(self, k):
        self.n += k

    def feed(self, data):
        k = len(data)
        self._compact()
        need = self.n + k
        if need > len(self.buf):
            nb = bytearray(max(need, 2 * len(self.buf)))
            nb[0:self.n] = self.buf[0:self.n]
            self.buf = nb
        self.buf[self.n:need] = data
        self.n = need

    def next(self):
        b = self.buf
        p = self.pos
        if self.n - p < 3:
            return None
        n = (b[p] << 8) | b[p + 1]
        if n < 1:
            raise ValueError("blemu: zero-length message")
        if self.n - p < 2 + n:
            return None
        op = b[p + 2]
        body = bytes(memoryview(b)[p + 3:p + 2 + n])
        self.pos = p + 2 + n       # last: a MemoryError above leaves the message in place
        return op, body


def ev_conn(irq, conn, addr_type, addr):
    return frame(EVENT, struct.pack(">BHB", irq, conn, addr_type) + bytes(addr))


def ev_simple(irq, fmt, *vals):
    return frame(EVENT, struct.pack(">B" + fmt, irq, *vals))


def ev_data(irq, fmt, vals, data):
    return frame(EVENT, struct.pack(">B" + fmt, irq, *vals) + bytes(data))
