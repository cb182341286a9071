# SHA-512 (FIPS 180-4, section 6.4) in pure Python for MicroPython, whose
# hashlib has no sha512, and CPython (where hashlib.sha512 is the faster
# choice; this module exists so both interpreters run the same code).
#
# Every 64-bit word is held as two 32-bit halves (hi, lo). On the MicroPython
# unix port small ints hold 62 bits, so 32-bit halves and the intermediate
# values below never become heap-allocated bignums, while full 64-bit words
# would (measured: see bench/crypto_bench.py and the report). Shifts left by
# 31 pre-mask the single bit that is kept so no intermediate reaches 2^62.
#
# API mirrors hashlib: sha512(data=b"") with update()/digest()/hexdigest()/
# copy(), digest_size, block_size, name; plus one-shot digest(data).
import struct
import binascii

digest_size = 64
block_size = 128

# Round constants K[t] (first 64 bits of the fractional parts of the cube roots
# of the first 80 primes) and the initial hash value H(0) (square roots of the
# first 8 primes), split into 32-bit halves. tests/firmware/test_sha512.py
# re-derives them from the primes. Tuples of literals: constants of the
# module's code, which a frozen build keeps in flash (a list would be built
# in the heap at import).
_KH = (
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2, 0xca273ece, 0xd186b8c7,
    0xeada7dd6, 0xf57d4f7f, 0x06f067aa, 0x0a637dc5, 0x113f9804, 0x1b710b35,
    0x28db77f5, 0x32caab7b, 0x3c9ebe0a, 0x431d67c4, 0x4cc5d4be, 0x597f299c,
    0x5fcb6fab, 0x6c44198c,
)
_KL = (
    0xd728ae22, 0x23ef65cd, 0xec4d3b2f, 0x8189dbbc, 0xf348b538, 0xb605d019,
    0xaf194f9b, 0xda6d8118, 0xa3030242, 0x45706fbe, 0x4ee4b28c, 0xd5ffb4e2,
    0xf27b896f, 0x3b1696b1, 0x25c71235, 0xcf692694, 0x9ef14ad2, 0x384f25e3,
    0x8b8cd5b5, 0x77ac9c65, 0x592b0275, 0x6ea6e483, 0xbd41fbd4, 0x831153b5,
    0xee66dfab, 0x2db43210, 0x98fb213f, 0xbeef0ee4, 0x3da88fc2, 0x930aa725,
    0xe003826f, 0x0a0e6e70, 0x46d22ffc, 0x5c26c926, 0x5ac42aed, 0x9d95b3df,
    0x8baf63de, 0x3c77b2a8, 0x47edaee6, 0x1482353b, 0x4cf10364, 0xbc423001,
    0xd0f89791, 0x0654be30, 0xd6ef5218, 0x5565a910, 0x5771202a, 0x32bbd1b8,
    0xb8d2d0c8, 0x5141ab53, 0xdf8eeb99, 0xe19b48a8, 0xc5c95a63, 0xe3418acb,
    0x7763e373, 0xd6b2b8a3, 0x5defb2fc, 0x43172f60, 0xa1f0ab72, 0x1a6439ec,
    0x23631e28, 0xde82bde9, 0xb2c67915, 0xe372532b, 0xea26619c, 0x21c0c207,
    0xcde0eb1e, 0xee6ed178, 0x72176fba, 0xa2c898a6, 0xbef90dae, 0x131c471b,
    0x23047d84, 0x40c72493, 0x15c9bebc, 0x9c100d4c, 0xcb3e42b6, 0xfc657e2a,
    0x3ad6faec, 0x4a475817,
)
_IV = (
    0x6a09e667, 0xf3bcc908, 0xbb67ae85, 0x84caa73b, 0x3c6ef372, 0xfe94f82b,
    0xa54ff53a, 0x5f1d36f1, 0x510e527f, 0xade682d1, 0x9b05688c, 0x2b3e6c1f,
    0x1f83d9ab, 0xfb41bd6b, 0x5be0cd19, 0x137e2179,
)

_M = 0xffffffff
_UNPACK = ">32I"


