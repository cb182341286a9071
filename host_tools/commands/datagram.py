"""`snakemesh send` and `snakemesh recv`: application datagrams through a
node's console (host_tools/meshclient.py; docs/guides/DATAGRAMS.md).

send: exit 0 when the datagram was delivered (--ack) or sent (without);
one line on stderr and exit 4 when it failed, with the reason.
recv: one line per datagram, `SRC SERVICE LEN TEXT|hex:HEX` (SRC: the
node name from --names, or the key's first 16 hex digits); --json: one
object per line with src, service, len, data_hex and text (when the data is
UTF-8). With --count, exit 0 once that many arrived, 4 when --timeout
passed first.
"""
import binascii
import json
import sys

from host_tools import boards
from host_tools import names as names_mod
from host_tools.errors import InputError, TimeoutError_, UsageError
from host_tools.meshclient import MeshClient, SendFailed, parse_service

KEY_HELP = ("destination: a public key (64 hex digits), a unique prefix of at least %d hex digits, "
            "or a node name from --names" % names_mod.MIN_PREFIX)


def _common(p):
    p.add_argument("--port", required=True, help="the node's console: device path or socket://host:port")
    p.add_argument("--service", default="0", metavar="N", help="service number 0..65535 (default 0)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--names", metavar="FILE|DIR", help="node names (as for ping; default $%s)" % names_mod.ENV)
    boards.add_verbose(p)


def register(sub):
    p = sub.add_parser("send", help="send a datagram to a key through a node (end-to-end ack with --ack)",
                       description="Send TEXT (or --file F) to KEY's SERVICE through the node on --port. "
                                   "Exit 0: delivered (--ack) or sent; exit 4 with the reason: failed.")
    p.add_argument("key", metavar="KEY", help=KEY_HELP)
    p.add_argument("text", metavar="TEXT", nargs="?", help="the data as text (UTF-8)")
    p.add_argument("--file", metavar="F", help="send this file's bytes")
    p.add_argument("--ack", action="store_true", help="ask for an end-to-end ack: wait for delivered/failed")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds to wait for the outcome (default 30 with --ack, else 5)")
    _common(p)
    p.set_defaults(func=run_send)

    p = sub.add_parser("recv", help="print datagrams arriving at a node",
                       description="Print the datagrams arriving at the node on --port (to --service N, "
                                   "or any service), one line each, until --count arrived or --timeout "
                                   "passed (default: until Ctrl-C).")
    p.add_argument("--service", default=None, metavar="N", help="only this service (0..65535)")
    p.add_argument("--count", type=int, default=None, metavar="N", help="stop after N datagrams")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="stop after S seconds")
    p.add_argument("--port", required=True, help="the node's console: device path or socket://host:port")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--names", metavar="FILE|DIR", help="node names (default $%s)" % names_mod.ENV)
    boards.add_verbose(p)
    p.set_defaults(func=run_recv)


def _data(args):
    if args.file is not None and args.text is not None:
        raise UsageError("send: give TEXT or --file, not both")
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                return f.read()
        except OSError as e:
            raise InputError("cannot read %s: %s" % (args.file, e.strerror or e))
    return (args.text or "").encode("utf-8")


def run_send(args):
    svc = parse_service(args.service)
    names = names_mod.from_args(args.names)
    names_mod.classify(args.key, names)      # a malformed KEY fails before the port is opened
    data = _data(args)
    if len(data) > 0xFFFF:
        raise InputError("too_big: %d bytes (a datagram holds at most 65535, and the node's profile "
                         "dgram_max less)" % len(data), exit_code=4)
    with MeshClient(args.port, timeout=5.0, names=names) as mc:
        r = mc.send_result(args.key, data, svc, args.ack, args.timeout)
    if args.json:
        print(json.dumps(dict(r._asdict()), sort_keys=True))
    elif r.state != "failed":
        n = names.name(r.dst)
        print("%s to %s service %d: %d bytes%s" % (
            r.state, n or r.dst[:16], svc, r.len, (", %d ms" % r.rtt_ms) if r.state == "delivered" else ""))
    if r.state == "failed":
        raise SendFailed("send to %s failed: %s" % (names.name(r.dst) or r.dst[:16], r.reason), r.reason, r)
    return 0


def format_line(d, names):
    """One datagram as recv prints it: SRC SERVICE LEN TEXT|hex:HEX."""
    src = names.name(d.src) or (d.src or "?")[:16]
    text = _text(d.data)
    shown = json.dumps(text) if text is not None else "hex:" + binascii.hexlify(d.data).decode()
    return "%s %d %d %s" % (src, d.service, len(d.data), shown)


def format_json(d):
    o = {"src": d.src, "service": d.service, "len": len(d.data),
         "data_hex": binascii.hexlify(d.data).decode()}
    text = _text(d.data)
    if text is not None:
        o["text"] = text
    return json.dumps(o, sort_keys=True)


def _text(b):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def run_recv(args):
    svc = None if args.service is None else parse_service(args.service)
    if args.count is not None and args.count < 1:
        raise UsageError("recv: --count must be at least 1")
    names = names_mod.from_args(args.names)
    got = 0
    with MeshClient(args.port, timeout=5.0, names=names) as mc:
        for d in mc.recv(svc, args.count, args.timeout):
            print(format_json(d) if args.json else format_line(d, names))
            sys.stdout.flush()
            got += 1
    if args.count is not None and got < args.count:
        raise TimeoutError_("recv: %d of %d datagrams within %g s" % (got, args.count, args.timeout or 0))
    return 0
