# Ed25519 signatures (RFC 8032, section 5.1) in pure Python for MicroPython
# and CPython.
#
#   public_key(seed32) -> bytes(32)
#   sign(seed32, msg) -> bytes(64)
#   SigningKey(seed32): .public, .sign(msg)  (caches the expanded secret)
#   expand(seed32) -> key; sign_expanded(key, msg) -> bytes(64)
#   verify(pub32, msg, sig64[, kc]) -> bool  (never raises; kc: key_cache())
#
# Field elements are ints modulo p = 2^255 - 19. Points use extended twisted
# Edwards coordinates (X:Y:Z:T) with x = X/Z, y = Y/Z, xy = T/Z (Hisil, Wong,
# Carter, Dawson 2008, a = -1). Multi-scalar multiplication is Straus with
# width-w NAF digits and one shared doubling chain; every table entry is a
# "cached" point (Y+X, Y-X, 2Z, 2dT).
#
# Fixed base: the odd multiples B, 3B, 5B, 7B of the base point B and of
# B' = [2^128]B (width-4 digits), affine x and y written out below as bytes
# (_BT; tests/firmware/test_ed25519.py recomputes them), turned into cached
# points (y+x, y-x, 2, 2dxy) per call (_btab: 16 int.from_bytes and 16
# multiplications, ~1 % of a verify). A board running this module as .mpy
# holds its constants in the heap (a frozen image keeps them in flash):
# 512 bytes here, where 2 x 8 points of (y+x, y-x, 2dxy) as int literals
# cost ~4.7 KB on a 32-bit port; width 4 instead of 5 and x, y instead of
# the three sums cost 2-3 % of a verify (bench/crypto_bench.py). A scalar
# b < 2^253 is split b = b0 + 2^128 b1, so [b]B costs 128 doublings. The
# per-call tables of A and R (verify) have width 5: 8 points each.
#
# Verification uses half-size scalars (Antipa et al., "Accelerated
# verification of ECDSA signatures", SAC 2005): with k = H(R|A|M) mod L the
# extended Euclidean algorithm on (8L, k) gives u, v of about 128 bits with
# u = v*k (mod 8L) and v odd. Then
#     Q' = [v*S mod L]B - [u]A - [v]R = [v]([S]B - [k]A - R)
# for any curve points A, R (the group order is 8L and B has order L), and
# because gcd(v, 8L) = 1, Q' is the neutral element exactly when
# [S]B = R + [k]A. So the check is the cofactorless equation of RFC 8032 with
# 128 doublings instead of 253, and no field inversion.
#
# Verification rules are libsodium's (crypto_sign_verify_detached): wrong
# lengths, S >= L, a non-canonical or undecodable A or R (y >= p, x = 0 with
# the sign bit set, not on the curve), and an A or R of small order are
# rejected; then [S]B == R + [k]A must hold exactly.
#
# Not constant time: MicroPython's ints are variable-time, so signing leaks
# timing. snake.crypto prefers a native backend when the image has one.

# snake.crypto checks this to be sure it loaded this file, not a PyPI
# package that is also importable as `ed25519`.
IMPLEMENTATION = "snakemesh-ed25519"

try:
    from hashlib import sha512 as _hashlib_sha512

    def _sha512(data):
        return _hashlib_sha512(data).digest()
except ImportError:  # MicroPython: no sha512 in hashlib
    from sha512 import digest as _sha512

_P = 0x7fffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffed
_L = 0x1000000000000000000000000000000014def9dea2f79cd65812631a5cf5d3ed
_L8 = 8 * _L
# d = -121665/121666, 2d, sqrt(-1) = 2^((p-1)/4)
_D = 0x52036cee2b6ffe738cc740797779e89800700a4d4141d8ab75eb4dca135978a3
_D2 = 0x2406d9dc56dffce7198e80f2eef3d13000e0149a8283b156ebd69b9426b2f159
_SQRTM1 = 0x2b8324804fc1df0b2b4d00993dfbd7a72f431806ad2fe478c4ee1b274a0ea0b0
_MASK255 = (1 << 255) - 1
_MASK128 = (1 << 128) - 1
_BYTES = (bytes, bytearray, memoryview)


# ---------------------------------------------------------------- field

def _sqn(x, n):
    p = _P
    while n:
        x = x * x % p
        n -= 1
    return x


