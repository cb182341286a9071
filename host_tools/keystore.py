"""Node identity keys on the host.

A node key is a 32-byte ed25519 seed. On disk it is either the raw 32 bytes
(what `snakemesh keygen` writes, mode 0600) or 64 hex digits (whitespace
around them allowed). The seed is never printed; only the public key is.
Public keys on the command line are 64 hex digits.

Provisioning policy "a gateway is the root" (docs/reports/CAPACITY.md): the tree's
root is the node with the highest public key, and SNEK paths concentrate
near the root, so the root should be a node with hub-sized tables. Nodes
that run a root-candidate profile (ROOT_CANDIDATE_PROFILES: GATEWAY) get a
key drawn until it starts with ROOT_PREFIX (0xffff); every other key is
drawn again while it does. Any root-candidate key then sorts above any
board key made by these tools; a board key made elsewhere beats it with
probability 1 / 65,536. The routing rules and the wire format are the
seeds': only who holds the highest key changes.
"""
import binascii
import os
import stat
import sys
import tempfile

from host_tools.errors import InputError

SEED_LEN = 32


class KeyFormatError(InputError):
    pass


def public_key(seed):
    """ed25519 public key (32 bytes) of a 32-byte seed.

    Uses the firmware's snake.crypto.public_key (the code the node runs);
    PyNaCl only while that module is missing from the checkout."""
    if len(seed) != SEED_LEN:
        raise KeyFormatError("a seed must be %d bytes, not %d" % (SEED_LEN, len(seed)))
    try:
        from snake.crypto import public_key as fw_public_key
    except ImportError:
        fw_public_key = None
    if fw_public_key is not None:
        return bytes(fw_public_key(bytes(seed)))
    from nacl.signing import SigningKey
    return bytes(SigningKey(bytes(seed)).verify_key)


def new_seed():
    return os.urandom(SEED_LEN)


# Profiles (by their "name") whose nodes get root keys. Host-side on purpose:
# the firmware never needs it (a node does not make its own key, and its
# profile loader rejects keys it does not know).
ROOT_CANDIDATE_PROFILES = ("GATEWAY",)
# A root candidate's public key starts with these bytes; no other key made
# here does. Two bytes: ~65,536 draws (~2 s with PyNaCl; docs/reports/CAPACITY.md).
ROOT_PREFIX = b"\xff\xff"


def is_root_candidate(profile):
    """True if nodes running `profile` (a snake.profile.Profile, a board
    name or None = UNIX) get root keys."""
    if profile is None:
        return False
    name = profile if isinstance(profile, str) else getattr(profile, "name", None)
    return name in ROOT_CANDIDATE_PROFILES


def is_root_key(pub, prefix=ROOT_PREFIX):
    """True if public key `pub` (bytes) carries the root-candidate prefix."""
    return bytes(pub[:len(prefix)]) == prefix


def draw_seed(root, next_seed=new_seed, prefix=ROOT_PREFIX):
    """(seed, public key, draws): seeds from next_seed() until the public
    key starts with `prefix` (root=True) or does not (root=False).

    A root key takes 256 ** len(prefix) draws on average (geometric)."""
    n = 0
    while True:
        seed = next_seed()
        n += 1
        pub = public_key(seed)
        if is_root_key(pub, prefix) == bool(root):
            return seed, pub, n


def _first_non_hex(text):
    for i, c in enumerate(text):
        if c not in "0123456789abcdefABCDEF":
            return i
    return None


def parse_seed(data, source="key"):
    """Decode a seed from raw bytes or hex text (a key file's content);
    KeyFormatError otherwise.

    The error message never contains the data itself."""
    if len(data) == SEED_LEN:
        return bytes(data)
    text = data.strip()
    if len(text) == 2 * SEED_LEN:
        try:
            return binascii.unhexlify(text)
        except (binascii.Error, ValueError):
            bad = _first_non_hex(text.decode("latin-1"))
            raise KeyFormatError("unknown key format in %s: 64 characters of text, but character %d "
                                 "is not a hex digit (expected 64 hex digits or a 32-byte raw seed)"
                                 % (source, (bad or 0) + 1))
    raise KeyFormatError("unknown key format in %s: expected a 32-byte raw seed or 64 hex digits "
                         "(got %d bytes)" % (source, len(data)))


def parse_seed_text(text, source="--seed"):
    """A seed typed on the command line: exactly 64 hex digits (a 32-byte
    seed). Text is counted in characters; the message never shows the seed."""
    t = text.strip()
    if len(t) != 2 * SEED_LEN:
        raise KeyFormatError("%s must be 64 hex digits (a 32-byte seed), got %d character%s"
                             % (source, len(t), "" if len(t) == 1 else "s"))
    bad = _first_non_hex(t)
    if bad is not None:
        raise KeyFormatError("%s must be 64 hex digits (a 32-byte seed): character %d is not a hex "
                             "digit" % (source, bad + 1))
    return binascii.unhexlify(t)


def load_seed(path, warn=True):
    """Read a seed file (raw or hex). Warns on stderr if others can read it."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise InputError("key file %s is a directory" % path)
        with open(path, "rb") as f:
            data = f.read(4096)
    except InputError:
        raise
    except OSError as e:
        raise InputError("cannot read key file %s: %s" % (path, e.strerror or e))
    seed = parse_seed(data, path)
    if warn and os.name == "posix" and st.st_mode & 0o077:
        print("snakemesh: warning: key file %s is readable by other users (chmod 600 %s)" % (path, path),
              file=sys.stderr)
    return seed


def check_target(path, force=False):
    """InputError if write_seed(path, ..., force) would refuse `path` (a
    folder, or an existing file without force)."""
    if os.path.isdir(path):
        raise InputError("%s is a directory; give a file name for the key" % path)
    if os.path.lexists(path) and not force:
        raise InputError("%s already exists; use --force to replace it (the old key is lost)" % path)


def write_seed(path, seed, force=False):
    """Write the raw seed to `path` with mode 0600 (never wider, even for a
    moment). Refuses to replace an existing file unless force."""
    if len(seed) != SEED_LEN:
        raise KeyFormatError("a seed must be %d bytes" % SEED_LEN)
    check_target(path, force)
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".snakemesh-key-", dir=d)   # created 0600
    except OSError as e:
        raise InputError("cannot write key file %s: %s" % (path, e.strerror or e))
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(seed)
        if force:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)        # fails if `path` appeared meanwhile
            except FileExistsError:
                os.unlink(tmp)
                raise InputError("%s already exists; use --force to replace it" % path)
            except OSError:
                os.replace(tmp, path)     # filesystem without hard links
            else:
                os.unlink(tmp)
    except InputError:
        raise
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError("cannot write key file %s: %s" % (path, e.strerror or e))


def parse_public_key(text):
    """A public key given on the command line: 64 hex digits -> hex string."""
    t = text.strip().lower()
    if len(t) == 2 * SEED_LEN:
        try:
            binascii.unhexlify(t)
            return t
        except (binascii.Error, ValueError):
            pass
    raise KeyFormatError("unknown key format: %r (expected a public key of 64 hex digits)"
                         % (text if len(text) <= 80 else text[:77] + "..."))


def to_hex(b):
    return binascii.hexlify(b).decode("ascii")
