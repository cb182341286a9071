"""`snakemesh keygen` and `snakemesh provision`: node identity keys.

    snakemesh keygen --out node1.key            # 32-byte seed, mode 0600
    snakemesh keygen --out gw.key --profile GATEWAY   # a gateway: the root
    snakemesh provision --port P                # generate the key on the board
    snakemesh provision --port P --key-file node1.key [--force]

A node's key is an ed25519 seed stored on the board as /key.bin (32 raw
bytes). Only the public key is ever printed. A key generated on the board
(os.urandom) never leaves it; a host key is copied from a 0600 temp file
(never passed on a command line). An existing /key.bin is only replaced
with --force, since that changes the node's identity.

Provisioning policy "a gateway is the root" (host_tools/keystore.py,
docs/reports/CAPACITY.md): `keygen --profile GATEWAY` (a root-candidate profile)
draws until the public key starts with 0xffff, so that the gateway is the
tree's root; every other key made here (keygen without it, provision on
the board) is drawn again in the rare case it starts with 0xffff.
`provision` refuses to put a root key on a board unless --allow-root-key.
"""
import os
import sys
import tempfile
import time

from host_tools import boards, keystore
from host_tools.commands.deploy import DEFAULT_TOOL_TIMEOUT, Mpremote, parse_marker
from host_tools.errors import CliError, DeviceError, InputError

DEVICE_KEY = "/key.bin"


class KeyExistsError(CliError):
    exit_code = 1


def register(subparsers):
    g = subparsers.add_parser(
        "keygen", help="make a node key (ed25519 seed) on the host; prints the public key",
        description="Write a new 32-byte ed25519 seed to FILE (mode 0600) and print its public key.")
    g.add_argument("--out", required=True, metavar="FILE", help="where to write the private key")
    g.add_argument("--force", action="store_true", help="replace FILE if it exists")
    g.add_argument("--profile", metavar="BOARD|FILE",
                   help="the profile the node will run; a root candidate (%s) gets a key that sorts "
                        "above every board's (its public key starts with ffff: ~65,000 draws, a few "
                        "seconds), so it is the tree's root" % ", ".join(keystore.ROOT_CANDIDATE_PROFILES))
    boards.add_verbose(g)
    g.set_defaults(func=run_keygen)

    p = subparsers.add_parser(
        "provision", help="store a node key on a board (/key.bin); prints the public key",
        description="Give a board its identity: generate the key on the board (default) or copy "
                    "one made with `snakemesh keygen`. Refuses to replace an existing key without --force.")
    p.add_argument("--port", required=True, help="serial port (device path or pyserial URL)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--key-file", metavar="FILE", help="copy this seed (raw 32 bytes or 64 hex digits)")
    src.add_argument("--on-device", action="store_true",
                     help="generate the key on the board with os.urandom (default; needs the firmware deployed)")
    p.add_argument("--force", action="store_true", help="replace the board's existing key")
    p.add_argument("--allow-root-key", action="store_true",
                   help="accept a --key-file whose key was made for a gateway (starts with ffff): "
                        "the board would become the tree's root")
    p.add_argument("--no-reset", action="store_true",
                   help="do not reset the board afterwards (mpremote stops the running firmware)")
    p.add_argument("--sink", metavar="KEY|auto|off",
                   help="also set the board's telemetry sink in /config.json: a gateway's key "
                        "(docs/guides/GATEWAY.md)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TOOL_TIMEOUT,
                   help="seconds each mpremote step may take (default %(default)s)")
    boards.add_verbose(p)
    p.set_defaults(func=run_provision)


# Board-side scripts (stock MicroPython + the deployed firmware). `root` is
# "" on a board; the tests run them under the unix port in a temp dir.

def script_key_exists(root=""):
    return ("import os\nR=%r\n"
            "try:\n os.stat(R+%r)\n print('SMKEY 1')\nexcept OSError:\n print('SMKEY 0')\n"
            % (root, DEVICE_KEY))


def script_generate(force, root=""):
    return ("import os, binascii\nR=%r\nF=%r\nK=R+%r\n"
            "try:\n from snake.crypto import public_key\nexcept ImportError:\n public_key=None\n"
            "try:\n os.stat(K)\n e=1\nexcept OSError:\n e=0\n"
            "if public_key is None:\n print('SMKEY nofw')\n"
            "elif e and not F:\n print('SMKEY exists')\n"
            "else:\n"
            " while 1:\n"
            "  s=os.urandom(32)\n  p=public_key(s)\n"
            "  if p[0]!=255 or p[1]!=255:\n   break\n"
            " f=open(K+'.tmp','wb')\n f.write(s)\n f.close()\n s=None\n"
            " if e:\n  os.remove(K)\n"
            " os.rename(K+'.tmp',K)\n"
            " print('SMPUB', binascii.hexlify(p).decode())\n"
            % (root, bool(force), DEVICE_KEY))


