"""Figure 8: Spark pipeline wall time for 1,000,000 telemetry records
(local mode).

Delegates to bench/pipeline_bench.py (owned by the pipeline work), run in
its own process with ``--records N --json``: it generates synthetic
telemetry, runs `snakemesh analyze` (local[2], CLI end to end including the
JVM start) and a single-process pandas baseline computing the same headline
figures with the same rules, and checks that both agree. The ratio column
is Spark wall time / pandas wall time (same run, same machine); the row
fails if the two disagree on a headline figure. Run once by default
(--reps N repeats it); --quick uses 100,000 records. Two more rows: the
wall and JVM CPU time of `snakemesh analyze` on a 250-node, 180 s simulator
folder (bench/analyze_sim.py; issue 28's target <= 20 s on 2 cores).
"""
import json
import os
import subprocess
import sys

from figures.common import BENCH, NotAvailable, row, median
from figures.f7_sim_scale import cpython_calibration

TITLE = "Pipeline (Spark local mode)"
RECORDS = 1000000


def _parse(stdout):
    i = stdout.find("{")
    if i < 0:
        return None
    try:
        return json.loads(stdout[i:])
    except ValueError:
        return None


def run(ctx):
    script = os.path.join(BENCH, "pipeline_bench.py")
    if not os.path.exists(script):
        raise NotAvailable("bench/pipeline_bench.py not present (pipeline work not delivered yet)")
    records = 100000 if ctx.quick else RECORDS
    reps = ctx.reps if ctx.reps_given else 1
    cal = cpython_calibration(ctx)
    runs = []
    for i in range(reps):
        cmd = [sys.executable, script, "--records", str(records), "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        r = _parse(out.stdout)
        if r is None or "spark_wall_s" not in r:
            tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
            raise RuntimeError("pipeline_bench failed (exit %d): %s" % (out.returncode, " | ".join(tail)))
        runs.append(r)
        ctx.log("pipeline %d records: spark %.1f s, pandas baseline %.1f s, figures match %s" % (
            records, r["spark_wall_s"], r.get("pandas_wall_s") or 0, r.get("figures_match")))
    wall = median([r["spark_wall_s"] for r in runs])
    base = median([r.get("pandas_wall_s") for r in runs])
    ctx.shared["f8"] = runs
    match = all(r.get("figures_match") for r in runs)
    r0 = runs[0]
    note = ("%d run(s); CLI end to end incl. JVM start, local[2]; inside analyze %s s (stages %s); "
            "single-process pandas baseline (same rules) %s s, figures match: %s; analyze peak RSS: Python driver %s MB, "
            "JVM %s MB; load average before %s; wall / CPython calibration run = %.0f"
            ) % (reps, r0.get("spark_inside_s"), r0.get("spark_stages_s"), base, "yes" if match else "NO",
                 r0.get("peak_rss_driver_python_mb"), r0.get("peak_rss_jvm_mb"),
                 (r0.get("load_before") or [None])[0], wall / cal)
    rows = [row("%d records, local mode: wall time" % records, round(wall, 1), "s", "report",
                None if match else False, note,
                ratio=round(wall / base, 2) if base else None)]
    return rows + sim_folder_rows(ctx, reps)


def sim_folder_rows(ctx, reps):
    """Issue 28's case: analyze of a 250-node, 180 s simulator folder
    (bench/analyze_sim.py), wall (target <= 20 s on 2 cores) and the JVM's
    CPU seconds (what load does not inflate)."""
    script = os.path.join(BENCH, "analyze_sim.py")
    out = subprocess.run([sys.executable, script, "--reps", str(reps), "--json"],
                         capture_output=True, text=True, timeout=3600)
    r = _parse(out.stdout)
    if r is None or "wall_median_s" not in r:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        raise RuntimeError("analyze_sim failed (exit %d): %s" % (out.returncode, " | ".join(tail)))
    ctx.shared["f8_sim"] = r
    r0 = r["runs"][0]
    ctx.log("analyze of a 250-node sim folder: wall %.1f s, JVM CPU %.1f s" % (r["wall_median_s"],
                                                                              r["jvm_cpu_median_s"]))
    note = ("%s, %d records, %.1f MB; %d run(s), CLI end to end incl. JVM start, local[2]; stages (wall s) %s, "
            "JVM CPU s %s; Python CPU %.1f s; load average %.2f -> %.2f"
            ) % (r["folder"], r["records"], r["telemetry_mb"], len(r["runs"]), r0["stages_s"],
                 r0["jvm_cpu_stages_s"], r0["python_cpu_s"], r0["load_before"], r0["load_after"])
    return [row("250-node 180 s sim folder: analyze wall time", r["wall_median_s"], "s", "report", None, note),
            row("250-node 180 s sim folder: analyze JVM CPU", r["jvm_cpu_median_s"], "s", "report", None,
                "the JVM's CPU seconds over analyze's stages (JVM start not included)")]
