"""Memory on an ESP32's word size (issue 13): whole nodes in a board's heap,
on 32-bit builds of MicroPython 1.28.0 (`make mp32`, host_tools/procmesh/mp32.py;
the test builds them when they are missing or out of date).

1. ESP32_GENERIC, firmware frozen (build/mp32/micropython-frozen: the unix
   twin of the custom image `make firmware-image` builds; only function
   objects and state in RAM), `-X heapsize=110K` (a plain ESP32 with Wi-Fi
   and BLE up leaves ~110 KB of MicroPython heap).
2. ESP32_GENERIC_S3, stock-like build (build/mp32/micropython-stock, only
   asyncio frozen as on stock firmware), the firmware compiled to .mpy as
   `snakemesh deploy` puts it on a board, `-X heapsize=200K`.

Each case runs bench/heap_scenario.py for 60 s: three nodes in a TCP
triangle plus a BLE link per pair (emulated medium), scripted peers on every
other port keeping every table full. Passes when no node restarts or hits
MemoryError, every table reached its capacity, and every node has at least
35 % of its heap free after gc.collect() (console `mem`) in every sample
once its tables are full. The figures are printed (pytest -s).

SNAKEMESH_HEAP32 overrides the heap of both cases (e.g. 512K, to see the
use without pressure); SNAKEMESH_HEAP_SECONDS the duration.

3. `snakemesh mesh --micropython PATH --heapsize SIZE` runs every node on
   that interpreter with that heap (the frozen 32-bit build at 110K here).
"""
import json
import os
import subprocess
import sys

import pytest

import heap_scenario
from host_tools.procmesh import mp32

SECONDS = float(os.environ.get("SNAKEMESH_HEAP_SECONDS", "60"))
CASES = {
    # profile: (build variant, heap)
    "ESP32_GENERIC": ("frozen", "110K"),
    "ESP32_GENERIC_S3": ("stock", "200K"),
}


# The S3 runs stock MicroPython with the firmware as .mpy (bytecode in the
# heap): it keeps the budget because what a running node does not need
# between events is not kept (console commands, ping/trace, BLE and Wi-Fi
# bring-up, the boot code, one-shot constructors, the pure-Python ed25519,
# the datagram layer's logic). Code added to the resident modules shows
# here first; the figures: docs/reports/MEMORY.md.

# ESP32_GENERIC with ESP-NOW on (issue 27): its tables, Wi-Fi/TCP and ESP-NOW
# links (BLE off: the three radios' ports together leave ~28 % of 110K free,
# docs/reference/ESPNOW.md "Memory"), frozen build at 110K, an ESP-NOW link per pair.
CASES["ESP32_GENERIC+espnow"] = ("frozen", "110K")
ESPNOW_OVERRIDE = {"espnow": True, "ble": False}


def profile_for(case, tmp_path):
    """A board name, or for a "+espnow" case a profile file: the board's
    profile with ESPNOW_OVERRIDE."""
    if not case.endswith("+espnow"):
        return case
    from host_tools import BOARDS_DIR
    with open(os.path.join(BOARDS_DIR, case.split("+")[0], "profile.json")) as f:
        d = json.load(f)
    d.update(ESPNOW_OVERRIDE)
    path = str(tmp_path / "profile.json")
    with open(path, "w") as f:
        json.dump(d, f)
    return path


# With the datagram layer in use (issue 25: sends in flight full, acked
# datagrams delivered, a reassembly in flight where the profile has one).
# ESP32_GENERIC's tables are sized to leave room for it (and for telemetry
# over the mesh, issue 26: every node sends its records every 5 s to a
# gateway's stand-in a hop away, a scripted peer that decodes them;
# heap_scenario.py); the S3's .mpy case, bytecode in the heap, keeps it
# because the layer's logic and the pure-Python ed25519 are loaded per
# event, not kept (docs/reports/MEMORY.md "Application datagrams").
DGRAM_CASES = ("ESP32_GENERIC", "ESP32_GENERIC_S3")
TELEMETRY_S = 5.0


@pytest.mark.parametrize("profile,datagrams,telemetry",
                         [(p, False, None) for p in sorted(CASES)]
                         + [(p, True, None) for p in DGRAM_CASES]
                         + [("ESP32_GENERIC", False, TELEMETRY_S)])