def _compress(st, buf, off, nblocks, wh, wl):
    """Process nblocks 128-byte blocks of buf starting at off into state st
    (list of 16 halves). wh/wl are scratch lists of 80 ints."""
    M = _M
    KH = _KH
    KL = _KL
    unpack_from = struct.unpack_from
    while nblocks:
        w = unpack_from(_UNPACK, buf, off)
        i = 0
        while i < 16:
            wh[i] = w[2 * i]
            wl[i] = w[2 * i + 1]
            i += 1
        # message schedule: W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]
        t = 16
        while t < 80:
            xh = wh[t - 15]
            xl = wl[t - 15]
            yh = wh[t - 2]
            yl = wl[t - 2]
            # s0 = ROTR1 ^ ROTR8 ^ SHR7 ; s1 = ROTR19 ^ ROTR61 ^ SHR6
            lo = ((((xl >> 1) | ((xh & 1) << 31)) ^ ((xl >> 8) | (xh << 24)) ^ ((xl >> 7) | (xh << 25))) & M) \
                + ((((yl >> 19) | (yh << 13)) ^ ((yh >> 29) | (yl << 3)) ^ ((yl >> 6) | (yh << 26))) & M) \
                + wl[t - 7] + wl[t - 16]
            wl[t] = lo & M
            wh[t] = (((xh >> 1) | ((xl & 1) << 31)) ^ ((xh >> 8) | (xl << 24)) ^ (xh >> 7)) \
                + (((yh >> 19) | (yl << 13)) ^ ((yl >> 29) | (yh << 3)) ^ (yh >> 6)) \
                + wh[t - 7] + wh[t - 16] + (lo >> 32) & M
            t += 1
        ah = st[0]; al = st[1]; bh = st[2]; bl = st[3]
        ch = st[4]; cl = st[5]; dh = st[6]; dl = st[7]
        eh = st[8]; el = st[9]; fh = st[10]; fl = st[11]
        gh = st[12]; gl = st[13]; hh = st[14]; hl = st[15]
        t = 0
        while t < 80:
            # T1 = h + S1(e) + Ch(e, f, g) + K[t] + W[t]
            # S1 = ROTR14 ^ ROTR18 ^ ROTR41
            lo = hl + ((((el >> 14) | (eh << 18)) ^ ((el >> 18) | (eh << 14)) ^ ((eh >> 9) | (el << 23))) & M) \
                + (gl ^ (el & (fl ^ gl))) + KL[t] + wl[t]
            hi = hh + (((eh >> 14) | (el << 18)) ^ ((eh >> 18) | (el << 14)) ^ ((el >> 9) | (eh << 23))) \
                + (gh ^ (eh & (fh ^ gh))) + KH[t] + wh[t] + (lo >> 32)
            lo &= M
            hh = gh; hl = gl; gh = fh; gl = fl; fh = eh; fl = el
            # e = d + T1
            el = dl + lo
            eh = (dh + hi + (el >> 32)) & M
            el &= M
            dh = ch; dl = cl
            # a = T1 + S0(a) + Maj(a, b, c); S0 = ROTR28 ^ ROTR34 ^ ROTR39
            lo += ((((al >> 28) | (ah << 4)) ^ ((ah >> 2) | (al << 30)) ^ ((ah >> 7) | (al << 25))) & M) \
                + ((al & bl) | (cl & (al | bl)))
            hi += ((((ah >> 28) | (al << 4)) ^ ((al >> 2) | (ah << 30)) ^ ((al >> 7) | (ah << 25))) & M) \
                + ((ah & bh) | (ch & (ah | bh))) + (lo >> 32)
            ch = bh; cl = bl; bh = ah; bl = al
            ah = hi & M
            al = lo & M
            t += 1
        # H(i) = H(i-1) + working variables
        for i, xh, xl in ((0, ah, al), (2, bh, bl), (4, ch, cl), (6, dh, dl),
                          (8, eh, el), (10, fh, fl), (12, gh, gl), (14, hh, hl)):
            lo = st[i + 1] + xl
            st[i] = (st[i] + xh + (lo >> 32)) & M
            st[i + 1] = lo & M
        off += 128
        nblocks -= 1


def _pad(n):
    """Padding for a message of n bytes: 0x80, zeros, 128-bit big-endian bit length."""
    z = (111 - n) % 128
    return b"\x80" + bytes(z) + struct.pack(">QQ", n >> 61, (n << 3) & 0xffffffffffffffff)


# message-schedule scratch of the one-shot digest(), allocated once: a
# verify on a board must not need two fresh 80-entry lists (a kilobyte
# block each on a 64-bit port) per hash. digest() does not yield, so one
# set is enough under MicroPython's cooperative asyncio. Zeroed after each
# hash: on a 32-bit port (ESP32) a 32-bit half above 2**30 is a heap int,
# and 160 of them left behind would keep ~4 KB alive between hashes.
_WH = [0] * 80
_WL = [0] * 80


def _wipe(wh, wl):
    i = 0
    while i < 80:
        wh[i] = 0
        wl[i] = 0
        i += 1


def digest(data):
    """One-shot SHA-512 of bytes-like data -> 64 bytes."""
    n = len(data)
    st = list(_IV)
    wh = _WH
    wl = _WL
    full = n >> 7
    if full:
        _compress(st, data, 0, full, wh, wl)
    tail = bytes(data[full << 7:]) + _pad(n)
    _compress(st, tail, 0, len(tail) >> 7, wh, wl)
    _wipe(wh, wl)
    return struct.pack(">16I", *st)


class sha512:
    name = "sha512"
    digest_size = 64
    block_size = 128

    def __init__(self, data=b""):
        self._st = list(_IV)
        self._buf = bytearray(128)
        self._nbuf = 0
        self._len = 0
        self._wh = [0] * 80
        self._wl = [0] * 80
        if data:
            self.update(data)

    def update(self, data):
        n = len(data)
        self._len += n
        pos = 0
        nb = self._nbuf
        buf = self._buf
        if nb:
            take = 128 - nb
            if take > n:
                take = n
            buf[nb:nb + take] = data[0:take]
            nb += take
            pos = take
            if nb < 128:
                self._nbuf = nb
                return
            _compress(self._st, buf, 0, 1, self._wh, self._wl)
            nb = 0
        full = (n - pos) >> 7
        if full:
            _compress(self._st, data, pos, full, self._wh, self._wl)
            pos += full << 7
        rest = n - pos
        if rest:
            buf[0:rest] = data[pos:n]
        self._nbuf = rest

    def copy(self):
        c = sha512()
        c._st = list(self._st)
        c._buf[:] = self._buf
        c._nbuf = self._nbuf
        c._len = self._len
        return c

    def digest(self):
        tail = bytes(self._buf[0:self._nbuf]) + _pad(self._len)
        st = list(self._st)
        _compress(st, tail, 0, len(tail) >> 7, self._wh, self._wl)
        _wipe(self._wh, self._wl)
        return struct.pack(">16I", *st)

    def hexdigest(self):
        return binascii.hexlify(self.digest()).decode()
