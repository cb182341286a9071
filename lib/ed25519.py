# Ed25519 signatures (RFC 8032, section 5.1) in pure Python for MicroPython
# and CPython.
#
#   public_key(seed32) -> bytes(32)
#   sign(seed32, msg) -> bytes(64)
#   SigningKey(seed32): .public, .sign(msg)  (caches the expanded secret)
#   verify(pub32, msg, sig64) -> bool        (never raises)
#
# Field elements are ints modulo p = 2^255 - 19. Points use extended twisted
# Edwards coordinates (X:Y:Z:T) with x = X/Z, y = Y/Z, xy = T/Z (Hisil, Wong,
# Carter, Dawson 2008, a = -1). Multi-scalar multiplication is Straus with
# width-w NAF digits and one shared doubling chain.
#
# Fixed base: odd multiples of B and of B' = [2^128]B, in affine "Niels" form
# (y+x, y-x, 2dxy): 2 * 8 points, written out below as constants (_BTABS;
# tests/firmware/test_ed25519.py recomputes them with _compute_base_tables).
# A frozen build keeps them in flash; imported as .mpy they cost the heap
# what computing them at run time did (~2.9 KB on a 32-bit port).
# A scalar b < 2^253 is split b = b0 + 2^128 b1, so [b]B costs 128 doublings.
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
# d = -121665/121666, 2d, sqrt(-1) = 2^((p-1)/4), base point B (y = 4/5, x even)
_D = 0x52036cee2b6ffe738cc740797779e89800700a4d4141d8ab75eb4dca135978a3
_D2 = 0x2406d9dc56dffce7198e80f2eef3d13000e0149a8283b156ebd69b9426b2f159
_SQRTM1 = 0x2b8324804fc1df0b2b4d00993dfbd7a72f431806ad2fe478c4ee1b274a0ea0b0
_BX = 0x216936d3cd6e53fec0a4e231fdd6dc5c692cc7609525a7b2c9562d608f25d51a
_BY = 0x6666666666666666666666666666666666666666666666666666666666666658
_MASK255 = (1 << 255) - 1
_MASK128 = (1 << 128) - 1
_BYTES = (bytes, bytearray, memoryview)

# NAF widths: each fixed-base table holds 2^(_WB-2) points; the per-call
# tables for A and R hold 2^(_WV-2).
_WB = 5
_WV = 5



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
    p = _P
    X = x
    Y = y
    Z = 1
    for _ in range(3):
        xx = X * X
        yy = Y * Y
        s = X + Y
        s = s * s
        zz = Z * Z
        h = (xx + yy) % p
        g = (xx - yy) % p
        e = (h - s) % p
        f = (zz + zz + g) % p
        X = e * f % p
        Y = g * h % p
        Z = f * g % p
    return X == 0 and Y == Z


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


def _odd_multiples(x, y, w):
    """P, 3P, ..., (2^(w-1)-1)P of the affine point P = (x, y) as extended
    points."""
    p = _P
    P1 = (x, y, 1, x * y % p)
    c2 = _cached(_add_cached(P1, _cached(P1)))
    out = [P1]
    for _ in range((1 << (w - 2)) - 1):
        out.append(_add_cached(out[-1], c2))
    return out


def _compact(v):
    """A copy of 0 <= v < 2^256 in an exactly-sized int: results of `%` on
    MicroPython keep the dividend's digit capacity (twice the size)."""
    return int.from_bytes(v.to_bytes(32, "little"), "little")


def _affine_niels(pts):
    """Extended points -> affine (y+x, y-x, 2dxy), one shared inversion;
    compact ints, since the tables live for the whole run."""
    p = _P
    n = len(pts)
    acc = [1] * (n + 1)
    for i in range(n):
        acc[i + 1] = acc[i] * pts[i][2] % p
    inv = _inv(acc[n])
    out = [None] * n
    for i in range(n - 1, -1, -1):
        X, Y, Z, T = pts[i]
        zi = inv * acc[i] % p
        inv = inv * Z % p
        x = X * zi % p
        y = Y * zi % p
        out[i] = (_compact((y + x) % p), _compact((y - x) % p), _compact(_D2 * x % p * y % p))
    return out


def _compute_base_tables():
    """(table of B, table of [2^128]B) from scratch (_BTABS holds the result)."""
    p = _P
    t0 = _affine_niels(_odd_multiples(_BX, _BY, _WB))
    # B' = [2^128]B
    X, Y, Z = _msm(((_wnaf(1 << 128, 2), t0, True),))
    zi = _inv(Z)
    t1 = _affine_niels(_odd_multiples(X * zi % p, Y * zi % p, _WB))
    return (t0, t1)


def _base_tables():
    return _BTABS


