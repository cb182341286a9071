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
# API: digest(data) -> 64 bytes, one shot (all ed25519 needs). No streaming
# hashlib-style object: as .mpy its code would cost a board ~0.5 KB of heap
# that nothing uses.
#
# Heap: a board running this module as .mpy holds its constants in the heap
# (a frozen image keeps them in flash). They are bytes, not tuples of ints:
# on a 32-bit port every 32-bit half above 2^30 would be a boxed int of its
# own (176 of them, ~4 KB). The message schedule is a 16-word window
# (W[t] overwrites W[t-16]) in a list made per block.
import struct

# Round constants K[0..79] (first 64 bits of the fractional parts of the
# cube roots of the first 80 primes, FIPS 180-4 4.2.3) and the initial hash
# value H(0) (square roots of the first 8 primes, 5.3.5), big-endian.
# tests/firmware/test_sha512.py re-derives them from the primes.
_K = (
    b"\x42\x8a\x2f\x98\xd7\x28\xae\x22" b"\x71\x37\x44\x91\x23\xef\x65\xcd"
    b"\xb5\xc0\xfb\xcf\xec\x4d\x3b\x2f" b"\xe9\xb5\xdb\xa5\x81\x89\xdb\xbc"
    b"\x39\x56\xc2\x5b\xf3\x48\xb5\x38" b"\x59\xf1\x11\xf1\xb6\x05\xd0\x19"
    b"\x92\x3f\x82\xa4\xaf\x19\x4f\x9b" b"\xab\x1c\x5e\xd5\xda\x6d\x81\x18"
    b"\xd8\x07\xaa\x98\xa3\x03\x02\x42" b"\x12\x83\x5b\x01\x45\x70\x6f\xbe"
    b"\x24\x31\x85\xbe\x4e\xe4\xb2\x8c" b"\x55\x0c\x7d\xc3\xd5\xff\xb4\xe2"
    b"\x72\xbe\x5d\x74\xf2\x7b\x89\x6f" b"\x80\xde\xb1\xfe\x3b\x16\x96\xb1"
    b"\x9b\xdc\x06\xa7\x25\xc7\x12\x35" b"\xc1\x9b\xf1\x74\xcf\x69\x26\x94"
    b"\xe4\x9b\x69\xc1\x9e\xf1\x4a\xd2" b"\xef\xbe\x47\x86\x38\x4f\x25\xe3"
    b"\x0f\xc1\x9d\xc6\x8b\x8c\xd5\xb5" b"\x24\x0c\xa1\xcc\x77\xac\x9c\x65"
    b"\x2d\xe9\x2c\x6f\x59\x2b\x02\x75" b"\x4a\x74\x84\xaa\x6e\xa6\xe4\x83"
    b"\x5c\xb0\xa9\xdc\xbd\x41\xfb\xd4" b"\x76\xf9\x88\xda\x83\x11\x53\xb5"
    b"\x98\x3e\x51\x52\xee\x66\xdf\xab" b"\xa8\x31\xc6\x6d\x2d\xb4\x32\x10"
    b"\xb0\x03\x27\xc8\x98\xfb\x21\x3f" b"\xbf\x59\x7f\xc7\xbe\xef\x0e\xe4"
    b"\xc6\xe0\x0b\xf3\x3d\xa8\x8f\xc2" b"\xd5\xa7\x91\x47\x93\x0a\xa7\x25"
    b"\x06\xca\x63\x51\xe0\x03\x82\x6f" b"\x14\x29\x29\x67\x0a\x0e\x6e\x70"
    b"\x27\xb7\x0a\x85\x46\xd2\x2f\xfc" b"\x2e\x1b\x21\x38\x5c\x26\xc9\x26"
    b"\x4d\x2c\x6d\xfc\x5a\xc4\x2a\xed" b"\x53\x38\x0d\x13\x9d\x95\xb3\xdf"
    b"\x65\x0a\x73\x54\x8b\xaf\x63\xde" b"\x76\x6a\x0a\xbb\x3c\x77\xb2\xa8"
    b"\x81\xc2\xc9\x2e\x47\xed\xae\xe6" b"\x92\x72\x2c\x85\x14\x82\x35\x3b"
    b"\xa2\xbf\xe8\xa1\x4c\xf1\x03\x64" b"\xa8\x1a\x66\x4b\xbc\x42\x30\x01"
    b"\xc2\x4b\x8b\x70\xd0\xf8\x97\x91" b"\xc7\x6c\x51\xa3\x06\x54\xbe\x30"
    b"\xd1\x92\xe8\x19\xd6\xef\x52\x18" b"\xd6\x99\x06\x24\x55\x65\xa9\x10"
    b"\xf4\x0e\x35\x85\x57\x71\x20\x2a" b"\x10\x6a\xa0\x70\x32\xbb\xd1\xb8"
    b"\x19\xa4\xc1\x16\xb8\xd2\xd0\xc8" b"\x1e\x37\x6c\x08\x51\x41\xab\x53"
    b"\x27\x48\x77\x4c\xdf\x8e\xeb\x99" b"\x34\xb0\xbc\xb5\xe1\x9b\x48\xa8"
    b"\x39\x1c\x0c\xb3\xc5\xc9\x5a\x63" b"\x4e\xd8\xaa\x4a\xe3\x41\x8a\xcb"
    b"\x5b\x9c\xca\x4f\x77\x63\xe3\x73" b"\x68\x2e\x6f\xf3\xd6\xb2\xb8\xa3"
    b"\x74\x8f\x82\xee\x5d\xef\xb2\xfc" b"\x78\xa5\x63\x6f\x43\x17\x2f\x60"
    b"\x84\xc8\x78\x14\xa1\xf0\xab\x72" b"\x8c\xc7\x02\x08\x1a\x64\x39\xec"
    b"\x90\xbe\xff\xfa\x23\x63\x1e\x28" b"\xa4\x50\x6c\xeb\xde\x82\xbd\xe9"
    b"\xbe\xf9\xa3\xf7\xb2\xc6\x79\x15" b"\xc6\x71\x78\xf2\xe3\x72\x53\x2b"
    b"\xca\x27\x3e\xce\xea\x26\x61\x9c" b"\xd1\x86\xb8\xc7\x21\xc0\xc2\x07"
    b"\xea\xda\x7d\xd6\xcd\xe0\xeb\x1e" b"\xf5\x7d\x4f\x7f\xee\x6e\xd1\x78"
    b"\x06\xf0\x67\xaa\x72\x17\x6f\xba" b"\x0a\x63\x7d\xc5\xa2\xc8\x98\xa6"
    b"\x11\x3f\x98\x04\xbe\xf9\x0d\xae" b"\x1b\x71\x0b\x35\x13\x1c\x47\x1b"
    b"\x28\xdb\x77\xf5\x23\x04\x7d\x84" b"\x32\xca\xab\x7b\x40\xc7\x24\x93"
    b"\x3c\x9e\xbe\x0a\x15\xc9\xbe\xbc" b"\x43\x1d\x67\xc4\x9c\x10\x0d\x4c"
    b"\x4c\xc5\xd4\xbe\xcb\x3e\x42\xb6" b"\x59\x7f\x29\x9c\xfc\x65\x7e\x2a"
    b"\x5f\xcb\x6f\xab\x3a\xd6\xfa\xec" b"\x6c\x44\x19\x8c\x4a\x47\x58\x17"
)
_IV = (
    b"\x6a\x09\xe6\x67\xf3\xbc\xc9\x08" b"\xbb\x67\xae\x85\x84\xca\xa7\x3b"
    b"\x3c\x6e\xf3\x72\xfe\x94\xf8\x2b" b"\xa5\x4f\xf5\x3a\x5f\x1d\x36\xf1"
    b"\x51\x0e\x52\x7f\xad\xe6\x82\xd1" b"\x9b\x05\x68\x8c\x2b\x3e\x6c\x1f"
    b"\x1f\x83\xd9\xab\xfb\x41\xbd\x6b" b"\x5b\xe0\xcd\x19\x13\x7e\x21\x79"
)

