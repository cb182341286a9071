"""Client for a snakemesh node's serial console (docs/reference/INTERFACES.md,
"Console protocol").

The port is anything pyserial's serial_for_url() opens: a device path
(/dev/ttyUSB0, COM3), a pseudo-terminal of a unix-port node (/dev/pts/5) or a
URL (socket://127.0.0.1:7000, rfc2217://...).

A request is one line `#ID COMMAND ARGS` (sent with CR LF so a board that is
sitting in the MicroPython REPL shows its prompt, which is how that case is
recognised). Replies and telemetry are lines `@sm ` + JSON; every other line
(REPL banner, logs, the echo of a terminal) is ignored. A reply is matched by
its `id`. Telemetry records (objects with `v`) seen while waiting for a
reply are kept for `records()`.

Every expected failure is a CliError subclass with one clear line:
no such port, permission denied, port busy, not a serial port, timeout,
garbage on the line, board in the MicroPython REPL, disconnected, node
replied ok:false.
"""
import collections
import errno
import json
import time

from host_tools.errors import CliError, DeviceError, TimeoutError_

PREFIX = b"@sm "
BAUDRATE = 115200
MAX_LINE = 65536          # a longer line without newline is dropped as garbage
MAX_PENDING_RECORDS = 10000
_POLL = 0.05


class NodeError(CliError):
    """The node understood the request and answered ok:false."""
    exit_code = 1


class ReplBusyError(DeviceError):
    pass


class GarbageError(DeviceError):
    pass


# The first bytes a node's peer port (--listen, a static TCP listener) sends:
# its handshake, version 1 and capabilities 0x3b (docs/spec, wire.py). A
# console client that sees them was pointed at the wrong port.
PEER_HANDSHAKE_HEAD = b"\x01\x00\x00\x00\x00\x00\x00\x3b"


def _describe_bytes(sample):
    text = repr(bytes(sample[:80]))
    return "first bytes received: " + text + (" ..." if len(sample) > 80 else "")


def open_serial(port, timeout=_POLL, serial_module=None):
    """Open `port` with pyserial; map every failure to one clear DeviceError."""
    if serial_module is None:
        import serial as serial_module
    try:
        if not str(port).startswith("socket://"):
            return serial_module.serial_for_url(port, baudrate=BAUDRATE, timeout=timeout, exclusive=True)
        # pyserial drops what a socket sent on connect; a node's peer port
        # sends its handshake then, which is how ConsoleClient.open tells
        # one from a console: keep it for the client to look at
        ser = serial_module.serial_for_url(port, baudrate=BAUDRATE, timeout=timeout, do_not_open=True)
        ser.reset_input_buffer = lambda: None
        try:
            ser.open()
        finally:
            del ser.reset_input_buffer
        return ser
    except ValueError as e:
        raise DeviceError("invalid port %s: %s" % (port, e)) from e
    except (OSError, serial_module.SerialException) as e:
        raise map_open_error(port, e) from e


def map_open_error(port, e):
    msg = str(e)
    low = msg.lower()
    code = getattr(e, "errno", None)
    if code == errno.ENOENT or "no such file" in low or "errno 2]" in low:
        return DeviceError("no such port: %s (is the board plugged in? is the node running?)" % port, detail=msg)
    if code in (errno.EACCES, errno.EPERM) or "permission denied" in low or "errno 13]" in low:
        return DeviceError("permission denied on %s (add your user to the dialout group, then log in again)"
                           % port, detail=msg)
    if (code in (errno.EBUSY, errno.EAGAIN) or "exclusively lock" in low or "resource busy" in low
            or "temporarily unavailable" in low):
        return DeviceError("port %s is busy (another program has it open: a serial monitor, mpremote, "
                           "another snakemesh command)" % port, detail=msg)
    if "connection refused" in low or "errno 111]" in low:
        return DeviceError("no such port: %s (connection refused: nothing listens there)" % port, detail=msg)
    if "inappropriate ioctl" in low or "(25," in low or "errno 25]" in low:
        return DeviceError("%s is not a serial port" % port, detail=msg)
    if "timed out" in low:
        return TimeoutError_("timeout opening %s" % port, detail=msg)
    return DeviceError("cannot open %s: %s" % (port, msg), detail=msg)


