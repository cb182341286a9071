# ed25519 backend choice and switching (snake/crypto.py's cold half).
#
#   NAMES                    backend names, fastest first
#   available_backends()     names usable on this interpreter, fastest first
#   use_backend(name)        switch crypto's Signer/verify/SigCache to `name`
#   choose()                 the backend at import: SNAKEMESH_CRYPTO_BACKEND
#                            (where os.getenv exists), else the fastest
#
# Backends, fastest first:
#   native        a C module `snakemesh_ed25519` frozen into a custom firmware
#                 image: public_key(seed), sign(seed, msg), verify(pub, msg, sig)
#   nacl          PyNaCl (libsodium), CPython (snakehost/crypto_host.py)
#   cryptography  pyca/cryptography (OpenSSL), CPython (snakehost/crypto_host.py)
#   python        lib/ed25519.py (pure Python, runs on MicroPython)
#
# snake/crypto.py loads this module once at its import (choose()) and drops
# it from sys.modules on MicroPython right after, so a running node's heap
# holds none of this code (docs/reports/MEMORY.md): the python backend's signer is
# crypto._py_make and its verify crypto._py_verify, functions of crypto.py
# that load lib/ed25519.py for each call on MicroPython.
# The native backend's two small functions are made here and keep this
# module's objects (a custom image: its code is in flash). Tests and
# benchmarks import it to switch backends.
from snake import platform

NAMES = ("native", "nacl", "cryptography", "python")

# Each backend is (make_signer, verify): make_signer(seed) -> (public, sign).
_loaded = {}


def _crypto():
    # also while snake.crypto is being imported (it calls choose()): both
    # interpreters register a module before running its code
    from snake import crypto
    return crypto


def _load(name):
    if name == "python":
        ed = platform.try_import("ed25519")
        if getattr(ed, "IMPLEMENTATION", None) != "snakemesh-ed25519":
            return None  # missing, or another package named ed25519 shadows lib/
        c = _crypto()
        c._kc = ed.key_cache()
        if platform.MICROPYTHON:
            # crypto loads it per call (crypto._ed25519)
            platform.unload("ed25519")
            platform.unload("sha512")
        return c._py_make, c._py_verify
    if name == "native":
        mod = platform.try_import("snakemesh_ed25519")
        if mod is None:
            return None

        def make_native(seed):
            seed = bytes(seed)
            return bytes(mod.public_key(seed)), lambda msg: bytes(mod.sign(seed, msg))
        return make_native, lambda pub, msg, sig: bool(mod.verify(pub, msg, sig))
    if platform.MICROPYTHON or name not in NAMES:
        return None
    # PyNaCl, pyca/cryptography: CPython only, in snakehost/crypto_host.py (not
    # loaded on MicroPython, so a board's heap holds none of that code)
    return platform.cold("snakehost.crypto_host").load(name)


def _get(name):
    if name not in _loaded:
        _loaded[name] = _load(name)
    return _loaded[name]


def available_backends():
    """Backend names that load on this interpreter, fastest first."""
    return [n for n in NAMES if _get(n) is not None]


def use_backend(name):
    """Switch every later Signer/verify/SigCache to backend `name`.
    Raises ValueError when it is unknown or not available here."""
    impl = _get(name)
    if impl is None:
        raise ValueError("crypto backend not available: %s" % name)
    c = _crypto()
    c.BACKEND = name
    c._make, c._verify = impl
    return name


def choose():
    """The backend at import: SNAKEMESH_CRYPTO_BACKEND, else the fastest."""
    try:
        import os
        want = os.getenv("SNAKEMESH_CRYPTO_BACKEND")
    except Exception:
        want = None
    if not want:
        for want in NAMES:
            if _get(want) is not None:
                break
        else:
            raise ImportError("no ed25519 backend (lib/ed25519.py missing from sys.path)")
    return use_backend(want)