def _pow_2_250_1(z):
    """(z^(2^250-1), z^11): the shared head of inversion and square root
    (addition chain from ref10)."""
    p = _P
    z2 = z * z % p
    z9 = _sqn(z2, 2) * z % p
    z11 = z9 * z2 % p
    t = z11 * z11 % p * z9 % p          # 2^5 - 1
    t10 = _sqn(t, 5) * t % p            # 2^10 - 1
    t20 = _sqn(t10, 10) * t10 % p       # 2^20 - 1
    t = _sqn(t20, 20) * t20 % p         # 2^40 - 1
    t50 = _sqn(t, 10) * t10 % p         # 2^50 - 1
    t100 = _sqn(t50, 50) * t50 % p      # 2^100 - 1
    t = _sqn(t100, 100) * t100 % p      # 2^200 - 1
    return _sqn(t, 50) * t50 % p, z11   # 2^250 - 1


def _inv(z):
    """z^(p-2) = 1/z mod p (0 for 0)."""
    t, z11 = _pow_2_250_1(z % _P)
    return _sqn(t, 5) * z11 % _P        # 2^255 - 21


def _pow22523(z):
    """z^((p-5)/8) = z^(2^252-3)."""
    t, _ = _pow_2_250_1(z)
    return _sqn(t, 2) * z % _P


# ---------------------------------------------------------------- points

def _decode_point(b):
    """32 bytes -> affine (x, y), or None unless b is the canonical encoding
    of a curve point (RFC 8032 5.1.3; y >= p is rejected)."""
    p = _P
    y = int.from_bytes(b, "little")
    sign = y >> 255
    y &= _MASK255
    if y >= p:
        return None
    yy = y * y % p
    u = (yy - 1) % p
    v = (_D * yy + 1) % p
    v3 = v * v % p * v % p
    uv3 = u * v3 % p
    x = uv3 * _pow22523(uv3 * v3 % p * v % p) % p
    vxx = v * x % p * x % p
    if vxx != u:
        if vxx != p - u:
            return None
        x = x * _SQRTM1 % p
    if x == 0 and sign:
        return None
    if (x & 1) != sign:
        x = p - x
    return x, y


def _encode(X, Y, Z):
    p = _P
    zi = _inv(Z)
    x = X * zi % p
    y = Y * zi % p
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _small_order(x, y):
    """True when the affine point has order dividing 8 ([8]P is neutral)."""
    X, Y, Z = _msm(((b"\x00\x00\x00\x01", (_cached((x, y, 1, x * y % _P)),)),))
    return X % _P == 0 and (Y - Z) % _P == 0


def _add_cached(P1, c):
    """Extended point + cached point (Y+X, Y-X, 2Z, 2dT) -> extended.
    (add-2008-hwcd-3; complete, so it also doubles)."""
    p = _P
    X1, Y1, Z1, T1 = P1
    a = (Y1 - X1) * c[1] % p
    b = (Y1 + X1) * c[0] % p
    cc = T1 * c[3] % p
    d = Z1 * c[2] % p
    e = b - a
    f = d - cc
    g = d + cc
    h = b + a
    return e * f % p, g * h % p, f * g % p, e * h % p


def _cached(P1):
    p = _P
    X, Y, Z, T = P1
    return (Y + X) % p, (Y - X) % p, 2 * Z % p, _D2 * T % p


def _odd_multiples(x, y):
    """P, 3P, ..., 15P of the affine point P = (x, y), cached."""
    P1 = (x, y, 1, x * y % _P)
    c = _cached(P1)
    c2 = _cached(_add_cached(P1, c))
    out = [c]
    for _ in range(7):
        P1 = _add_cached(P1, c2)
        out.append(_cached(P1))
    return out


