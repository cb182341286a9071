# snake.crypto: backend selection, Signer/verify on the Pinecone wire vectors
# for every backend available on this interpreter, and SigCache. Runs under
# CPython (nacl, cryptography, python) and MicroPython (python).
import binascii
import hashlib
import json

from snake import crypto, crypto_backends

U = binascii.unhexlify

_vectors = None


def vectors():
    global _vectors
    if _vectors is None:
        here = __file__.replace("\\", "/").rsplit("/", 1)[0]
        with open(here + "/../data/pinecone_wire_vectors.json") as f:
            _vectors = json.load(f)
    return _vectors


def signed_items():
    """(public key, signed bytes, signature) for every signature the Go
    router produced in the capture: handshakes (bytes 40..104 over 0..40) and
    the tree-announcement hop signatures."""
    out = []
    for hs in vectors()["handshakes"]:
        raw = U(hs["hex"])
        out.append((raw[8:40], raw[0:40], raw[40:104]))
    for fr in vectors()["frames"]:
        for s in fr.get("decoded", {}).get("signatures", []):
            out.append((U(s["public_key"]), U(s["signed_bytes"]), U(s["signature"])))
    return out


def each_backend(fn):
    before = crypto.BACKEND
    names = crypto_backends.available_backends()
    assert "python" in names
    try:
        for name in names:
            crypto_backends.use_backend(name)
            assert crypto.BACKEND == name
            fn(name)
    finally:
        crypto_backends.use_backend(before)
    return names


def seed_of(node):
    return U(vectors()["nodes"][node]["seed"])


def test_backend_is_the_fastest_available():
    names = crypto_backends.available_backends()
    assert crypto.BACKEND == names[0]
    assert crypto.BACKEND in ("native", "nacl", "cryptography", "python")


def test_use_backend_rejects_unknown():
    try:
        crypto_backends.use_backend("rot13")
    except ValueError:
        pass
    else:
        assert False, "unknown backend accepted"
    assert crypto.BACKEND in crypto_backends.available_backends()


def test_node_seeds_give_the_listed_public_keys():
    def check(name):
        for node in ("A", "B", "C"):
            want = U(vectors()["nodes"][node]["public_key"])
            assert crypto.public_key(seed_of(node)) == want, (name, node)
            assert crypto.Signer(seed_of(node)).public == want, (name, node)
    each_backend(check)


def test_handshake_signatures_verify_and_are_reproduced():
    by_pub = {}
    for node in ("A", "B", "C"):
        by_pub[U(vectors()["nodes"][node]["public_key"])] = seed_of(node)
    items = signed_items()
    assert len(items) >= 3 + 9

    def check(name):
        signers = {}
        for pub, msg, sig in items:
            assert crypto.verify(pub, msg, sig) is True, name
            if pub not in signers:
                signers[pub] = crypto.Signer(by_pub[pub])
            assert signers[pub].sign(msg) == sig, name
    each_backend(check)


def test_handshake_forgeries_rejected():
    pub, msg, sig = signed_items()[0]

    def check(name):
        bad = bytearray(sig)
        bad[0] ^= 1
        assert crypto.verify(pub, msg, bytes(bad)) is False, name
        bad = bytearray(sig)
        bad[40] ^= 0x10
        assert crypto.verify(pub, msg, bytes(bad)) is False, name
        assert crypto.verify(pub, msg[:-1] + b"\x00", sig) is False, name
        other = U(vectors()["nodes"]["B"]["public_key"])
        assert crypto.verify(other, msg, sig) is False, name
    each_backend(check)


def test_verify_never_raises():
    pub, msg, sig = signed_items()[0]
    junk = (None, 0, 1.5, "text", b"", b"\x00" * 31, b"\x00" * 33, b"\xff" * 32,
            b"\x00" * 64, b"\xff" * 64, [1, 2], object())

    def check(name):
        for j in junk:
            assert crypto.verify(j, msg, sig) is False, (name, j)
            assert crypto.verify(pub, msg, j) is False, (name, j)
            if not isinstance(j, (bytes, bytearray)):
                assert crypto.verify(pub, j, sig) is False, (name, j)
        assert crypto.verify(memoryview(pub), bytearray(msg), memoryview(sig)) is True, name
    each_backend(check)


def test_signer_rejects_bad_seed():
    for bad in (b"", b"\x00" * 31, b"\x00" * 33, None, "x" * 32):
        try:
            crypto.Signer(bad)
        except ValueError:
            continue
        assert False, bad


# ------------------------------------------------------------------ SigCache

_triples = None


def triples(n):
    """n distinct valid (pub, msg, sig) made with node A's key."""
    global _triples
    if _triples is None or len(_triples) < n:
        s = crypto.Signer(seed_of("A"))
        _triples = [(s.public, b"msg %d" % i, s.sign(b"msg %d" % i)) for i in range(n)]
    return _triples[:n]


