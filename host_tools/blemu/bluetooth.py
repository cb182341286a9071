# Emulation of MicroPython's `bluetooth` module (the subset snakemesh uses),
# for emulated nodes on the host: MicroPython unix port and CPython.
#
# Put host_tools/blemu on MICROPYPATH (unix port) or sys.path (CPython) of an
# emulated node only. The radio talks to the medium process
# (host_tools/blemu/medium.py) over loopback TCP:
#   SNAKEMESH_BLE_MEDIUM=127.0.0.1:PORT   where the medium listens
#   SNAKEMESH_BLE_NAME=NAME               this node's name in the topology file
#   SNAKEMESH_BLE_MAXCONN=4               connections the "controller" allows
#   SNAKEMESH_BLE_TXBUF=12                packets in flight before ENOMEM
#
# Behaviour follows the MicroPython documentation (library/bluetooth.rst) and
# the NimBLE binding used on ESP32:
# - IRQ events use the documented numbers and data tuples; `addr`,
#   `adv_data` and `notify_data` are memoryviews valid only during the handler
#   (the emulator overwrites them afterwards, so keeping one is a visible bug).
# - Notifications and writes longer than ATT MTU - 3 are truncated silently
#   (NimBLE truncates to the MTU), counted in `stats["truncated"]`.
# - A characteristic value holds 20 bytes until gatts_set_buffer()/a local
#   gatts_write() grows it; longer remote writes are truncated to the buffer.
# - Only a limited number of packets can be queued (tx buffers, like NimBLE's
#   mbuf pool): gatts_notify()/gattc_write() then raise OSError(ENOMEM).
# - gap_connect() stops a running scan (raising _IRQ_SCAN_DONE); gap_scan()
#   while a connection attempt is pending raises OSError(EBUSY), and while a
#   scan already runs OSError(EALREADY). Connectable advertising stops when a
#   central connects. gatts_register_services() raises OSError(EBUSY) while
#   advertising or connected.
# - Events are delivered by an asyncio task that the radio starts itself
#   (no threads), so the IRQ handler runs between other tasks' steps.
import gc
import sys
import struct
import socket
import select

try:
    import _blemu_proto as P          # host_tools/blemu on the module path
except ImportError:
    from host_tools.blemu import _blemu_proto as P

try:
    import asyncio
except ImportError:  # pragma: no cover
    import uasyncio as asyncio

try:
    import os
    _getenv = os.getenv
except (ImportError, AttributeError):  # pragma: no cover
    def _getenv(k, d=None):
        return d

_MP = sys.implementation.name == "micropython"

FLAG_BROADCAST = 0x0001
FLAG_READ = 0x0002
FLAG_WRITE_NO_RESPONSE = 0x0004
FLAG_WRITE = 0x0008
FLAG_NOTIFY = 0x0010
FLAG_INDICATE = 0x0020
FLAG_AUTHENTICATED_SIGNED_WRITE = 0x0040
FLAG_AUX_WRITE = 0x0100
FLAG_READ_ENCRYPTED = 0x0200
FLAG_READ_AUTHENTICATED = 0x0400
FLAG_READ_AUTHORIZED = 0x0800
FLAG_WRITE_ENCRYPTED = 0x1000
FLAG_WRITE_AUTHENTICATED = 0x2000
FLAG_WRITE_AUTHORIZED = 0x4000

# Linux/MicroPython errno values (MicroPython's errno module lacks EBUSY).
_ENOENT = 2
_EAGAIN = 11
_ENOMEM = 12
_EBUSY = 16
_ENODEV = 19
_EINVAL = 22
_ENOTCONN = 107
_EALREADY = 114

_DEFAULT_ATTR_LEN = 20
_RX_CHUNK = 256          # bytes read from the medium at least at a time (into the parser's buffer)
# the parser's buffer holds a read behind the longest unfinished message
# (u16 length, op, irq, conn, handle, 244 bytes of a 247-byte MTU, what
# snake/runtime/ble.py asks for); it grows (once) if a longer message comes
_RX_HELD = _RX_CHUNK + 2 + 1 + 1 + 4 + 244
_FIRST_USER_HANDLE = 10  # NimBLE puts the GAP (0x1800) and GATT (0x1801) services first


def _hex(b):
    s = ""
    for x in b:
        s += "0123456789abcdef"[x >> 4] + "0123456789abcdef"[x & 15]
    return s