# The fixed-base tables: B, 3B, 5B, 7B, then [2^128]B, [3 * 2^128]B, ...;
# each point affine x, y, 32 bytes little-endian each.
_BT = (
    # B: x, y
    b"\x1a\xd5\x25\x8f\x60\x2d\x56\xc9\xb2\xa7\x25\x95\x60\xc7\x2c\x69"
    b"\x5c\xdc\xd6\xfd\x31\xe2\xa4\xc0\xfe\x53\x6e\xcd\xd3\x36\x69\x21"
    b"\x58\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66"
    b"\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66\x66"
    # 3B: x, y
    b"\x5c\xe2\xf8\xd3\x5f\x48\x62\xac\x86\x48\x62\x81\x19\x98\x43\x63"
    b"\x3a\xc8\xda\x3e\x74\xae\xf4\x1f\x49\x8f\x92\x22\x4a\x9c\xae\x67"
    b"\xd4\xb4\xf5\x78\x48\x68\xc3\x02\x04\x03\x24\x67\x17\xec\x16\x9f"
    b"\xf7\x9e\x26\x60\x8e\xa1\x26\xa1\xab\x69\xee\x77\xd1\xb1\x67\x12"
    # 5B: x, y
    b"\x33\xf2\x2e\x32\xc0\x9c\x40\x91\xa5\xe1\x1b\x3e\xf9\x19\x28\x5c"
    b"\xde\xa5\x2d\xd1\xf7\x7c\xef\xfc\x7b\x58\xe3\xad\x3e\xa7\xfd\x49"
    b"\xed\xc8\x76\xd6\x83\x1f\xd2\x10\x5d\x0b\x43\x89\xca\x2e\x28\x31"
    b"\x66\x46\x92\x89\x14\x6e\x2c\xe0\x6f\xae\xfe\x98\xb2\x25\x48\x5f"
    # 7B: x, y
    b"\x07\x41\x0e\xf5\x1a\x98\x55\x58\x95\xce\xf1\xbb\xf3\x09\xe8\x83"
    b"\x07\x81\x1d\x4b\x19\xee\xe3\xe9\x4e\xbd\xf4\xfc\x85\x86\x56\x14"
    b"\xb8\x62\x40\x9f\xb5\xc4\xc4\x12\x3d\xf2\xab\xf7\x46\x2b\x88\xf0"
    b"\x41\xad\x36\xdd\x68\x64\xce\x87\x2f\xd5\x47\x2b\xe3\x63\xc5\x31"
    # [2^128]B: x, y
    b"\x24\xe8\xb7\x60\xae\x47\x80\xfc\xe5\x23\xe7\xc2\xc9\x85\xe6\x98"
    b"\xa0\x29\x4e\xe1\x84\x39\x2d\x95\x2c\xf3\x45\x3c\xff\xaf\x27\x4c"
    b"\x6b\xa6\xf5\x4b\x11\xbd\xba\x5b\x9e\xc4\xa4\x51\x1e\xbe\xd0\x90"
    b"\x3a\x9c\xc2\x26\xb6\x1e\xf1\x95\x7d\xc8\x6d\x52\xe6\x99\x2c\x5f"
    # [3 * 2^128]B: x, y
    b"\xc7\xc7\x93\xf1\x89\xca\x25\x31\x4b\xd9\x56\x87\xcc\xba\xa4\xae"
    b"\x9b\xf0\x84\x8b\xa5\x3a\xfd\xa2\x1c\x95\x33\xb8\xaf\x86\xc1\x09"
    b"\x2f\x06\x7b\x7f\x35\x9a\x34\x1a\xf1\x4f\xd5\xbe\x6b\x2a\xa8\x02"
    b"\x1e\x4a\x86\x49\xb1\x95\x46\x93\x53\xb3\x27\x60\x74\xb0\x37\x61"
    # [5 * 2^128]B: x, y
    b"\x17\x4f\x2d\xb1\xa2\xe3\x19\x49\x55\x99\x3c\x97\xe5\x0c\xa1\xed"
    b"\xe8\xc9\x89\x5c\x36\xe0\x13\xb8\x82\xe0\xe4\xee\x96\x1f\x2e\x4a"
    b"\xc4\x6f\x84\xac\x32\xb8\xd4\x44\x64\xa6\x35\x73\x51\x9e\x22\xdc"
    b"\xa8\x0d\xdf\xbf\x88\x11\x95\x8c\x5b\x5c\x18\x2e\x82\x24\x3f\x6c"
    # [7 * 2^128]B: x, y
    b"\x85\x56\xed\x76\xdc\xba\x70\x93\x11\x5e\x27\xfd\x1a\x01\x8e\xb5"
    b"\xeb\x1c\x77\xf9\x7d\xd5\xf2\xf1\xc0\xd3\x75\x45\x04\x02\x37\x4b"
    b"\x20\xb8\x89\xd2\xac\x27\x20\x48\x92\xe2\xcc\xaf\x0f\xcb\x6d\xe3"
    b"\xaf\x6a\x60\xe5\x80\x7a\x42\x2f\xf5\x32\xf3\xac\x50\x3c\x33\x54")


def _btab(o):
    """The fixed-base table at byte offset o of _BT (0: B, 256: [2^128]B)
    as cached points (y+x, y-x, 2, 2dxy)."""
    f = int.from_bytes
    t = _BT
    p = _P
    out = []
    e = o + 256
    while o < e:
        x = f(t[o:o + 32], "little")
        y = f(t[o + 32:o + 64], "little")
        out.append(((y + x) % p, (y - x) % p, 2, _D2 * x % p * y % p))
        o += 64
    return out


