"""Benchmark: `snakemesh analyze` of a simulator folder after a run, end to
end (CLI, JVM start included). Issue 28's target: a 250-node, 180 s folder
in <= 20 s on 2 cores.

    .venv/bin/python bench/analyze_sim.py [--reps N] [--folder DIR] [--keep DIR] [--json]

The folder is `snakemesh sim --generate ba:250:2 --seed 1 --duration 180`
(the default UNIX profile: 16 ports, so the hubs refuse links and every
refusal is a topology epoch), made once into a temporary (or --keep)
directory unless --folder names one already made. Each of --reps runs gives
the wall time, analyze's stages (wall and JVM CPU seconds), the CLI's own
CPU seconds (the Python driver) and the load average before and after: the
machine may be shared, and the JVM CPU time is the figure that load does not
inflate.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATE = ("ba:250:2", "1", "180")     # spec, seed, duration


def cli(*args, timeout=900):
    exe = os.path.join(os.path.dirname(sys.executable), "snakemesh")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "host_tools.cli"]
    return subprocess.run(cmd + list(args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def make_folder(out):
    spec, seed, duration = GENERATE
    r = cli("sim", "--generate", spec, "--seed", seed, "--duration", duration, "--out", out, "-q")
    if r.returncode != 0:
        raise SystemExit("sim failed: " + (r.stderr or r.stdout).strip()[-500:])
    return out


def time_analyze(folder, out, reps):
    runs = []
    for _ in range(reps):
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.time()
        r = cli("analyze", folder, "--out", out, "-q")
        wall = time.time() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if r.returncode != 0:
            raise SystemExit("analyze failed: " + (r.stderr or r.stdout).strip()[-500:])
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        cpu = s.get("jvm_cpu_s") or {}
        runs.append({
            "wall_s": round(wall, 1), "inside_s": s.get("wall_time_s"), "records": s["records"],
            "jvm_cpu_s": round(sum(cpu.values()), 1), "jvm_cpu_stages_s": cpu,
            "stages_s": s.get("timings_s"),
            "python_cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)})
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--folder", help="an existing sim folder to analyze (default: make one)")
    ap.add_argument("--keep", help="make the sim folder here and keep it")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="analyze-sim-")
    try:
        folder = a.folder
        if not folder:
            folder = a.keep or os.path.join(work, "sim")
            if a.keep and os.path.exists(os.path.join(folder, "telemetry.jsonl")):
                pass
            else:
                if a.keep and os.path.exists(folder):
                    shutil.rmtree(folder)
                make_folder(folder)
        size = os.path.getsize(os.path.join(folder, "telemetry.jsonl"))
        runs = time_analyze(folder, os.path.join(work, "out"), a.reps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    walls = sorted(r["wall_s"] for r in runs)
    res = {"folder": "sim --generate %s --seed %s --duration %s" % GENERATE, "telemetry_mb": round(size / 1e6, 1),
           "records": runs[0]["records"], "wall_median_s": walls[len(walls) // 2],
           "jvm_cpu_median_s": sorted(r["jvm_cpu_s"] for r in runs)[len(runs) // 2], "runs": runs}
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print("analyze of %s (%d records, %.1f MB):" % (res["folder"], res["records"], res["telemetry_mb"]))
    for r in runs:
        print("  wall %.1f s (inside analyze %.1f s, stages %s), JVM CPU %.1f s (stages %s), Python CPU %.1f s, "
              "load %.2f -> %.2f"
              % (r["wall_s"], r["inside_s"], r["stages_s"], r["jvm_cpu_s"], r["jvm_cpu_stages_s"],
                 r["python_cpu_s"], r["load_before"], r["load_after"]))
    print("median wall %.1f s, median JVM CPU %.1f s (target: wall <= 20 s on 2 cores)"
          % (res["wall_median_s"], res["jvm_cpu_median_s"]))


if __name__ == "__main__":
    main()
