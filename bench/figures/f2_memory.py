"""Figure 2: router memory at full capacity, and a node under a 110K heap.

2a. bench/figures/mp_router.py (micropython): a Router with the
    ESP32_GENERIC profile, every table filled through the router's own
    inputs (max_peers peers, one max_hops-deep announcement per peer, a full
    routing table, coordinate cache, signature cache and wakeup filter).
    Reported: gc.mem_alloc() growth (after gc.collect()) from before the
    Router is constructed to after it is full: the whole router object graph
    (tree, snake, tables, buffers, counters, its own signatures). Excluded:
    module bytecode and function objects (imported before), the node's
    Signer (built before), the pure-Python ed25519 fixed-base tables (built
    lazily by the first crypto call; measured by bench/crypto_bench.py as
    base_tables_heap_bytes), the runtime's send queues and read buffers
    (figure 2b covers the whole node).
2b. Three real firmware node processes (unix port, `-X heapsize=110K`, the
    firmware compiled to .mpy as deployed to a board, ESP32_GENERIC profile,
    static TCP peering on loopback in a triangle, no multicast). After every
    node has two peers and one root, 20 s of steady state, then each node's
    console `status` reports gc.mem_free() (after gc.collect()) five times;
    the figure is the lowest node's median, as a share of the 110K heap.
2c. What 2b's budget is spent on before any state: bench/figures/mp_code_heap.py
    imports the modules a running Wi-Fi node holds, from the same .mpy
    build, and reports the gc.mem_alloc() growth (bytecode, constants,
    qstrs, raw-code and function objects in the heap, as on a board running
    stock MicroPython). With 2a, it gives the floor of a node's heap use:
    when code + state alone exceed 65 % of 110K, 2b cannot pass with this
    code in the heap (frozen modules or ROMFS keep it in flash instead).
"""
import os
import tempfile
import time

from figures.common import FIGS, ROOT, NotAvailable, row, median, run_mp

TITLE = "Router state at full capacity; node under a 110K heap"
HEAP = "110K"
HEAP_BYTES = 110 * 1024
TARGET_STATE = 32 * 1024


def run(ctx):
    rows = state(ctx)
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


def node_runtime():
    """(NodeProcess, build_mpy) or raise NotAvailable."""
    if not os.path.exists(os.path.join(ROOT, "firmware", "main.py")) or \
            not os.path.exists(os.path.join(ROOT, "firmware", "snake", "node.py")):
        raise NotAvailable("node runtime missing (firmware/main.py, firmware/snake/node.py)")
    try:
        import host_tools  # noqa: F401
        from host_tools.nodeproc import NodeProcess, build_mpy, micropython_binary
    except ImportError as e:
        raise NotAvailable("node runtime missing (host_tools.nodeproc: %s)" % e)
    if micropython_binary() is None:
        raise NotAvailable("micropython (unix port) not found; run `make setup`")
    return NodeProcess, build_mpy


def start_triangle(NodeProcess, mpy_dir, heap, profile, seeds):
    """Three nodes peered in a triangle over loopback; returns the list."""
    from host_tools.nodeproc import free_port
    ports = [free_port() for _ in range(3)]
    nodes = []
    try:
        for i in range(3):
            connect = [("127.0.0.1", ports[j]) for j in range(i)]
            p = NodeProcess(seed=seeds[i], listen=("127.0.0.1", ports[i]), connect=connect,
                            multicast=False, heapsize=heap, profile=profile, mpy_dir=mpy_dir)
            p.start()
            nodes.append(p)
    except BaseException:
        for p in nodes:
            p.stop()
        raise
    return nodes


def wait_mesh(nodes, peers, timeout):
    """Until every node has `peers` peers and all agree on the root."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        st = [p.request("status") for p in nodes]
        last = st
        if all(s.get("peers") == peers for s in st) and len(set(s.get("root") for s in st)) == 1:
            return st
        time.sleep(0.5)
    raise RuntimeError("mesh did not form within %g s: %s" % (
        timeout, [(s.get("peers"), (s.get("root") or "")[:8]) for s in (last or [])]))


def code_heap(ctx, mpy_dir):
    """Row 2c: heap taken by importing the running node's modules (.mpy)."""
    env = dict(os.environ)
    env["MICROPYPATH"] = ".frozen:%s:%s" % (mpy_dir, os.path.join(mpy_dir, "lib"))
    vals = []
    last = None
    try:
        for i in range(3):
            last = run_mp([os.path.join(FIGS, "mp_code_heap.py")], env=env)
            vals.append(last["code_heap"])
    except (RuntimeError, NotAvailable) as e:
        return row("2c firmware code in the heap (.mpy imports)", None, "B", "report", None,
                   "not measured: %s" % e)
    v = median(vals)
    ctx.shared.setdefault("f2", {})["code"] = last
    state = (ctx.shared.get("f2", {}).get("state") or {}).get("heap_full")
    floor = "" if state is None else "; code + full state (2a) = %d B = %.0f %% of 110K" % (
        v + state, 100.0 * (v + state) / HEAP_BYTES)
    big = sorted(last["per_module"].items(), key=lambda kv: -kv[1])[:4]
    note = "%d modules%s; largest increments: %s" % (
        len(last["modules"]), floor, ", ".join("%s %d" % kv for kv in big))
    return row("2c firmware code in the heap (.mpy imports)", v, "B", "report", None, note)


def node_heap(ctx):
    try:
        NodeProcess, build_mpy = node_runtime()
    except NotAvailable as e:
        return [row("2b 3-node mesh, 110K heap: mem_free share", None, "%", ">= 35 %", None,
                    "not available: %s" % e)]
    steady = 10 if ctx.quick else 20
    tmp = tempfile.mkdtemp(prefix="bench_mpy_")
    nodes = []
    rows = []
    try:
        mpy = build_mpy(tmp)
        rows.append(code_heap(ctx, mpy))
        seeds = [bytes([0x21 + i]) * 32 for i in range(3)]
        try:
            nodes = start_triangle(NodeProcess, mpy, HEAP, "ESP32_GENERIC", seeds)
            wait_mesh(nodes, 2, 60)
        except Exception as e:
            msg = str(e).splitlines()[0][:300]
            return rows + [row("2b 3-node mesh, 110K heap: mem_free share", None, "%", ">= 35 %",
                               False, "node failed: %s" % msg)]
        ctx.log("2b mesh formed; %d s steady state" % steady)
        time.sleep(steady)
        per_node = []
        for p in nodes:
            per_node.append([])
        for k in range(5):
            for i, p in enumerate(nodes):
                s = p.request("status")
                if not p.alive():
                    raise RuntimeError("node %d exited" % i)
                per_node[i].append(s.get("mem_free"))
            time.sleep(1.0)
        st = wait_mesh(nodes, 2, 10)    # still a mesh at the end
        meds = [median(v) for v in per_node]
        worst = min(meds)
        share = 100.0 * worst / HEAP_BYTES
        ctx.shared.setdefault("f2", {})["node"] = {"mem_free_per_node": per_node, "status": st}
        note = "mem_free per node (median of 5): %s B of %d B; .mpy, ESP32_GENERIC, triangle" % (
            ", ".join(str(m) for m in meds), HEAP_BYTES)
        return rows + [row("2b 3-node mesh, 110K heap: mem_free share", round(share, 1), "%",
                           ">= 35 %", share >= 35.0, note)]
    finally:
        for p in nodes:
            try:
                p.stop()
            except Exception:
                pass
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