# ---------------------------------------------------------------- scalars

def _wnaf(k, w):
    """Width-w NAF of 0 <= k < 2^256, least significant digit first (the
    last digits may be zeros). Digits are 0 or odd with |d| < 2^(w-1)
    (w <= 8), stored as bytes modulo 256 (a negative d is 256 + d): one
    small bytearray instead of a list of ints, so a verify under a tight,
    fragmented heap needs no kilobyte-sized block."""
    b = k.to_bytes(34, "little")
    top = 33
    while top >= 0 and b[top] == 0:
        top -= 1
    if top < 0:
        return bytearray(0)
    n = (top + 1) * 8 + 1
    out = bytearray(n)
    mask = (1 << w) - 1
    half = 1 << (w - 1)
    full = 1 << w
    carry = 0
    i = 0
    while i < n:
        j = i >> 3
        if ((b[j] >> (i & 7)) & 1) == carry:
            i += 1
            continue
        word = (((b[j] | (b[j + 1] << 8)) >> (i & 7)) & mask) + carry
        if word >= half:
            word -= full
            carry = 1
        else:
            carry = 0
        out[i] = word & 0xFF
        i += w
    return out


def _half_size(k):
    """(u, v) with u = v*k (mod 8L), u >= 0, v odd, both about 2^127.5."""
    N = _L8
    r0 = N
    r1 = k
    t0 = 0
    t1 = 1
    while r1 * r1 >= N:
        q = r0 // r1
        r0, r1 = r1, r0 - q * r1
        t0, t1 = t1, t0 - q * t1
    if t1 & 1:
        return r1, t1
    # t0 is odd (consecutive t are coprime), so every (r0 - q r1, t0 - q t1)
    # qualifies; as q grows the first shrinks and the second grows (t0 and
    # t1 have opposite signs): take the q that balances them.
    a0 = t0 if t0 >= 0 else -t0
    a1 = t1 if t1 >= 0 else -t1
    q = (r0 - a0) // (r1 + a1)
    if q < 0:
        q = 0
    best = None
    for qq in (q, q + 1):
        u = r0 - qq * r1
        if u < 0:
            continue
        m = a0 + qq * a1
        if u > m:
            m = u
        if best is None or m < best:
            best = m
            bu = u
            bv = t0 - qq * t1
    return bu, bv


# ---------------------------------------------------------------- Straus

def _msm(terms):
    """Sum of [k_i]P_i. terms: (naf digits, table) where table holds the odd
    multiples of P_i as cached points. Returns projective (X, Y, Z).
    Digits are read in place from each term's NAF (bytes, see _wnaf)."""
    p = _P
    n = 0
    for t in terms:
        if len(t[0]) > n:
            n = len(t[0])
    X = 0
    Y = 1
    Z = 1
    T = 0
    started = False
    i = n
    while i > 0:
        i -= 1
        adds = 0
        for t in terms:
            naf = t[0]
            if i < len(naf) and naf[i]:
                adds += 1
        if started:
            # doubling (dbl-2008-hwcd, a = -1); T only if an addition follows
            xx = X * X
            yy = Y * Y
            e = X + Y
            e = e * e
            zz = Z * Z
            h = (xx + yy) % p
            g = (xx - yy) % p
            e = (h - e) % p
            f = (zz + zz + g) % p
            X = e * f % p
            Y = g * h % p
            Z = f * g % p
            if adds:
                T = e * h % p
        if not adds:
            continue
        started = True
        for naf, tab in terms:
            if i >= len(naf):
                continue
            dg = naf[i]
            if not dg:
                continue
            adds -= 1
            # add-2008-hwcd-3 with the table entry, or with its negation
            # (-P swaps Y+X and Y-X and negates T)
            if dg < 128:
                c = tab[dg >> 1]
                a = (Y - X) * c[1] % p
                b = (Y + X) * c[0] % p
                cc = T * c[3] % p
            else:
                c = tab[(256 - dg) >> 1]
                a = (Y - X) * c[0] % p
                b = (Y + X) * c[1] % p
                cc = -T * c[3] % p
            zd = Z * c[2] % p
            e = b - a
            f = zd - cc
            g = zd + cc
            h = b + a
            X = e * f % p
            Y = g * h % p
            Z = f * g % p
            if adds:
                T = e * h % p
    return X, Y, Z


