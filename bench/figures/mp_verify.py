# Pure-Python ed25519 verify time and the calibration workload, interleaved
# in one process (so a burst of machine load hits both alike). Run under
# micropython (the python backend is the only one there):
#     micropython [-X heapsize=110K] bench/figures/mp_verify.py [ROUNDS]
# Prints one JSON line: verify_ms (median, best), pidigits digits_per_s
# (best), ms per verify on the handshake-sized message.
import sys
import gc
import json

try:
    _f = __file__
except NameError:
    _f = "bench/figures/mp_verify.py"
_f = _f.replace("\\", "/")
_parts = _f.rsplit("/", 3)
ROOT = _parts[0] if len(_parts) == 4 else "."
sys.path.insert(0, ROOT + "/bench/figures")
sys.path.insert(0, ROOT + "/lib")
sys.path.insert(0, ROOT + "/firmware")

import calib                      # noqa: E402
from snake import crypto          # noqa: E402
from snake import crypto_backends  # noqa: E402

# the calibration's microsecond clock (MicroPython ticks or perf_counter)
_us = calib._us
_diff = calib._diff


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    if sys.implementation.name == "micropython":
        crypto_backends.use_backend("python")
    s = crypto.Signer(bytes(range(32)))
    # a bootstrap-sized signed message (varu64 seq | root key | varu64 seq)
    msg = b"\x86\xba\xf0\xa5\xc6\x53" + bytes(range(32)) + b"\x01"
    sig = s.sign(msg)
    assert crypto.verify(s.public, msg, sig)
    bad = bytes([sig[0] ^ 1]) + sig[1:]
    assert not crypto.verify(s.public, msg, bad)
    vt = []
    ct = []
    for _ in range(rounds):
        # each timed section starts on a collected heap (as a benchmark run
        # in a fresh process would); collections a verify itself causes on
        # a small heap are part of its cost
        gc.collect()
        t0 = _us()
        crypto.verify(s.public, msg, sig)
        vt.append(_diff(_us(), t0) / 1000.0)
        gc.collect()
        t0 = _us()
        calib.pi_digits(calib.DIGITS)
        ct.append(_diff(_us(), t0))
    # verify time in units of one calibration run, per round (interleaved,
    # so machine load largely cancels out)
    units = sorted(vt[i] * 1000.0 / max(ct[i], 1) for i in range(rounds))
    vt.sort()
    ct.sort()
    print(json.dumps({
        "interpreter": sys.implementation.name, "backend": crypto.BACKEND, "rounds": rounds,
        "verify_ms_median": vt[len(vt) // 2], "verify_ms_best": vt[0],
        "pidigits_per_s_best": 1e6 * calib.DIGITS / max(ct[0], 1),
        "pidigits_per_s_median": 1e6 * calib.DIGITS / max(ct[len(ct) // 2], 1),
        "verify_in_calib_units": units[len(units) // 2],
        "verify_in_calib_units_all": units,
    }))


main()
