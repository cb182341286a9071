# Links: the byte streams that ports run on, and the TCP link.
#
# ---------------------------------------------------------------- contract
# A Link is any object with:
#
#   link_type              int: 1 Wi-Fi multicast-discovered (LAN), 3 remote
#                          (static --connect / --listen), 4 Bluetooth LE.
#                          (0 local pipe and 2 Bonjour exist in the protocol
#                          but no transport here makes them.)
#   name                   str, for logs ("tcp 10.0.0.5:40012", "ble ...")
#   outbound               True when this side initiated the link (dialled /
#                          BLE central); used to break ties between two
#                          simultaneous links to the same key (node.link_up)
#   want_key               optional: when True, stream.run sets peer_key (the
#                          peer's public key) after the handshake
#   async recv_into(mv)    read up to len(mv) bytes into the memoryview /
#                          bytearray mv; return how many (>= 1), or 0 on EOF,
#                          error or after close(). Never raises OSError.
#                          Cancelled (node._slow takes a stalled frame's
#                          buffer back), it consumes no bytes and raises
#                          CancelledError unless the link closed (then 0).
#   source()               optional: the peer's address of a link we
#                          accepted (per-source admission, back-off), or
#                          None; a TcpLink's is read from its stream by
#                          snake/runtime/guard.py (cold code), a BleLink has none
#   async send(buf, n)     write buf[0:n] completely (the handshake; buf is a
#                          bytearray the caller reuses as soon as send
#                          returns: copy it if the transport keeps it).
#                          Raises OSError when the link is closed or fails.
#   try_send(buf, n, off)  frames: write as much of buf[off:n] as the
#                          transport takes now, without blocking and without
#                          keeping a reference to buf; returns the count
#                          (0..n-off), or -1 when the link is closed or
#                          failed. The node calls it with the oldest bytes
#                          it has for the link, so frames stay in order, and
#                          queues what was not taken (node.py).
#   close()                idempotent; must wake a task blocked in recv_into
#                          (which then returns 0) and make send raise.
#
# A transport (wifi.py, ble.py) that has a connected Link hands it to the
# node with `node.start_link(link)` (spawns a task) or runs
# `await snake.runtime.stream.run(node, link)` in its own task. stream.run does the
# 104-byte handshake (10 s deadline), reports the peer to the node
# (node.link_up(link, key) -> port, or 0 = refused: duplicate, own key,
# no free port), feeds frames to router.receive from a preallocated
# per-link buffer, drains the port's bounded send queue with a writer task,
# and on EOF / error / close calls node.link_down(port, link) and
# link.close(). The transport never sees frames.
# ---------------------------------------------------------------------------
import asyncio

from snake import platform
from snake.platform import const

LINK_MULTICAST = 1
LINK_REMOTE = 3

_EBADF = const(9)
_EAGAIN = (11, 35)       # Linux, macOS/BSD
_TX_HIGH = const(65536)     # CPython: bytes a TCP transport may hold before try_send waits
# what a read that failed raises (a module tuple: recv_into's frame, kept
# while a link waits for bytes, is a 16-byte block smaller than with the
# tuple built in the except clause)
_READ_ERRORS = (OSError, ValueError, EOFError)


def _current_task():
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


def set_nodelay(writer):
    """TCP_NODELAY on the socket behind an asyncio stream (best effort)."""
    sock = None
    try:
        sock = writer.get_extra_info("socket")     # CPython
    except (KeyError, AttributeError, TypeError):
        sock = None
    if sock is None:
        sock = getattr(writer, "s", None)          # MicroPython Stream
    if sock is None:
        return False
    try:
        sock.setsockopt(platform.IPPROTO_TCP, platform.TCP_NODELAY, 1)
        return True
    except (OSError, AttributeError, TypeError, ValueError):
        return False


def close_stream(writer):
    """Close an asyncio stream's socket on either interpreter (MicroPython's
    Stream.close() alone leaves the socket open)."""
    try:
        writer.close()
    except (OSError, AttributeError, RuntimeError):
        pass
    if hasattr(writer, "awrite"):
        s = getattr(writer, "s", None)
        if s is not None:
            try:
                s.close()
            except OSError:
                pass


def peer_name(writer, default="?"):
    """'host:port' of the remote end of an accepted asyncio stream."""
    try:
        addr = writer.get_extra_info("peername")
    except (KeyError, AttributeError, TypeError):
        return default
    if addr is None:
        return default
    try:
        host, port = host_port(addr)
    except (ValueError, TypeError, IndexError, OSError, AttributeError):
        return default
    return "%s:%d" % (host, port)


def host_port(addr):
    """(dotted host str, port) from any recvfrom()/peername address:
    CPython and ESP32 give a tuple; the MicroPython unix port a raw sockaddr
    that socket.sockaddr() decodes, with the host as 4 raw bytes."""
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
    else:
        import socket
        dec = socket.sockaddr(addr)
        # unix port: (family, (host, port)) or (family, host, port) by version
        if len(dec) == 2:
            host, port = dec[1][0], dec[1][1]
        else:
            host, port = dec[1], dec[2]
    if isinstance(host, (bytes, bytearray)) and len(host) == 4:
        host = "%d.%d.%d.%d" % (host[0], host[1], host[2], host[3])
    return host, port


