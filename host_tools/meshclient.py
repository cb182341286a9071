"""Send and receive application datagrams through a node, from a script.

    from host_tools.meshclient import MeshClient
    with MeshClient("/dev/ttyUSB0") as mc:            # or "socket://127.0.0.1:7000"
        r = mc.send("c933a29e", b"21.5", service=7, ack=True)
        print(r.state, r.reason, r.rtt_ms)            # delivered None 12
        for d in mc.recv(service=7, count=1, timeout=10):
            print(d.src, d.service, d.src_service, d.data)

The node is any snakemesh node reachable by its console: a board on USB
serial, a unix-port node's pty, or `snakemesh node` on this host (the host's
own node; --console-port gives it a socket:// console). The datagrams go
through the node's datagram layer (docs/reference/DATAGRAMS.md): services,
end-to-end acks, fragments. Keys take the forms of `snakemesh ping`: the
full key (64 hex digits), a unique prefix of 8+ hex digits the node knows,
or a name from a names file (names=...). docs/guides/DATAGRAMS.md has the
whole page; the console requests it uses are send/put/recv
(docs/guides/NODE.md).

Errors are host_tools.errors.CliError subclasses with one clear line:
DeviceError (the port), TimeoutError_, InputError (a key), NodeError (the
node refused the request: a bad service, a datagram larger than its
profile's dgram_max).
"""
import binascii
import collections
import time

from host_tools import names as names_mod
from host_tools.console_client import ConsoleClient, NodeError
from host_tools.errors import CliError, InputError, TimeoutError_

# Bytes of data per console line: a request line holds at most 256 bytes
# (firmware snake/console.py MAX_LINE), "#ID put TOTAL OFFSET " and the
# data in hex.
CHUNK = 100
SEND_TIMEOUT = 30.0      # a send with ack ends on the node within about 22 s

Sent = collections.namedtuple("Sent", "state reason rtt_ms len dst service")
Datagram = collections.namedtuple("Datagram", "src service src_service data")


class SendFailed(CliError):
    """A datagram ended failed (reason in .reason)."""
    exit_code = 4

    def __init__(self, message, reason=None, result=None):
        CliError.__init__(self, message)
        self.reason = reason
        self.result = result


def parse_service(s):
    """A service number 0..65535 from the command line; InputError otherwise."""
    try:
        v = int(s)
    except (TypeError, ValueError):
        v = -1
    if not 0 <= v <= 0xFFFF:
        raise InputError("bad service %r: expected an integer 0..65535" % (s,), exit_code=2)
    return v


class MeshClient(object):
    def __init__(self, port, timeout=5.0, names=None, serial_module=None):
        self.port = port
        self.timeout = timeout
        self.names = names if names is not None else names_mod.EMPTY
        self.console = ConsoleClient(port, timeout=timeout, serial_module=serial_module)
        self._key = None
        self._listening = False

    def open(self):
        self.console.open()
        return self

    def close(self):
        if self._listening and self.console.ser is not None:
            try:
                self.console.request("recv", "off", timeout=1.0, check=False)
            except CliError:
                pass
            self._listening = False
        self.console.close()

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()
        return False

    @property
    def key(self):
        """The node's own key (hex)."""
        if self._key is None:
            self._key = self.console.request("status")["key"]
        return self._key

    def resolve(self, key):
        """A key in any of ping's forms -> 64 hex digits."""
        if isinstance(key, (bytes, bytearray)):
            if len(key) != 32:
                raise InputError("a key is 32 bytes, not %d" % len(key), exit_code=2)
            return binascii.hexlify(bytes(key)).decode()
        names_mod.classify(key, self.names)
        return names_mod.resolve(key, self.names, known=lambda: names_mod.node_keys(self.console))

    def send(self, key, data, service=0, ack=False, timeout=None):
        """Send data (bytes or str) to key for service; a Sent once final
        (with ack: delivered or failed; without: sent or failed). Raises
        SendFailed when it failed (use check=False... see send_result)."""
        r = self.send_result(key, data, service, ack, timeout)
        if r.state == "failed":
            raise SendFailed("datagram to %s failed: %s" % (r.dst[:16], r.reason), r.reason, r)
        return r

    def send_result(self, key, data, service=0, ack=False, timeout=None):
        """As send(), but a failed datagram is returned, not raised."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        data = bytes(data)
        service = parse_service(service)
        dst = self.resolve(key)
        c = self.console
        if len(data) <= CHUNK:
            arg = binascii.hexlify(data).decode() if data else None
        else:
            off = 0
            while off < len(data):
                piece = data[off:off + CHUNK]
                r = c.request("put", len(data), off, binascii.hexlify(piece).decode(), check=False)
                if r.get("ok") is False:
                    err = r.get("error") or ""
                    if err.startswith("too_big"):
                        # larger than the node's dgram_max: the send fails too_big
                        return Sent("failed", "too_big", None, len(data), dst, service)
                    raise NodeError("%s: 'put' failed on the node: %s" % (self.port, err))
                off += len(piece)
            arg = "@"
        args = [dst, service, 1 if ack else 0]
        if arg is not None:
            args.append(arg)
        t = timeout if timeout is not None else (SEND_TIMEOUT if ack else self.timeout)
        d = c.request("send", *args, timeout=t)
        return Sent(d.get("state"), d.get("reason"), d.get("rtt_ms"), d.get("len"), d.get("dst", dst),
                    d.get("service"))

    def listen(self, service=None):
        """Have the node pass datagrams to service (None: every service) to us."""
        self.console.request("recv", "all" if service is None else parse_service(service))
        self._listening = True

    def recv(self, service=None, count=None, timeout=None):
        """Yield Datagrams to `service` (None: any) arriving at the node,
        until count arrived or timeout seconds passed (None: no limit)."""
        if not self._listening:
            self.listen(service)
        got = 0
        end = None if timeout is None else time.monotonic() + timeout
        while count is None or got < count:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return
            for rec in self.console.records(duration=min(left, 0.5) if left is not None else 0.5):
                if rec.get("kind") != "datagram":
                    continue
                if service is not None and rec.get("service") != service:
                    continue
                yield Datagram(rec.get("src"), rec.get("service"), rec.get("src_service"),
                               binascii.unhexlify(rec.get("data_hex") or ""))
                got += 1
                if count is not None and got >= count:
                    return


__all__ = ["MeshClient", "Sent", "Datagram", "SendFailed", "NodeError", "TimeoutError_", "parse_service"]