class UUID:
    """bluetooth.UUID: 16-bit int, 128-bit string, or 2/4/16 bytes (LE)."""

    def __init__(self, value):
        if isinstance(value, UUID):
            self._le = value._le
        elif isinstance(value, int):
            if not 0 <= value <= 0xFFFF:
                raise ValueError("invalid UUID")
            self._le = bytes((value & 0xFF, value >> 8))
        elif isinstance(value, str):
            h = value.replace("-", "")
            if len(h) != 32:
                raise ValueError("invalid UUID")
            be = bytearray(16)
            for i in range(16):
                be[i] = int(h[2 * i:2 * i + 2], 16)
            le = bytearray(16)
            for i in range(16):
                le[i] = be[15 - i]
            self._le = bytes(le)
        else:
            b = bytes(value)
            if len(b) not in (2, 4, 16):
                raise ValueError("invalid UUID")
            self._le = b

    def __eq__(self, other):
        return isinstance(other, UUID) and other._le == self._le

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash(self._le)

    def __bytes__(self):
        return self._le

    def __len__(self):
        return len(self._le)

    def __getitem__(self, i):
        return self._le[i]

    def __repr__(self):
        if len(self._le) == 2:
            return "UUID(0x%04x)" % (self._le[0] | (self._le[1] << 8))
        if len(self._le) == 4:
            v = self._le[0] | (self._le[1] << 8) | (self._le[2] << 16) | (self._le[3] << 24)
            return "UUID(0x%08x)" % v
        be = bytes([self._le[15 - i] for i in range(16)])
        h = _hex(be)
        return "UUID('%s-%s-%s-%s-%s')" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


class _Value:
    __slots__ = ("data", "n", "append")

    def __init__(self, alloc):
        self.data = bytearray(alloc)
        self.n = 0
        self.append = False


def _ro(mv):
    # Read-only view where the interpreter can make one (CPython).
    try:
        return mv.toreadonly()
    except AttributeError:
        return mv