def script_check(root=""):
    """Size of /key.bin and, if the firmware is there, its public key."""
    return ("import os, binascii\nR=%r\nK=R+%r\n"
            "print('SMSIZE', os.stat(K)[6])\n"
            "try:\n from snake.crypto import public_key\nexcept ImportError:\n public_key=None\n"
            "if public_key is None:\n print('SMPUB -')\n"
            "else:\n f=open(K,'rb')\n p=public_key(f.read())\n f.close()\n"
            " print('SMPUB', binascii.hexlify(p).decode())\n"
            % (root, DEVICE_KEY))


def script_sink(sink, root=""):
    """Set "sink" in the board's /config.json (kept otherwise; made when absent)."""
    return ("import json\nP=%r+'/config.json'\n"
            "try:\n f=open(P)\n c=json.load(f)\n f.close()\nexcept (OSError, ValueError):\n c={}\n"
            "c['sink']=%r\nf=open(P,'w')\njson.dump(c,f)\nf.close()\nprint('SMSINK', c['sink'])\n"
            % (root, sink))


def run_keygen(args):
    root = False
    if args.profile is not None:
        from host_tools.sim import profiles as PR
        try:
            root = keystore.is_root_candidate(PR.load(args.profile))
        except PR.ProfileSpecError as e:
            raise InputError("--profile: %s" % e)
    keystore.check_target(args.out, args.force)        # before drawing for seconds
    t0 = time.monotonic()
    seed, pub, draws = keystore.draw_seed(root)
    if root:
        print("snakemesh: root key for a %s node: %d draws in %.1f s" % (
            args.profile, draws, time.monotonic() - t0), file=sys.stderr)
    keystore.write_seed(args.out, seed, force=args.force)
    print(keystore.to_hex(pub))
    return 0


def _refuse(port):
    return KeyExistsError("the board on %s already has a key (%s); use --force to replace it "
                          "(the node gets a new identity)" % (port, DEVICE_KEY))


def _device_key_exists(mp):
    out = parse_marker(mp.exec_(script_key_exists(), "checking for an existing key").stdout, "SMKEY")
    if out not in ("0", "1"):
        raise DeviceError("unexpected answer from the board on %s while checking for a key" % mp.port)
    return out == "1"


def run_provision(args):
    seed = None
    pub = None
    sink_step = []
    if getattr(args, "sink", None) is not None:
        from host_tools.commands.node import check_sink
        sink_step = [["exec", script_sink(check_sink(args.sink))]]
    if args.key_file:
        seed = keystore.load_seed(args.key_file)
        pubkey = keystore.public_key(seed)
        pub = keystore.to_hex(pubkey)
        if keystore.is_root_key(pubkey) and not args.allow_root_key:
            raise InputError("%s holds a gateway's key (public key %s...: it sorts above every board's, "
                             "so this board would become the tree's root); give the board a key from "
                             "`snakemesh keygen --out FILE`, or --allow-root-key" % (args.key_file, pub[:8]))
    boards.precheck_port(args.port)
    mp = Mpremote(args.port, timeout=args.timeout)
    # mpremote interrupts the running firmware: reset the board at the end
    # (in the same mpremote session) so the node starts again, with its key.
    reset = [] if args.no_reset else [["reset"]]
    if seed is None:
        result = mp.run([["exec", script_generate(args.force)]] + sink_step + reset,
                        "generating a key on the board")
        status = parse_marker(result.stdout, "SMKEY")
        if status == "exists":
            raise _refuse(args.port)
        if status == "nofw":
            raise DeviceError("the snakemesh firmware is not on the board on %s (no snake.crypto): deploy it "
                              "or flash the custom image first (%s), or use --key-file"
                              % (args.port, boards.FIRST_BOARD_GUIDE))
        pub = parse_marker(result.stdout, "SMPUB")
        if not pub or len(pub) != 64:
            raise DeviceError("the board on %s did not report a public key" % args.port)
        print(pub)
        return 0

    if not args.force and _device_key_exists(mp):
        if reset:
            mp.run(reset, "resetting the board", check=False)
        raise _refuse(args.port)
    fd, tmp = tempfile.mkstemp(prefix="snakemesh-key-")     # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(seed)
        result = mp.run([["fs", "cp", "-f", tmp, ":" + DEVICE_KEY], ["exec", script_check()]] + sink_step + reset,
                        "storing the key")
    finally:
        os.unlink(tmp)
    size = parse_marker(result.stdout, "SMSIZE")
    if size != str(keystore.SEED_LEN):
        raise DeviceError("key check failed on %s: %s has %s bytes, expected %d"
                          % (args.port, DEVICE_KEY, size, keystore.SEED_LEN))
    dev_pub = parse_marker(result.stdout, "SMPUB")
    if dev_pub not in (None, "-") and dev_pub != pub:
        raise DeviceError("key check failed on %s: the board derives public key %s, the host %s"
                          % (args.port, dev_pub, pub))
    print(pub)
    return 0
