"""Figure 9: large meshes of ESP32 boards (with GATEWAY hubs) in the
virtual-time simulator: the acceptance runs of issue 14.

Runs bench/sim_accept.py once per case, each in its own process (`--case
NAME --json`; seed 1): every node ESP32_GENERIC as shipped on rgg:250 and
grid:16x16; ba:500:2 and rgg:1000 with GATEWAY on every node that has more
links than ESP32_GENERIC's max_peers; rgg:1000 without gateways (overload);
the two rgg:1000 cases again with ESP32_SPIRAM boards (an ESP32 with PSRAM
and the tables of a ~1,000-board mesh) in place of ESP32_GENERIC.
One row per target: snake_correct_ratio_final, snake converged (every
descending entry right from that time to the end of the run), ping delivery
(100 random pairs x 2 after the deadline), capacity_warnings (truth.json,
analyze's rule); the figures are the simulator's truth (docs/guides/SIMULATOR.md).
For the overload case `snakemesh analyze` also runs on the telemetry when
the pipeline is installed, and its summary.json capacity_warnings count is
shown next to the simulator's. That is --full. By default the three cases
of up to 500 nodes run as specified and the four rgg:1000 cases, the bulk
of the figure's time, are left to --full (a row says so); --quick runs
small versions of every case (60-120 nodes). Other shared graphs: figure 6 compares convergence and
first-message stretch with the reference.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from figures.common import BENCH, ROOT, row

TITLE = "Large ESP32 meshes with gateway hubs (virtual-time sim, issue 14)"
# (row name, sim_accept case, base profile or None for the case's own)
CASE_ORDER = (("rgg250", "rgg250", None), ("grid16x16", "grid16x16", None), ("ba500", "ba500", None),
              ("rgg1000-gateways", "rgg1000-gateways", None),
              ("rgg1000-overload", "rgg1000-overload", None),
              ("rgg1000-gateways, ESP32_SPIRAM", "rgg1000-gateways", "ESP32_SPIRAM"),
              ("rgg1000-overload, ESP32_SPIRAM", "rgg1000-overload", "ESP32_SPIRAM"))
# run by --full (and --quick, small) only
FULL_ONLY = ("rgg1000-gateways", "rgg1000-overload")


def _analyze(out_dir, tmp):
    """analyze's capacity_warnings count for a run's telemetry, or a reason
    why there is none."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return None, "pipeline not installed"
    exe = os.path.join(os.path.dirname(sys.executable), "snakemesh")
    an = os.path.join(tmp, "analyze")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    r = subprocess.run([exe, "analyze", os.path.join(out_dir, "telemetry.jsonl"), "--out", an, "-q"],
                       capture_output=True, text=True, timeout=3600, env=env)
    if r.returncode != 0:
        return None, "analyze failed: %s" % ((r.stderr or r.stdout).strip().splitlines() or ["?"])[-1]
    with open(os.path.join(an, "summary.json")) as f:
        s = json.load(f)
    if "capacity_warnings" not in s:
        return None, "analyze's summary.json has no capacity_warnings yet"
    return len(s["capacity_warnings"]), None


def run(ctx):
    script = os.path.join(BENCH, "sim_accept.py")
    gateway = os.path.isfile(os.path.join(ROOT, "boards", "GATEWAY", "profile.json"))
    rows = []
    runs = []
    left = [name for name, case, profile in CASE_ORDER if case in FULL_ONLY]
    cases = CASE_ORDER if ctx.size(True, False, True) else [c for c in CASE_ORDER if c[1] not in FULL_ONLY]
    if len(cases) < len(CASE_ORDER):
        rows.append(row("rgg:1000 cases (%s)" % "; ".join(left), None, "", "report", None,
                        "not run by default: `make bench-full` (bench/run.py --full) runs them"))
    for name, case, profile in cases:
        tmp = tempfile.mkdtemp(prefix="f9_")
        try:
            cmd = [sys.executable, script, "--case", case, "--json", "--out", tmp]
            if profile:
                cmd += ["--profile", profile]
            if ctx.quick:
                cmd.append("--quick")
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=7200)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            if not lines:
                tail = (p.stderr or p.stdout).strip().splitlines()[-2:]
                reason = " | ".join(tail)
                if not gateway and "GATEWAY" in reason:
                    reason = "boards/GATEWAY/profile.json missing (router side of issue 14)"
                rows.append(row("%s: run" % name, None, "", "runs", False, reason))
                continue
            r = json.loads(lines[-1])
            runs.append(r)
            out = os.path.join(tmp, case)
            analyzed = None
            if name == "rgg1000-overload":
                analyzed = _analyze(out, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        s = r["summary"]
        desc = "%s, %s%s" % (r["generate"], r["profile"],
                             " + %s hubs" % r["hub_profile"] if r["hub_profile"] else "")
        ctx.log("%s (%s): %s; wall %.0f s, peak RSS %.0f MB" % (
            name, desc, ", ".join("%s %s" % (c["metric"], c["value"]) for c in r["checks"]),
            r["wall_s"], r["peak_rss_mb"]))
        base = ("%s: %d nodes (%s), mean degree %.2f, %d edges; %g s virtual, wall %.0f s, CPU %.0f s, "
                "peak RSS %.0f MB") % (
            desc, r["nodes"], ", ".join("%d %s" % (v, k) for k, v in sorted(r["profiles"].items())),
            r["mean_degree"], r["edges"], r["duration_s"], r["wall_s"], r["cpu_s"], r["peak_rss_mb"])
        for i, c in enumerate(r["checks"]):
            note = base if i == 0 else None
            if c["metric"] == "ping delivery":
                note = "%d/%d pings; first-message stretch %s" % (
                    s["probes_ok"], s["probes"], s["first_message_stretch"])
            if c["metric"] == "capacity_warnings":
                note = "on %d nodes, by table %s; snake_correct_ratio_final %s" % (
                    s["capacity_warning_nodes"], r["capacity_warnings_by_table"],
                    s["snake_correct_ratio_final"])
                if analyzed is not None:
                    n, why = analyzed
                    note += "; analyze summary.json: %s" % (
                        "%d warnings" % n if n is not None else why)
            if c["metric"] == "snake converged":
                unit = "s (virtual)"
                note = "every descending entry right from then to the end (%g s); first at %s s" % (
                    r["duration_s"], s["snake_first_s"])
            else:
                unit = ""
            if i == 0:
                note = base + ("; " + note if note and note != base else "")
            rows.append(row("%s: %s" % (name, c["metric"]), c["value"], unit, c["target"], c["ok"],
                            note))
        if not any(c["metric"] == "snake_correct_ratio_final" for c in r["checks"]):
            rows.append(row("%s: snake_correct_ratio_final" % name, s["snake_correct_ratio_final"], "",
                            "report", None, "converged (held) at %s s; first at %s s" % (
                                s["snake_converged_s"], s["first_convergence_s"])))
    ctx.shared["f9"] = runs
    return rows
