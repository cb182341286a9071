"""A fake snakemesh console node, for tests only (never used by production
code). It serves the console protocol of docs/reference/INTERFACES.md over a
pseudo-terminal (like a unix-port node or a USB serial board) or over a TCP
socket (pyserial's socket:// URL), and can misbehave on purpose:

    ok        normal replies
    noise     normal replies, but surrounded by REPL-ish log lines, invalid
              UTF-8, a stale reply with another id, a telemetry record, and
              each reply written in fragments
    idless    replies without `id` (the client falls back to matching `re`)
    error     every command answers ok:false with an error message
    silent    reads everything, never answers
    garbage   answers every line with undecodable bytes
    repl      behaves like MicroPython's friendly REPL (echo + ">>> ")
    rawrepl   answers the first line with the raw REPL banner
    echo      echoes every line (like a pty in cooked mode), then answers
    echosilent  echoes every line, never answers

Run standalone: python fake_node.py [--mode M] [--transport pty|socket]
prints the port to use and serves until interrupted.
"""
import json
import os
import select
import socket
import threading
import time

DEFAULT_KEY = "5a" * 32
PEER_KEYS = ["7f" + "11" * 31, "3c" + "22" * 31]


class FakeNode(object):
    def __init__(self, mode="ok", transport="pty", key=DEFAULT_KEY, telemetry_scale=0.05,
                 version="0.1.0", board="FAKE"):
        self.mode = mode
        self.transport = transport
        self.key = key
        self.telemetry_scale = telemetry_scale
        self.version = version
        self.board = board
        self.received = []          # request lines, as text
        self.port = None
        self._stop = threading.Event()
        self._threads = []
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._telemetry_period = None
        self._next_telemetry = 0.0
        self._seq = 0

    # -- lifecycle ------------------------------------------------------------
    def start(self):
        if self.transport == "pty":
            import tty
            self._master, self._slave = os.openpty()
            tty.setraw(self._slave)
            os.set_blocking(self._master, False)   # never block on a full pty
            self.port = os.ttyname(self._slave)
            self._spawn(self._serve_pty)
        elif self.transport == "socket":
            self._lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._lsock.bind(("127.0.0.1", 0))
            self._lsock.listen(4)
            self.port = "socket://127.0.0.1:%d" % self._lsock.getsockname()[1]
            self._spawn(self._serve_socket)
        else:
            raise ValueError("transport must be pty or socket")
        return self.port

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(2)
        if self.transport == "pty":
            for fd in (self._master, self._slave):
                try:
                    os.close(fd)
                except OSError:
                    pass
        else:
            try:
                self._lsock.close()
            except OSError:
                pass

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _spawn(self, fn):
        t = threading.Thread(target=fn, daemon=True)
        t.start()
        self._threads.append(t)

    # -- transports -----------------------------------------------------------
    def _serve_pty(self):
        fd = self._master

        def write(data):
            try:
                os.write(fd, data)
            except OSError:
                pass
        self._session(lambda: self._read_fd(fd), write)

    def _read_fd(self, fd):
        r, _, _ = select.select([fd], [], [], 0.02)
        if not r:
            return b""
        try:
            return os.read(fd, 4096)
        except OSError:
            time.sleep(0.02)   # no client has the slave open right now
            return b""

    def _serve_socket(self):
        self._lsock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._lsock.accept()
            except (socket.timeout, OSError):
                continue
            conn.settimeout(0.02)
            closed = []

            def read():
                try:
                    data = conn.recv(4096)
                except socket.timeout:
                    return b""
                except OSError:
                    closed.append(1)
                    return None
                if not data:
                    closed.append(1)
                    return None
                return data

            def write(data):
                try:
                    conn.sendall(data)
                except OSError:
                    closed.append(1)
            self._telemetry_period = None
            self._session(read, write, closed)
            try:
                conn.close()
            except OSError:
                pass

    # -- protocol -------------------------------------------------------------
    def _session(self, read, write, closed=None):
        buf = b""
        while not self._stop.is_set() and not closed:
            data = read()
            if data is None:
                return
            if data:
                buf += data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._handle(line, write)
            self._maybe_telemetry(write)

    def _emit(self, write, obj, fragments=False):
        data = b"@sm " + json.dumps(obj).encode() + b"\r\n"
        if fragments:
            for i in range(0, len(data), 7):
                write(data[i:i + 7])
                time.sleep(0.001)
        else:
            write(data)

    def _handle(self, raw, write):
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            if self.mode == "repl":
                write(b"\r\n>>> ")
            return
        with self._lock:
            self.received.append(text)
        mode = self.mode
        if mode in ("echo", "echosilent"):
            write(raw + b"\r\n")
        if mode in ("silent", "echosilent"):
            return
        if mode == "garbage":
            write(b"\xff\xfe\x00\x9c\x81garbage\x00\xe9\x80" * 4 + b"\r\n\xc3(")
            return
        if mode == "repl":
            write(raw + b"\r\n>>> ")
            return
        if mode == "rawrepl":
            write(b"raw REPL; CTRL-B to exit\r\n>")
            return
        rid = None
        if text.startswith("#"):
            head, _, text = text.partition(" ")
            rid = head[1:]
            try:
                rid = int(rid)
            except ValueError:
                pass
        parts = text.split()
        cmd, args = parts[0], parts[1:]
        reply = {"re": cmd}
        if rid is not None and mode != "idless":
            reply["id"] = rid
        if mode == "error":
            reply.update(ok=False, error="no route to destination")
        else:
            try:
                data = self._command(cmd, args)
                reply["ok"] = True
                reply.update(data)
            except ValueError as e:
                reply.update(ok=False, error=str(e))
        if mode == "noise":
            write(b"I (1234) wifi: connected, noise line\r\n")
            write(b"\xff\xfe not utf8 \x80\r\n")
            write(b"MicroPython log: >>> is not a prompt here\r\n")
            stale = dict(reply)
            stale["id"] = "stale-%s" % rid
            stale["uptime_s"] = -1
            self._emit(write, stale)
            self._emit(write, self._record("event", event="peer_up", detail="noise"))
            self._emit(write, reply, fragments=True)
        else:
            self._emit(write, reply)

    def _command(self, cmd, args):
        key = self.key
        if cmd == "version":
            return {"version": self.version, "board": self.board, "platform": "fake"}
        if cmd == "status":
            return {"key": key, "version": self.version, "root": PEER_KEYS[0], "root_seq": 7,
                    "parent": PEER_KEYS[0], "coords": [1, 2], "depth": 2, "desc": PEER_KEYS[1],
                    "peers": 2, "routes": 3, "uptime_s": 42, "mem_free": 51234}
        if cmd == "peers":
            return {"peers": [
                {"port": 1, "key": PEER_KEYS[0], "link": "wifi", "root": PEER_KEYS[0], "root_seq": 7,
                 "coords": [1]},
                {"port": 2, "key": PEER_KEYS[1], "link": "ble", "root": PEER_KEYS[0], "root_seq": 7,
                 "coords": [1, 2, 1]}]}
        if cmd == "tree":
            return {"root": PEER_KEYS[0], "root_seq": 7, "parent": PEER_KEYS[0], "coords": [1, 2],
                    "depth": 2, "ancestors": [PEER_KEYS[0]]}
        if cmd == "snake":
            return {"desc": {"key": PEER_KEYS[1], "port": 2, "root": PEER_KEYS[0], "root_seq": 7},
                    "routes": 3}
        if cmd == "routes":
            return {"routes": [
                {"key": PEER_KEYS[1], "src_port": 0, "dst_port": 2, "root": PEER_KEYS[0], "root_seq": 7,
                 "wm_key": PEER_KEYS[1], "wm_seq": 3, "age_ms": 1500}]}
        if cmd == "stats":
            return {"rx": {"traffic": 10, "bootstrap": 2}, "tx": {"traffic": 9},
                    "drops": {"no_route": 1}, "verify_done": 5, "verify_skipped": 1,
                    "verify_cached": 3, "evictions": {"routes": 0},
                    "occupancy": {"routes": [3, 32]}, "mem_free": 51234}
        if cmd == "ping":
            if not args:
                raise ValueError("usage: ping KEY [COUNT]")
            count = int(args[1]) if len(args) > 1 else 4
            if args[0] == "00" * 32:
                return {"dst": args[0], "sent": count, "received": 0, "rtts_ms": []}
            rtts = [10.0 + 2.5 * i for i in range(count)]
            return {"dst": args[0], "sent": count, "received": count, "rtts_ms": rtts}
        if cmd == "trace":
            if not args:
                raise ValueError("usage: trace KEY")
            if args[0] == "00" * 32:
                return {"dst": args[0], "ok": False, "hops": [{"key": PEER_KEYS[0], "rtt_ms": 4.0}]}
            return {"dst": args[0], "ok": True, "hops": [
                {"key": PEER_KEYS[0], "rtt_ms": 4.0}, {"key": PEER_KEYS[1], "rtt_ms": 9.5},
                {"key": args[0], "rtt_ms": 15.25}]}
        if cmd == "telemetry":
            if not args:
                raise ValueError("usage: telemetry SECONDS|off")
            if args[0] == "off":
                self._telemetry_period = None
            else:
                self._telemetry_period = float(args[0]) * self.telemetry_scale
                self._next_telemetry = time.monotonic()
            return {"telemetry": args[0]}
        if cmd == "help":
            return {"commands": ["help", "version", "status", "peers", "tree", "snake", "routes",
                                 "stats", "ping", "trace", "telemetry"]}
        raise ValueError("unknown command: " + cmd)

    def _record(self, kind, **fields):
        rec = {"v": 1, "kind": kind, "t": round(time.monotonic() - self._t0, 3), "node": self.key}
        rec.update(fields)
        return rec

    def _maybe_telemetry(self, write):
        if self._telemetry_period is None or time.monotonic() < self._next_telemetry:
            return
        self._next_telemetry = time.monotonic() + self._telemetry_period
        self._seq += 1
        self._emit(write, self._record("state", root=PEER_KEYS[0], root_seq=7, parent=PEER_KEYS[0],
                                       coords=[1, 2], depth=2, desc=PEER_KEYS[1], peers=2, routes=3))
        rec = self._record("counters", rx={"traffic": self._seq}, tx={"traffic": self._seq}, drops={},
                           verify_done=0, verify_skipped=0, verify_cached=0, evictions={},
                           occupancy={}, mem_free=50000)
        del rec["t"]   # one record without `t`: monitor fills in host time
        self._emit(write, rec)


def main():
    import argparse
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="ok")
    p.add_argument("--transport", default="pty", choices=["pty", "socket"])
    p.add_argument("--telemetry-scale", type=float, default=1.0)
    a = p.parse_args()
    node = FakeNode(a.mode, a.transport, telemetry_scale=a.telemetry_scale)
    print(node.start(), flush=True)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        node.stop()


if __name__ == "__main__":
    main()