class Radio:
    """One emulated controller + host stack. `BLE()` returns the process-wide
    instance configured from the environment; tests may create more."""

    def __init__(self, medium=None, name=None, maxconn=None, txbuf=None):
        self._medium = medium or _getenv("SNAKEMESH_BLE_MEDIUM")
        self._name = name or _getenv("SNAKEMESH_BLE_NAME")
        self._maxconn = int(maxconn or _getenv("SNAKEMESH_BLE_MAXCONN") or 4)
        self._txbuf = int(txbuf or _getenv("SNAKEMESH_BLE_TXBUF") or 12)
        self._active = False
        self._sock = None
        self._stream = None
        self._parser = P.Parser(_RX_HELD)
        # the receive path reads straight into the parser's buffer: inside
        # an emulated node it shares the small MicroPython heap with the
        # firmware, which a board's native stack does not
        self._handler = None
        self._addr_type = 1
        self._addr = bytes(6)
        self._gap_name = b"MPY NIMBLE"
        self._mtu = 23
        self._rxbuf = 128
        self._adv_data = b""
        self._resp_data = b""
        self._advertising = False
        self._scanning = False
        self._connecting = False
        self._conns = {}  # handle -> [mtu, role] (role 0 central: we connected out; 1 peripheral)
        self._values = {}  # value handle -> _Value
        self._services_msg = None
        self._credits = self._txbuf
        self._pump_task = None
        self._pump_loop = None
        self.stats = {"truncated": 0, "enomem": 0, "irq_errors": 0, "events": 0, "oom": 0}

    # ------------------------------------------------------------ plumbing
    def _need_active(self):
        if not self._active:
            raise OSError(_ENODEV)
        self._ensure_pump()

    def _connect_medium(self):
        if not self._medium:
            raise OSError(_ENODEV, "SNAKEMESH_BLE_MEDIUM not set (host:port of blemu medium)")
        if not self._name:
            raise OSError(_ENODEV, "SNAKEMESH_BLE_NAME not set (node name in the topology)")
        host, _, port = self._medium.rpartition(":")
        ai = socket.getaddrinfo(host, int(port), 0, socket.SOCK_STREAM)[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM)
        try:
            s.connect(ai[-1])
        except OSError:
            s.close()
            raise OSError(_ENODEV, "cannot reach the BLE medium at " + self._medium)
        self._sock = s
        # One poller for this socket's blocking waits, kept for its whole
        # life: short-lived poll objects registered on a socket that asyncio
        # also polls corrupted the unix port's poll set (segfault).
        self._wpoll = select.poll()
        self._sendraw(P.frame(P.HELLO, self._name.encode()))
        # Wait (blocking, bounded) for the address.
        p = self._wpoll
        p.register(s, select.POLLIN)
        parser = self._parser
        while True:
            if not p.poll(5000):
                self._close_sock()
                raise OSError(_ENODEV, "BLE medium did not answer")
            d = s.recv(512)
            if not d:
                self._close_sock()
                raise OSError(_ENODEV, "BLE medium closed the connection")
            parser.feed(d)
            m = parser.next()
            if m is None:
                continue
            op, body = m
            if op == P.ERROR:
                self._close_sock()
                raise OSError(_ENODEV, "BLE medium: " + body.decode())
            if op == P.HELLO_ACK:
                self._addr_type = body[0]
                self._addr = bytes(body[1:7])
                break
        p.modify(s, select.POLLOUT)
        s.setblocking(False)
        self._send(P.CFG, struct.pack(">HB", self._mtu, self._maxconn))

    def _close_sock(self):
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._stream = None

    def _sendraw(self, data):
        s = self._sock
        if s is None:
            raise OSError(_ENODEV)
        mv = memoryview(data)
        off = 0
        while off < len(data):
            try:
                n = s.send(mv[off:] if off else data)
            except MemoryError:
                # no heap for the view of the rest: a half-sent message
                # must still be completed, or the medium loses sync
                gc.collect()
                continue
            except OSError as e:
                if e.args and e.args[0] == _EAGAIN:
                    p = self._wpoll
                    p.modify(s, select.POLLOUT)
                    p.poll(200)
                    continue
                raise
            if n is None:
                n = 0
            off += n

    def _send(self, op, body=b""):
        self._sendraw(P.frame(op, body))

    def _ensure_pump(self):
        t = self._pump_task
        if _MP:
            if t is None or t.done():
                self._pump_task = asyncio.create_task(self._pump())
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # started by the next call made from inside a running loop
        if t is None or t.done() or self._pump_loop is not loop:
            self._pump_loop = loop
            self._pump_task = loop.create_task(self._pump())

    async def _read(self):
        """Read from the medium into the receive buffer: the count, 0 when
        the medium closed the connection, None when nothing was there."""
        mv = self._parser.space(_RX_CHUNK)
        if _MP:
            if self._stream is None:
                self._stream = asyncio.StreamReader(self._sock)
            n = await self._stream.readinto(mv)
        else:
            n = await asyncio.get_running_loop().sock_recv_into(self._sock, mv)
        if n:
            self._parser.filled(n)
        return n

    def _next_event(self):
        """Handle one complete message from the medium; False if none."""
        m = self._parser.next()
        if m is None:
            return False
        try:
            self._on_msg(m[0], m[1])
        except MemoryError:
            # decoding it needs a little heap (tuples, views): make room
            # and try once more (the IRQ handler had not run yet)
            self.stats["oom"] += 1
            gc.collect()
            self._on_msg(m[0], m[1])
        return True

    async def _pump(self):
        while self._sock is not None:
            try:
                n = await self._read()
            except OSError:
                n = 0
            except MemoryError:
                # the node's heap is short right now; the bytes wait in the socket
                self.stats["oom"] += 1
                gc.collect()
                await asyncio.sleep(0.01)
                continue
            if self._sock is None:
                break
            if n is None:
                continue      # woken up without data
            if not n:
                print("blemu: the BLE medium closed the connection")
                self._close_sock()
                self._active = False
                break
            k = 0
            while True:
                try:
                    if not self._next_event():
                        break
                except MemoryError:
                    # still no heap: that event is lost (counted), like an
                    # IRQ handler that raised on a board
                    self.stats["oom"] += 1
                    gc.collect()
                    await asyncio.sleep(0.01)
                    continue
                k += 1
                if k % 8 == 0:
                    # A real radio delivers at a bounded rate: let the tasks
                    # that consume events run between bursts.
                    await asyncio.sleep(0)

    def _on_msg(self, op, b):
        if op == P.TXDONE:
            self._credits += (b[0] << 8) | b[1]
            if self._credits > self._txbuf:
                self._credits = self._txbuf
            return
        if op == P.ERROR:
            print("blemu: medium error:", b.decode())
            return
        if op != P.EVENT:
            return
        ev = b[0]
        scratch = None
        if ev in (P.IRQ_CENTRAL_CONNECT, P.IRQ_CENTRAL_DISCONNECT,
                  P.IRQ_PERIPHERAL_CONNECT, P.IRQ_PERIPHERAL_DISCONNECT):
            h, at = struct.unpack(">HB", b[1:4])
            scratch = bytearray(b[4:10])
            data = (h, at, _ro(memoryview(scratch)))
            if ev == P.IRQ_CENTRAL_CONNECT:
                self._conns[h] = [23, 1]
                self._advertising = False
            elif ev == P.IRQ_PERIPHERAL_CONNECT:
                self._conns[h] = [23, 0]
                self._connecting = False
            elif ev == P.IRQ_PERIPHERAL_DISCONNECT and h == P.CONN_NONE:
                self._connecting = False
            else:
                self._conns.pop(h, None)
        elif ev == P.IRQ_GATTS_WRITE:
            h, vh = struct.unpack(">HH", b[1:5])
            v = self._values.get(vh)
            if v is None:
                return
            payload = b[5:]
            data = (h, vh)
            off = v.n if v.append else 0
            n = min(len(v.data), off + len(payload))
            v.data[off:n] = payload[:n - off]
            v.n = n
        elif ev == P.IRQ_SCAN_RESULT:
            at = b[1]
            adv_type, rssi = struct.unpack(">Bb", b[8:10])
            scratch = bytearray(b[2:8]) + bytearray(b[10:])
            mv = _ro(memoryview(scratch))
            data = (at, mv[0:6], adv_type, rssi, mv[6:])
        elif ev == P.IRQ_SCAN_DONE:
            self._scanning = False
            data = ()
        elif ev == P.IRQ_GATTC_SERVICE_RESULT:
            h, s0, s1 = struct.unpack(">HHH", b[1:7])
            data = (h, s0, s1, UUID(b[7:]))
        elif ev == P.IRQ_GATTC_CHARACTERISTIC_RESULT:
            h, d, vh, props = struct.unpack(">HHHB", b[1:8])
            data = (h, d, vh, props, UUID(b[8:]))
        elif ev in (P.IRQ_GATTC_SERVICE_DONE, P.IRQ_GATTC_CHARACTERISTIC_DONE):
            data = struct.unpack(">HH", b[1:5])
        elif ev in (P.IRQ_GATTC_WRITE_DONE, P.IRQ_GATTS_INDICATE_DONE):
            data = struct.unpack(">HHH", b[1:7])
        elif ev in (P.IRQ_GATTC_NOTIFY, P.IRQ_GATTC_INDICATE):
            h, vh = struct.unpack(">HH", b[1:5])
            scratch = bytearray(b[5:])
            data = (h, vh, _ro(memoryview(scratch)))
        elif ev == P.IRQ_MTU_EXCHANGED:
            h, mtu = struct.unpack(">HH", b[1:5])
            c = self._conns.get(h)
            if c is not None:
                c[0] = mtu
            data = (h, mtu)
        else:
            return
        self.stats["events"] += 1
        hd = self._handler
        if hd is not None:
            try:
                hd(ev, data)
            except Exception as e:
                self.stats["irq_errors"] += 1
                print("Unhandled exception in IRQ callback handler")
                if _MP:
                    sys.print_exception(e)
                else:
                    import traceback
                    traceback.print_exception(type(e), e, e.__traceback__)
        if scratch is not None:
            # The memoryviews pointed into the stack's ring buffer: gone now.
            for i in range(len(scratch)):
                scratch[i] = 0xEE

    def _local_event(self, frame):
        # Raised by the stack itself (e.g. scan stopped): routed through the
        # medium so it arrives in order with every other event.
        self._send(P.ECHO, frame)

    def _take_credit(self):
        if self._credits <= 0:
            self.stats["enomem"] += 1
            raise OSError(_ENOMEM)
        self._credits -= 1

    def _conn(self, conn_handle):
        c = self._conns.get(conn_handle)
        if c is None:
            raise OSError(_ENOTCONN)
        return c

    def _payload(self, c, data):
        b = bytes(data)
        lim = c[0] - 3
        if len(b) > lim:
            self.stats["truncated"] += 1
            b = b[:lim]
        return b

    # ------------------------------------------------------------ configuration
    def active(self, *args):
        if not args:
            return self._active
        on = bool(args[0])
        if on and not self._active:
            self._connect_medium()
            self._active = True
            self._credits = self._txbuf
            if self._services_msg is not None:
                self._send(P.SERVICES, self._services_msg)
            self._ensure_pump()
        elif not on and self._active:
            self._active = False
            t = self._pump_task
            self._pump_task = None
            if t is not None and not t.done():
                try:
                    t.cancel()
                except Exception:
                    pass
            self._close_sock()
            self._conns = {}
            self._advertising = False
            self._scanning = False
            self._connecting = False
        return self._active

    def config(self, *args, **kw):
        if args:
            if len(args) != 1 or kw:
                raise TypeError("config takes one parameter name or keywords")
            k = args[0]
            if k == "mac":
                if not self._active:
                    raise OSError(_ENODEV)
                return (self._addr_type, self._addr)
            if k == "gap_name":
                return self._gap_name
            if k == "mtu":
                return self._mtu
            if k == "rxbuf":
                return self._rxbuf
            raise ValueError("unknown config param")
        for k in kw:
            v = kw[k]
            if k == "mtu":
                if not 23 <= v <= 527:
                    raise OSError(_EINVAL)
                self._mtu = v
                if self._active:
                    self._send(P.CFG, struct.pack(">HB", self._mtu, self._maxconn))
            elif k == "gap_name":
                self._gap_name = bytes(v) if not isinstance(v, str) else v.encode()
            elif k == "rxbuf":
                self._rxbuf = int(v)
            elif k in ("addr_mode", "bond", "mitm", "io", "le_secure"):
                pass
            else:
                raise ValueError("unknown config param")

    def irq(self, handler):
        self._handler = handler
        if self._active:
            self._ensure_pump()

    # ------------------------------------------------------------ GAP
    def gap_advertise(self, interval_us, adv_data=None, *, resp_data=None, connectable=True):
        self._need_active()
        if adv_data is not None:
            if len(adv_data) > 31:
                raise OSError(_EINVAL)
            self._adv_data = bytes(adv_data)
        if resp_data is not None:
            if len(resp_data) > 31:
                raise OSError(_EINVAL)
            self._resp_data = bytes(resp_data)
        if interval_us is None:
            self._advertising = False
            self._send(P.ADV, struct.pack(">BBIB", 0, 0, 0, 0))
            return
        if connectable and len(self._conns) >= self._maxconn:
            raise OSError(_ENOMEM)
        self._advertising = True
        self._send(P.ADV, struct.pack(">BBIB", 1, 1 if connectable else 0, int(interval_us),
                                      len(self._adv_data)) + self._adv_data + self._resp_data)

    def gap_scan(self, duration_ms, interval_us=1280000, window_us=11250, active=False):
        self._need_active()
        if duration_ms is None:
            if self._scanning:
                self._scanning = False
                self._send(P.SCAN, struct.pack(">BBI", 0, 0, 0))
                self._local_event(P.ev_simple(P.IRQ_SCAN_DONE, ""))
            return
        if self._connecting:
            raise OSError(_EBUSY)
        if self._scanning:
            raise OSError(_EALREADY)
        self._scanning = True
        self._send(P.SCAN, struct.pack(">BBI", 1, 1 if active else 0, int(duration_ms)))

    def gap_connect(self, addr_type, addr=None, scan_duration_ms=2000, min_conn_interval_us=None,
                    max_conn_interval_us=None):
        self._need_active()
        if addr_type is None:
            if self._connecting:
                self._send(P.CONNECT_CANCEL)
            return
        if self._connecting:
            raise OSError(_EALREADY)
        if len(self._conns) >= self._maxconn:
            raise OSError(_ENOMEM)
        a = bytes(addr)
        if len(a) != 6:
            raise ValueError("invalid addr")
        if self._scanning:
            self._scanning = False
            self._send(P.SCAN, struct.pack(">BBI", 0, 0, 0))
            self._local_event(P.ev_simple(P.IRQ_SCAN_DONE, ""))
        self._connecting = True
        self._send(P.CONNECT, struct.pack(">B", addr_type) + a + struct.pack(">I", int(scan_duration_ms)))

    def gap_disconnect(self, conn_handle):
        self._need_active()
        if conn_handle not in self._conns:
            return False
        self._send(P.DISCONNECT, struct.pack(">H", conn_handle))
        return True

    # ------------------------------------------------------------ GATT server
    def gatts_register_services(self, services):
        self._need_active()
        if self._advertising or self._conns:
            raise OSError(_EBUSY)
        h = _FIRST_USER_HANDLE
        out = []
        msg = bytearray()
        self._values = {}
        for svc in services:
            suuid, chars = svc[0], svc[1]
            if not isinstance(suuid, UUID):
                raise TypeError("service UUID must be a bluetooth.UUID")
            start = h
            h += 1
            handles = []
            entries = []
            for ch in chars:
                if len(ch) not in (2, 3):
                    raise ValueError("characteristic must be (uuid, flags[, descriptors])")
                cuuid, flags = ch[0], ch[1]
                if not isinstance(cuuid, UUID):
                    raise TypeError("characteristic UUID must be a bluetooth.UUID")
                decl = h
                vh = h + 1
                h += 2
                if flags & (FLAG_NOTIFY | FLAG_INDICATE):
                    h += 1  # CCCD
                handles.append(vh)
                self._values[vh] = _Value(_DEFAULT_ATTR_LEN)
                entries.append((2, decl, vh, flags & 0xFF, cuuid._le))
                if len(ch) == 3:
                    for d in ch[2]:
                        handles.append(h)
                        self._values[h] = _Value(_DEFAULT_ATTR_LEN)
                        h += 1
            end = h - 1
            msg += struct.pack(">BHHBB", 1, start, end, 0, len(suuid._le)) + suuid._le
            for e in entries:
                msg += struct.pack(">BHHBB", e[0], e[1], e[2], e[3], len(e[4])) + e[4]
            out.append(tuple(handles))
        self._services_msg = bytes(msg)
        self._send(P.SERVICES, self._services_msg)
        return tuple(out)

    def _value(self, value_handle):
        v = self._values.get(value_handle)
        if v is None:
            raise OSError(_EINVAL)
        return v

    def gatts_read(self, value_handle):
        self._need_active()
        v = self._value(value_handle)
        r = bytes(v.data[:v.n])
        if v.append:
            v.n = 0
        return r

    def gatts_write(self, value_handle, data, send_update=False):
        self._need_active()
        v = self._value(value_handle)
        d = bytes(data)
        if len(d) > len(v.data):
            v.data = bytearray(len(d))
        v.data[0:len(d)] = d
        v.n = len(d)
        if send_update:
            # Emulation: no CCCD tracking; every connected client is notified.
            for h in list(self._conns):
                try:
                    self.gatts_notify(h, value_handle)
                except OSError:
                    pass

    def gatts_set_buffer(self, value_handle, length, append=False):
        self._need_active()
        v = self._value(value_handle)
        nb = bytearray(length)
        k = min(v.n, length)
        nb[0:k] = v.data[0:k]
        v.data = nb
        v.n = k
        v.append = bool(append)

    def _server_send(self, conn_handle, value_handle, data, indicate):
        self._need_active()
        c = self._conn(conn_handle)
        if data is None:
            v = self._value(value_handle)
            data = v.data[:v.n]
        b = self._payload(c, data)
        self._take_credit()
        self._send(P.NOTIFY, struct.pack(">HHB", conn_handle, value_handle, indicate) + b)

    def gatts_notify(self, conn_handle, value_handle, data=None):
        self._server_send(conn_handle, value_handle, data, 0)

    def gatts_indicate(self, conn_handle, value_handle, data=None):
        self._server_send(conn_handle, value_handle, data, 1)

    # ------------------------------------------------------------ GATT client
    def gattc_discover_services(self, conn_handle, uuid=None):
        self._need_active()
        self._conn(conn_handle)
        u = UUID(uuid)._le if uuid is not None else b""
        self._send(P.DISC_SVC, struct.pack(">H", conn_handle) + u)

    def gattc_discover_characteristics(self, conn_handle, start_handle, end_handle, uuid=None):
        self._need_active()
        self._conn(conn_handle)
        u = UUID(uuid)._le if uuid is not None else b""
        self._send(P.DISC_CHR, struct.pack(">HHH", conn_handle, start_handle, end_handle) + u)

    def gattc_write(self, conn_handle, value_handle, data, mode=0):
        self._need_active()
        c = self._conn(conn_handle)
        if mode not in (0, 1):
            raise OSError(_EINVAL)
        b = self._payload(c, data)
        self._take_credit()
        self._send(P.WRITE, struct.pack(">HHB", conn_handle, value_handle, mode) + b)

    def gattc_exchange_mtu(self, conn_handle):
        self._need_active()
        self._conn(conn_handle)
        self._send(P.MTU_REQ, struct.pack(">H", conn_handle))


_ble = None


def BLE():
    """Returns the singleton BLE object (configured from the environment)."""
    global _ble
    if _ble is None:
        _ble = Radio()
    return _ble
