"""Benchmark: `snakemesh analyze` on the small inputs a user runs it on by
hand, end to end (CLI, JVM start included). Issue 17's target: <= 15 s.

    .venv/bin/python bench/analyze_small.py [--reps N] [--keep DIR] [--json]

1. monitor: three unix-port firmware nodes in a line (a process mesh, as
   `snakemesh mesh` runs them), `snakemesh monitor` on their three consoles
   for 20 s (about 180 records);
2. demo: the telemetry of the demo's mesh phase (`snakemesh mesh` with
   `make demo`'s settings: the demo-mixed topology, 8 nodes, 20 s, 16 pings,
   6 traces), which `make demo` then analyzes.

Each capture is analyzed --reps times (`snakemesh analyze INPUT --out DIR
-q`); the result gives every wall time, analyze's stages, the local JVM's
CPU seconds and the load average before each run (the machine may be
shared: the JVM CPU time is the figure that load does not inflate).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def cli(*args, timeout=600):
    exe = os.path.join(os.path.dirname(sys.executable), "snakemesh")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "host_tools.cli"]
    return subprocess.run(cmd + list(args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def capture_monitor(work, seconds=20):
    from host_tools.procmesh.mesh import ProcessMesh
    topo = os.path.join(work, "line3.txt")
    with open(topo, "w") as f:
        f.write("a b c\n")
    out = os.path.join(work, "monitor.jsonl")
    with ProcessMesh(topo, os.path.join(work, "mesh3"), seed=4) as m:
        m.wait_converged(timeout=120)
        ports = []
        for n in ("a", "b", "c"):
            ports += ["--port", m.nodes[n].pty_path]
        r = cli("monitor", *ports, "--out", out, "--duration", str(seconds))
        if r.returncode != 0:
            raise SystemExit("monitor failed: " + (r.stderr or r.stdout).strip()[-500:])
    return out


def capture_demo(work):
    out = os.path.join(work, "demo-mesh")
    r = cli("mesh", "--topology", "demo-mixed", "--out", out, "--seed", "1", "--duration", "20",
            "--pings", "16", "--traces", "6", "--converge-timeout", "120", timeout=900)
    if r.returncode != 0:
        raise SystemExit("mesh failed: " + (r.stderr or r.stdout).strip()[-500:])
    return os.path.join(out, "telemetry.jsonl")


def time_analyze(inp, out, reps):
    runs = []
    for _ in range(reps):
        load = os.getloadavg()[0]
        t0 = time.time()
        r = cli("analyze", inp, "--out", out, "-q")
        wall = time.time() - t0
        if r.returncode != 0:
            raise SystemExit("analyze failed: " + (r.stderr or r.stdout).strip()[-500:])
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        runs.append({"wall_s": round(wall, 1), "load_before": round(load, 2), "records": s["records"],
                     "stages_s": s.get("timings_s"), "jvm_cpu_s": round(sum((s.get("jvm_cpu_s") or {}).values()), 1)})
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", metavar="DIR", help="keep captures and outputs here")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="snakemesh-small-")
    os.makedirs(work, exist_ok=True)
    try:
        result = {}
        for name, make in (("monitor_3_nodes_20s", capture_monitor), ("demo_mesh", capture_demo)):
            inp = make(work)
            with open(inp) as f:
                lines = sum(1 for _ in f)
            runs = time_analyze(inp, os.path.join(work, "out-" + name), a.reps)
            walls = sorted(r["wall_s"] for r in runs)
            result[name] = {"lines": lines, "median_wall_s": walls[len(walls) // 2], "runs": runs}
            if not a.json:
                print("%-20s %5d lines: analyze %s s (median %.1f; JVM CPU %s s; load before %s)"
                      % (name, lines, walls, walls[len(walls) // 2], [r["jvm_cpu_s"] for r in runs],
                         [r["load_before"] for r in runs]), flush=True)
        if a.json:
            print(json.dumps(result, indent=2))
        return 0
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
