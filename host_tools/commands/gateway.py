"""`snakemesh gateway`: this machine's node as the mesh's gateway. The
nodes' telemetry arrives over the mesh (firmware/snake/runtime/telesink.py)
and goes to --out DIR as the JSON-lines records `monitor` writes (rotating
files, nodes.json of who was heard when), and with --mqtt to a broker
(docs/guides/GATEWAY.md has the topics).

    snakemesh gateway --out gw-out --listen 0.0.0.0:7000 --mqtt 127.0.0.1:1883

Without --seed / --key-file the gateway uses DIR/gateway.key, made on the
first run with the gateway prefix (host_tools/keystore.py ROOT_PREFIX):
such a key is the tree's root, and nodes with no `sink` configured send
their telemetry to a root holding one.
"""
import os
import signal
import sys
import threading
import time

from host_tools import keystore
from host_tools.commands.node import _hostport, _check_listen, EventView, print_header, trap_signals
from host_tools.errors import CliError, InputError, UsageError

PROGRESS_S = 5.0


def register(subparsers):
    p = subparsers.add_parser(
        "gateway", help="run this machine's node as the mesh's gateway: telemetry to files and MQTT",
        description="Start a host node (GATEWAY profile) that collects every node's telemetry, sent over "
                    "the mesh, into --out DIR (the records `monitor` writes, so `analyze` reads it), and "
                    "bridges telemetry and datagrams to an MQTT broker with --mqtt.")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--seed", metavar="HEX", help="node seed, 64 hex digits (prefer --key-file)")
    key.add_argument("--key-file", metavar="FILE",
                     help="node key file (default: DIR/gateway.key, made on the first run)")
    p.add_argument("--listen", type=_hostport, metavar="[HOST:]PORT", help="static TCP listener for peers")
    p.add_argument("--connect", type=_hostport, action="append", default=[], metavar="HOST:PORT",
                   help="static peer to dial (repeatable)")
    p.add_argument("--no-multicast", action="store_true", help="no LAN multicast discovery")
    p.add_argument("--ble-medium", metavar="ADDR", help="emulated BLE medium to attach to (HOST:PORT)")
    p.add_argument("--profile", metavar="BOARD|FILE", default="GATEWAY",
                   help="board profile (default %(default)s)")
    p.add_argument("--out", required=True, metavar="DIR", help="capture folder")
    p.add_argument("--mqtt", type=_hostport, metavar="HOST:PORT", help="MQTT broker to bridge to")
    p.add_argument("--console-port", type=int, metavar="N",
                   help="also serve the console on socket://127.0.0.1:N (0 = any free port)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S",
                   help="period of the gateway node's own telemetry records in the capture (default %(default)s s)")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds (default: Ctrl-C)")
    p.add_argument("--heapsize", default="64M", metavar="SIZE",
                   help="MicroPython heap (default %(default)s: the GATEWAY profile's tables need it)")
    p.add_argument("--micropython", metavar="PATH", help="micropython binary (default: the venv's)")
    p.add_argument("-q", "--quiet", action="store_true", help="no peer and progress lines")
    p.set_defaults(func=run)


def _key(args):
    """(seed, key_file) for NodeProcess."""
    if args.seed is not None:
        return keystore.parse_seed_text(args.seed, "--seed"), None
    if args.key_file is not None:
        return None, args.key_file
    path = os.path.join(args.out, "gateway.key")
    if not os.path.exists(path):
        seed, _pub, _n = keystore.draw_seed(True)
        keystore.write_seed(path, seed)
    return None, path


def run(args):
    from host_tools.procmesh.nodeproc import NodeProcess
    from host_tools.procmesh.consoletap import ConsoleTap
    from host_tools.gateway import Capture, Gateway
    if args.console_port is not None and not 0 <= args.console_port <= 65535:
        raise UsageError("--console-port must be within 0..65535")
    try:
        os.makedirs(args.out, exist_ok=True)
        capture = Capture(args.out)
    except OSError as e:
        raise InputError("cannot write %s: %s" % (args.out, e.strerror or e))
    if args.mqtt is not None:
        try:
            import paho.mqtt.client  # noqa: F401
        except ImportError:
            raise CliError("--mqtt needs paho-mqtt (pip install -e . installs it)")
    seed, key_file = _key(args)
    node = NodeProcess(seed=seed, key_file=key_file, listen=args.listen, connect=args.connect,
                       multicast=not args.no_multicast, ble_medium=args.ble_medium, profile=args.profile,
                       heapsize=args.heapsize, micropython=args.micropython, extra_args=["--sink", "off"])
    lock = threading.Lock()

    def say(text):
        with lock:
            sys.stdout.write("%s %s\n" % (time.strftime("%H:%M:%S"), text))
            sys.stdout.flush()

    stopping, restore = trap_signals()
    tap = gw = None
    try:
        node.start()
        _check_listen(node, args.listen)
        view = EventView(quiet=args.quiet)
        gw = Gateway(capture, None, say, mqtt=args.mqtt, own_key=node.pubkey)

        def on_line(line):
            gw.on_line(line)
            view.on_line(line)
        tap = ConsoleTap(node, on_line=on_line, console_port=args.console_port).start()
        gw.request = tap.request
        print_header(node, tap)
        print("capture %s" % os.path.abspath(args.out))
        if not keystore.is_root_key(bytes.fromhex(node.pubkey)):
            print("snakemesh: warning: this gateway's key is not a gateway key (%s...): nodes find it only "
                  "with `sink` set to it" % keystore.ROOT_PREFIX.hex(), file=sys.stderr)
        print("running; Ctrl-C stops the gateway")
        sys.stdout.flush()
        view.start()
        gw.start(args.interval)
        end = None if args.duration is None else time.monotonic() + args.duration
        next_progress = time.monotonic() + PROGRESS_S
        while node.alive():
            if end is not None and time.monotonic() >= end:
                return 0
            if time.monotonic() >= next_progress:
                next_progress += PROGRESS_S
                if not args.quiet:
                    say(gw.progress())
            time.sleep(0.1)
        raise CliError("gateway node exited with code %s" % node.proc.returncode)
    except KeyboardInterrupt:
        if not stopping or stopping[0] == signal.SIGINT:
            print("stopping gateway %s" % node.pubkey[:16], file=sys.stderr)
        return 0
    except RuntimeError as e:
        raise CliError(str(e))
    finally:
        if gw is not None:
            gw.stop()
            c = gw.counts
            print("gateway: %d records from %d node(s) in %s; %d uplink datagram(s); downlink %d (%d delivered, "
                  "%d failed); %d bad telemetry, %d bad downlink%s" % (
                      capture.records, len(capture.nodes), args.out, c["uplink"], c["downlink"],
                      c["downlink_delivered"], c["downlink_failed"], c["bad_telemetry"], c["bad_downlink"],
                      "; mqtt: %d published, %d not published" % (gw.bridge.published,
                                                                   gw.bridge.unpublished_total)
                      if gw.bridge is not None else ""))
            sys.stdout.flush()
        else:
            capture.close()
        if tap is not None:
            tap.stop()
        node.stop()
        restore()
