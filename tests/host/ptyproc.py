"""Drive a command as a user at a terminal does (tests only): the command
runs on the slave side of a pseudo-terminal (so isatty() is true, readline
and prompts are on), the test types into the master side and waits for
text to appear, like pexpect."""
import os
import re
import select
import signal
import subprocess
import sys
import time

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\r")


class PtyProc(object):
    def __init__(self, argv, env=None, cwd=None, cols=120, rows=40):
        import fcntl
        import struct
        import termios
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        e = dict(os.environ if env is None else env)
        e.setdefault("TERM", "xterm")
        e["COLUMNS"], e["LINES"] = str(cols), str(rows)

        def setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)     # the pty is its controlling terminal (Ctrl-C)

        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=e, cwd=cwd,
                                     preexec_fn=setup, close_fds=True)
        os.close(slave)
        self.raw = bytearray()      # everything the command wrote
        self.pos = 0                # how far expect() has consumed (in the cleaned text)

    def _pump(self, wait):
        r, _, _ = select.select([self.master], [], [], wait)
        if not r:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:         # EIO: the command exited and closed the terminal
            return None
        if not data:
            return None
        self.raw += data
        return True

    @property
    def text(self):
        # "\r ESC[K" (back to the line start, clear it) starts the line anew
        raw = bytes(self.raw).replace(b"\r\x1b[K", b"\n")
        return ANSI.sub(b"", raw).decode("utf-8", "replace")

    def expect(self, pattern, timeout=20):
        """Wait until `pattern` (regex) appears after the last match; the
        match (searched in the text after the last match: \\A anchors there)."""
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        while True:
            m = rx.search(self.text[self.pos:])
            if m:
                self.pos += m.end()
                return m
            left = end - time.monotonic()
            got = self._pump(min(left, 0.2)) if left > 0 else False
            if left <= 0 or (got is None and self.proc.poll() is not None
                             and not rx.search(self.text[self.pos:])):
                raise AssertionError("%r not seen within %g s; output so far:\n%s"
                                     % (pattern, timeout, self.text[-3000:]))

    def send(self, data):
        os.write(self.master, data.encode() if isinstance(data, str) else data)

    def sendline(self, line):
        self.send(line + "\r")

    def interrupt(self):
        self.send(b"\x03")

    def wait(self, timeout=20):
        end = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < end:
            self._pump(0.1)
        while self._pump(0.05):
            pass
        return self.proc.wait(max(0.1, end - time.monotonic()))

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        try:
            os.close(self.master)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def snakemesh(*args, **kw):
    return PtyProc([sys.executable, "-m", "host_tools.cli"] + list(args), **kw)