class TcpLink:
    """A Link over an asyncio TCP stream pair (CPython or MicroPython)."""

    closed = False
    outbound = False    # set on the links we dialled only (one attribute
                        # fewer keeps an accepted link's attribute table a size smaller)
    _rtask = None       # the task blocked in recv_into (close() wakes it)
    _fast = 0           # direct socket reads in a row
    _name = None
    _addr = None

    def __init__(self, reader, writer, link_type, name=None, outbound=False, addr=None):
        self.r = reader
        self.w = writer
        self.link_type = link_type
        # the name (logs) is made when asked for, not kept per link
        if name is not None:
            self._name = name
        if addr is not None:
            self._addr = addr        # (host, port) we dialled
        if outbound:
            self.outbound = True
        # MicroPython: the stream's non-blocking socket (reader and writer
        # are one Stream), read directly when data is already waiting and
        # written directly (try_send). CPython: None; reads through the
        # StreamReader, writes into the StreamWriter's transport.
        self._sock = getattr(reader, "s", None) if hasattr(writer, "awrite") else None

    @property
    def name(self):
        if self._name is not None:
            return self._name
        if self._addr is not None:
            return "tcp %s:%d" % self._addr
        return "tcp " + peer_name(self.w) + " (in)"

    def try_send(self, buf, n, off):
        if self.closed:
            return -1
        s = self._sock
        try:
            if s is not None:
                k = s.write(memoryview(buf)[off:n])
                return k if k else 0
            tr = self.w.transport
            if tr.is_closing():
                self.close()
                return -1
            if tr.get_write_buffer_size() > _TX_HIGH:
                return 0
            self.w.write(bytes(buf[off:n]))
            return n - off
        except (OSError, ValueError, RuntimeError, AttributeError):
            self.close()
            return -1

    async def recv_into(self, mv):
        if self.closed:
            return 0
        s = self._sock
        if s is not None and self._fast < 16:
            # at most 16 direct reads in a row, then one through asyncio so
            # other tasks (the flusher, the console) get their turn
            try:
                n = s.readinto(mv)
            except OSError:
                n = None
            if n:
                self._fast += 1
                return n
        self._fast = 0
        self._rtask = _current_task()
        try:
            if s is not None:
                n = await self.r.readinto(mv)
                if n is None:
                    n = 0
            else:
                data = await self.r.read(len(mv))
                n = len(data)
                if n:
                    mv[0:n] = data
        except asyncio.CancelledError:
            if self.closed:
                return 0
            raise
        except _READ_ERRORS:
            n = 0
        finally:
            self._rtask = None
        if self.closed:
            return 0
        return n

    async def send(self, buf, n):
        if self.closed:
            raise OSError(_EBADF)
        if self._sock is None:
            data = bytes(buf[0:n])     # CPython's transport may keep what it is given
        else:
            data = memoryview(buf)[0:n]
        try:
            self.w.write(data)
            await self.w.drain()
        except OSError:
            self.close()
            raise
        except (ValueError, RuntimeError, AttributeError):
            # a transport closed under us (CPython raises these too)
            self.close()
            raise OSError(_EBADF)
        if self.closed:
            raise OSError(_EBADF)

    def close(self):
        if self.closed:
            return
        self.closed = True
        # MicroPython does not wake a reader blocked on a socket closed under
        # it: cancel that task; recv_into turns the cancellation into EOF.
        t = self._rtask
        if t is not None and t is not _current_task():
            try:
                t.cancel()
            except RuntimeError:
                pass
        close_stream(self.w)


async def _deadline(task, timeout_s, late):
    # cancels the dialling task when the connect attempt outlasts the
    # deadline (a task this small, not asyncio.wait_for: its module stays
    # out of the heap)
    await asyncio.sleep(timeout_s)
    late[0] = 1
    task.cancel()


async def open_tcp(host, port, link_type, timeout_s=5):
    """Dial host:port; a connected TcpLink (TCP_NODELAY on) or OSError."""
    late = bytearray(1)
    wd = asyncio.create_task(_deadline(asyncio.current_task(), timeout_s, late))
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except asyncio.CancelledError:
        if not late[0]:
            raise       # the dialler itself was cancelled
        raise OSError(110)  # ETIMEDOUT
    finally:
        wd.cancel()
    # MicroPython's open_connection returns when the connect attempt ends,
    # refused or not; on the unix port a zero-length send reports the
    # refusal here, as a failed dial. Not on a board: the ESP32 port's send
    # raises ETIMEDOUT for zero bytes even on a good connection; there the
    # refusal shows at the handshake's first write (stream.handshake counts
    # that as a failed dial too)
    s = getattr(writer, "s", None) if not platform.BOARD else None
    if s is not None:
        try:
            s.send(b"")
        except OSError as e:
            if not e.args or e.args[0] not in _EAGAIN:
                close_stream(writer)
                raise
    set_nodelay(writer)
    return TcpLink(reader, writer, link_type, outbound=True, addr=(host, port))
