# lib/sha512.py against FIPS 180-4 known answers, under CPython and
# MicroPython. (Random data against hashlib.sha512: tests/host/
# test_crypto_backends.py.)
import binascii

import sha512

H = binascii.hexlify
U = binascii.unhexlify

# FIPS 180-4 / NIST CSRC example values for SHA-512
ABC = ("ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
       "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f")
EMPTY = ("cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce"
         "47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e")
TWO_BLOCK_MSG = (b"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                 b"hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")
TWO_BLOCK = ("8e959b75dae313da8cf4f72814fc143f8f7779c6eb9f7fa17299aeadb6889018"
             "501d289e4900f7e4331b99dec4b5433ac7d329eeb6dd26545e96e55b874be909")
MILLION_A = ("e718483d0ce769644e2e42c7bc15b4638e1f98b13b2044285632a803afa973eb"
             "de0ff244877ea60a4cb0432ce577c31beb009c5c2c49aa2e4eadb217ad8cc09b")
# 1000 bytes (i*7+3) & 255: digest from CPython's hashlib.sha512 (OpenSSL);
# test_thousand_bytes re-checks it against hashlib where hashlib has sha512.
THOUSAND = ("00e36fccf193e59697a92b5ab24666ce6326d7fa16bf10832d0991ddc591112e"
            "9dfa6a636950ed9c4d67344a760654c2ff7785e1d60094d651038735b5dccabd")


def pattern(n):
    return bytes([(i * 7 + 3) & 255 for i in range(n)])


def test_abc():
    assert H(sha512.digest(b"abc")).decode() == ABC


def test_empty():
    assert H(sha512.digest(b"")).decode() == EMPTY


def test_896_bit_two_block_message():
    assert len(TWO_BLOCK_MSG) == 112  # padding spills into a second block
    assert H(sha512.digest(TWO_BLOCK_MSG)).decode() == TWO_BLOCK


def test_million_a():
    assert H(sha512.digest(b"a" * 1000000)).decode() == MILLION_A


def test_thousand_bytes():
    data = pattern(1000)
    assert H(sha512.digest(data)).decode() == THOUSAND
    try:
        from hashlib import sha512 as ref
    except ImportError:
        ref = None
    if ref is not None:
        assert ref(data).hexdigest() == THOUSAND


def test_buffer_types_and_offsets_at_block_boundaries():
    # bytes, bytearray and memoryview (also a slice of a larger buffer) hash
    # alike, at every length around the 128-byte block and the 112-byte
    # padding boundary
    for n in (0, 1, 63, 64, 111, 112, 113, 127, 128, 129, 239, 240, 255, 256, 257, 300):
        data = pattern(n)
        want = sha512.digest(data)
        assert sha512.digest(bytearray(data)) == want, n
        assert sha512.digest(memoryview(data)) == want, n
        assert sha512.digest(memoryview(b"x" + data + b"y")[1:n + 1]) == want, n
        try:
            from hashlib import sha512 as ref
        except ImportError:
            ref = None
        if ref is not None:
            assert ref(data).digest() == want, n


def test_lengths_differ_and_digest_is_64_bytes():
    seen = set()
    for n in range(0, 260, 7):
        d = sha512.digest(pattern(n))
        assert len(d) == 64
        seen.add(d)
    assert len(seen) == len(range(0, 260, 7))


def _icbrt(x):
    lo = 0
    hi = 1
    while hi * hi * hi <= x:
        hi *= 2
    while hi - lo > 1:
        m = (lo + hi) // 2
        if m * m * m <= x:
            lo = m
        else:
            hi = m
    return lo


def _isqrt(x):
    lo = 0
    hi = 1
    while hi * hi <= x:
        hi *= 2
    while hi - lo > 1:
        m = (lo + hi) // 2
        if m * m <= x:
            lo = m
        else:
            hi = m
    return lo


def test_constants_derive_from_primes():
    # FIPS 180-4 4.2.3 / 5.3.5: fractional parts of cube roots (K) and square
    # roots (H0) of the first primes, 64 bits each.
    primes = []
    c = 2
    while len(primes) < 80:
        ok = True
        for q in primes:
            if c % q == 0:
                ok = False
                break
        if ok:
            primes.append(c)
        c += 1
    mask = (1 << 64) - 1
    # both are written out big-endian, 8 bytes per constant
    assert len(sha512._K) == 80 * 8 and len(sha512._IV) == 8 * 8
    for t in range(80):
        k = _icbrt(primes[t] << 192) & mask
        assert int.from_bytes(sha512._K[8 * t:8 * t + 8], "big") == k, t
    for t in range(8):
        h = _isqrt(primes[t] << 128) & mask
        assert int.from_bytes(sha512._IV[8 * t:8 * t + 8], "big") == h, t
