"""Deterministic node keys: ed25519 seed = sha256(seed_str + ":" + name).

The same seed and name always give the same key, so a run (and its
telemetry) is reproducible and a node keeps its key across restarts.

With the provisioning policy "a gateway is the root" (host_tools.keystore,
docs/reports/CAPACITY.md) in force (`snakemesh sim/mesh --gateway-root`, which
needs a root-candidate profile, GATEWAY, in the mesh), a node's key is drawn
as `snakemesh keygen` draws it, deterministically: the seeds of
sha256(seed_str + ":" + name + "\\n" + i) for i = 1, 2, ... are tried until
the public key starts with SIM_ROOT_PREFIX (root candidates) or does not
(every other node). Names hold no newline, so no redraw is another node's
seed. One byte instead of keygen's two: the order it gives is the same
(every root candidate above every other node, exactly), at 256 draws per
gateway instead of 65,536 (a 1,000-node mesh has ~330 gateways). Without
it, every node keeps the plain key.
"""
import binascii
import hashlib

SIM_ROOT_PREFIX = b"\xff"


def node_seed(seed, name):
    """32-byte ed25519 seed of node `name` in a run with seed `seed`."""
    return hashlib.sha256((str(seed) + ":" + name).encode("utf-8")).digest()


def policy_seed(seed, name, root=None):
    """The node's seed under the root policy: root None = policy not in force
    (node_seed), True = a root candidate's key, False = any other node's."""
    if root is None:
        return node_seed(seed, name)
    from host_tools import keystore
    draws = [0]

    def nxt():
        i = draws[0]
        draws[0] += 1
        return node_seed(seed, name if i == 0 else "%s\n%d" % (name, i))
    return keystore.draw_seed(root, nxt, SIM_ROOT_PREFIX)[0]


def policy_in_force(profiles):
    """True if any of `profiles` (Profile objects, names or None) is a root
    candidate: then every node's key follows the policy."""
    from host_tools import keystore
    return any(keystore.is_root_candidate(p) for p in profiles)


def make_signer(seed, name, root=None):
    """snake.crypto.Signer for the node (imported lazily: the firmware
    package is put on sys.path by host_tools); `root` as policy_seed."""
    from snake.crypto import Signer
    return Signer(policy_seed(seed, name, root))


def hexkey(key):
    return binascii.hexlify(key).decode() if key is not None else None
