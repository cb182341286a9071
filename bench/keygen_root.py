"""How long `snakemesh keygen --profile GATEWAY` takes to draw a gateway's
key (public key starting with keystore.ROOT_PREFIX, ffff): the draw of
host_tools/keystore.py with the host's ed25519 backend, N keys.

    .venv/bin/python bench/keygen_root.py [N]     # default 10

Prints the backend, draws and seconds per key (median, min, max) and the
time per draw. The number of draws is geometric with mean 65,536.
"""
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv else 10
    import host_tools  # noqa: F401
    from host_tools import keystore
    from snake import crypto
    draws, secs = [], []
    for _ in range(n):
        t = time.perf_counter()
        _, pub, k = keystore.draw_seed(True)
        secs.append(time.perf_counter() - t)
        draws.append(k)
        if not keystore.is_root_key(pub):
            raise SystemExit("bug: not a root key")
    print("backend %s, %d keys" % (crypto.BACKEND, n))
    print("draws:   median %d, min %d, max %d" % (statistics.median(draws), min(draws), max(draws)))
    print("seconds: median %.2f, min %.2f, max %.2f" % (statistics.median(secs), min(secs), max(secs)))
    print("per draw: %.1f us" % (sum(secs) / sum(draws) * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
