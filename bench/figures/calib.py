# Calibration workload: the first 65 decimal digits of pi by Gibbons'
# unbounded spigot (big-integer arithmetic, like ed25519 field arithmetic).
# Runs under MicroPython and CPython; prints one JSON line:
#     {"digits_per_s": best rate over ROUNDS runs, "interpreter": ...}
#
# Why this workload: MicroPython's own performance suite publishes scores
# for the same computation (tests/perf_bench/bm_pidigits.py at N=100 M=100
# computes 65 digits; its score is digits per second) measured on ESP32
# boards, so the ratio host score / ESP32 score translates a time measured
# on the unix port of this machine into an ESP32 time (docs/reports/BENCH.md).
import sys
import json

try:
    import time
    _us = time.ticks_us
    _diff = time.ticks_diff
except AttributeError:
    import time

    def _us():
        return time.perf_counter_ns() // 1000

    def _diff(a, b):
        return a - b

DIGITS = 65


def _mul(a, b):
    # 2x2 matrices (q, r, s, t) = [[q, r], [s, t]]
    return (a[0] * b[0], a[0] * b[1] + a[1] * b[3],
            a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3])


def _floor_at(z, x):
    return (z[0] * x + z[1]) // (z[2] * x + z[3])


def pi_digits(n):
    z = (1, 0, 0, 1)
    k = 0
    out = []
    while len(out) < n:
        d = _floor_at(z, 3)
        if d == _floor_at(z, 4):
            out.append(d)
            z = _mul((10, -10 * d, 0, 1), z)
        else:
            k += 1
            z = _mul(z, (k, 4 * k + 2, 0, 2 * k + 1))
    return out


def measure(rounds=7, digits=DIGITS):
    first = pi_digits(digits)
    assert first[:6] == [3, 1, 4, 1, 5, 9]
    best = None
    for _ in range(rounds):
        t0 = _us()
        pi_digits(digits)
        dt = _diff(_us(), t0)
        if best is None or dt < best:
            best = dt
    return 1e6 * digits / max(best, 1)


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    print(json.dumps({"digits_per_s": measure(rounds), "digits": DIGITS, "rounds": rounds,
                      "interpreter": sys.implementation.name}))
