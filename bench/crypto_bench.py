"""ed25519 / SHA-512 speed per backend and interpreter (a script, not a test).

    .venv/bin/python bench/crypto_bench.py [--json] [--rounds N]

Under CPython it measures every backend snake.crypto can load, then runs
itself under the MicroPython unix port (.venv/bin/micropython, default heap
and a 110 KB heap like an ESP32's) for the pure-Python backend. Prints the
median sign and verify time (ms) and pure-Python SHA-512 throughput; with
--json, one JSON object instead. `run()` returns the same dict for
bench/run.py.
"""
import sys

try:
    import time
    _ticks_us = time.ticks_us
    _ticks_diff = time.ticks_diff
except AttributeError:  # CPython
    import time

    def _ticks_us():
        return time.perf_counter_ns() // 1000

    def _ticks_diff(a, b):
        return a - b


def _root():
    f = globals().get("__file__", "bench/crypto_bench.py").replace("\\", "/")
    parts = f.rsplit("/", 2)
    if len(parts) == 3:
        return parts[0]
    return "."


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _time_ms(fn, rounds):
    """(median, best) milliseconds over `rounds` calls."""
    out = []
    for _ in range(rounds):
        t0 = _ticks_us()
        fn()
        out.append(_ticks_diff(_ticks_us(), t0) / 1000.0)
    return _median(out), min(out)


def measure(rounds, backends):
    """Median ms for each backend name in `backends` on this interpreter."""
    from snake import crypto, crypto_backends
    results = []
    seed = bytes(range(32))
    msg = b"\x01\x00\x00\x00\x00\x00\x00\x3b" + bytes(32)  # handshake-sized
    for name in backends:
        crypto_backends.use_backend(name)
        n = rounds if name == "python" else rounds * 10
        t0 = _ticks_us()
        signer = crypto.Signer(seed)
        first_ms = _ticks_diff(_ticks_us(), t0) / 1000.0
        sig = signer.sign(msg)
        assert crypto.verify(signer.public, msg, sig)
        kg = _time_ms(lambda: crypto.Signer(seed), n)
        sg = _time_ms(lambda: signer.sign(msg), n)
        vf = _time_ms(lambda: crypto.verify(signer.public, msg, sig), n)
        results.append({
            "backend": name,
            "interpreter": sys.implementation.name,
            "rounds": n,
            "first_signer_ms": round(first_ms, 3),
            "keygen_ms": round(kg[0], 4),
            "sign_ms": round(sg[0], 4),
            "verify_ms": round(vf[0], 4),
            "sign_best_ms": round(sg[1], 4),
            "verify_best_ms": round(vf[1], 4),
        })
    return results


def measure_python_extras(rounds):
    import gc
    import sha512
    import ed25519
    out = {}
    data = bytes(128 * 8 - 17)
    ms = _time_ms(lambda: sha512.digest(data), rounds)[1]
    out["sha512_us_per_block"] = round(ms * 1000 / 8, 1)
    seed = bytes(range(32))
    key = ed25519.SigningKey(seed)
    sig = key.sign(b"x")
    mf = getattr(gc, "mem_free", None)
    if mf is not None:
        # bytes allocated (garbage included) by one verify, when the heap is
        # big enough to measure it
        gc.collect()
        f0 = mf()
        if f0 > 1024 * 1024:   # only where no collection can interfere
            gc.disable()
            ed25519.verify(key.public, b"x", sig)
            out["verify_alloc_bytes"] = f0 - mf()
            gc.enable()
    # the fixed-base tables: one bytes constant of the module (in the heap
    # when imported as .mpy, in flash when frozen), decoded per call
    out["base_tables_bytes"] = len(ed25519._BT)
    return out


def child(rounds):
    """Run under MicroPython: measure the python backend, print JSON."""
    import json
    root = _root()
    for p in ("/lib", "/firmware"):
        sys.path.insert(0, root + p)
    res = measure(rounds, ["python"])
    res[0].update(measure_python_extras(rounds))
    print(json.dumps(res))


def run(rounds=21, micropython=None):
    import json
    import os
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for p in ("lib", "firmware"):
        full = os.path.join(root, p)
        if full not in sys.path:
            sys.path.insert(0, full)
    from snake import crypto, crypto_backends
    before = crypto.BACKEND
    rows = measure(rounds, crypto_backends.available_backends())
    if rows[-1]["backend"] == "python":
        rows[-1].update(measure_python_extras(rounds))
    crypto_backends.use_backend(before)
    mp = micropython or os.path.join(root, ".venv", "bin", "micropython")
    for heap in (None, "110K"):
        if not os.path.exists(mp):
            break
        cmd = [mp]
        if heap:
            cmd += ["-X", "heapsize=" + heap]
        cmd += [os.path.join(root, "bench", "crypto_bench.py"), "--child", "--rounds", str(rounds)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            rows.append({"backend": "python", "interpreter": "micropython", "heap": heap,
                         "error": (out.stderr or out.stdout)[-500:]})
            continue
        for r in json.loads(out.stdout.strip().splitlines()[-1]):
            r["heap"] = heap or "default"
            rows.append(r)
    return {"crypto": rows}


def main():
    args = sys.argv[1:]
    rounds = 21
    if "--rounds" in args:
        rounds = int(args[args.index("--rounds") + 1])
    if "--child" in args:
        child(rounds)
        return
    import json
    res = run(rounds)
    if "--json" in args:
        print(json.dumps(res, indent=1))
        return
    print("median (best) milliseconds; the machine may be shared, so best is the steadier figure")
    print("%-13s %-12s %-8s %17s %17s %9s  %s" % ("backend", "interpreter", "heap", "sign ms",
                                                "verify ms", "keygen ms", "notes"))
    for r in res["crypto"]:
        if "error" in r:
            print("%-13s %-12s %-8s error: %s" % (r["backend"], r["interpreter"], r.get("heap"), r["error"]))
            continue
        notes = []
        if "sha512_us_per_block" in r:
            notes.append("sha512 %.0f us/block" % r["sha512_us_per_block"])
        if "first_signer_ms" in r and r["backend"] == "python":
            notes.append("first Signer %.1f ms" % r["first_signer_ms"])
        if "base_tables_bytes" in r:
            notes.append("tables %d B" % r["base_tables_bytes"])
        if "verify_alloc_bytes" in r:
            notes.append("verify allocates %d B" % r["verify_alloc_bytes"])
        print("%-13s %-12s %-8s %8.3f (%6.3f) %8.3f (%6.3f) %9.3f  %s" % (
            r["backend"], r["interpreter"], r.get("heap", "-"), r["sign_ms"], r["sign_best_ms"],
            r["verify_ms"], r["verify_best_ms"], r["keygen_ms"], ", ".join(notes)))


if __name__ == "__main__":
    main()
