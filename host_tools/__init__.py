"""snakemesh host toolkit: CLI, console client, flasher, deployer, simulators,
Spark pipeline and reports.

The firmware's router package (`snake`) and the device libraries in `lib/`
are importable from host code too (the simulator runs the shipped core);
this puts them on sys.path when running from a checkout.
"""
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIRMWARE_DIR = os.path.join(REPO_ROOT, "firmware")
LIB_DIR = os.path.join(REPO_ROOT, "lib")
BOARDS_DIR = os.path.join(REPO_ROOT, "boards")

for _p in (FIRMWARE_DIR, LIB_DIR):
    if os.path.isdir(_p) and _p not in sys.path:
        sys.path.insert(0, _p)

__version__ = "0.1.0"