class ConsoleClient(object):
    """One open console connection. Use as a context manager."""

    def __init__(self, port, timeout=5.0, serial_module=None):
        self.port = port
        self.timeout = float(timeout)
        self._serial_module = serial_module
        self.ser = None
        self._buf = bytearray()
        self._next_id = 1
        self.records_pending = collections.deque(maxlen=MAX_PENDING_RECORDS)
        # What the line has shown so far (to tell garbage from silence).
        self.rx_bytes = 0
        self.noise_bytes = 0      # non-protocol bytes, not counting echoes of our requests
        self._sent = collections.deque(maxlen=16)
        self.protocol_lines = 0
        self.sample = bytearray()
        self.repl_seen = False
        self.bad_protocol_lines = 0

    # -- connection ---------------------------------------------------------
    def open(self):
        if self.ser is None:
            self.ser = open_serial(self.port, serial_module=self._serial_module)
            # what waits in the input queue was meant for someone else (a
            # previous client's late replies would match our ids)
            try:
                self._check_peer_port(self._drain())
            except DeviceError:
                self.close()
                raise
        return self

    def _drain(self):
        """Read and return what waits in the input queue (to be dropped)."""
        data = bytearray()
        try:
            for _ in range(1024):
                n = self.ser.in_waiting
                if not n:
                    break
                got = self.ser.read(n)
                if not got:
                    break
                data += got
        except Exception:
            try:
                self.ser.reset_input_buffer()
            except Exception:
                pass
        return bytes(data)

    def _check_peer_port(self, data):
        if data[:len(PEER_HANDSHAKE_HEAD)] == PEER_HANDSHAKE_HEAD:
            raise DeviceError("%s is not a console: it is a Pinecone peer port (a node's --listen port; it "
                              "sent a peer handshake). Open the node's console instead: the `console` line "
                              "`snakemesh node` prints (--console-port N serves it on socket://127.0.0.1:N)"
                              % self.port)

    def close(self):
        if self.ser is not None:
            try:
                self.ser.close()
            except Exception:
                pass
            self.ser = None

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()
        return False

    # -- low level ----------------------------------------------------------
    def send_line(self, text):
        data = text.encode("utf-8") + b"\r\n"
        self._sent.append(text.encode("utf-8").strip())
        try:
            self.ser.write(data)
            self.ser.flush()
        except Exception as e:
            raise DeviceError("%s disconnected (write failed: %s)" % (self.port, e)) from e

    def _read_some(self, deadline):
        """Read what is available (waiting at most until `deadline`)."""
        wait = deadline - time.monotonic()
        if wait <= 0:
            return b""
        try:
            n = self.ser.in_waiting
            data = self.ser.read(n if n > 0 else 1)
            if data:
                n = self.ser.in_waiting
                if n:
                    data += self.ser.read(n)
        except Exception as e:
            raise DeviceError("%s disconnected (%s)" % (self.port, e)) from e
        return data

    def _note_rx(self, data):
        before = self.rx_bytes
        self.rx_bytes += len(data)
        if len(self.sample) < 256:
            self.sample += data[:256 - len(self.sample)]
        # the first bytes may come in pieces: judge them once there are enough
        if before < len(PEER_HANDSHAKE_HEAD) <= self.rx_bytes and not self.protocol_lines:
            self._check_peer_port(bytes(self.sample))

    def raw_lines(self, deadline):
        """Yield complete lines (bytes, without CR/LF) until `deadline`."""
        while True:
            while True:
                i = self._buf.find(b"\n")
                if i < 0:
                    break
                line = bytes(self._buf[:i]).rstrip(b"\r")
                del self._buf[:i + 1]
                yield line
            self._check_partial()
            if time.monotonic() >= deadline:
                return
            data = self._read_some(deadline)
            if data:
                self._note_rx(data)
                self._buf += data

    def _check_partial(self):
        """Spot an interactive prompt (no newline after it) and overlong lines."""
        if not self._buf:
            return
        # Complete lines were consumed already: the buffer is the partial
        # line, and an interactive prompt never gets a newline after it.
        if self._buf.startswith(b">>> ") or self._buf == b">>>":
            self.repl_seen = True
            self._raise_repl()
        if len(self._buf) > MAX_LINE:
            self.noise_bytes += len(self._buf)
            del self._buf[:]

    def _raise_repl(self):
        raise ReplBusyError("board on %s is in the MicroPython REPL, not running snakemesh; "
                            "press Ctrl-D or reset it" % self.port, detail=_describe_bytes(self.sample))

    def classify_line(self, line):
        """Return a dict for an `@sm ` line, None for anything else.

        Raises ReplBusyError for a REPL prompt or the raw-REPL banner."""
        if line.startswith(PREFIX):
            try:
                obj = json.loads(line[len(PREFIX):].decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                self.bad_protocol_lines += 1
                return None
            if not isinstance(obj, dict):
                self.bad_protocol_lines += 1
                return None
            self.protocol_lines += 1
            return obj
        if line.startswith(b">>> ") or line == b">>>" or b"raw REPL; CTRL-B to exit" in line:
            self.repl_seen = True
            self._raise_repl()
        stripped = line.strip()
        if stripped and stripped not in self._sent:   # a terminal's echo of our request is not noise
            self.noise_bytes += len(line)
        return None

    def _timeout_error(self, what, waited):
        noise = self.noise_bytes + len(self._buf.strip())
        if noise and not self.protocol_lines:
            return GarbageError("no snakemesh console on %s (garbage on the line)" % self.port,
                                detail=_describe_bytes(self.sample))
        return TimeoutError_("timeout: no reply to '%s' from %s within %g s (is the snakemesh firmware "
                             "running? reset the board or retry with a larger --timeout)"
                             % (what, self.port, waited),
                             detail=_describe_bytes(self.sample) if self.rx_bytes else "nothing received")

    # -- requests -----------------------------------------------------------
    def request(self, command, *args, **kw):
        """Send `command args` and return the node's reply (a dict).

        kw: timeout (seconds, default self.timeout), check (raise NodeError
        on ok:false, default True)."""
        timeout = kw.get("timeout")
        if timeout is None:
            timeout = self.timeout
        check = kw.get("check", True)
        if self.ser is None:
            self.open()
        rid = self._next_id
        self._next_id += 1
        text = "#%d %s" % (rid, command)
        if args:
            text += " " + " ".join(str(a) for a in args)
        self.send_line(text)
        deadline = time.monotonic() + timeout
        for line in self.raw_lines(deadline):
            obj = self.classify_line(line)
            if obj is None:
                continue
            if "v" in obj and "re" not in obj:
                self.records_pending.append(obj)
                continue
            if "id" in obj:
                if str(obj.get("id")) != str(rid):
                    continue  # a stale reply to an earlier request
                if obj.get("re") not in (command, "", None):
                    continue  # the same id, another command: a previous client's reply
            elif obj.get("re") != command:
                continue
            if check and obj.get("ok") is False:
                raise NodeError("%s: '%s' failed on the node: %s"
                                % (self.port, command, obj.get("error") or "no reason given"),
                                detail=json.dumps(obj))
            return obj
        raise self._timeout_error(command, timeout)

    def records(self, duration=None, stop=None):
        """Yield telemetry records until `duration` seconds pass (forever if
        None) or stop() returns true; checks stop() at least every 0.2 s."""
        end = None if duration is None else time.monotonic() + duration
        while True:
            while self.records_pending:
                yield self.records_pending.popleft()
            if stop is not None and stop():
                return
            now = time.monotonic()
            if end is not None and now >= end:
                return
            slice_end = now + 0.2 if end is None else min(end, now + 0.2)
            for line in self.raw_lines(slice_end):
                obj = self.classify_line(line)
                if obj is not None and "v" in obj and "re" not in obj:
                    self.records_pending.append(obj)