def _base_mul(s, more=()):
    """[s]B (plus the Straus terms `more`) for 0 <= s < 2^256."""
    return _msm(((_wnaf(s & _MASK128, 4), _btab(0)),
                 (_wnaf(s >> 128, 4), _btab(256))) + more)


# ---------------------------------------------------------------- API

def expand(seed):
    """An expanded ed25519 secret: seed -> (scalar a, prefix, public key).
    A caller that keeps this module out of its heap between signatures
    (snake/crypto.py on MicroPython) keeps this tuple instead of a
    SigningKey."""
    if not isinstance(seed, _BYTES) or len(seed) != 32:
        raise ValueError("seed must be 32 bytes")
    h = _sha512(bytes(seed))
    # clamp (RFC 8032 5.1.5): clear the low 3 bits and bit 255, set bit 254
    a = int.from_bytes(h[0:32], "little") & ((1 << 254) - 8) | (1 << 254)
    return a, h[32:64], _encode(*_base_mul(a % _L))


def sign_expanded(key, msg):
    """Sign msg with key = expand(seed)."""
    a, prefix, public = key
    msg = bytes(msg)
    r = int.from_bytes(_sha512(prefix + msg), "little") % _L
    R = _encode(*_base_mul(r))
    k = int.from_bytes(_sha512(R + public + msg), "little") % _L
    return R + ((r + k * a) % _L).to_bytes(32, "little")


class SigningKey:
    """An expanded ed25519 secret: seed -> (scalar a, prefix, public key)."""

    def __init__(self, seed):
        self._key = expand(seed)
        self.public = self._key[2]

    def sign(self, msg):
        return sign_expanded(self._key, msg)


def public_key(seed):
    return expand(seed)[2]


def sign(seed, msg):
    return sign_expanded(expand(seed), msg)


# Recently decoded public keys (valid ones only): a node verifies the same
# few peers' keys over and over, and decoding costs a square root. Only x is
# kept (y is the key's own low 255 bits, read again at no cost), copied into
# an exactly-sized int (results of `%` on MicroPython keep the dividend's
# digit capacity, twice the size): on a 32-bit port each 255-bit int costs
# 48 bytes of heap. A cache is [keys, xs, next slot]: verify() takes one the
# caller keeps (so it outlives this module's code where that comes and
# goes), else uses this module's own.
_KC = 4


def key_cache():
    return [[None] * _KC, [None] * _KC, 0]


_kc = key_cache()


def _decode_key(pub, kc):
    keys, xs, i = kc
    if pub in keys:
        return xs[keys.index(pub)], int.from_bytes(pub, "little") & _MASK255
    A = _decode_point(pub)
    if A is None or _small_order(A[0], A[1]):
        return None
    keys[i] = pub
    xs[i] = int.from_bytes(A[0].to_bytes(32, "little"), "little")
    kc[2] = (i + 1) % _KC
    return A


def verify(pub, msg, sig, kc=None):
    """True when sig is a valid signature of msg by pub; False for anything
    else, including malformed input. MemoryError is re-raised: running out
    of heap says nothing about the signature. kc: a key_cache() of the
    caller's (default: this module's)."""
    try:
        if not isinstance(pub, _BYTES) or len(pub) != 32:
            return False
        if not isinstance(sig, _BYTES) or len(sig) != 64:
            return False
        if not isinstance(msg, _BYTES):
            return False
        S = int.from_bytes(sig[32:64], "little")
        if S >= _L:
            return False
        pub = bytes(pub)
        A = _decode_key(pub, kc or _kc)
        if A is None:
            return False
        Rb = bytes(sig[0:32])
        R = _decode_point(Rb)
        if R is None or _small_order(R[0], R[1]):
            return False
        p = _P
        k = int.from_bytes(_sha512(Rb + pub + bytes(msg)), "little") % _L
        u, v = _half_size(k)
        # Q' = [v*S mod L]B + [u](-A) + [|v|](-sign(v) R)
        b = v * S % _L
        rx = (p - R[0]) % p if v > 0 else R[0]
        if v < 0:
            v = -v
        X, Y, Z = _base_mul(b,
                            ((_wnaf(u, 5), _odd_multiples((p - A[0]) % p, A[1])),
                             (_wnaf(v, 5), _odd_multiples(rx, R[1]))))
        return X % p == 0 and (Y - Z) % p == 0
    except MemoryError:
        raise
    except Exception:
        return False
