"""Helpers for tests that use the emulated BLE medium (CPython only).

Medium(topology_text, *args) starts `python -m host_tools.blemu.medium` on a
free port and stops it on exit (also when the test fails); `.ctl(cmd)` sends
a control command; `.addr` is "127.0.0.1:PORT". LineReader follows a child
process's stdout from a thread so tests can wait for lines with a deadline.
"""
import json
import os
import queue
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLEMU = os.path.join(ROOT, "host_tools", "blemu")
PY = sys.executable
MICROPYTHON = os.path.join(os.path.dirname(sys.executable), "micropython")

CTL = 32
CTL_REPLY = 0xA0


class Medium:
    """module: the medium to run (the BLE one; host_tools.espnowemu.medium
    for ESP-NOW, which speaks the same control framing)."""

    def __init__(self, topology, *args, module="host_tools.blemu.medium"):
        self.module = module
        self.dir = tempfile.TemporaryDirectory()
        self.topo = os.path.join(self.dir.name, "topology.txt")
        with open(self.topo, "w") as f:
            f.write(topology)
        self.args = [str(a) for a in args]
        self.proc = None
        self.addr = None
        self.port = None

    def __enter__(self):
        self.proc = subprocess.Popen(
            [PY, "-m", self.module, "--topology", self.topo, "--port", "0"] + self.args,
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.__exit__(None, None, None)
            raise RuntimeError("medium did not start: %r %s" % (line, err))
        hp = line.strip().rsplit(" ", 1)[1]
        self.addr = hp
        self.port = int(hp.rsplit(":", 1)[1])
        return self

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None:
            for s in (self.proc.stdout, self.proc.stderr):
                try:
                    s.close()
                except Exception:
                    pass
        self.dir.cleanup()
        return False

    def ctl(self, cmd):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        try:
            body = cmd.encode()
            s.sendall(struct.pack(">HB", len(body) + 1, CTL) + body)
            buf = b""
            while True:
                d = s.recv(65536)
                if not d:
                    raise RuntimeError("medium closed the control connection")
                buf += d
                if len(buf) >= 3:
                    n = (buf[0] << 8) | buf[1]
                    if len(buf) >= 2 + n:
                        assert buf[2] == CTL_REPLY
                        return json.loads(buf[3:2 + n].decode())
        finally:
            s.close()

    def stats(self):
        return self.ctl("stats")


class LineReader:
    """Collects a process's stdout lines in a thread; wait() with a deadline."""

    def __init__(self, proc):
        self.proc = proc
        self.q = queue.Queue()
        self.lines = []
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        for line in self.proc.stdout:
            self.q.put(line.rstrip("\n"))
        self.q.put(None)

    def wait(self, pred, timeout):
        """First new line (or already seen event) satisfying pred; None on timeout/EOF."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                self.q.put(None)
                return None
            self.lines.append(line)
            if pred(line):
                return line

    def drain(self, timeout):
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            try:
                line = self.q.get(timeout=left)
            except queue.Empty:
                return
            if line is None:
                self.q.put(None)
                return
            self.lines.append(line)

    def events(self):
        out = []
        for line in self.lines:
            if line.startswith("@ble "):
                out.append(json.loads(line[5:]))
        return out


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
