# ed25519 backends of CPython hosts (snake/crypto.py picks among them):
# PyNaCl (libsodium) and pyca/cryptography (OpenSSL). Never loaded on
# MicroPython. load(name) -> (make_signer, verify) or None when missing.
from snake import platform


def _sub(mod, path):
    # try_import("a.b.c") returns package a; walk to a.b.c
    for part in path.split(".")[1:]:
        mod = getattr(mod, part, None)
        if mod is None:
            return None
    return mod


def _load_nacl():
    signing = _sub(platform.try_import("nacl.signing"), "nacl.signing")
    if signing is None:
        return None

    def make(seed):
        key = signing.SigningKey(bytes(seed))

        def sign(msg):
            return key.sign(bytes(msg)).signature
        return bytes(key.verify_key), sign

    def verify(pub, msg, sig):
        try:
            signing.VerifyKey(bytes(pub)).verify(bytes(msg), bytes(sig))
            return True
        except Exception:
            return False
    return make, verify


def _load_cryptography():
    path = "cryptography.hazmat.primitives.asymmetric.ed25519"
    ed = _sub(platform.try_import(path), path)
    ser = _sub(platform.try_import("cryptography.hazmat.primitives.serialization"),
               "cryptography.hazmat.primitives.serialization")
    if ed is None or ser is None:
        return None
    raw = ser.Encoding.Raw
    rawpub = ser.PublicFormat.Raw

    def make(seed):
        key = ed.Ed25519PrivateKey.from_private_bytes(bytes(seed))
        pub = key.public_key().public_bytes(raw, rawpub)

        def sign(msg):
            return key.sign(bytes(msg))
        return pub, sign

    def verify(pub, msg, sig):
        try:
            ed.Ed25519PublicKey.from_public_bytes(bytes(pub)).verify(bytes(sig), bytes(msg))
            return True
        except Exception:
            return False
    return make, verify


def load(name):
    if name == "nacl":
        return _load_nacl()
    if name == "cryptography":
        return _load_cryptography()
    return None
