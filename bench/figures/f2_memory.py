"""Figure 2: router memory at full capacity, and a node under a 110K heap.

2a. bench/figures/mp_router.py (micropython): a Router with the
    ESP32_GENERIC profile, every table filled through the router's own
    inputs (max_peers peers, one max_hops-deep announcement per peer, a full
    routing table, coordinate cache, signature cache and wakeup filter).
    Reported: gc.mem_alloc() growth (after gc.collect()) from before the
    Router is constructed to after it is full: the whole router object graph
    (tree, snake, tables, buffers, counters, its own signatures). Excluded:
    module bytecode, constants and function objects (imported before; the
    pure-Python ed25519 fixed-base tables are a bytes constant, size in
    bench/crypto_bench.py's base_tables_bytes), the node's Signer (built
    before), the runtime's send queues and read buffers
    (figure 2b covers the whole node).
2b. bench/heap_scenario.py on the 32-bit builds of MicroPython 1.28.0
    (`make mp32`): three nodes in a TCP triangle plus a BLE link per pair
    (emulated medium), scripted peers on every other port (8 links per
    node) keeping every table full with bootstraps, traffic and wakeups from
    many keys; every 5 s each node's console `mem` (heap after
    gc.collect()). Row per case: the lowest free share over every node's
    samples once its tables are full. ESP32_GENERIC on the build with the
    firmware frozen in (a custom image) at 110K; ESP32_GENERIC_S3 on the
    stock-like build with the firmware as .mpy (snakemesh deploy) at 200K.
    Passes when that share is >= 35 % and nothing else went wrong (no
    MemoryError, no restart, every table reached its capacity). The note
    says where the worst node's heap went (parts measured at boot, README
    "Memory").
2c. What 2b's budget is spent on before any state: bench/figures/mp_code_heap.py
    imports the modules a running Wi-Fi + BLE node holds, on both 32-bit
    builds: frozen (module dicts, function and class objects only: the
    bytecode stays in the image) and .mpy (bytecode, constants, qstrs,
    raw-code and function objects in the heap, as on a board running stock
    MicroPython).
"""
import os
import sys
import tempfile

from figures.common import FIGS, ROOT, NotAvailable, row, median, run_mp

TITLE = "Router state at full capacity; node under a 110K heap"
HEAP = "110K"
HEAP_BYTES = 110 * 1024
TARGET_STATE = 32 * 1024


def run(ctx):
    rows = state(ctx)
    rows.extend(code_heap(ctx))
    rows.extend(node_heap(ctx))
    return rows


def state(ctx):
    prof = os.path.join(ROOT, "boards", "ESP32_GENERIC", "profile.json")
    vals = []
    last = None
    for i in range(ctx.reps if ctx.reps_given else 3):
        last = run_mp([os.path.join(FIGS, "mp_router.py"), "state", prof])
        vals.append(last["heap_full"])
        ctx.log("2a rep %d: %s B full, %s B empty" % (i + 1, last["heap_full"], last["heap_empty"]))
    v = median(vals)
    ctx.shared.setdefault("f2", {})["state"] = last
    bd = last.get("breakdown") or {}
    note = "empty %d B, fill +%d B; tree %d, snake %d, coords %d, wakeups %d, sigcache %d" % (
        last["heap_empty"], last["heap_fill_growth"], bd.get("tree", 0), bd.get("snake", 0),
        bd.get("coord_cache", 0), bd.get("wakeup_filter", 0), bd.get("sigcache", 0))
    return [row("2a router heap, ESP32_GENERIC tables full", v, "B", "<= 32768 B (32 KiB)",
                v is not None and v <= TARGET_STATE, note)]


def code_heap(ctx):
    """Rows 2c: heap taken by importing the running node's modules on the
    32-bit builds: frozen (the custom image) and .mpy (stock firmware)."""
    from host_tools.procmesh import mp32
    from host_tools.procmesh.nodeproc import build_mpy
    rows = []
    tmp = tempfile.mkdtemp(prefix="bench_mpy_")
    try:
        builds = (("frozen", mp32.binary("frozen"), ".frozen"),
                  ("mpy", mp32.binary("stock"), ".frozen:%s:%s" % (build_mpy(tmp), os.path.join(tmp, "lib"))))
    except Exception as e:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
        return [row("2c firmware code in the heap, 32-bit", None, "B", "report", None, "not measured: %s" % e)]
    try:
        got = {}
        for name, binary, path in builds:
            env = dict(os.environ)
            env["MICROPYPATH"] = path
            vals = []
            last = None
            for i in range(3):
                # cwd "/": the script's folder comes first on sys.path, firmware/ must not
                last = run_mp([os.path.join(FIGS, "mp_code_heap.py")], env=env, binary=binary, cwd="/")
                vals.append(last["code_heap"])
            got[name] = (median(vals), last)
            ctx.shared.setdefault("f2", {})["code_" + name] = last
    except (RuntimeError, NotAvailable) as e:
        return [row("2c firmware code in the heap, 32-bit", None, "B", "report", None, "not measured: %s" % e)]
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    for name, label in (("frozen", "frozen into the image (make mp32-frozen)"),
                        ("mpy", ".mpy imports, stock-like build")):
        v, last = got[name]
        big = sorted(last["per_module"].items(), key=lambda kv: -kv[1])[:4]
        note = "%d modules, %.1f %% of a 110K heap; largest: %s" % (
            len(last["modules"]), 100.0 * v / HEAP_BYTES, ", ".join("%s %d" % kv for kv in big))
        rows.append(row("2c firmware code in the heap, 32-bit, " + label, v, "B", "report", None, note))
    return rows


def node_heap(ctx):
    """Rows 2b: bench/heap_scenario.py on the 32-bit builds: ESP32_GENERIC
    frozen at 110K, ESP32_GENERIC_S3 .mpy at 200K, every table full."""
    try:
        import heap_scenario
    except ImportError as e:
        return [row("2b node heap, tables full", None, "%", ">= 35 %", None, "not available: %s" % e)]
    seconds = 20 if ctx.quick else 40
    rows = []
    for profile, variant, heap in (("ESP32_GENERIC", "frozen", "110K"), ("ESP32_GENERIC_S3", "stock", "200K")):
        label = "2b %s, %s, %s heap, Wi-Fi + BLE, 8 links, tables full: lowest free share" % (
            profile, "frozen" if variant == "frozen" else ".mpy", heap)
        tmp = tempfile.mkdtemp(prefix="bench_heap_")
        try:
            ctx.log("2b %s %s %s: %d s with every table full" % (profile, variant, heap, seconds))
            res = heap_scenario.run(profile, variant, heap, seconds, tmp)
        except Exception as e:
            msg = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            rows.append(row(label, None, "%", ">= 35 %", False, "did not run: %s" % msg))
            continue
        finally:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
        worst, who = heap_scenario.worst_free(res)
        f = res.final[who]
        parts = f.get("parts") or {}
        note = "node %s: used %d of %d B: %s" % (who, f["used"], f["heap"], ", ".join(
            "%s %d" % kv for kv in sorted(parts.items(), key=lambda kv: -kv[1]) if kv[1]))
        other = [e for e in res.errors if "free (" not in e]
        if other:
            note += "; PROBLEMS: " + "; ".join(other)[:300]
        ctx.shared.setdefault("f2", {})["node_" + profile] = {"report": heap_scenario.report(res),
                                                             "errors": res.errors}
        rows.append(row(label, round(worst, 1), "%", ">= 35 %", not res.errors, note))
    return rows
