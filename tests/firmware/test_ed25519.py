# lib/ed25519.py against RFC 8032 section 7.1, a slow reference written
# straight from the RFC's formulas, and malformed/forged input; runs under
# CPython and MicroPython. (Random comparison with libsodium:
# tests/host/test_crypto_backends.py.)
import binascii
import hashlib

import ed25519

U = binascii.unhexlify

# RFC 8032 section 7.1: (name, SECRET KEY, PUBLIC KEY, MESSAGE, SIGNATURE)
MSG1024 = (
    "08b8b2b733424243760fe426a4b54908" "632110a66c2f6591eabd3345e3e4eb98"
    "fa6e264bf09efe12ee50f8f54e9f77b1" "e355f6c50544e23fb1433ddf73be84d8"
    "79de7c0046dc4996d9e773f4bc9efe57" "38829adb26c81b37c93a1b270b20329d"
    "658675fc6ea534e0810a4432826bf58c" "941efb65d57a338bbd2e26640f89ffbc"
    "1a858efcb8550ee3a5e1998bd177e93a" "7363c344fe6b199ee5d02e82d522c4fe"
    "ba15452f80288a821a579116ec6dad2b" "3b310da903401aa62100ab5d1a36553e"
    "06203b33890cc9b832f79ef80560ccb9" "a39ce767967ed628c6ad573cb116dbef"
    "efd75499da96bd68a8a97b928a8bbc10" "3b6621fcde2beca1231d206be6cd9ec7"
    "aff6f6c94fcd7204ed3455c68c83f4a4" "1da4af2b74ef5c53f1d8ac70bdcb7ed1"
    "85ce81bd84359d44254d95629e9855a9" "4a7c1958d1f8ada5d0532ed8a5aa3fb2"
    "d17ba70eb6248e594e1a2297acbbb39d" "502f1a8c6eb6f1ce22b3de1a1f40cc24"
    "554119a831a9aad6079cad88425de6bd" "e1a9187ebb6092cf67bf2b13fd65f270"
    "88d78b7e883c8759d2c4f5c65adb7553" "878ad575f9fad878e80a0c9ba63bcbcc"
    "2732e69485bbc9c90bfbd62481d9089b" "eccf80cfe2df16a2cf65bd92dd597b07"
    "07e0917af48bbb75fed413d238f5555a" "7a569d80c3414a8d0859dc65a46128ba"
    "b27af87a71314f318c782b23ebfe808b" "82b0ce26401d2e22f04d83d1255dc51a"
    "ddd3b75a2b1ae0784504df543af8969b" "e3ea7082ff7fc9888c144da2af58429e"
    "c96031dbcad3dad9af0dcbaaaf268cb8" "fcffead94f3c7ca495e056a9b47acdb7"
    "51fb73e666c6c655ade8297297d07ad1" "ba5e43f1bca32301651339e22904cc8c"
    "42f58c30c04aafdb038dda0847dd988d" "cda6f3bfd15c4b4c4525004aa06eeff8"
    "ca61783aacec57fb3d1f92b0fe2fd1a8" "5f6724517b65e614ad6808d6f6ee34df"
    "f7310fdc82aebfd904b01e1dc54b2927" "094b2db68d6f903b68401adebf5a7e08"
    "d78ff4ef5d63653a65040cf9bfd4aca7" "984a74d37145986780fc0b16ac451649"
    "de6188a7dbdf191f64b5fc5e2ab47b57" "f7f7276cd419c17a3ca8e1b939ae49e4"
    "88acba6b965610b5480109c8b17b80e1" "b7b750dfc7598d5d5011fd2dcc5600a3"
    "2ef5b52a1ecc820e308aa342721aac09" "43bf6686b64b2579376504ccc493d97e"
    "6aed3fb0f9cd71a43dd497f01f17c0e2" "cb3797aa2a2f256656168e6c496afc5f"
    "b93246f6b1116398a346f1a641f3b041" "e989f7914f90cc2c7fff357876e506b5"
    "0d334ba77c225bc307ba537152f3f161" "0e4eafe595f6d9d90d11faa933a15ef1"
    "369546868a7f3a45a96768d40fd9d034" "12c091c6315cf4fde7cb68606937380d"
    "b2eaaa707b4c4185c32eddcdd306705e" "4dc1ffc872eeee475a64dfac86aba41c"
    "0618983f8741c5ef68d3a101e8a3b8ca" "c60c905c15fc910840b94c00a0b9d0"
)
VECTORS = [
    ("TEST 1",
     "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
     "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
     "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("TEST 2",
     "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
     "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
     "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("TEST 3",
     "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
     "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac"
     "18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
    ("TEST 1024",
     "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5",
     "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
     MSG1024,
     "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350"
     "aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a6ac00a9704a188a03"),
    ("TEST SHA(abc)",
     "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42",
     "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
     "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
     "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
     "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b589"
     "09351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704"),
]


# ------------------------------------------------------------------ reference
# Deliberately simple: RFC 8032 5.1.4 addition, double-and-add, pow() for
# inverses and square roots; shares no code with lib/ed25519.py.
P = 2 ** 255 - 19
L = 2 ** 252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRTM1 = pow(2, (P - 1) // 4, P)


def r_add(p1, p2):
    A = (p1[1] - p1[0]) * (p2[1] - p2[0]) % P
    B = (p1[1] + p1[0]) * (p2[1] + p2[0]) % P
    C = 2 * p1[3] * p2[3] * D % P
    Dd = 2 * p1[2] * p2[2] % P
    E, F, G, H = B - A, Dd - C, Dd + C, B + A
    return (E * F % P, G * H % P, F * G % P, E * H % P)


def r_mul(s, p1):
    q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = r_add(q, p1)
        p1 = r_add(p1, p1)
        s >>= 1
    return q


def r_affine(x, y):
    return (x, y, 1, x * y % P)


def r_recover_x(y, sign):
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * SQRTM1 % P
    if (x * x - x2) % P:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


def r_encode(p1):
    zi = pow(p1[2], P - 2, P)
    x = p1[0] * zi % P
    y = p1[1] * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def r_equal(p1, p2):
    return (p1[0] * p2[2] - p2[0] * p1[2]) % P == 0 and (p1[1] * p2[2] - p2[1] * p1[2]) % P == 0


BY = 4 * pow(5, P - 2, P) % P
BASE = r_affine(r_recover_x(BY, 0), BY)
IDENTITY = (0, 1, 1, 0)


def sha512(data):
    return ed25519._sha512(data)


def h_int(data):
    return int.from_bytes(sha512(data), "little")


def order8_point():
    # [L]Q lies in the 8-torsion; Q = the point with y = 2 gives order 8
    y = 2
    while True:
        x = r_recover_x(y, 0)
        if x is not None:
            t = r_mul(L, r_affine(x, y))
            if not r_equal(r_mul(4, t), IDENTITY):
                return t
        y += 1


# ------------------------------------------------------------------ RFC 8032


def test_rfc8032_public_keys():
    for name, sk, pk, msg, sig in VECTORS:
        assert ed25519.public_key(U(sk)) == U(pk), name


def test_rfc8032_signatures():
    for name, sk, pk, msg, sig in VECTORS:
        assert ed25519.sign(U(sk), U(msg)) == U(sig), name
        assert ed25519.SigningKey(U(sk)).sign(U(msg)) == U(sig), name


def test_rfc8032_verify():
    for name, sk, pk, msg, sig in VECTORS:
        assert ed25519.verify(U(pk), U(msg), U(sig)) is True, name


def test_rfc1024_message_length():
    assert len(U(MSG1024)) == 1023


def test_against_reference_implementation():
    for i in range(3):
        seed = hashlib.sha256(b"ref" + bytes([i])).digest()
        h = sha512(seed)
        a = int.from_bytes(h[0:32], "little")
        a = (a & ((1 << 254) - 8)) | (1 << 254)
        pub = r_encode(r_mul(a, BASE))
        assert ed25519.public_key(seed) == pub
        msg = b"reference message %d" % i
        r = h_int(h[32:64] + msg) % L
        R = r_encode(r_mul(r, BASE))
        S = (r + h_int(R + pub + msg) % L * a) % L
        assert ed25519.sign(seed, msg) == R + S.to_bytes(32, "little")


# ------------------------------------------------------------------ rejection

def _good():
    name, sk, pk, msg, sig = VECTORS[2]
    return U(pk), U(msg), U(sig)


def _flip(b, i, bit=1):
    b = bytearray(b)
    b[i] ^= bit
    return bytes(b)


def test_flipped_bits_rejected():
    pub, msg, sig = _good()
    assert ed25519.verify(pub, msg, sig)
    for i in (0, 5, 31):                       # R
        assert not ed25519.verify(pub, msg, _flip(sig, i)), i
    for i in (32, 40, 62):                     # S
        assert not ed25519.verify(pub, msg, _flip(sig, i)), i
    assert not ed25519.verify(pub, _flip(msg, 0), sig)
    assert not ed25519.verify(pub, msg + b"\x00", sig)
    assert not ed25519.verify(pub, b"", sig)
    for i in (0, 17, 31):                      # public key
        assert not ed25519.verify(_flip(pub, i), msg, sig), i
    assert not ed25519.verify(_flip(pub, 31, 0x80), msg, sig)


def test_s_not_reduced_rejected():
    pub, msg, sig = _good()
    S = int.from_bytes(sig[32:], "little")
    # S + L is the same scalar mod L: a malleated copy that must not verify
    assert ed25519.verify(pub, msg, sig[:32] + S.to_bytes(32, "little"))
    assert not ed25519.verify(pub, msg, sig[:32] + (S + L).to_bytes(32, "little"))
    assert not ed25519.verify(pub, msg, sig[:32] + L.to_bytes(32, "little"))
    assert not ed25519.verify(pub, msg, sig[:32] + b"\xff" * 32)


def test_wrong_lengths_and_types_rejected():
    pub, msg, sig = _good()
    for bad_sig in (sig[:63], sig + b"\x00", b"", None, 5, "x" * 64):
        assert ed25519.verify(pub, msg, bad_sig) is False
    for bad_pub in (pub[:31], pub + b"\x00", b"", None, 7, "x" * 32):
        assert ed25519.verify(bad_pub, msg, sig) is False
    for bad_msg in (None, 3, "text"):
        assert ed25519.verify(pub, bad_msg, sig) is False
    assert ed25519.verify(bytearray(pub), memoryview(msg), bytearray(sig)) is True


def test_points_not_on_curve_or_not_canonical_rejected():
    pub, msg, sig = _good()
    # a y with no x on the curve
    y = 2
    while r_recover_x(y, 0) is not None:
        y += 1
    off = y.to_bytes(32, "little")
    assert not ed25519.verify(off, msg, sig)
    assert not ed25519.verify(pub, msg, off + sig[32:])
    # y >= p (non-canonical encodings of y - p)
    for y in (P, P + 1, P + 2, 2 ** 255 - 1):
        enc = y.to_bytes(32, "little")
        assert ed25519._decode_point(enc) is None
        assert not ed25519.verify(enc, msg, sig)
    # x = 0 with the sign bit set
    assert ed25519._decode_point((1 | (1 << 255)).to_bytes(32, "little")) is None
    assert ed25519._decode_point((1).to_bytes(32, "little")) == (0, 1)


def test_small_order_public_key_rejected():
    # With A the neutral element, [k]A vanishes and R = [S]B "verifies" under
    # a naive check; libsodium's rules (and ours) reject such keys.
    msg = b"any message"
    S = 12345
    R = r_encode(r_mul(S, BASE))
    sig = R + S.to_bytes(32, "little")
    ident = (1).to_bytes(32, "little")
    assert r_equal(r_add(r_mul(S, BASE), IDENTITY), r_mul(S, BASE))
    assert not ed25519.verify(ident, msg, sig)
    t8 = order8_point()
    for j in range(8):
        enc = r_encode(r_mul(j, t8))
        assert not ed25519.verify(enc, msg, sig), j


def test_public_key_with_torsion_component():
    # A' = [a]B + T8 is a valid point of order 8L. [S]B = R + [k]A' holds
    # exactly when [k]T8 = 0, i.e. k % 8 == 0 (cofactorless equation, as in
    # libsodium). Exercises the mod-8L lattice of the half-size scalars.
    t8 = order8_point()
    a = 0x1234567890abcdef ** 4 % L
    Ap = r_add(r_mul(a, BASE), t8)
    pub = r_encode(Ap)
    seen = [0, 0]
    i = 0
    while seen[1] < 1 or seen[0] < 2:
        msg = b"torsion %d" % i
        r = h_int(b"nonce" + msg) % L
        R = r_encode(r_mul(r, BASE))
        k = h_int(R + pub + msg) % L
        S = (r + k * a) % L
        expect = k % 8 == 0
        assert ed25519.verify(pub, msg, R + S.to_bytes(32, "little")) is expect, i
        seen[1 if expect else 0] += 1
        i += 1


def test_half_size_scalars():
    for i in range(200):
        k = h_int(b"k" + bytes([i])) % L
        u, v = ed25519._half_size(k)
        assert (u - v * k) % (8 * L) == 0
        assert v & 1 == 1 and u >= 0
        assert u < 2 ** 137 and -(2 ** 137) < v < 2 ** 137
    assert ed25519._half_size(0) == (0, 1)


def test_wnaf_digits_reconstruct():
    for i in range(40):
        k = h_int(b"w" + bytes([i])) >> (256 + i * 5)
        for w in (2, 4, 5, 6):
            naf = ed25519._wnaf(k, w)
            # digits are stored modulo 256 (bytes): -3 is 253
            assert len(naf) <= 258
            acc = 0
            for j in range(len(naf) - 1, -1, -1):
                d = naf[j] - 256 if naf[j] > 127 else naf[j]
                acc = 2 * acc + d
                assert d == 0 or (d & 1 and -(1 << (w - 1)) < d < (1 << (w - 1)))
            assert acc == k
    assert not any(ed25519._wnaf(0, 5))


def test_base_tables_and_constants():
    # the fixed-base tables written out as bytes are B, 3B, 5B, 7B and the
    # same multiples of [2^128]B as affine x, y, recomputed here with the
    # reference arithmetic; _btab gives them as cached points (Z = 1)
    assert len(ed25519._BT) == 2 * 4 * 2 * 32
    for off, base in ((0, BASE), (256, r_mul(1 << 128, BASE))):
        tab = ed25519._btab(off)
        assert len(tab) == 4
        two = r_add(base, base)
        q = base
        for j in range(4):
            zi = pow(q[2], P - 2, P)
            x = q[0] * zi % P
            y = q[1] * zi % P
            o = off + 64 * j
            assert ed25519._BT[o:o + 64] == x.to_bytes(32, "little") + y.to_bytes(32, "little"), (off, j)
            assert tab[j] == ((y + x) % P, (y - x) % P, 2, 2 * D * x * y % P), (off, j)
            q = r_add(q, two)
    assert ed25519._D == D and ed25519._SQRTM1 == SQRTM1 and ed25519._D2 == 2 * D % P
    assert ed25519._P == P and ed25519._L == L


def test_inversion_and_sqrt_chains():
    for z in (1, 2, 3, 12345, P - 1, 2 ** 254 + 17):
        assert ed25519._inv(z) * z % P == 1
        assert ed25519._pow22523(z) == pow(z, (P - 5) // 8, P)


def test_encode_decode_roundtrip():
    for s in (1, 2, 7, 2 ** 200 + 3, L - 1):
        pt = r_mul(s, BASE)
        enc = r_encode(pt)
        x, y = ed25519._decode_point(enc)
        assert r_equal(r_affine(x, y), pt)
        assert ed25519._encode(pt[0], pt[1], pt[2]) == enc


def test_r_with_torsion_component_rejected():
    # A signer who knows a can publish R' = [r]B + T (T torsion) with
    # S = r + k'a, k' = H(R'|A|M): then [S]B - [k']A - R' = -T. The
    # cofactorless equation (libsodium, ours) rejects; a cofactored check would
    # accept. Catches half-size scalars with even v ([v]T2 vanishes) or v not
    # coprime to 8.
    seed = hashlib.sha256(b"torsion-r").digest()
    h = sha512(seed)
    a = (int.from_bytes(h[0:32], "little") & ((1 << 254) - 8)) | (1 << 254)
    pub = ed25519.public_key(seed)
    t2 = r_affine(0, P - 1)
    t8 = order8_point()
    for i in range(12):
        msg = b"m%d" % i
        r = h_int(b"r" + msg) % L
        rB = r_mul(r, BASE)
        R = r_encode(rB)
        S = (r + h_int(R + pub + msg) % L * a) % L
        assert ed25519.verify(pub, msg, R + S.to_bytes(32, "little"))
        for t in (t2, t8):
            R2 = r_encode(r_add(rB, t))
            S2 = (r + h_int(R2 + pub + msg) % L * a) % L
            assert not ed25519.verify(pub, msg, R2 + S2.to_bytes(32, "little")), i