class CountingBackend:
    """Wraps the backend verify so tests see how often the cache called it."""

    def __init__(self):
        self.calls = 0
        self.orig = crypto._verify

    def __enter__(self):
        def counted(pub, msg, sig):
            self.calls += 1
            return self.orig(pub, msg, sig)
        crypto._verify = counted
        return self

    def __exit__(self, *a):
        crypto._verify = self.orig


def test_sigcache_hit_on_identical_triple():
    c = crypto.SigCache(4)
    pub, msg, sig = triples(1)[0]
    with CountingBackend() as cb:
        assert c.verify(pub, msg, sig) is True
        assert c.verify(pub, msg, sig) is True
        assert c.verify(bytearray(pub), memoryview(msg), bytearray(sig)) is True
        assert cb.calls == 1
    assert c.hits == 2 and c.misses == 1 and c.count == 1 and c.failures == 0


def test_sigcache_changed_message_is_a_miss():
    c = crypto.SigCache(4)
    (pub, msg, sig), (pub2, msg2, sig2) = triples(2)
    assert c.verify(pub, msg, sig)
    with CountingBackend() as cb:
        assert c.verify(pub, msg2, sig) is False      # old signature, new message
        assert c.verify(pub, msg + b"x", sig) is False
        assert cb.calls == 2
    assert c.hits == 0 and c.misses == 3 and c.failures == 2 and c.count == 1


def test_sigcache_forgery_never_cached():
    c = crypto.SigCache(4)
    pub, msg, sig = triples(1)[0]
    bad = bytearray(sig)
    bad[10] ^= 4
    bad = bytes(bad)
    with CountingBackend() as cb:
        for _ in range(3):
            assert c.verify(pub, msg, bad) is False
        assert cb.calls == 3
    assert c.count == 0 and c.hits == 0 and c.failures == 3
    # malformed input: False, no backend call, nothing cached
    assert c.verify(pub[:31], msg, sig) is False
    assert c.verify(pub, None, sig) is False
    assert c.count == 0


def test_sigcache_capacity_and_evictions():
    cap = 3
    c = crypto.SigCache(cap)
    ts = triples(cap + 4)
    for i in range(len(ts)):
        assert c.verify(*ts[i])
        assert c.count <= cap
        assert c.evictions == (0 if i < cap else i + 1 - cap)
    assert c.count == c.capacity == cap
    assert len(c._dig) == cap * 16 and len(c._tags) == cap
    # the newest entries are cached, the oldest were evicted
    with CountingBackend() as cb:
        assert c.verify(*ts[-1])
        assert cb.calls == 0
        assert c.verify(*ts[0])
        assert cb.calls == 1


def test_sigcache_clock_keeps_recently_hit_entries():
    c = crypto.SigCache(3)
    a, b, d, e = triples(4)
    for t in (a, b, d):
        c.verify(*t)
    c.verify(*a)            # a referenced
    c.verify(*e)            # evicts b (a has its reference bit)
    assert c.evictions == 1
    with CountingBackend() as cb:
        assert c.verify(*a) and c.verify(*d) and c.verify(*e)
        assert cb.calls == 0
        assert c.verify(*b)
        assert cb.calls == 1


def test_sigcache_rejects_bad_capacity_and_clears():
    for bad in (0, -1):
        try:
            crypto.SigCache(bad)
        except ValueError:
            continue
        assert False, bad
    c = crypto.SigCache(2)
    c.verify(*triples(1)[0])
    c.clear()
    assert c.count == 0
    with CountingBackend() as cb:
        assert c.verify(*triples(1)[0])
        assert cb.calls == 1


def test_sigcache_key_covers_public_key():
    # same msg and sig under another key: not a hit (and not valid)
    c = crypto.SigCache(2)
    pub, msg, sig = triples(1)[0]
    assert c.verify(pub, msg, sig)
    other = U(vectors()["nodes"]["B"]["public_key"])
    assert c.verify(other, msg, sig) is False
    assert c.hits == 0
    h = hashlib.sha256(pub)
    h.update(msg)
    h.update(sig)
    assert bytes(c._dig[0:16]) == h.digest()[:16]


def test_python_backend_keeps_its_code_out_of_a_micropython_heap_between_calls():
    # on MicroPython lib/ed25519.py (and lib/sha512.py) are loaded for each
    # signature made or checked and dropped again; the decoded keys live on
    # in crypto (its _kc), so the second check of a key decodes nothing new
    import sys
    before = crypto.BACKEND
    try:
        crypto_backends.use_backend("python")
        pub, msg, sig = signed_items()[0]
        s = crypto.Signer(seed_of(next(iter(vectors()["nodes"]))))
        sig2 = s.sign(b"hello")
        assert crypto.verify(s.public, b"hello", sig2)
        assert not crypto.verify(s.public, b"hellO", sig2)
        assert crypto.verify(pub, msg, sig)
        assert bytes(pub) in crypto._kc[0] and bytes(s.public) in crypto._kc[0]
        if sys.implementation.name == "micropython":
            assert "ed25519" not in sys.modules and "sha512" not in sys.modules
        else:
            assert "ed25519" in sys.modules     # CPython keeps cold code imported
    finally:
        crypto_backends.use_backend(before)
