"""Deterministic node keys: ed25519 seed = sha256(seed_str + ":" + name).

The same seed and name always give the same key, so a run (and its
telemetry) is reproducible and a node keeps its key across restarts.
"""
import binascii
import hashlib


def node_seed(seed, name):
    """32-byte ed25519 seed of node `name` in a run with seed `seed`."""
    return hashlib.sha256((str(seed) + ":" + name).encode("utf-8")).digest()


def make_signer(seed, name):
    """snake.crypto.Signer for the node (imported lazily: the firmware
    package is put on sys.path by host_tools)."""
    from snake.crypto import Signer
    return Signer(node_seed(seed, name))


def hexkey(key):
    return binascii.hexlify(key).decode() if key is not None else None
