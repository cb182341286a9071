# Emulation of MicroPython's `espnow` module (ESP32 API, docs/library/espnow.rst)
# for emulated nodes on the host: MicroPython unix port and CPython.
#
# Put host_tools/espnowemu on MICROPYPATH (unix port) or sys.path (CPython) of
# an emulated node only: it must never shadow the C module on a board. The
# radio talks to the medium process (host_tools/espnowemu/medium.py) over
# loopback TCP:
#   SNAKEMESH_ESPNOW_MEDIUM=127.0.0.1:PORT   where the medium listens
#   SNAKEMESH_ESPNOW_NAME=NAME               this node's name in the topology file
#   SNAKEMESH_ESPNOW_CHANNEL=1               Wi-Fi channel (radios hear their channel only)
#   SNAKEMESH_ESPNOW_TXBUF=8                 sends awaiting their radio ack before NO_MEM
#
# Behaviour follows the documentation so the firmware's code runs unchanged
# on a board:
# - send() needs a registered peer (OSError ESP_ERR_ESPNOW_NOT_FOUND), at
#   most MAX_DATA_LEN (250) bytes (ValueError), the broadcast address too
#   once added; sync=True waits for the radio-level ack of every peer and
#   returns False when one is missing; broadcasts always return True.
# - add_peer: ESP_ERR_ESPNOW_EXIST, ESP_ERR_ESPNOW_FULL beyond
#   MAX_TOTAL_PEER_NUM (20); del_peer/get_peer: ESP_ERR_ESPNOW_NOT_FOUND.
# - Received messages wait in a receive buffer of config(rxbuf) bytes (each
#   message costs its length + 13); a message that does not fit is dropped
#   and counted (stats()[4]) although the sender's radio got its ack: the
#   ack is per hop and says nothing about the application.
# - irecv() returns one reused [mac, msg] pair (msg a bytearray overwritten
#   by the next call); recv() new bytes; mac is the key in peers_table,
#   which gets an entry [rssi, time_ms] for every sender read out
#   (registered or not), as the C module does.
# - irq(callback) runs callback(self) soon after messages arrive (from an
#   asyncio task the radio starts itself: no threads).
import sys
import struct
import socket
import select
import time

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

MAX_DATA_LEN = 250
KEY_LEN = 16
ADDR_LEN = 6
MAX_TOTAL_PEER_NUM = 20
MAX_ENCRYPT_PEER_NUM = 6

# ESP-IDF error codes (esp_now.h: ESP_ERR_ESPNOW_BASE 0x3000 + 100)
ESP_ERR_ESPNOW_NOT_INIT = 0x3065
ESP_ERR_ESPNOW_ARG = 0x3066
ESP_ERR_ESPNOW_NO_MEM = 0x3067
ESP_ERR_ESPNOW_FULL = 0x3068
ESP_ERR_ESPNOW_NOT_FOUND = 0x3069
ESP_ERR_ESPNOW_INTERNAL = 0x306A
ESP_ERR_ESPNOW_EXIST = 0x306B
ESP_ERR_ESPNOW_IF = 0x306C
_NAMES = {0x3065: "ESP_ERR_ESPNOW_NOT_INIT", 0x3066: "ESP_ERR_ESPNOW_ARG",
          0x3067: "ESP_ERR_ESPNOW_NO_MEM", 0x3068: "ESP_ERR_ESPNOW_FULL",
          0x3069: "ESP_ERR_ESPNOW_NOT_FOUND", 0x306A: "ESP_ERR_ESPNOW_INTERNAL",
          0x306B: "ESP_ERR_ESPNOW_EXIST", 0x306C: "ESP_ERR_ESPNOW_IF"}

BROADCAST = b"\xff\xff\xff\xff\xff\xff"
_RX_OVERHEAD = 13          # per buffered message: mac, length and ring bookkeeping
_RXBUF_DEFAULT = 526       # two 250-byte messages (the C module's default)
_IN_SIZE = 560             # the input buffer: two complete messages from the medium and a part
_SCRATCH = 263             # what the pump reads at a time: one complete message

