"""32-bit MicroPython unix ports: the ESP32's interpreter on this host.

The Makefile builds them (`make mp32`, docs/reports/MEMORY.md) from the pinned
MicroPython source archive into build/mp32/:

    micropython-frozen   the firmware frozen in by boards/ESP32_GENERIC/manifest.py
                         (as a custom board image has it: bytecode out of the heap)
    micropython-stock    stock-like: only asyncio frozen; the node imports .mpy

`binary(variant)` brings the build up to date (make's own dependencies: the
frozen variant follows every change to firmware/ and lib/) and returns the
path, so a test or benchmark that needs one builds it instead of skipping.
"""
import fcntl
import os
import subprocess

from host_tools import REPO_ROOT
from host_tools.errors import CliError

VARIANTS = ("frozen", "stock")
BUILD_DIR = os.path.join(REPO_ROOT, "build", "mp32")


def path(variant):
    if variant not in VARIANTS:
        raise ValueError("mp32 variant must be one of %s" % (VARIANTS,))
    return os.path.join(BUILD_DIR, "micropython-" + variant)


def binary(variant="frozen"):
    """Path of the 32-bit build `variant`, made (or brought up to date) first."""
    p = path(variant)
    os.makedirs(BUILD_DIR, exist_ok=True)
    # one build at a time (pytest processes, a bench run next to a test run)
    with open(os.path.join(BUILD_DIR, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(["make", "-s", "-C", REPO_ROOT, "mp32-" + variant],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or not os.path.exists(p):
        tail = " | ".join(r.stdout.strip().splitlines()[-4:])
        raise CliError("cannot build the 32-bit MicroPython (make mp32-%s): %s" % (variant, tail))
    return p
