"""Figure 7: simulator scale: 1,000 nodes x 300 virtual seconds.

Runs bench/sim_scale.py in its own process (so its peak RSS is its own):
a connected random geometric graph of 1,000 nodes (mean degree ~8), the
shipped router core on every node, full telemetry written, 20 ping pairs x 3
at half time; reports wall time, peak RSS (ru_maxrss), convergence and
delivery. Two meshes: every node UNIX (as shipped), and ESP32_GENERIC boards
with GATEWAY on every node with more links than an ESP32 takes (about a
third of them: hubs with thousands of routes). That is --full; by default
500 nodes x 150 s (a quarter of the work), --quick 200 nodes x 60 s. Run once by default (the heavy figure; --reps N repeats it). The ratio column is the run's CPU time
divided by one CPython calibration run (figures/calib.py, median of three best-of-15) in the
same run: CPU time rather than wall time, so load from other processes on a
shared machine does not inflate it, and machine speed cancels out.
"""
import json
import os
import subprocess
import sys

from figures.common import BENCH, NotAvailable, row, median

TITLE = "Simulator scale"


def cpython_calibration(ctx):
    """Seconds of one calibration run under this CPython (median of three best-of-15)."""
    if "cpython_calib_s" not in ctx.shared:
        from figures import calib
        vals = [calib.measure(15) for _ in range(3)]
        ctx.shared["cpython_calib_s"] = calib.DIGITS / median(vals)
    return ctx.shared["cpython_calib_s"]


MESHES = (
    ("UNIX", []),
    ("ESP32 + GATEWAY hubs", ["--profile", "ESP32_GENERIC", "--hub-profile", "GATEWAY"]),
)


def run(ctx):
    script = os.path.join(BENCH, "sim_scale.py")
    if not os.path.exists(script):
        raise NotAvailable("bench/sim_scale.py missing (simulator helper)")
    nodes, dur = ctx.size((200, 60), (500, 150), (1000, 300))
    reps = ctx.reps if ctx.reps_given else 1
    cal = cpython_calibration(ctx)
    rows = []
    shared = {}
    for name, extra in MESHES:
        label = "%d nodes x %d s, %s" % (nodes, dur, name)
        runs = []
        err = None
        for i in range(reps):
            cmd = [sys.executable, script, "--nodes", str(nodes), "--duration", str(dur),
                   "--json"] + extra
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
            if out.returncode != 0:
                tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
                err = "sim_scale failed (exit %d): %s" % (out.returncode, " | ".join(tail))
                break
            r = json.loads(out.stdout.strip().splitlines()[-1])
            runs.append(r)
            ctx.log("sim_scale %s: wall %.1f s, CPU %.1f s, peak RSS %.1f MB" % (
                label, r["wall_s"], r["cpu_s"], r["peak_rss_mb"]))
        if err is not None:
            rows.append(row("%s: wall time" % label, None, "s", "runs", False, err))
            continue
        shared[name] = runs
        wall = median([r["wall_s"] for r in runs])
        cpu = median([r["cpu_s"] for r in runs])
        rss = median([r["peak_rss_mb"] for r in runs])
        r = runs[0]
        note = ("CPU %.0f s (ratio = CPU s / CPython calibration run); crypto backend %s; %s; "
                "%d edges, %d events, %d frames; snake right at the end %s, converged (held) at %s s; "
                "pings %s/%s; telemetry %d records; %d run(s)") % (
            cpu, r.get("crypto_backend"), ", ".join("%d %s" % (v, k) for k, v in sorted(r["profiles"].items())),
            r["edges"], r["events"], r["frames"], r["snake_correct_ratio_final"],
            r["snake_converged_s"], r["probes_ok"], r["probes"], r["telemetry_records"], len(runs))
        rows.append(row("%s: wall time" % label, wall, "s", "report", None, note,
                        ratio=round(cpu / cal)))
        rows.append(row("%s: peak memory (RSS)" % label, rss, "MB", "report", None,
                        "%.0f KB per node" % (rss * 1024.0 / nodes)))
    ctx.shared["f7"] = shared
    return rows