_M = 0xffffffff


def _compress(st, buf, off, nblocks):
    """Process nblocks 128-byte blocks of buf starting at off into state st
    (list of 16 halves: H0 hi, H0 lo, H1 hi, ...)."""
    M = _M
    K = _K
    unpack_from = struct.unpack_from
    while nblocks:
        # W[t] is w[2j] (hi), w[2j + 1] (lo) with j = t mod 16
        w = list(unpack_from(">32I", buf, off))
        ah = st[0]; al = st[1]; bh = st[2]; bl = st[3]
        ch = st[4]; cl = st[5]; dh = st[6]; dl = st[7]
        eh = st[8]; el = st[9]; fh = st[10]; fl = st[11]
        gh = st[12]; gl = st[13]; hh = st[14]; hl = st[15]
        t = 0
        while t < 80:
            j = (t & 15) << 1
            if t < 16:
                wh = w[j]
                wl = w[j + 1]
            else:
                # W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]
                # s0 = ROTR1 ^ ROTR8 ^ SHR7 ; s1 = ROTR19 ^ ROTR61 ^ SHR6
                i = ((t + 1) & 15) << 1          # t - 15
                xh = w[i]
                xl = w[i + 1]
                i = ((t + 14) & 15) << 1         # t - 2
                yh = w[i]
                yl = w[i + 1]
                i = ((t + 9) & 15) << 1          # t - 7
                wl = ((((xl >> 1) | ((xh & 1) << 31)) ^ ((xl >> 8) | (xh << 24)) ^ ((xl >> 7) | (xh << 25))) & M) \
                    + ((((yl >> 19) | (yh << 13)) ^ ((yh >> 29) | (yl << 3)) ^ ((yl >> 6) | (yh << 26))) & M) \
                    + w[i + 1] + w[j + 1]
                wh = (((xh >> 1) | ((xl & 1) << 31)) ^ ((xh >> 8) | (xl << 24)) ^ (xh >> 7)) \
                    + (((yh >> 19) | (yl << 13)) ^ ((yl >> 29) | (yh << 3)) ^ (yh >> 6)) \
                    + w[i] + w[j] + (wl >> 32) & M
                wl &= M
                w[j] = wh
                w[j + 1] = wl
            kh, kl = unpack_from(">II", K, t << 3)
            # T1 = h + S1(e) + Ch(e, f, g) + K[t] + W[t]
            # S1 = ROTR14 ^ ROTR18 ^ ROTR41
            lo = hl + ((((el >> 14) | (eh << 18)) ^ ((el >> 18) | (eh << 14)) ^ ((eh >> 9) | (el << 23))) & M) \
                + (gl ^ (el & (fl ^ gl))) + kl + wl
            hi = hh + (((eh >> 14) | (el << 18)) ^ ((eh >> 18) | (el << 14)) ^ ((el >> 9) | (eh << 23))) \
                + (gh ^ (eh & (fh ^ gh))) + kh + wh + (lo >> 32)
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
        i = 0
        for xh, xl in ((ah, al), (bh, bl), (ch, cl), (dh, dl), (eh, el), (fh, fl), (gh, gl), (hh, hl)):
            lo = st[i + 1] + xl
            st[i] = (st[i] + xh + (lo >> 32)) & M
            st[i + 1] = lo & M
            i += 2
        off += 128
        nblocks -= 1


def digest(data):
    """SHA-512 of bytes-like data -> 64 bytes."""
    n = len(data)
    st = list(struct.unpack(">16I", _IV))
    full = n >> 7
    if full:
        _compress(st, data, 0, full)
    # padding (5.1.2): 0x80, zeros, the message length in bits (128 bits)
    nb = n & 127
    tail = bytes(data[n - nb:n]) + b"\x80" + bytes((111 - nb) & 127) + (n << 3).to_bytes(16, "big")
    _compress(st, tail, 0, len(tail) >> 7)
    return struct.pack(">16I", *st)
