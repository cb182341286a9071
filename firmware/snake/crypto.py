# ed25519 for the router: one API over the fastest backend present.
#
#   BACKEND                  "native" | "nacl" | "cryptography" | "python"
#   Signer(seed32)           .public -> bytes(32); .sign(msg) -> bytes(64)
#   public_key(seed32)       -> bytes(32)
#   verify(pub, msg, sig)    -> bool, never raises on malformed input
#   SigCache(capacity)       .verify(pub, msg, sig): cached on success
#
# Choosing and switching the backend is snake/crypto_backends.py's (cold
# code: loaded at this module's import and dropped again on MicroPython):
# crypto_backends.available_backends(), crypto_backends.use_backend(name)
# (tests, benchmarks); the environment variable SNAKEMESH_CRYPTO_BACKEND
# (where os.getenv exists) picks one at import, e.g. to run the simulator
# on the python backend.
#
# All backends sign identically (ed25519 is deterministic). Verification
# rules: nacl and python reject the same inputs (libsodium's rules: S >= L,
# non-canonical or small-order A or R); cryptography (OpenSSL) may accept a
# few crafted small-order keys the others reject. Honest signatures verify
# everywhere.
import hashlib

from snake import platform


def _ok_bytes(b, n):
    return isinstance(b, (bytes, bytearray, memoryview)) and len(b) == n


# the backend in use (crypto_backends.use_backend sets them)
BACKEND = None
_make = None       # seed -> (public, sign)
_verify = None     # (pub, msg, sig) -> bool
_kc = None         # the python backend's decoded keys (ed25519.key_cache())


# The python backend (lib/ed25519.py, and lib/sha512.py, which it imports
# where hashlib has no SHA-512) is cold code on MicroPython: loaded for each
# signature made or checked and dropped again, so as .mpy its ~7.5 KB of
# bytecode is in the heap only while it runs (a pure-Python verify takes
# ~1000x longer than the load). What must outlive a call stays here: the
# expanded secret in the signer's closure, the decoded keys in _kc.
def _ed25519():
    ed = platform.cold("ed25519")
    if platform.MICROPYTHON:
        platform.unload("sha512")
    return ed


def _py_make(seed):
    # the python backend's signer (here, not in crypto_backends: the
    # function's module stays in the heap with it)
    key = _ed25519().expand(bytes(seed))

    def sign(msg):
        return _ed25519().sign_expanded(key, msg)
    return key[2], sign


def _py_verify(pub, msg, sig):
    return _ed25519().verify(pub, msg, sig, _kc)


# ---------------------------------------------------------------- API

class Signer:
    """Signs with one seed; caches the expanded secret and the public key."""

    def __init__(self, seed):
        if not _ok_bytes(seed, 32):
            raise ValueError("seed must be 32 bytes")
        self.backend = BACKEND
        # .sign(msg) -> bytes(64) is the backend's own function (an
        # attribute, not a method: one call less per signature)
        self.public, self.sign = _make(seed)


def public_key(seed):
    return Signer(seed).public


def verify(pub, msg, sig):
    """True iff sig is pub's valid signature of msg. Never raises on bad
    input; MemoryError is re-raised (a node out of heap must not mistake a
    valid signature for a forgery and drop an honest peer)."""
    if not (_ok_bytes(pub, 32) and _ok_bytes(sig, 64)):
        return False
    if not isinstance(msg, (bytes, bytearray, memoryview)):
        return False
    try:
        return _verify(pub, msg, sig) is True
    except MemoryError:
        raise
    except Exception:
        return False


class SigCache:
    """Fixed-capacity cache of verified (pub, msg, sig) triples.

    An entry is the first 16 bytes of sha256(pub | msg | sig) (pub and sig
    have fixed lengths, so the concatenation is unambiguous), so a signature
    reused over another message or key is a different entry. Only successful
    verifications are cached. Storage is preallocated: one bytearray of
    capacity * 16 digest bytes, a list of 30-bit tags (small ints on every
    port) for a C-level scan, and a reference bit per entry for CLOCK
    eviction (a hit sets the bit; the hand clears bits and evicts the first
    entry whose bit is clear).

    Counters: hits, misses (backend verifications), failures (misses that did
    not verify), evictions, count, capacity."""

    def __init__(self, capacity):
        capacity = int(capacity)
        if capacity < 1:
            raise ValueError("SigCache capacity must be >= 1")
        self.capacity = capacity
        self.count = 0
        self.hits = 0
        self.misses = 0
        self.failures = 0
        self.evictions = 0
        self._dig = bytearray(capacity * 16)
        self._tags = [-1] * capacity
        self._ref = bytearray(capacity)
        self._hand = 0

    def verify(self, pub, msg, sig):
        """Like crypto.verify, answering from the cache when this exact triple
        verified before. Never raises."""
        if not (_ok_bytes(pub, 32) and _ok_bytes(sig, 64)):
            return False
        if not isinstance(msg, (bytes, bytearray, memoryview)):
            return False
        h = hashlib.sha256(pub)
        h.update(msg)
        h.update(sig)
        d = h.digest()
        tag = (d[0] << 22) | (d[1] << 14) | (d[2] << 6) | (d[3] >> 2)
        tags = self._tags
        dig = self._dig
        # look up: every entry with this tag, then its 16 digest bytes
        n = tags.count(tag)
        i = 0
        while n:
            i = tags.index(tag, i)
            o = i * 16
            j = 0
            while j < 16 and dig[o + j] == d[j]:
                j += 1
            if j == 16:
                self.hits += 1
                self._ref[i] = 1
                return True
            i += 1
            n -= 1
        self.misses += 1
        if not verify(pub, msg, sig):
            self.failures += 1
            return False
        # a slot: the next free one, else CLOCK
        cap = self.capacity
        ref = self._ref
        if self.count < cap:
            i = self.count
            self.count += 1
        else:
            i = self._hand
            while ref[i]:
                ref[i] = 0
                i += 1
                if i == cap:
                    i = 0
            self._hand = 0 if i + 1 == cap else i + 1
            self.evictions += 1
        o = i * 16
        j = 0
        while j < 16:
            dig[o + j] = d[j]
            j += 1
        tags[i] = tag
        ref[i] = 0
        return True

    def clear(self):
        self.count = 0
        self._hand = 0
        i = 0
        while i < self.capacity:
            self._tags[i] = -1
            self._ref[i] = 0
            i += 1


# the backend at import (module-level code: as .mpy its bytecode is freed
# once the import ran; crypto_backends is cold code, platform.cold)
platform.cold("snake.crypto_backends").choose()