# (table of B, table of [2^128]B): 2^(_WB-2) affine Niels points each
_BTABS = ((
    (0x07cf9d3a33d4ba65270b4898643d42c2cf932dc6fb8c0e192fbc93c6f58c3b85,
     0x44fd2f9298f81267a5c18434688f8a09fd399f05d140beb39d103905d740913e,
     0x6f117b689f0c65a85a1b7dcbdd43598c26d9e823ccaac49eabc91205877aaa68),
    (0x7a164e1b9a80f8f4c11b50029f016732025a8430e8864b8aaf25b0a84cee9730,
     0x2ab91587555bda628131f31a214bd6bd3bd353fde5c1ba7d56611fe8a4fcd265,
     0x5a2826af12b9b4c6d170e5458cf2db4c589423221c35da6214ae933f0dd0d889),
    (0x2945ccf146e206ebdd1beb0c5abfec448d5048c3c75eed02a212bc4408a5bb33,
     0x154a7e73eb1b55f3e33cf11cb864a087d50014d14b2729b77f9182c3a447d6ba,
     0x43aabe696b3bb69ab41b670b1bbda72d270e0807d0bdd1fcbcbbdbf1812a8285),
    (0x461bea69283c927e71b2528228542e497470353ab39dc0d26b1a5cd0944ea3bf,
     0x1d6edd5d2e5317e09dea764f92192c3a6ca021533bba23a7ba6f2c9aaa3221b1,
     0x7a9fbb1c6a0f90a7529c41ba5877adf3b3035f47053ea49af1836dc801b8b3a2),
    (0x34b9ed338add7f59ceb233c9c686f5b5a6509e6f51bc46c59b2e678aa6a8632f,
     0x49c05a51fadc9c8f96cbc608e75eb04498a081b6f520419bf36e217e039d8064,
     0x73c172021b008b06aaf6fc2993d4cf16e2ff83e8a719d22f06b4e8bf9045af1b),
    (0x4275aae2546d8faf113e847117703406e5d9fecf02302e272fbf00848a802ade,
     0x18ab598029d5c77fa3a075556a8deb953ed6b36977088381315f5b0249864348,
     0x3dc65522b53df94844311199b51a8622031eb4a13282e4a4d82b2cc5fd6089e9),
    (0x234fd7eec346f241537a0e12fb07ba07bf84b39ab5bcdedbbf70c222a2007f6d,
     0x0267882d176024a79d12b232aaad5968aefcebc99b776f6b506f013b327fbf93,
     0x497ba6fdaa097863a2ef37f891a7e5332437e6b1df8dd4715360a119732ea378),
    (0x61e22917f12de72b2dbdbdfac1f2d4d08648c28d189c246d24cecc0313cfeaa0,
     0x43b5cd4218d05ebf7508300807b25192d3829ba42a9910d6040bcd86468ccf0b,
     0x511d61210ae4d842032e5a7d93d64270eb38af4e373fdeee5d9a762f9bd0b516),
), (
    (0x2b5449e58eb3bbaa2b1e583b0810c5db29b743e8148be884583b04bfacad8ea2,
     0x1304e9e71627d55100c3e53145747299f7ea38548ebda0b85f3a7562eb3dbe47,
     0x4468de2d7c2dd693da0fe1fff979c60a3c1bab3f8b48dd0b789814d26adc9cfe),
    (0x6af93724185b48703643d056d50b3ab9b14ce538462c293c4b5a64bf710ecdf6,
     0x577629c4a7f41e36f0495b0bbe01598254036f9f377e76a5e90ecfab8de73e68,
     0x701f25bb0caec18f83e236233c33289fd2e036134b5589733220024509c6a888),
    (0x366d44191cfd3cde44a8f1bf1c68d791c9c3ab370a723fb98dee9bd55db1beee,
     0x221104eb3f337bd8d4813152635543bfee81916bdbf90d0efbbad48ffb5720ad,
     0x4167a4e6bc593244ccb82f0e68a7fb972eda26fcb5856c3b9e3c1743f2bc8c14),
    (0x1f6a3e54f26906b621354ffeded7879b98fbcc2aacf440a3db90e28949770eb8,
     0x08fc3a4c677d5f343d4fa502ebe94dc42ddfc9f4b2a58480b4af6cd05b9c619b,
     0x4f2fad0116b900d1e2333e23f759829540c085b631165cd660a4c199d30734ea),
    (0x3bc6a10aa583b07367da92c7870bd336c972aa11b971fa7947c27ef70e37c8cb,
     0x3fd86de2aebd0a002a520c99411d105e2d66ab42806e07a3afcbc5db45dc2c78,
     0x5326ccb69408342c5bce16df21a65a0ccc30c4661fa8c69502343d82f773aecb),
    (0x4d4ec054daefe339b0d4e4ecc1c7b08df65a5d746ed81d6ec227f192a0d2da41,
     0x336d296b4cdca8fd5b146093d21d62c4bb1ad727e13e83da9f521df92dcc5416,
     0x15e397726486fcb8e4f2bc4f8317bc29176f722358d0fb2cc4d6fc516536cb46),
    (0x22751f67f4f51f2ac46ad91bfc4e0fabad1f81931add3b95914d3e4ea7c67900,
     0x306cf6d5c4b1bf102a75a7b63321404ce5e24f183103a2ce964ab749181b45c7,
     0x71bd6e5254388c2fd802d0d1cf524dee6602d9eb416be258ac3366fa22060ed4),
    (0x63585a3c041f3ddcb340d20b7f4803d45f65a79925947f83847832923fa62600,
     0x0ff6d3f433920dba6841d34023ee4103d8bbb343ae9689d80a788e93d9457638,
     0x311875e37124b98d84cd1f0e6306af3f1adc7a18cd4173f04f234ee871911c90),
))


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
    """Sum of [k_i]P_i. terms: (naf digits, table, affine) where table holds
    the odd multiples of P_i, as affine Niels (y+x, y-x, 2dxy) when affine
    is True, else cached (Y+X, Y-X, 2Z, 2dT). Returns projective (X, Y, Z).
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
        for naf, tab, aff in terms:
            if i >= len(naf):
                continue
            dg = naf[i]
            if not dg:
                continue
            adds -= 1
            if dg < 128:
                c = tab[dg >> 1]
                a = (Y - X) * c[1] % p
                b = (Y + X) * c[0] % p
                if aff:
                    cc = T * c[2] % p
                    zd = Z + Z
                else:
                    cc = T * c[3] % p
                    zd = Z * c[2] % p
            else:
                c = tab[(256 - dg) >> 1]
                a = (Y - X) * c[0] % p
                b = (Y + X) * c[1] % p
                if aff:
                    cc = -T * c[2] % p
                    zd = Z + Z
                else:
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


def _base_mul(s):
    """[s]B for 0 <= s < 2^256 (s is reduced mod L first)."""
    t0, t1 = _base_tables()
    s %= _L
    return _msm(((_wnaf(s & _MASK128, _WB), t0, True),
                 (_wnaf(s >> 128, _WB), t1, True)))


# ---------------------------------------------------------------- API

def _clamp(h32):
    a = int.from_bytes(h32, "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a


class SigningKey:
    """An expanded ed25519 secret: seed -> (scalar a, prefix, public key)."""

    def __init__(self, seed):
        if not isinstance(seed, _BYTES) or len(seed) != 32:
            raise ValueError("seed must be 32 bytes")
        h = _sha512(bytes(seed))
        self._a = _clamp(h[0:32])
        self._prefix = h[32:64]
        X, Y, Z = _base_mul(self._a)
        self.public = _encode(X, Y, Z)

    def sign(self, msg):
        msg = bytes(msg)
        r = int.from_bytes(_sha512(self._prefix + msg), "little") % _L
        X, Y, Z = _base_mul(r)
        R = _encode(X, Y, Z)
        k = int.from_bytes(_sha512(R + self.public + msg), "little") % _L
        S = (r + k * self._a) % _L
        return R + S.to_bytes(32, "little")


def public_key(seed):
    return SigningKey(seed).public


def sign(seed, msg):
    return SigningKey(seed).sign(msg)


def verify(pub, msg, sig):
    """True when sig is a valid signature of msg by pub; False for anything
    else, including malformed input. MemoryError is re-raised: running out
    of heap says nothing about the signature."""
    try:
        return _verify(pub, msg, sig)
    except MemoryError:
        raise
    except Exception:
        return False


# Recently decoded public keys (valid ones only): a node verifies the same
# few peers' keys over and over, and decoding costs a square root. Only x is
# kept (y is the key's own low 255 bits, read again at no cost): on a
# 32-bit port each 255-bit int costs 48 bytes of heap.
_KC = 4
_kc_keys = [None] * _KC
_kc_x = [None] * _KC
_kc_next = 0


def _decode_key(pub):
    global _kc_next
    if pub in _kc_keys:
        return _kc_x[_kc_keys.index(pub)], int.from_bytes(pub, "little") & _MASK255
    A = _decode_point(pub)
    if A is None or _small_order(A[0], A[1]):
        return None
    i = _kc_next
    _kc_keys[i] = pub
    _kc_x[i] = _compact(A[0])
    _kc_next = (i + 1) % _KC
    return A


def _verify(pub, msg, sig):
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
    A = _decode_key(pub)
    if A is None:
        return False
    Rb = bytes(sig[0:32])
    R = _decode_point(Rb)
    if R is None or _small_order(R[0], R[1]):
        return False
    p = _P
    k = int.from_bytes(_sha512(Rb + pub + bytes(msg)), "little") % _L
    u, v = _half_size(k)
    b = v * S % _L
    t0, t1 = _base_tables()
    # Q' = [b0]B + [b1]B' + [u](-A) + [|v|](-sign(v) R)
    ax = (p - A[0]) % p
    rx = (p - R[0]) % p if v > 0 else R[0]
    if v < 0:
        v = -v
    ta = [_cached(P1) for P1 in _odd_multiples(ax, A[1], _WV)]
    tr = [_cached(P1) for P1 in _odd_multiples(rx, R[1], _WV)]
    X, Y, Z = _msm(((_wnaf(b & _MASK128, _WB), t0, True),
                    (_wnaf(b >> 128, _WB), t1, True),
                    (_wnaf(u, _WV), ta, False),
                    (_wnaf(v, _WV), tr, False)))
    return X % p == 0 and (Y - Z) % p == 0
