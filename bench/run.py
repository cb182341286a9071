"""snakemesh benchmark suite: `make bench`.

    .venv/bin/python bench/run.py [--quick | --full] [--only N[,N...]] [--reps K]
                                  [--out bench/results.json] [--esp32-factor X]

Runs every figure (bench/figures/f<N>_*.py, described in docs/reports/BENCH.md),
at one of three sizes: --quick (a few minutes), the default (every figure,
the heavy ones on smaller cases: about 20 minutes on 2 cores), --full (the
heavy figures' cases as specified: figure 7 at 1,000 nodes x 300 s, every
figure 9 case; `make bench-full`, an hour or more);
writes bench/results.json and prints a table: figure, metric, value, ratio
(timings against a baseline measured in the same run), target, pass/fail.
A figure that cannot run here (a missing part) is reported as
"not available" with the reason; one that fails is reported as "error".
Exit status: 0 when every figure ran and every target was met, 1 otherwise.
"""
import argparse
import datetime
import json
import os
import platform
import sys
import time
import traceback

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)
from figures import common  # noqa: E402  (puts ROOT, firmware/, lib/ on sys.path)

FIGURES = (
    (1, "f1_forward_alloc"),
    (2, "f2_memory"),
    (3, "f3_next_hop"),
    (4, "f4_relay"),
    (5, "f5_verify"),
    (6, "f6_control"),
    (7, "f7_sim_scale"),
    (8, "f8_pipeline"),
    (9, "f9_sim_accept"),
    (10, "f10_radio_links"),
    (11, "f11_datagrams"),
    (12, "f12_telemetry"),
)


def parse_only(values):
    out = set()
    for v in values or ():
        for part in v.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                n = int(part)
            except ValueError:
                raise SystemExit("bench: --only takes figure numbers 1..%d, got %r" % (len(FIGURES), part))
            if n not in dict(FIGURES):
                raise SystemExit("bench: no figure %d (figures are 1..%d)" % (n, len(FIGURES)))
            out.add(n)
    return out


def host_info():
    info = {"python": sys.version.split()[0], "platform": platform.platform(),
            "machine": platform.machine(), "cpus": os.cpu_count()}
    mp = common.micropython()
    if mp:
        import subprocess
        try:
            out = subprocess.run([mp, "-c", "import sys; print(sys.version)"], capture_output=True,
                                 text=True, timeout=10)
            info["micropython"] = out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["micropython"] = None
    try:
        info["loadavg"] = os.getloadavg()
    except OSError:
        pass
    return info


def run_figure(num, modname, ctx):
    import importlib
    t0 = time.monotonic()
    res = {"figure": num, "module": "bench/figures/%s.py" % modname, "status": "ok", "rows": []}
    try:
        mod = importlib.import_module("figures." + modname)
        res["title"] = getattr(mod, "TITLE", modname)
        res["rows"] = mod.run(ctx)
        if ctx.shared.get("f%d" % num) is not None:
            res["details"] = ctx.shared["f%d" % num]
    except common.NotAvailable as e:
        res["status"] = "not available"
        res["reason"] = str(e)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        res["status"] = "error"
        res["reason"] = "%s: %s" % (type(e).__name__, e)
        res["traceback"] = traceback.format_exc(limit=6)
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if v == int(v) and abs(v) < 1e12:
            return "%d" % v
        if abs(v) >= 100:
            return "%.0f" % v
        if abs(v) >= 1:
            return "%.2f" % v
        return "%.4g" % v
    return str(v)


