"""Shared helpers of the benchmark figures (CPython side).

A figure module exposes ``run(ctx) -> list of rows`` (see ``row``), and
may raise ``NotAvailable(reason)`` when what it measures cannot run here
(the driver reports the figure as "not available: <reason>").
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
FIGS = os.path.join(BENCH, "figures")
# the shared topologies: the repository's copy, else the shared folder next to it
TOPOLOGIES = os.path.join(ROOT, "host_tools", "topologies")
if not os.path.exists(os.path.join(TOPOLOGIES, "line-0050.txt")):
    TOPOLOGIES = os.path.join(os.path.dirname(ROOT), "shared", "topologies")

for _p in (ROOT, os.path.join(ROOT, "firmware"), os.path.join(ROOT, "lib")):
    if _p not in sys.path:
        sys.path.insert(0, _p)


class NotAvailable(Exception):
    """The figure cannot be measured here; str(e) says why."""


class Context(object):
    """Run-wide settings and values shared between figures."""

    def __init__(self, quick=False, reps=None, progress=None, esp32_factor=None, full=False):
        if quick and full:
            raise ValueError("quick and full exclude each other")
        self.quick = quick
        # the heavy figures (7, 8, 9) have three sizes: --quick, the default
        # (every figure within a sitting), --full (the cases as specified)
        self.full = full
        self.reps = reps if reps else (3 if quick else 5)
        self.reps_given = bool(reps)
        self.progress = progress
        self.esp32_factor = esp32_factor
        self.shared = {}          # cross-figure cache (e.g. the sim sweep)

    def size(self, quick, default, full):
        """The value for this run's size: --quick, default or --full."""
        return quick if self.quick else (full if self.full else default)

    def log(self, msg):
        if self.progress is not None:
            self.progress.write("  .. %s\n" % msg)
            self.progress.flush()


def row(metric, value, unit="", target=None, ok=None, note=None, ratio=None):
    """One line of the table. `target` is text ("<= 32 KiB"), `ok` True /
    False / None (no target); `ratio` the machine-independent form of a
    timing (value divided by a baseline measured in the same run)."""
    return {"metric": metric, "value": value, "unit": unit, "target": target,
            "pass": ok, "note": note, "ratio": ratio}


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    if n % 2:
        return xs[n // 2]
    return (xs[n // 2 - 1] + xs[n // 2]) / 2.0


def micropython():
    """Path of the MicroPython unix port (the venv's), or None."""
    cand = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.exists(cand):
        return cand
    cand = os.path.join(ROOT, ".venv", "bin", "micropython")
    if os.path.exists(cand):
        return cand
    import shutil
    return shutil.which("micropython")


def run_mp(args, heap=None, timeout=600, cwd=None, env=None, binary=None):
    """Run a script under micropython (`binary`, default the venv's;
    environment `env`, default ours); return its last stdout line parsed as
    JSON. Raises NotAvailable without micropython, RuntimeError when the
    script fails (with the tail of its output)."""
    mp = binary or micropython()
    if mp is None:
        raise NotAvailable("micropython (unix port) not found; run `make setup`")
    cmd = [mp]
    if heap:
        cmd += ["-X", "heapsize=%s" % heap]
    cmd += list(args)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT,
                         env=env)
    lines = [l for l in out.stdout.strip().splitlines() if l.strip()]
    if out.returncode != 0 or not lines:
        tail = (out.stderr or out.stdout or "").strip().splitlines()[-3:]
        raise RuntimeError("%s failed (exit %s): %s" % (os.path.basename(args[0]), out.returncode,
                                                       " | ".join(tail)))
    return json.loads(lines[-1])


def timed(fn, *a, **kw):
    t0 = time.monotonic()
    r = fn(*a, **kw)
    return r, time.monotonic() - t0
