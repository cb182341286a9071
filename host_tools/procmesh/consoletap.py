"""A tap on a unix-port node's console, for `snakemesh node`.

The node's own pseudo-terminal is read by one thread only (this one): every
line the node prints goes to `on_line` (the `node` command shows peers
coming and going, dial failures, root changes) and is passed on, unchanged,
to a second pseudo-terminal whose path is what the user opens
(`snakemesh status --port /dev/pts/M`, `console`, a serial terminal) and,
with a console port, to one socket://127.0.0.1:N client. What those
clients write goes to the node. Without this, two readers of the node's
pty (the `node` command and a client) would steal each other's lines.

`request(cmd)` sends a request of the tap's own (ids "_t1", "_t2", ...);
its reply is returned here and never shown to the clients.

Lines nobody reads are dropped, never buffered without bound: the public
pty holds a few kilobytes (a client that opens it later may see the last
few lines; console clients match replies by id and skip them).
"""
import errno
import json
import os
import select
import socket
import threading
import time
import tty

from host_tools.errors import CliError, DeviceError

PREFIX = b"@sm "
MAX_LINE = 65536
PARTIAL_FLUSH_S = 0.2



def listen_console(port):
    """A loopback socket listening for one console client on `port` (0: any
    free port); a port that cannot be had is one DeviceError line."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        ls.bind(("127.0.0.1", port))
    except OSError as e:
        ls.close()
        why = {errno.EADDRINUSE: "address already in use (another program or node listens there)",
               errno.EACCES: "permission denied (ports below 1024 need root)"}.get(e.errno)
        raise DeviceError("cannot listen on 127.0.0.1:%d (console port): %s"
                          % (port, why or e.strerror or e))
    ls.listen(1)
    return ls

class ConsoleTap(object):
    def __init__(self, node, on_line=None, console_port=None):
        self.node = node                  # a started NodeProcess (owns the node's pty: node.slave)
        self.on_line = on_line or (lambda line: None)
        self.pub_master, self.pub_slave = os.openpty()
        tty.setraw(self.pub_slave)
        os.set_blocking(self.pub_master, False)
        self.pty_path = os.ttyname(self.pub_slave)
        self.console_url = None
        self.lsock = None
        self.client = None
        self.dropped = 0                  # lines no client took
        self._cut = False
        # what the node printed right after its boot line may already sit in
        # the NodeProcess's buffer (read together with the boot line): ours now
        self._buf = bytearray(getattr(node, "_buf", b""))
        if self._buf:
            del node._buf[:]
        self._last_rx = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._waiting = {}
        self._n = 0
        if console_port is not None:
            self._listen(console_port)
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _listen(self, port):
        self.lsock = listen_console(port)
        self.console_url = "socket://127.0.0.1:%d" % self.lsock.getsockname()[1]

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self._stop.set()
        self.thread.join(2)
        for s in (self.client, self.lsock):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        for fd in (self.pub_master, self.pub_slave):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- requests of our own --------------------------------------------------
    def request(self, command, timeout=5.0):
        """Send `command` with an id of ours; the reply dict, or None on timeout."""
        with self._lock:
            self._n += 1
            rid = "_t%d" % self._n
            w = [threading.Event(), None]
            self._waiting[rid] = w
        try:
            self.node.write_line("#%s %s" % (rid, command))
            w[0].wait(timeout)
            return w[1]
        except CliError:
            return None
        finally:
            with self._lock:
                self._waiting.pop(rid, None)

    # -- the relay ----------------------------------------------------------------
    def _loop(self):
        node_fd = self.node.slave
        self._lines()
        while not self._stop.is_set():
            fds = [node_fd, self.pub_master]
            if self.lsock is not None:
                fds.append(self.client if self.client is not None else self.lsock)
            try:
                r, _, _ = select.select(fds, [], [], PARTIAL_FLUSH_S)
            except (OSError, ValueError):
                return
            if node_fd in r:
                try:
                    data = os.read(node_fd, 65536)
                except BlockingIOError:
                    data = b""
                except OSError:
                    return          # the node is gone
                if data:
                    self._last_rx = time.monotonic()
                    self._buf += data
                    self._lines()
            elif self._buf and time.monotonic() - self._last_rx >= PARTIAL_FLUSH_S:
                # a partial line that stays partial (a prompt): pass it on as it is
                self._forward(bytes(self._buf))
                del self._buf[:]
            if self.pub_master in r:
                try:
                    data = os.read(self.pub_master, 4096)
                except (BlockingIOError, OSError):
                    data = b""
                if data:
                    self._to_node(data)
            if self.lsock is not None and self.client is None and self.lsock in r:
                try:
                    self.client, _ = self.lsock.accept()
                    self.client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    self.client = None
            elif self.client is not None and self.client in r:
                try:
                    data = self.client.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    self.client.close()
                    self.client = None
                else:
                    self._to_node(data)

    def _to_node(self, data):
        try:
            self.node.write(data)
        except (OSError, CliError):
            pass

    def _lines(self):
        buf = self._buf
        while True:
            i = buf.find(b"\n")
            if i < 0:
                if len(buf) > MAX_LINE:
                    self._forward(bytes(buf))
                    del buf[:]
                return
            raw = bytes(buf[:i + 1])
            del buf[:i + 1]
            line = raw.rstrip(b"\r\n")
            if line.startswith(PREFIX + b'{') and b'"_t' in line and self._mine(line):
                continue
            try:
                self.on_line(line)
            except Exception:        # a display problem must not stop the relay
                pass
            self._forward(raw)

    def _mine(self, line):
        try:
            obj = json.loads(line[len(PREFIX):].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return False
        rid = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(rid, str) or not rid.startswith("_t"):
            return False
        with self._lock:
            w = self._waiting.get(rid)
        if w is not None:
            w[1] = obj
            w[0].set()
        return True          # ours, even if we stopped waiting for it

    def _forward(self, data):
        if self._cut:
            data = b"\n" + data
        self._cut = False
        off = 0
        tries = 0
        while off < len(data):
            try:
                off += os.write(self.pub_master, data[off:])
            except BlockingIOError:
                if off == 0 or tries >= 10:
                    break
                tries += 1
                time.sleep(0.005)
            except OSError:
                break
        if off == 0:
            self.dropped += 1
        elif off < len(data):
            self.dropped += 1
            self._cut = True
        if self.client is not None:
            try:
                self.client.sendall(data)
            except OSError:
                self.client.close()
                self.client = None
