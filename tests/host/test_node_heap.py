"""Memory: three unix-port nodes with the ESP32_GENERIC profile and a fixed
MicroPython heap run a mesh for 60 s with every table filled to capacity,
without MemoryError, without a frame dropped for lack of memory, and with
every signature check done. The firmware runs compiled to .mpy, as deployed
on a board. The nodes find each other by multicast inside a private network
namespace; scripted peers (bench/heap_scenario.py's Filler) take every free
port and keep the tables full: bootstraps from 48 synthetic keys per node
(routes), traffic from synthetic sources (coordinate cache), wakeups from
synthetic origins (wakeup filter), all signed (signature cache).

The heap is 384K, not the 110K of an ESP32 without PSRAM: on the 64-bit
unix port the imported firmware alone (.mpy bytecode, qstrs, function and
module objects with 8-byte pointers) takes ~120 KB before the node does
anything, so 110K cannot even boot; at 256K the pure-Python verify's bignum
churn hits MemoryError (fragmentation), and at 300K it still does now and
then under load (a few frames dropped as no_memory per minute). The
measured steady state is printed (pytest -s). See docs/reports/MEMORY.md for what this means on a board
(frozen modules / ROMFS keep bytecode out of the heap).

SNAKEMESH_HEAP overrides the heap size (e.g. 110K) to measure the margin;
SNAKEMESH_HEAP_SECONDS the duration.
"""
import os
import time

import pytest

from host_tools.procmesh.nodeproc import NodeProcess, build_mpy, free_port, micropython_binary

from heap_scenario import Filler  # bench/, on sys.path in conftest
from test_node_mesh import Netns

pytestmark = pytest.mark.skipif(micropython_binary() is None, reason="micropython binary missing")

HEAP = os.environ.get("SNAKEMESH_HEAP", "384K")
SECONDS = float(os.environ.get("SNAKEMESH_HEAP_SECONDS", "60"))
PROFILE = "ESP32_GENERIC"


def _capacity(profile):
    # the tables as the shipped profile sizes them
    import json
    from host_tools import BOARDS_DIR
    with open(os.path.join(BOARDS_DIR, profile, "profile.json")) as f:
        p = json.load(f)
    return {"peers": p["max_peers"], "routes": p["max_routes"], "coords": p["coord_cache"],
            "sigcache": p["sig_cache"], "wakeups": p["wakeup_filter"]}


CAPACITY = _capacity(PROFILE)
FAKES_PER_NODE = CAPACITY["peers"] - 2
# more bootstrapping keys than the routing table holds (it must run full)
SYNTH_PER_NODE = max(48, CAPACITY["routes"] + 16)


def _req(n, cmd, timeout=15):
    from host_tools.errors import CliError
    try:
        return n.request(cmd, timeout=timeout)
    except CliError as e:
        raise AssertionError("%s (alive: %s; unmatched replies: %s)"
                             % (e.message[:300], n.alive(), list(n.pending)[-5:]))


def test_esp32_profile_full_tables_in_a_fixed_heap(tmp_path):
    mpy = build_mpy(str(tmp_path / "mpy"))
    ns = Netns()
    nodes = []
    filler = None
    try:
        from host_tools.errors import CliError
        for i in range(3):
            n = NodeProcess(seed=bytes([0x90 + i]) * 32, profile=PROFILE, heapsize=HEAP, mpy_dir=mpy,
                            netns_pid=ns.pid, listen=("127.0.0.1", free_port()),
                            stderr=str(tmp_path / ("node%d.err" % i)))
            nodes.append(n)
            try:
                n.start(timeout=30)
            except CliError as e:
                err = open(n.stderr).read()[-600:] if os.path.exists(n.stderr) else ""
                raise AssertionError("a node with the %s profile cannot even boot in a %s heap: %s %s"
                                     % (PROFILE, HEAP, e.message[:400], err))
        keys = [n.pubkey for n in nodes]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            st = [_req(n, "status") for n in nodes]
            if all(s["peers"] == 2 and s["root"] == max(keys) for s in st):
                break
            time.sleep(0.5)
        assert all(s["peers"] == 2 and s["root"] == max(keys) for s in st), st
        filler = Filler(ns.pid, [(n.listen[1], n.pubkey) for n in nodes], FAKES_PER_NODE, SYNTH_PER_NODE)
        filler.start()
        samples = []
        t_end = time.monotonic() + SECONDS
        k = 0
        while time.monotonic() < t_end:
            time.sleep(5)
            assert filler.error is None, "scripted peers failed: %r" % (filler.error,)
            # the mesh keeps carrying traffic meanwhile
            a, b = nodes[k % 3], nodes[(k + 1) % 3]
            k += 1
            p = _req(a, "ping %s 1" % b.pubkey)
            assert p["ok"] is True, p
            for n in nodes:
                s = _req(n, "stats")
                assert s["ok"] is True, "stats failed: %s" % s.get("error")
                samples.append((time.monotonic(), n.pubkey[:8], s["mem_free"], s["occupancy"],
                                sum(s["evictions"].values())))
        assert all(n.alive() for n in nodes), "a node died"
        full = {}
        report = []
        final = {}
        for n in nodes:
            s = _req(n, "stats")
            final[n.pubkey[:8]] = s
            occ = s["occupancy"]
            full[n.pubkey[:8]] = occ
            report.append("%s mem_free=%s occupancy=%s evictions=%s drops=%s"
                          % (n.pubkey[:8], s["mem_free"], occ, s["evictions"], s["drops"]))
        print("\nheap %s, %s s, steady state:\n  %s" % (HEAP, SECONDS, "\n  ".join(report)))
        mins = {}
        for t, who, mf, occ, ev in samples:
            mins[who] = min(mins.get(who, mf), mf)
        print("  lowest mem_free seen: %s" % mins)
        # every table reached its capacity during the run and never went past
        # it (entries expire and refill, so the last sample may be one short)
        peak = {}
        for t, who, mf, occ, ev in samples + [(0, w, 0, o, 0) for w, o in full.items()]:
            for table, (n, cap) in occ.items():
                assert n <= cap, "%s table %s over capacity: %s" % (who, table, occ)
                key = (who, table)
                peak[key] = max(peak.get(key, 0), n)
        for who in full:
            for table, cap in CAPACITY.items():
                assert peak[(who, table)] == cap, "%s table %s never full: peak %d of %d" % (
                    who, table, peak[(who, table)], cap)
        for who, s in final.items():
            # every signature the scripted peers make is valid: a failed
            # verification here is memory pressure (a MemoryError inside the
            # pure-Python verify reads as "bad signature")
            assert s["drops"].get("bad_signature", 0) == 0, (who, s["drops"])
            assert s["drops"].get("no_memory", 0) == 0, (who, s["drops"])
            assert "bad_signature" not in s["handshake_failures"], (who, s["handshake_failures"])
            assert s["links"]["oom"] == 0 and s["console"]["oom"] == 0, (who, s["links"], s["console"])
        for n in nodes:
            text = "\n".join(l.decode("utf-8", "replace") for l in n.lines)
            err = open(n.stderr).read() if isinstance(n.stderr, str) and os.path.exists(n.stderr) else ""
            assert "MemoryError" not in text + err and "out of memory" not in text, (text + err)[-2000:]
    finally:
        if filler is not None:
            filler.stop.set()
            filler.thread.join(10)
        for n in nodes:
            n.stop()
        ns.close()