def test_node_fits_board_heap_with_full_tables(profile, datagrams, telemetry, tmp_path):
    variant, heap = CASES[profile]
    heap = os.environ.get("SNAKEMESH_HEAP32", heap)
    res = heap_scenario.run(profile_for(profile, tmp_path), variant, heap, SECONDS, str(tmp_path / "run"),
                            datagrams=datagrams, telemetry=telemetry)
    print("\n" + "\n".join(heap_scenario.report(res)))
    assert not res.errors, "\n".join(res.errors)


def cli(*args, timeout=300):
    r = subprocess.run([sys.executable, "-m", "host_tools.cli"] + list(args),
                       capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def test_mesh_cli_takes_micropython_and_heapsize(tmp_path):
    frozen = mp32.binary("frozen")
    topo = tmp_path / "t.txt"
    topo.write_text("a b\n")
    out = tmp_path / "out"
    rc, so, se = cli("mesh", "--topology", str(topo), "--out", str(out), "--profile", "ESP32_GENERIC",
                     "--micropython", frozen, "--heapsize", "110K", "--duration", "3", "--pings", "2",
                     "--traces", "0")
    assert rc == 0, so[-2000:] + se[-2000:]
    # every node ran with that heap: telemetry's mem_free (after gc.collect)
    # is below the 110K heap, where the venv's default heap is megabytes
    recs = [json.loads(l) for l in (out / "telemetry.jsonl").read_text().splitlines()]
    frees = [r["mem_free"] for r in recs if r.get("kind") == "counters"]
    assert frees and all(0 < f < 110 * 1024 for f in frees), frees[:5]
    # bad values: one line, before any node starts
    rc, so, se = cli("mesh", "--topology", str(topo), "--out", str(out), "--micropython",
                     str(tmp_path / "nope"))
    assert rc != 0 and se.strip().splitlines() == [
        "snakemesh: error: --micropython %s: no such executable (build one with `make mp32`)" % (tmp_path / "nope")]
    rc, so, se = cli("mesh", "--topology", str(topo), "--out", str(out), "--heapsize", "12Q")
    assert rc == 2 and "expected a size like 110K" in se


# (profile, build, heap with room to spare, HEAP_NEED entry) measured for `snakemesh deploy`
NEED_RUNS = (("ESP32_GENERIC", "frozen", "256K", "frozen"),
             ("ESP32_GENERIC", "stock", "400K", "mpy"),
             ("ESP32_GENERIC_S3", "frozen", "256K", "frozen"),
             ("ESP32_GENERIC_S3", "stock", "400K", "mpy"),
             ("ESP32_GENERIC_C3", "frozen", "256K", "frozen"),
             ("ESP32_GENERIC_C3", "stock", "400K", "mpy"),
             ("ESP32_SPIRAM", "stock", "1M", "mpy"))


def test_deploy_heap_figures_are_current(tmp_path):
    """boards.HEAP_NEED (what `snakemesh deploy` compares a board's free heap
    with) is what the firmware uses now: the most any node of the scenario
    used, with room to spare so nothing else limits it, up to 12 % above."""
    from host_tools import boards, BOARDS_DIR
    # ESP32_GENERIC (depth 30, 320 routes: sized to the plain ESP32's frozen
    # budget) and _S3 (depth 10: its .mpy case was short of 35 %, README
    # Memory) differ in their tables, so each is measured both ways
    report = []
    bad = []
    for profile, variant, heap, key in NEED_RUNS:
        res = heap_scenario.run(profile, variant, heap, 20, str(tmp_path / (profile + variant)))
        assert not [e for e in res.errors if "free (" not in e], res.errors
        used = max(total - free for n in res.names for t, free, total, occ in res.samples[n])
        used = max([used] + [res.final[n]["used"] for n in res.names])
        fig = boards.HEAP_NEED[profile][key]
        report.append("%s %s: used at most %d B, HEAP_NEED %d B" % (profile, key, used, fig))
        if not used <= fig <= used * 1.12:
            bad.append(report[-1])
    print("\n" + "\n".join(report))
    assert not bad, "update host_tools/boards.py HEAP_NEED: %s" % bad