# Messages between radio and medium: u16 length (counts op + body) | u8 op | body
OP_HELLO = 1        # u8 channel | name (utf-8)
OP_SEND = 2         # u16 token | u8 flags (1: wants a status) | mac[6] | data
OP_CHANNEL = 3      # u8 channel
OP_CTL = 32         # control client: utf-8 command line
OP_HELLO_ACK = 0x80  # mac[6]
OP_RX = 0x81        # mac[6] | s8 rssi | data
OP_STATUS = 0x82    # u16 token | u8 ok
OP_ERROR = 0x8F     # utf-8 text
OP_CTL_REPLY = 0xA0  # utf-8 JSON


def _err(code):
    return OSError(code, _NAMES.get(code, "ESP_ERR"))


def frame(op, body=b""):
    return struct.pack(">HB", len(body) + 1, op) + bytes(body)


def _mac(mac):
    if not isinstance(mac, (bytes, bytearray, memoryview)) or len(mac) != 6:
        raise ValueError("invalid mac")
    return bytes(mac)


class ESPNow:
    """The radio. `ESPNow()` is the process-wide singleton configured from
    the environment; ESPNow(medium=..., name=...) makes another radio (tests
    that run several radios in one process)."""

    _single = None

    def __new__(cls, *args, **kw):
        if args or kw:
            return object.__new__(cls)
        one = ESPNow._single
        if one is None:
            one = object.__new__(cls)
            one._setup(None, None)
            ESPNow._single = one
        elif not isinstance(one, cls):
            # aioespnow.AIOESPNow() after espnow.ESPNow(): the subclass takes
            # the radio over (the C module extends the same object)
            sub = object.__new__(cls)
            for k in one.__dict__:
                setattr(sub, k, one.__dict__[k])
            ESPNow._single = one = sub
        return one

    def __init__(self, medium=None, name=None, channel=None, txbuf=None):
        if medium is not None or name is not None:
            self._setup(medium, name, channel, txbuf)

    def _setup(self, medium, name, channel=None, txbuf=None):
        self._medium = medium or _getenv("SNAKEMESH_ESPNOW_MEDIUM")
        self._name = name or _getenv("SNAKEMESH_ESPNOW_NAME")
        self._channel = int(channel or _getenv("SNAKEMESH_ESPNOW_CHANNEL") or 1)
        self._txbuf = int(txbuf or _getenv("SNAKEMESH_ESPNOW_TXBUF") or 8)
        self._active = False
        self._sock = None
        self._stream = None
        self._poller = None
        self._in = bytearray(_IN_SIZE)   # bytes read from the medium, not yet parsed
        self._n = 0
        self._rb = None              # the receive buffer (made by active(True))
        self._rx_head = 0
        self._rx_held = 0
        self._rx_used = 0            # bytes charged against rxbuf
        self._rx_count = 0
        self._macbuf = bytearray(6)
        self._scratch = bytearray(_SCRATCH)   # the pump's reads
        self._fresh = False          # a message arrived that the irq callback has not been told of
        self._rxbuf = _RXBUF_DEFAULT
        self._timeout = 300000
        self._peers = {}             # mac -> [lmk, channel, ifidx, encrypt]
        self.peers_table = {}
        self._pair = [None, None]    # irecv()'s callee-owned result
        self._msg = bytearray(MAX_DATA_LEN)
        self._token = 0
        self._pending = 0            # sends without a status yet
        self._status = {}            # token -> ok, for sync sends
        self._handler = None
        self._task = None
        self._task_loop = None
        self._stats = [0, 0, 0, 0, 0]   # tx_pkts, tx_responses, tx_failures, rx_packets, rx_dropped
        self._mac = bytes(6)

    # ------------------------------------------------------------ medium
    def _connect(self):
        if not self._medium:
            raise OSError(ESP_ERR_ESPNOW_IF, "SNAKEMESH_ESPNOW_MEDIUM not set (host:port of the medium)")
        if not self._name:
            raise OSError(ESP_ERR_ESPNOW_IF, "SNAKEMESH_ESPNOW_NAME not set (node name in the topology)")
        host, _, port = self._medium.rpartition(":")
        ai = socket.getaddrinfo(host, int(port), 0, socket.SOCK_STREAM)[0]
        s = socket.socket(ai[0], socket.SOCK_STREAM)
        try:
            s.connect(ai[-1])
        except OSError:
            s.close()
            raise OSError(ESP_ERR_ESPNOW_IF, "cannot reach the ESP-NOW medium at " + self._medium)
        self._sock = s
        self._poller = select.poll()
        self._poller.register(s, select.POLLIN)
        # non-blocking from here: a blocking readinto() on MicroPython waits
        # until the whole buffer is filled
        s.setblocking(False)
        self._raw(frame(OP_HELLO, bytes([self._channel]) + self._name.encode()))
        t0 = time.time()
        b = self._in
        while True:
            if time.time() - t0 > 5:
                self._close()
                raise OSError(ESP_ERR_ESPNOW_IF, "ESP-NOW medium did not answer")
            self._read(500)
            if self._n < 3 or self._n < 2 + ((b[0] << 8) | b[1]):
                continue
            ln = (b[0] << 8) | b[1]
            op = b[2]
            body = bytes(b[3:2 + ln])
            rest = self._n - 2 - ln
            b[0:rest] = b[2 + ln:self._n]
            self._n = rest
            if op == OP_ERROR:
                self._close()
                raise OSError(ESP_ERR_ESPNOW_IF, "ESP-NOW medium: " + body.decode())
            if op == OP_HELLO_ACK:
                self._mac = body[0:6]
                break

    def _close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._stream = None

    def _raw(self, data):
        s = self._sock
        if s is None:
            raise _err(ESP_ERR_ESPNOW_NOT_INIT)
        mv = memoryview(data)
        off = 0
        while off < len(data):
            try:
                n = s.send(mv[off:])
            except OSError as e:
                if e.args and e.args[0] in (11, 35):
                    self._poller.modify(s, select.POLLOUT)
                    self._poller.poll(200)
                    self._poller.modify(s, select.POLLIN)
                    continue
                raise
            off += n or 0

    def _read(self, timeout_ms):
        """Read what the medium sent (waiting up to timeout_ms) into the
        input buffer; False when the medium is gone."""
        s = self._sock
        if s is None:
            return False
        if timeout_ms and not self._poller.poll(timeout_ms):
            return True
        try:
            k = s.readinto(self._space()) if _MP else s.recv_into(self._space())
        except OSError:
            return True
        if k is None:
            return True
        if not k:
            print("espnowemu: the ESP-NOW medium closed the connection")
            self._close()
            return False
        self._n += k
        return True

    def _space(self):
        # free room behind the unparsed bytes; one buffer for the radio's
        # life (inside an emulated node it shares the board-sized heap).
        # Complete messages are taken out first (into the receive buffer,
        # or dropped as the radio does when it is full), so the room holds
        # at least one more whole message.
        if len(self._in) - self._n < 263:
            if self._dispatch():
                self._fresh = True
        return memoryview(self._in)[self._n:]

    def _dispatch(self):
        """Handle every complete message from the medium; True if one was
        a received ESP-NOW message."""
        got = False
        b = self._in
        p = 0
        while self._n - p >= 3:
            ln = (b[p] << 8) | b[p + 1]
            if self._n - p < 2 + ln:
                break
            op = b[p + 2]
            q = p + 3
            if op == OP_RX:
                self._stats[3] += 1
                if self._rx_put(b, q, ln - 1):
                    got = True
                else:
                    self._stats[4] += 1        # acked by the radio all the same
            elif op == OP_STATUS:
                tok = (b[q] << 8) | b[q + 1]
                ok = b[q + 2]
                if self._pending:
                    self._pending -= 1
                if ok:
                    self._stats[1] += 1
                else:
                    self._stats[2] += 1
                if tok in self._status:
                    self._status[tok] = ok
            elif op == OP_ERROR:
                print("espnowemu: medium error:", bytes(b[q:p + 2 + ln]).decode())
            p += 2 + ln
        if p:
            rest = self._n - p
            if rest:
                b[0:rest] = b[p:self._n]
            self._n = rest
        return got

    def _rx_put(self, src, off, n):
        # the receive buffer, as the C module's ring: per message its
        # length, the sender's MAC and RSSI, the data (n - 7 bytes here)
        data = n - 7
        if data < 0:
            return False
        cost = data + _RX_OVERHEAD
        if self._rx_used + cost > len(self._rb):
            return False
        r = self._rb
        size = len(r)
        w = (self._rx_head + self._rx_held) % size
        r[w] = data
        w = (w + 1) % size
        for i in range(n):
            r[w] = src[off + i]
            w = (w + 1) % size
        self._rx_held += n + 1
        self._rx_used += cost
        self._rx_count += 1
        return True

    def _rx_get(self):
        """(mac, rssi, n) of the oldest message, its data in self._msg[0:n]."""
        r = self._rb
        size = len(r)
        h = self._rx_head
        n = r[h]
        h = (h + 1) % size
        mac = self._macbuf
        for i in range(6):
            mac[i] = r[h]
            h = (h + 1) % size
        rssi = r[h]
        h = (h + 1) % size
        m = self._msg
        for i in range(n):
            m[i] = r[h]
            h = (h + 1) % size
        self._rx_head = h
        self._rx_held -= n + 8
        self._rx_used -= n + _RX_OVERHEAD
        self._rx_count -= 1
        return mac, rssi - 256 if rssi > 127 else rssi, n

    def _poll_now(self):
        while self._sock is not None and self._poller.poll(0):
            if not self._read(0):
                break
        return self._dispatch()

    def _ensure_task(self):
        t = self._task
        if _MP:
            if t is None or t.done():
                self._task = asyncio.create_task(self._pump())
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if t is None or t.done() or self._task_loop is not loop:
            self._task_loop = loop
            self._task = loop.create_task(self._pump())

    async def _pump(self):
        # Delivers arrivals to the irq callback while an asyncio loop runs.
        while self._sock is not None:
            # into the pump's own buffer: the receive calls (irecv, any,
            # send) read the socket too, synchronously, and move the input
            # buffer's bytes while this read waits, so a view of it taken
            # before the wait would receive bytes at a stale place
            scratch = self._scratch
            try:
                if _MP:
                    if self._stream is None:
                        self._stream = asyncio.StreamReader(self._sock)
                    k = await self._stream.readinto(scratch)
                else:
                    k = await asyncio.get_running_loop().sock_recv_into(self._sock, scratch)
            except OSError:
                k = 0
            if self._sock is None:
                break
            if k is None:
                continue
            if not k:
                print("espnowemu: the ESP-NOW medium closed the connection")
                self._close()
                break
            off = 0
            while off < k:
                room = self._space()
                m = len(room) if len(room) < k - off else k - off
                room[0:m] = memoryview(scratch)[off:off + m]
                self._n += m
                off += m
            got = self._dispatch() or self._fresh
            self._fresh = False
            if got and self._handler is not None:
                try:
                    self._handler(self)
                except Exception as e:
                    print("Unhandled exception in espnow irq callback")
                    if _MP:
                        sys.print_exception(e)
                    else:
                        import traceback
                        traceback.print_exception(type(e), e, e.__traceback__)

    # ------------------------------------------------------------ configuration
    def active(self, *args):
        if not args:
            return self._active
        on = bool(args[0])
        if on and not self._active:
            self._connect()
            self._active = True
            # the C module allocates its receive buffer here
            self._rb = bytearray(self._rxbuf)
            self._rx_head = self._rx_held = self._rx_used = self._rx_count = 0
            if self._handler is not None:
                self._ensure_task()
        elif not on and self._active:
            self._active = False
            t = self._task
            self._task = None
            self._close()
            if t is not None and not t.done():
                try:
                    t.cancel()
                except Exception:
                    pass
            self._peers = {}
        return self._active

    def init(self):
        self.active(True)

    def deinit(self):
        self.active(False)

    def _need(self):
        if not self._active:
            raise _err(ESP_ERR_ESPNOW_NOT_INIT)

    def config(self, *args, **kw):
        if args:
            if len(args) != 1 or kw:
                raise ValueError("config takes one parameter name or keywords")
            k = args[0]
            if k == "rxbuf":
                return self._rxbuf
            if k == "timeout_ms":
                return self._timeout
            raise ValueError("unknown config param")
        for k in kw:
            v = kw[k]
            if k == "rxbuf":
                if int(v) < 0:
                    raise ValueError("rxbuf")
                self._rxbuf = int(v)      # takes effect at the next active(True), as on a board
            elif k == "timeout_ms":
                self._timeout = int(v)
            elif k == "rate":
                pass
            elif k == "on_recv":
                self.irq(v)
            else:
                raise ValueError("unknown config param")

    def irq(self, callback):
        self._handler = callback
        if self._active and callback is not None:
            self._ensure_task()

    def stats(self):
        return tuple(self._stats)

    # ------------------------------------------------------------ sending
    def send(self, mac, msg=None, sync=True):
        if msg is None:
            msg, mac = mac, None
        self._need()
        if isinstance(msg, str):
            msg = msg.encode()
        if len(msg) > MAX_DATA_LEN or len(msg) == 0:
            raise ValueError("msg too long" if len(msg) else "msg empty")
        if mac is None:
            dests = [m for m in self._peers if m[0] & 1 == 0]
        else:
            m = _mac(mac)
            if m not in self._peers:
                raise _err(ESP_ERR_ESPNOW_NOT_FOUND)
            dests = [m]
        if self._pending >= self._txbuf:
            self._poll_now()
            if self._pending >= self._txbuf:
                raise _err(ESP_ERR_ESPNOW_NO_MEM)
        toks = []
        for d in dests:
            self._token = (self._token + 1) & 0xFFFF
            tok = self._token
            unicast = d[0] & 1 == 0
            if sync and unicast:
                self._status[tok] = None
                toks.append(tok)
            self._pending += 1
            self._stats[0] += 1
            self._raw(frame(OP_SEND, struct.pack(">HB", tok, 1) + d + bytes(msg)))
        if not sync or not toks:
            return True
        ok = True
        t0 = time.time()
        for tok in toks:
            while self._status.get(tok) is None:
                if self._sock is None or time.time() - t0 > 2:
                    break
                self._read(50)
                self._dispatch()
            if not self._status.pop(tok, None):
                ok = False
        return ok

    # ------------------------------------------------------------ receiving
    def any(self):
        self._need()
        if not self._rx_count:
            self._poll_now()
        return self._rx_count > 0

    def poll(self):
        return self.any()

    def _take(self, timeout_ms):
        """Wait for a message: (mac, n) with the data in self._msg, or None."""
        self._need()
        if timeout_ms is None:
            timeout_ms = self._timeout
        if not self._rx_count:
            self._poll_now()
        if not self._rx_count and timeout_ms != 0:
            t0 = time.time()
            while not self._rx_count and self._sock is not None:
                left = -1 if timeout_ms < 0 else int(timeout_ms - (time.time() - t0) * 1000)
                if timeout_ms >= 0 and left <= 0:
                    break
                self._read(left if left > 0 else 1000)
                self._dispatch()
        if not self._rx_count:
            return None
        mb, rssi, n = self._rx_get()
        # the sender's entry in the peer device table; mac is its key
        t = self.peers_table
        mac = None
        for k in t:
            if k[0] == mb[0] and k[1] == mb[1] and k[2] == mb[2] and k[3] == mb[3] \
                    and k[4] == mb[4] and k[5] == mb[5]:
                mac = k
                break
        if mac is None:
            mac = bytes(mb)
            t[mac] = [rssi, _ticks()]
        else:
            e = t[mac]
            e[0] = rssi
            e[1] = _ticks()
        return mac, n

    def irecv(self, timeout_ms=None):
        r = self._take(timeout_ms)
        p = self._pair
        if r is None:
            p[0] = None
            p[1] = None
            return p
        p[0] = r[0]
        # the C module hands out its one message buffer resized in place;
        # a view of the emulation's buffer is the nearest Python has
        p[1] = memoryview(self._msg)[0:r[1]]
        return p

    def recv(self, timeout_ms=None):
        r = self._take(timeout_ms)
        if r is None:
            return [None, None]
        return [r[0], bytes(self._msg[0:r[1]])]

    def recvinto(self, data, timeout_ms=None):
        r = self._take(timeout_ms)
        if r is None:
            return 0
        n = r[1]
        data[0] = r[0]
        data[1][0:n] = self._msg[0:n]
        return n

    def __iter__(self):
        return self

    def __next__(self):
        if not self._active:
            raise StopIteration
        return self.irecv()

    # ------------------------------------------------------------ peers
    def set_pmk(self, pmk):
        if len(pmk) != KEY_LEN:
            raise ValueError("invalid pmk")

    def add_peer(self, mac, lmk=None, channel=None, ifidx=None, encrypt=None):
        self._need()
        m = _mac(mac)
        if m in self._peers:
            raise _err(ESP_ERR_ESPNOW_EXIST)
        if len(self._peers) >= MAX_TOTAL_PEER_NUM:
            raise _err(ESP_ERR_ESPNOW_FULL)
        if channel is not None and not 0 <= channel <= 14:
            raise ValueError("invalid channel")
        if lmk and len(lmk) != KEY_LEN:
            raise ValueError("invalid lmk")
        self._peers[m] = [lmk or b"", channel or 0, ifidx or 0, bool(encrypt if encrypt is not None else lmk)]

    def del_peer(self, mac):
        self._need()
        m = _mac(mac)
        if m not in self._peers:
            raise _err(ESP_ERR_ESPNOW_NOT_FOUND)
        del self._peers[m]

    def get_peer(self, mac):
        self._need()
        m = _mac(mac)
        p = self._peers.get(m)
        if p is None:
            raise _err(ESP_ERR_ESPNOW_NOT_FOUND)
        return (m, p[0], p[1], p[2], p[3])

    def mod_peer(self, mac, lmk=None, channel=None, ifidx=None, encrypt=None):
        self._need()
        m = _mac(mac)
        p = self._peers.get(m)
        if p is None:
            raise _err(ESP_ERR_ESPNOW_NOT_FOUND)
        if lmk is not None:
            p[0] = lmk
        if channel is not None:
            p[1] = channel
        if ifidx is not None:
            p[2] = ifidx
        if encrypt is not None:
            p[3] = bool(encrypt)

    def get_peers(self):
        self._need()
        return tuple(self.get_peer(m) for m in self._peers)

    def peer_count(self):
        self._need()
        enc = 0
        for p in self._peers.values():
            if p[3]:
                enc += 1
        return (len(self._peers), enc)

    # ------------------------------------------------------------ emulation only
    def _set_channel(self, ch):
        # what network.WLAN(...).config(channel=ch) does to the radio on a board
        self._channel = int(ch)
        if self._sock is not None:
            self._raw(frame(OP_CHANNEL, bytes([self._channel])))

    def _wlan_mac(self):
        # what network.WLAN(network.STA_IF).config("mac") returns on a board
        return self._mac


def _ticks():
    try:
        return time.ticks_ms()
    except AttributeError:
        return int(time.monotonic() * 1000) & 0x3FFFFFFF
