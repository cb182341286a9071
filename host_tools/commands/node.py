"""`snakemesh node`: run a snakemesh firmware node on this machine (the
MicroPython unix port), e.g. to join a mesh from a laptop.

    snakemesh node --key-file me.key --listen 0.0.0.0:7000
    snakemesh node --seed HEX --connect 10.0.0.5:7000 --no-multicast --console-port 7100

Prints the node's public key and its console (a pseudo-terminal path, and
socket://127.0.0.1:N with --console-port), which `snakemesh status/peers/
ping/trace/monitor --port ...` and any serial terminal can open; then, as
they happen, peers coming up and going down, failed dials and handshakes,
and changes of the tree root and parent (--quiet: none of that). Runs until
Ctrl-C / SIGTERM, then stops the node (no process is left behind).

The node's console is read through a tap (host_tools/procmesh/consoletap.py): the
printed console path is a second pseudo-terminal fed with everything the
node says, so this command and a client never compete for its lines.
Root and parent changes come from a `status` request of the tap's own
every POLL_S seconds (its replies are not passed on to clients).
"""
import os
import re
import signal
import sys
import threading
import time

from host_tools import keystore
from host_tools import names as names_mod
from host_tools.errors import CliError, DeviceError, InputError, UsageError

POLL_S = 1.0


def _hostport(s):
    import argparse
    i = s.rfind(":")
    host, p = (s[:i], s[i + 1:]) if i >= 0 else ("0.0.0.0", s)
    try:
        port = int(p)
    except ValueError:
        raise argparse.ArgumentTypeError("expected HOST:PORT, got %r" % s)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError("port out of range in %r" % s)
    return (host or "0.0.0.0", port)


_ERRNO_WORDS = {"EADDRINUSE": "address already in use (another program or node listens there)",
                "EACCES": "permission denied (ports below 1024 need root)",
                "EADDRNOTAVAIL": "no such address on this machine"}


def _check_listen(node, listen):
    """--listen was asked for but the node could not bind it: that is an
    error of this command (one line, exit 3), not a warning to run on with."""
    if listen is None or "static" in (node.boot.get("listen") or {}):
        return
    why = "the node did not open it"
    for w in node.boot.get("warnings") or []:
        if "cannot listen on" in w:
            why = w.rsplit(": ", 1)[-1]
            for name, words in _ERRNO_WORDS.items():
                if name in why:
                    why = words
    raise DeviceError("cannot listen on %s:%d: %s" % (listen[0], listen[1], why))


def _listen_scope(name, where):
    """What a listener on `where` ("HOST:PORT") is open to, for the line
    that prints it: every interface is said out loud."""
    host, _, port = str(where).rpartition(":")
    if name == "static" and host in ("0.0.0.0", "::", ""):
        return (" (every interface: other machines can connect; --listen 127.0.0.1:%s keeps it to this "
                "machine)" % port)
    return ""


def trap_signals():
    """Make SIGINT and SIGTERM raise KeyboardInterrupt while a host node runs,
    so that either stops it through the same cleanup. Returns (stopping,
    restore): the signals that came, in order, and the call that puts the
    old handlers back."""
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)
        raise KeyboardInterrupt
    old = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        old[s] = signal.signal(s, on_signal)

    def restore():
        for s, h in old.items():
            signal.signal(s, h)
    return stopping, restore


def print_header(node, tap):
    """The lines a host node starts with: its key, its console(s), what it listens on."""
    print("node %s" % node.pubkey)
    print("console %s" % tap.pty_path)
    if tap.console_url:
        print("console %s" % tap.console_url)
    listen = node.boot.get("listen") or {}
    for name in sorted(listen):
        print("listen %s %s%s" % (name, listen[name], _listen_scope(name, listen[name])))


def _check_profile_file(profile):
    """A profile given as a file is checked here, where the parser says
    where it is wrong (MicroPython's only says "syntax error in JSON")."""
    import json
    import os
    if not profile or not os.path.isfile(profile):
        return
    try:
        with open(profile, encoding="utf-8") as f:
            json.load(f)
    except ValueError as e:
        raise InputError("profile %s is not valid JSON: %s" % (profile, e))
    except OSError as e:
        raise InputError("cannot read profile %s: %s" % (profile, e.strerror or e))


def key_policy_warning(profile, pubkey):
    """One line if the node holds a gateway's key (made by `keygen
    --profile GATEWAY` for the provisioning policy "a gateway is the root",
    host_tools/keystore.py) but does not run a root-candidate profile, else
    None. `profile`: a board name or a profile.json; `pubkey`: 64 hex
    digits. (A gateway without such a key is fine: the policy is optional.)"""
    from host_tools.sim import profiles as PR
    try:
        p = PR.load(profile)
    except PR.ProfileSpecError:
        return None                     # the node reports a bad profile itself
    if keystore.is_root_key(bytes.fromhex(pubkey)) and not keystore.is_root_candidate(p):
        return ("this node's key starts with %s (made for a gateway) but it runs %s: it may become "
                "the tree's root" % (keystore.ROOT_PREFIX.hex(), p.name))
    return None


