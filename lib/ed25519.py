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
# width-5 NAF digits and one shared doubling chain; every table entry is a
# "cached" point (Y+X, Y-X, 2Z, 2dT).
#
# Fixed base: the odd multiples B, 3B, ..., 15B of the base point B and of
# B' = [2^128]B, affine (Z = 1, so an entry is y+x, y-x, 2, 2dxy), written
# out below as bytes (_BT; tests/firmware/test_ed25519.py recomputes them)
# and turned into ints per call (_btab: 48 int.from_bytes, well under 1 % of
# a verify). Bytes because a board running this module as .mpy holds its
# constants in the heap: 1.5 KB of bytes, where the same 48 numbers as int
# literals cost ~4.7 KB on a 32-bit port (a frozen image keeps either in
# flash). A scalar b < 2^253 is split b = b0 + 2^128 b1, so [b]B costs 128
# doublings.
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


# The fixed-base tables: B, 3B, ..., 15B, then [2^128]B, ..., [15 * 2^128]B;
# each point y+x, y-x, 2dxy (affine), 32 bytes little-endian each.
_BT = (
    # 1B: y+x, y-x, 2dxy
    b"\x85\x3b\x8c\xf5\xc6\x93\xbc\x2f\x19\x0e\x8c\xfb\xc6\x2d\x93\xcf"
    b"\xc2\x42\x3d\x64\x98\x48\x0b\x27\x65\xba\xd4\x33\x3a\x9d\xcf\x07"
    b"\x3e\x91\x40\xd7\x05\x39\x10\x9d\xb3\xbe\x40\xd1\x05\x9f\x39\xfd"
    b"\x09\x8a\x8f\x68\x34\x84\xc1\xa5\x67\x12\xf8\x98\x92\x2f\xfd\x44"
    b"\x68\xaa\x7a\x87\x05\x12\xc9\xab\x9e\xc4\xaa\xcc\x23\xe8\xd9\x26"
    b"\x8c\x59\x43\xdd\xcb\x7d\x1b\x5a\xa8\x65\x0c\x9f\x68\x7b\x11\x6f"
    # 3B: y+x, y-x, 2dxy
    b"\x30\x97\xee\x4c\xa8\xb0\x25\xaf\x8a\x4b\x86\xe8\x30\x84\x5a\x02"
    b"\x32\x67\x01\x9f\x02\x50\x1b\xc1\xf4\xf8\x80\x9a\x1b\x4e\x16\x7a"
    b"\x65\xd2\xfc\xa4\xe8\x1f\x61\x56\x7d\xba\xc1\xe5\xfd\x53\xd3\x3b"
    b"\xbd\xd6\x4b\x21\x1a\xf3\x31\x81\x62\xda\x5b\x55\x87\x15\xb9\x2a"
    b"\x89\xd8\xd0\x0d\x3f\x93\xae\x14\x62\xda\x35\x1c\x22\x23\x94\x58"
    b"\x4c\xdb\xf2\x8c\x45\xe5\x70\xd1\xc6\xb4\xb9\x12\xaf\x26\x28\x5a"
    # 5B: y+x, y-x, 2dxy
    b"\x33\xbb\xa5\x08\x44\xbc\x12\xa2\x02\xed\x5e\xc7\xc3\x48\x50\x8d"
    b"\x44\xec\xbf\x5a\x0c\xeb\x1b\xdd\xeb\x06\xe2\x46\xf1\xcc\x45\x29"
    b"\xba\xd6\x47\xa4\xc3\x82\x91\x7f\xb7\x29\x27\x4b\xd1\x14\x00\xd5"
    b"\x87\xa0\x64\xb8\x1c\xf1\x3c\xe3\xf3\x55\x1b\xeb\x73\x7e\x4a\x15"
    b"\x85\x82\x2a\x81\xf1\xdb\xbb\xbc\xfc\xd1\xbd\xd0\x07\x08\x0e\x27"
    b"\x2d\xa7\xbd\x1b\x0b\x67\x1b\xb4\x9a\xb6\x3b\x6b\x69\xbe\xaa\x43"
    # 7B: y+x, y-x, 2dxy
    b"\xbf\xa3\x4e\x94\xd0\x5c\x1a\x6b\xd2\xc0\x9d\xb3\x3a\x35\x70\x74"
    b"\x49\x2e\x54\x28\x82\x52\xb2\x71\x7e\x92\x3c\x28\x69\xea\x1b\x46"
    b"\xb1\x21\x32\xaa\x9a\x2c\x6f\xba\xa7\x23\xba\x3b\x53\x21\xa0\x6c"
    b"\x3a\x2c\x19\x92\x4f\x76\xea\x9d\xe0\x17\x53\x2e\x5d\xdd\x6e\x1d"
    b"\xa2\xb3\xb8\x01\xc8\x6d\x83\xf1\x9a\xa4\x3e\x05\x47\x5f\x03\xb3"
    b"\xf3\xad\x77\x58\xba\x41\x9c\x52\xa7\x90\x0f\x6a\x1c\xbb\x9f\x7a"
    # 9B: y+x, y-x, 2dxy
    b"\x2f\x63\xa8\xa6\x8a\x67\x2e\x9b\xc5\x46\xbc\x51\x6f\x9e\x50\xa6"
    b"\xb5\xf5\x86\xc6\xc9\x33\xb2\xce\x59\x7f\xdd\x8a\x33\xed\xb9\x34"
    b"\x64\x80\x9d\x03\x7e\x21\x6e\xf3\x9b\x41\x20\xf5\xb6\x81\xa0\x98"
    b"\x44\xb0\x5e\xe7\x08\xc6\xcb\x96\x8f\x9c\xdc\xfa\x51\x5a\xc0\x49"
    b"\x1b\xaf\x45\x90\xbf\xe8\xb4\x06\x2f\xd2\x19\xa7\xe8\x83\xff\xe2"
    b"\x16\xcf\xd4\x93\x29\xfc\xf6\xaa\x06\x8b\x00\x1b\x02\x72\xc1\x73"
    # 11B: y+x, y-x, 2dxy
    b"\xde\x2a\x80\x8a\x84\x00\xbf\x2f\x27\x2e\x30\x02\xcf\xfe\xd9\xe5"
    b"\x06\x34\x70\x17\x71\x84\x3e\x11\xaf\x8f\x6d\x54\xe2\xaa\x75\x42"
    b"\x48\x43\x86\x49\x02\x5b\x5f\x31\x81\x83\x08\x77\x69\xb3\xd6\x3e"
    b"\x95\xeb\x8d\x6a\x55\x75\xa0\xa3\x7f\xc7\xd5\x29\x80\x59\xab\x18"
    b"\xe9\x89\x60\xfd\xc5\x2c\x2b\xd8\xa4\xe4\x82\x32\xa1\xb4\x1e\x03"
    b"\x22\x86\x1a\xb5\x99\x11\x31\x44\x48\xf9\x3d\xb5\x22\x55\xc6\x3d"
    # 13B: y+x, y-x, 2dxy
    b"\x6d\x7f\x00\xa2\x22\xc2\x70\xbf\xdb\xde\xbc\xb5\x9a\xb3\x84\xbf"
    b"\x07\xba\x07\xfb\x12\x0e\x7a\x53\x41\xf2\x46\xc3\xee\xd7\x4f\x23"
    b"\x93\xbf\x7f\x32\x3b\x01\x6f\x50\x6b\x6f\x77\x9b\xc9\xeb\xfc\xae"
    b"\x68\x59\xad\xaa\x32\xb2\x12\x9d\xa7\x24\x60\x17\x2d\x88\x67\x02"
    b"\x78\xa3\x2e\x73\x19\xa1\x60\x53\x71\xd4\x8d\xdf\xb1\xe6\x37\x24"
    b"\x33\xe5\xa7\x91\xf8\x37\xef\xa2\x63\x78\x09\xaa\xfd\xa6\x7b\x49"
    # 15B: y+x, y-x, 2dxy
    b"\xa0\xea\xcf\x13\x03\xcc\xce\x24\x6d\x24\x9c\x18\x8d\xc2\x48\x86"
    b"\xd0\xd4\xf2\xc1\xfa\xbd\xbd\x2d\x2b\xe7\x2d\xf1\x17\x29\xe2\x61"
    b"\x0b\xcf\x8c\x46\x86\xcd\x0b\x04\xd6\x10\x99\x2a\xa4\x9b\x82\xd3"
    b"\x92\x51\xb2\x07\x08\x30\x08\x75\xbf\x5e\xd0\x18\x42\xcd\xb5\x43"
    b"\x16\xb5\xd0\x9b\x2f\x76\x9a\x5d\xee\xde\x3f\x37\x4e\xaf\x38\xeb"
    b"\x70\x42\xd6\x93\x7d\x5a\x2e\x03\x42\xd8\xe4\x0a\x21\x61\x1d\x51"
    # 1[2^128]B: y+x, y-x, 2dxy
    b"\xa2\x8e\xad\xac\xbf\x04\x3b\x58\x84\xe8\x8b\x14\xe8\x43\xb7\x29"
    b"\xdb\xc5\x10\x08\x3b\x58\x1e\x2b\xaa\xbb\xb3\x8e\xe5\x49\x54\x2b"
    b"\x47\xbe\x3d\xeb\x62\x75\x3a\x5f\xb8\xa0\xbd\x8e\x54\x38\xea\xf7"
    b"\x99\x72\x74\x45\x31\xe5\xc3\x00\x51\xd5\x27\x16\xe7\xe9\x04\x13"
    b"\xfe\x9c\xdc\x6a\xd2\x14\x98\x78\x0b\xdd\x48\x8b\x3f\xab\x1b\x3c"
    b"\x0a\xc6\x79\xf9\xff\xe1\x0f\xda\x93\xd6\x2d\x7c\x2d\xde\x68\x44"
    # 3[2^128]B: y+x, y-x, 2dxy
    b"\xf6\xcd\x0e\x71\xbf\x64\x5a\x4b\x3c\x29\x2c\x46\x38\xe5\x4c\xb1"
    b"\xb9\x3a\x0b\xd5\x56\xd0\x43\x36\x70\x48\x5b\x18\x24\x37\xf9\x6a"
    b"\x68\x3e\xe7\x8d\xab\xcf\x0e\xe9\xa5\x76\x7e\x37\x9f\x6f\x03\x54"
    b"\x82\x59\x01\xbe\x0b\x5b\x49\xf0\x36\x1e\xf4\xa7\xc4\x29\x76\x57"
    b"\x88\xa8\xc6\x09\x45\x02\x20\x32\x73\x89\x55\x4b\x13\x36\xe0\xd2"
    b"\x9f\x28\x33\x3c\x23\x36\xe2\x83\x8f\xc1\xae\x0c\xbb\x25\x1f\x70"
    # 5[2^128]B: y+x, y-x, 2dxy
    b"\xee\xbe\xb1\x5d\xd5\x9b\xee\x8d\xb9\x3f\x72\x0a\x37\xab\xc3\xc9"
    b"\x91\xd7\x68\x1c\xbf\xf1\xa8\x44\xde\x3c\xfd\x1c\x19\x44\x6d\x36"
    b"\xad\x20\x57\xfb\x8f\xd4\xba\xfb\x0e\x0d\xf9\xdb\x6b\x91\x81\xee"
    b"\xbf\x43\x55\x63\x52\x31\x81\xd4\xd8\x7b\x33\x3f\xeb\x04\x11\x22"
    b"\x14\x8c\xbc\xf2\x43\x17\x3c\x9e\x3b\x6c\x85\xb5\xfc\x26\xda\x2e"
    b"\x97\xfb\xa7\x68\x0e\x2f\xb8\xcc\x44\x32\x59\xbc\xe6\xa4\x67\x41"
    # 7[2^128]B: y+x, y-x, 2dxy
    b"\xb8\x0e\x77\x49\x89\xe2\x90\xdb\xa3\x40\xf4\xac\x2a\xcc\xfb\x98"
    b"\x9b\x87\xd7\xde\xfe\x4f\x35\x21\xb6\x06\x69\xf2\x54\x3e\x6a\x1f"
    b"\x9b\x61\x9c\x5b\xd0\x6c\xaf\xb4\x80\x84\xa5\xb2\xf4\xc9\xdf\x2d"
    b"\xc4\x4d\xe9\xeb\x02\xa5\x4f\x3d\x34\x5f\x7d\x67\x4c\x3a\xfc\x08"
    b"\xea\x34\x07\xd3\x99\xc1\xa4\x60\xd6\x5c\x16\x31\xb6\x85\xc0\x40"
    b"\x95\x82\x59\xf7\x23\x3e\x33\xe2\xd1\x00\xb9\x16\x01\xad\x2f\x4f"
    # 9[2^128]B: y+x, y-x, 2dxy
    b"\xcb\xc8\x37\x0e\xf7\x7e\xc2\x47\x79\xfa\x71\xb9\x11\xaa\x72\xc9"
    b"\x36\xd3\x0b\x87\xc7\x92\xda\x67\x73\xb0\x83\xa5\x0a\xa1\xc6\x3b"
    b"\x78\x2c\xdc\x45\xdb\xc5\xcb\xaf\xa3\x07\x6e\x80\x42\xab\x66\x2d"
    b"\x5e\x10\x1d\x41\x99\x0c\x52\x2a\x00\x0a\xbd\xae\xe2\x6d\xd8\x3f"
    b"\xcb\xae\x73\xf7\x82\x3d\x34\x02\x95\xc6\xa8\x1f\x66\xc4\x30\xcc"
    b"\x0c\x5a\xa6\x21\xdf\x16\xce\x5b\x2c\x34\x08\x94\xb6\xcc\x26\x53"
    # 11[2^128]B: y+x, y-x, 2dxy
    b"\x41\xda\xd2\xa0\x92\xf1\x27\xc2\x6e\x1d\xd8\x6e\x74\x5d\x5a\xf6"
    b"\x8d\xb0\xc7\xc1\xec\xe4\xd4\xb0\x39\xe3\xef\xda\x54\xc0\x4e\x4d"
    b"\x16\x54\xcc\x2d\xf9\x1d\x52\x9f\xda\x83\x3e\xe1\x27\xd7\x1a\xbb"
    b"\xc4\x62\x1d\xd2\x93\x60\x14\x5b\xfd\xa8\xdc\x4c\x6b\x29\x6d\x33"
    b"\x46\xcb\x36\x65\x51\xfc\xd6\xc4\x2c\xfb\xd0\x58\x23\x72\x6f\x17"
    b"\x29\xbc\x17\x83\x4f\xbc\xf2\xe4\xb8\xfc\x86\x64\x72\x97\xe3\x15"
    # 13[2^128]B: y+x, y-x, 2dxy
    b"\x00\x79\xc6\xa7\x4e\x3e\x4d\x91\x95\x3b\xdd\x1a\x93\x81\x1f\xad"
    b"\xab\x0f\x4e\xfc\x1b\xd9\x6a\xc4\x2a\x1f\xf5\xf4\x67\x1f\x75\x22"
    b"\xc7\x45\x1b\x18\x49\xb7\x4a\x96\xce\xa2\x03\x31\x18\x4f\xe2\xe5"
    b"\x4c\x40\x21\x33\xb6\xa7\x75\x2a\x10\xbf\xb1\xc4\xd5\xf6\x6c\x30"
    b"\xd4\x0e\x06\x22\xfa\x66\x33\xac\x58\xe2\x6b\x41\xeb\xd9\x02\x66"
    b"\xee\x4d\x52\xcf\xd1\xd0\x02\xd8\x2f\x8c\x38\x54\x52\x6e\xbd\x71"
    # 15[2^128]B: y+x, y-x, 2dxy
    b"\x00\x26\xa6\x3f\x92\x32\x78\x84\x83\x7f\x94\x25\x99\xa7\x65\x5f"
    b"\xd4\x03\x48\x7f\x0b\xd2\x40\xb3\xdc\x3d\x1f\x04\x3c\x5a\x58\x63"
    b"\x38\x76\x45\xd9\x93\x8e\x78\x0a\xd8\x89\x96\xae\x43\xb3\xbb\xd8"
    b"\x03\x41\xee\x23\x40\xd3\x41\x68\xba\x0d\x92\x33\xf4\xd3\xf6\x0f"
    b"\x90\x1c\x91\x71\xe8\x4e\x23\x4f\xf0\x73\x41\xcd\x18\x7a\xdc\x1a"
    b"\x3f\xaf\x06\x63\x0e\x1f\xcd\x84\x8d\xb9\x24\x71\xe3\x75\x18\x31"
)