def table(results, out=sys.stdout):
    rows = []
    for fig in results:
        if fig["status"] != "ok":
            rows.append((str(fig["figure"]), fig.get("title", fig["module"]), fig["status"].upper(),
                         "", "", "FAIL" if fig["status"] == "error" else "n/a"))
            continue
        for r in fig["rows"]:
            val = _fmt(r["value"]) + ((" " + r["unit"]) if r["unit"] and r["value"] is not None else "")
            res = "-" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
            if r["value"] is None and r["pass"] is None and r.get("note", "").startswith("not available"):
                res = "n/a"
            rows.append((str(fig["figure"]), r["metric"], val, _fmt(r.get("ratio")),
                         r["target"] or "-", res))
    head = ("fig", "metric", "value", "ratio", "target", "result")
    widths = [max(len(head[i]), max([len(x[i]) for x in rows] or [0])) for i in range(6)]
    widths[1] = min(widths[1], 58)

    def line(cells):
        parts = []
        for i, c in enumerate(cells):
            if i == 1 and len(c) > widths[1]:
                c = c[:widths[1] - 1] + "~"
            parts.append(c.ljust(widths[i]) if i in (0, 1, 5) else c.rjust(widths[i]))
        return "  ".join(parts).rstrip()
    out.write(line(head) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for r in rows:
        out.write(line(r) + "\n")
    out.write("\nNotes\n")
    for fig in results:
        if fig["status"] != "ok":
            out.write("  [%d] %s: %s\n" % (fig["figure"], fig["status"], fig.get("reason")))
            continue
        for r in fig["rows"]:
            if r.get("note"):
                out.write("  [%d] %s: %s\n" % (fig["figure"], r["metric"], r["note"]))


def write_results(path, doc):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True, default=str)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None):
    p = argparse.ArgumentParser(description="snakemesh benchmark suite (docs/reports/BENCH.md)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="scaled-down run (200-node sim, fewer repetitions): a few minutes")
    size.add_argument("--full", action="store_true",
                      help="the heavy figures at full size (1,000-node sims, every figure 9 case): an hour or more")
    p.add_argument("--only", action="append", metavar="N", help="only these figures (e.g. 1,2 or repeat)")
    p.add_argument("--reps", type=int, default=None,
                   help="repetitions of every figure but 3 (default: per figure, see BENCH.md)")
    p.add_argument("--out", default=os.path.join(BENCH, "results.json"), help="results file")
    p.add_argument("--esp32-factor", type=float, default=None,
                   help="ESP32 slowdown vs this machine's unix port (default: measured, see BENCH.md)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    only = parse_only(a.only)
    if a.reps is not None and a.reps < 1:
        raise SystemExit("bench: --reps must be >= 1")
    if a.esp32_factor is not None and not a.esp32_factor > 0:
        raise SystemExit("bench: --esp32-factor must be > 0")
    progress = None if a.quiet else sys.stderr
    ctx = common.Context(quick=a.quick, full=a.full, reps=a.reps, progress=progress,
                         esp32_factor=a.esp32_factor)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    results = []

    def document(complete):
        return {
            "version": 1, "started": started, "seconds": round(time.monotonic() - t0, 1),
            "complete": complete,
            "quick": a.quick, "full": a.full, "only": sorted(only) or None, "host": host_info(),
            "figures": results,
            "esp32": ctx.shared.get("esp32"),
            "cpython_calibration_s": ctx.shared.get("cpython_calib_s"),
        }

    for num, modname in FIGURES:
        if only and num not in only:
            continue
        if progress:
            progress.write("figure %d (%s) ...\n" % (num, modname))
            progress.flush()
        res = run_figure(num, modname, ctx)
        results.append(res)
        # written after every figure: a run stopped part-way keeps what it measured
        write_results(a.out, document(False))
        if progress:
            progress.write("figure %d: %s in %.1f s%s\n" % (
                num, res["status"], res["seconds"],
                (": " + res["reason"]) if res.get("reason") else ""))
            progress.flush()
    doc = document(True)
    write_results(a.out, doc)
    sys.stdout.write("\nsnakemesh benchmarks%s (%s, %.0f s)\n\n" % (
        " (quick)" if a.quick else (" (full)" if a.full else ""), started, doc["seconds"]))
    table(results)
    sys.stdout.write("\nresults: %s\n" % os.path.relpath(a.out))
    bad = any(f["status"] == "error" for f in results) or any(
        r["pass"] is False for f in results for r in f["rows"])
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.stderr.write("bench: interrupted\n")
        sys.exit(130)