def check_sink(s):
    """--sink's value (a key, auto, off) as the node takes it, or UsageError."""
    s = s.strip().lower()
    if s in ("auto", "off"):
        return s
    if len(s) != 64 or any(ch not in "0123456789abcdef" for ch in s):
        raise UsageError("--sink: expected a gateway's key (64 hex digits), auto or off, got %r" % s[:80])
    return s


def register(subparsers):
    p = subparsers.add_parser(
        "node", help="run a firmware node on the MicroPython unix port (join a mesh from this machine)",
        description="Start the snakemesh firmware on the MicroPython unix port. Prints the node's "
                    "public key and console URL; Ctrl-C stops it.")
    # one of the two is required; run() says so with the way to make a key
    key = p.add_mutually_exclusive_group()
    key.add_argument("--seed", metavar="HEX", help="node seed, 64 hex digits (prefer --key-file)")
    key.add_argument("--key-file", metavar="FILE", help="node key file (from `snakemesh keygen`)")
    p.add_argument("--listen", type=_hostport, metavar="[HOST:]PORT",
                   help="static TCP listener for peers that --connect here; a bare PORT listens on every "
                        "interface (0.0.0.0), as a node that other machines join needs; 127.0.0.1:PORT "
                        "keeps it to this machine")
    p.add_argument("--connect", type=_hostport, action="append", default=[], metavar="HOST:PORT",
                   help="static peer to dial (repeatable)")
    p.add_argument("--no-multicast", action="store_true", help="no LAN multicast discovery")
    p.add_argument("--ble-medium", metavar="ADDR", help="emulated BLE medium to attach to (HOST:PORT)")
    p.add_argument("--ble-name", metavar="NAME",
                   help="this node's name in the BLE medium's topology (default: first 8 hex digits of its key)")
    p.add_argument("--profile", metavar="BOARD|FILE", default="UNIX",
                   help="board profile: a name in boards/ or a profile.json (default %(default)s)")
    p.add_argument("--console-port", type=int, metavar="N",
                   help="also serve the console on socket://127.0.0.1:N (0 = any free port)")
    p.add_argument("--heapsize", metavar="SIZE", help="MicroPython heap size, e.g. 110K (default: the port's)")
    p.add_argument("--mpy", action="store_true", help="run the firmware compiled to .mpy, as on a board")
    p.add_argument("--handshake-timeout", type=float, metavar="S", help="handshake deadline (default 10 s)")
    p.add_argument("--micropython", metavar="PATH", help="micropython binary (default: the venv's)")
    p.add_argument("--app", metavar="FILE.py|MODULE",
                   help="run this application beside the node: its main(mesh, conf) (firmware/examples/, "
                        "docs/guides/DATAGRAMS.md)")
    p.add_argument("--config", metavar="FILE",
                   help="a node config.json (app_config for --app, listen, peers; as on a board)")
    p.add_argument("--sink", metavar="KEY|auto|off",
                   help="where this node's telemetry goes over the mesh: a gateway's key (64 hex digits); "
                        "auto (default): the tree root when it holds a gateway key; off: nowhere")
    p.add_argument("--telemetry", type=float, metavar="S",
                   help="seconds between telemetry sends to the sink (default: the profile's telemetry_s)")
    p.add_argument("--names", metavar="FILE|DIR",
                   help="show peers by name (a mesh/demo/sim output folder, nodes.json, NAME KEY lines)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="do not print peers coming and going, failed dials, root changes")
    p.set_defaults(func=run)


def run(args):
    from host_tools.procmesh.nodeproc import NodeProcess, build_mpy
    seed = None
    if args.seed is None and args.key_file is None:
        raise UsageError("a node needs a key: --key-file FILE (make one with `snakemesh keygen --out FILE`) "
                         "or --seed HEX")
    if args.seed is not None:
        seed = keystore.parse_seed_text(args.seed, "--seed")
    if args.console_port is not None and not 0 <= args.console_port <= 65535:
        raise UsageError("--console-port must be within 0..65535")
    names = names_mod.from_args(args.names)
    _check_profile_file(args.profile)
    mpy_dir = None
    tmp = None
    if args.mpy:
        import tempfile
        tmp = tempfile.TemporaryDirectory(prefix="snakemesh-mpy-")
        mpy_dir = build_mpy(tmp.name)
    extra = []
    if args.app:
        app = args.app
        if app.endswith(".py"):
            if not os.path.isfile(app):
                raise InputError("no such app file: %s" % app)
            app = os.path.abspath(app)
        extra += ["--app", app]
    if args.sink is not None:
        extra += ["--sink", check_sink(args.sink)]
    if args.telemetry is not None:
        if not 0 <= args.telemetry <= 86400:
            raise UsageError("--telemetry must be within 0..86400 seconds (0: none)")
        extra += ["--telemetry", "%g" % args.telemetry]
    if args.config:
        if not os.path.isfile(args.config):
            raise InputError("no such config file: %s" % args.config)
        extra += ["--config", os.path.abspath(args.config)]
    node = NodeProcess(seed=seed, key_file=args.key_file, listen=args.listen, connect=args.connect, extra_args=extra,
                       multicast=not args.no_multicast, ble_medium=args.ble_medium,
                       ble_name=args.ble_name, profile=args.profile,
                       heapsize=args.heapsize, mpy_dir=mpy_dir,
                       handshake_timeout=args.handshake_timeout, micropython=args.micropython)
    stopping, restore = trap_signals()
    tap = None
    try:
        node.start()
        _check_listen(node, args.listen)
        from host_tools.procmesh.consoletap import ConsoleTap
        view = EventView(names, quiet=args.quiet)
        tap = ConsoleTap(node, on_line=view.on_line, console_port=args.console_port).start()
        print_header(node, tap)
        warnings = list(node.boot.get("warnings") or [])
        w = key_policy_warning(args.profile, node.pubkey)
        if w:
            warnings.append(w)
        for w in warnings:
            print("snakemesh: warning: %s" % w, file=sys.stderr)
        print("running; Ctrl-C stops the node")
        sys.stdout.flush()
        view.start()              # what the node said meanwhile comes after the header
        next_poll = 0.0
        while node.alive():
            if time.monotonic() >= next_poll:
                st = tap.request("status", timeout=POLL_S * 2)
                next_poll = time.monotonic() + POLL_S
                if st is not None and st.get("ok"):
                    view.tree(st)
            time.sleep(0.1)
        rc = node.proc.returncode
        raise CliError("node exited with code %s" % rc)
    except KeyboardInterrupt:
        if not stopping or stopping[0] == signal.SIGINT:
            print("stopping node %s" % node.pubkey[:16], file=sys.stderr)
        return 0
    finally:
        if tap is not None:
            tap.stop()
        node.stop()
        restore()
        if tmp is not None:
            tmp.cleanup()


_PEER_UP = re.compile(r"peer up: port (\d+) ([0-9a-f]+) via (.*)$")
_PEER_DOWN = re.compile(r"peer down: port (\d+) \((.*)\)$")
_ERRNO = re.compile(r"E[A-Z]+ \(errno \d+\)")
_LOG_WORDS = {"ECONNREFUSED": "connection refused", "ETIMEDOUT": "timed out",
                "EHOSTUNREACH": "no route to host", "ENETUNREACH": "network unreachable",
                "ECONNRESET": "connection reset"}


class EventView(object):
    """What the node's terminal shows while it runs: one timestamped line per
    peer up/down, failed dial or handshake, other log line of the node, and
    per change of the tree root or parent."""

    def __init__(self, names=names_mod.EMPTY, quiet=False, out=None):
        self.names = names
        self.quiet = quiet
        self.out = out or sys.stdout
        self.lock = threading.Lock()
        self.port_key = {}         # port -> key prefix (from peer up)
        self.root = None           # (root, root_seq, parent)
        self.held = []             # lines before start()

    def start(self):
        with self.lock:
            held, self.held = self.held, None
            for line in held:
                self.out.write(line)
            self.out.flush()

    def say(self, text):
        if self.quiet:
            return
        line = "%s %s\n" % (time.strftime("%H:%M:%S"), text)
        with self.lock:
            if self.held is not None:
                self.held.append(line)
                return
            self.out.write(line)
            self.out.flush()

    def label(self, key_or_prefix):
        k = key_or_prefix or ""
        for full, name in self.names.by_key.items():
            if full.startswith(k):
                return "%s (%s)" % (k[:16], name)
        return k[:16]

    def on_line(self, line):
        """A line from the node's console (bytes, no line end)."""
        if line.startswith(b"@sm "):
            return                 # replies and records are for the clients
        text = line.decode("utf-8", "replace").strip()
        if not text:
            return
        if text.startswith("snakemesh: "):
            text = text[len("snakemesh: "):]
        m = _PEER_UP.match(text)
        if m:
            port, key, via = m.groups()
            self.port_key[port] = key
            self.say("peer up    %s  port %s via %s" % (self.label(key), port, via))
            return
        m = _PEER_DOWN.match(text)
        if m:
            port, why = m.groups()
            self.say("peer down  %s  port %s (%s)" % (self.label(self.port_key.pop(port, "?")), port, why))
            return
        text = _ERRNO.sub(lambda m: _LOG_WORDS.get(m.group(0).split()[0], m.group(0)), text)
        self.say(text)

    def tree(self, st):
        """A status reply: say so when the root or the parent changed."""
        now = (st.get("root"), st.get("root_seq"), st.get("parent"))
        old = self.root
        if now == old:
            return
        self.root = now
        root, seq, parent = now
        me = st.get("key")
        where = ("this node is the root" if root == me else
                 "parent %s, depth %s" % (self.label(parent), st.get("depth")))
        if old is None:
            self.say("root       %s seq %s; %s" % (self.label(root), seq, where))
        elif old[0] != root:
            self.say("root changed  %s seq %s (was %s); %s" % (self.label(root), seq, self.label(old[0]), where))
        elif old[2] != parent:
            self.say("parent changed  %s" % where)