def _btab(o):
    """The fixed-base table at byte offset o of _BT (0: B, 768: [2^128]B) as
    cached points (y+x, y-x, 2, 2dxy)."""
    f = int.from_bytes
    t = _BT
    out = []
    e = o + 768
    while o < e:
        out.append((f(t[o:o + 32], "little"), f(t[o + 32:o + 64], "little"), 2,
                    f(t[o + 64:o + 96], "little")))
        o += 96
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
    return _msm(((_wnaf(s & _MASK128, 5), _btab(0)),
                 (_wnaf(s >> 128, 5), _btab(768))) + more)


# ---------------------------------------------------------------- API

class SigningKey:
    """An expanded ed25519 secret: seed -> (scalar a, prefix, public key)."""

    def __init__(self, seed):
        if not isinstance(seed, _BYTES) or len(seed) != 32:
            raise ValueError("seed must be 32 bytes")
        h = _sha512(bytes(seed))
        # clamp (RFC 8032 5.1.5): clear the low 3 bits and bit 255, set bit 254
        self._a = int.from_bytes(h[0:32], "little") & ((1 << 254) - 8) | (1 << 254)
        self._prefix = h[32:64]
        self.public = _encode(*_base_mul(self._a % _L))

    def sign(self, msg):
        msg = bytes(msg)
        r = int.from_bytes(_sha512(self._prefix + msg), "little") % _L
        R = _encode(*_base_mul(r))
        k = int.from_bytes(_sha512(R + self.public + msg), "little") % _L
        return R + ((r + k * self._a) % _L).to_bytes(32, "little")


def public_key(seed):
    return SigningKey(seed).public


def sign(seed, msg):
    return SigningKey(seed).sign(msg)


# Recently decoded public keys (valid ones only): a node verifies the same
# few peers' keys over and over, and decoding costs a square root. Only x is
# kept (y is the key's own low 255 bits, read again at no cost), copied into
# an exactly-sized int (results of `%` on MicroPython keep the dividend's
# digit capacity, twice the size): on a 32-bit port each 255-bit int costs
# 48 bytes of heap.
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
    _kc_x[i] = int.from_bytes(A[0].to_bytes(32, "little"), "little")
    _kc_next = (i + 1) % _KC
    return A


def verify(pub, msg, sig):
    """True when sig is a valid signature of msg by pub; False for anything
    else, including malformed input. MemoryError is re-raised: running out
    of heap says nothing about the signature."""
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
