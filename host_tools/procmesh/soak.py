"""`make soak`: an 8-node process mesh of ESP32-profile firmware under a fixed
MicroPython heap, with continuous pings and churn (a node killed with
SIGKILL and restarted every minute), for 10 minutes. Passes when no node
hits MemoryError, gc.mem_free() shows no downward trend, and every console
still answers at the end. Writes the mem_free series to soak-out/. The
trend is judged per process (a restart is a new heap), after its two-minute
warm-up, on the upper envelope of the samples (a single low sample is a
frame in flight, not a leak); a node without such a window is not judged.

    python -m host_tools.procmesh.soak [--minutes 10] [--heapsize 110K] [--micropython PATH] [--mpy]
                              [--out soak-out]

`make soak` runs it on the 32-bit build with the firmware frozen in
(build/mp32/micropython-frozen, `make mp32`) at 110K: an ESP32 without
PSRAM, with a custom image. Without --micropython it runs the venv's
micropython (64-bit), where 110K cannot even hold the firmware: give it
--mpy --heapsize 400K (docs/reports/MEMORY.md).
"""
import argparse
import json
import os
import random
import sys
import time

from host_tools import REPO_ROOT
from host_tools.errors import CliError
from host_tools.procmesh.mesh import ProcessMesh
from host_tools.procmesh.options import heapsize_arg, micropython_arg

TOPOLOGY = os.path.join(REPO_ROOT, "host_tools", "topologies", "demo-mixed.txt")


WARMUP_S = 120     # tables filling, caches warming: also after a restart
# samples (15 s apart) a trend is judged on: 2 minutes. Over fewer, a ~1 KB
# dip lasting two samples (a link in its handshake after a neighbour
# restarted) reads as a loss of > 1 KB/min (a 4-sample window did, soak of
# 2026-11-23); over 8 it reads ~300 B/min, and a 1.2 KB/min leak still shows.
MIN_POINTS = 8


def envelope(points):
    """Each sample replaced by the largest of it and its two neighbours.
    gc.mem_free() after a collect still counts what is alive at that moment
    (a frame, a reply being built): one low sample is not a trend, while a
    leak lowers every sample and so the envelope too."""
    out = []
    for i, (t, _) in enumerate(points):
        out.append((t, max(y for _, y in points[max(0, i - 1):i + 2])))
    return out


def trend_windows(points, starts=None):
    """The sample runs a trend is judged on: one per process of the node (a
    restart is a new heap), each after its warm-up, when long enough."""
    bounds = [0.0] + sorted(starts or []) + [float("inf")]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        w = [p for p in points if a + WARMUP_S <= p[0] < b]
        if len(w) >= MIN_POINTS:
            out.append(w)
    return out


def slope(points):
    """Least-squares slope of [(t, y)] (y units per second)."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    num = sum((t - mt) * (y - my) for t, y in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    return num / den if den else 0.0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="snakemesh-soak", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES", "10")))
    ap.add_argument("--heapsize", "--heap", dest="heap", type=heapsize_arg,
                    default=os.environ.get("SOAK_HEAP", "110K"), metavar="SIZE",
                    help="MicroPython heap per node (default %(default)s)")
    ap.add_argument("--micropython", metavar="PATH", default=os.environ.get("SOAK_MICROPYTHON"),
                    help="micropython binary (default: the venv's; `make soak`: the 32-bit frozen build)")
    ap.add_argument("--mpy", action="store_true", help="run the firmware compiled to .mpy, as on a board")
    ap.add_argument("--profile", default="ESP32_GENERIC")
    ap.add_argument("--out", default="soak-out")
    ap.add_argument("--topology", default=TOPOLOGY)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    rnd = random.Random(a.seed)
    say = lambda m: print("[soak %s] %s" % (time.strftime("%H:%M:%S"), m), flush=True)
    series = {}          # node -> [(t, mem_free)]
    pings = [0, 0]
    restarts = []
    started = {}         # node -> [t of each restart]
    failures = []
    latency = []
    t_start = time.monotonic()
    micropython = micropython_arg(a.micropython)
    with ProcessMesh(a.topology, a.out, seed=a.seed, profile=a.profile, heapsize=a.heap, log=say,
                     mpy=a.mpy, micropython=micropython) as m:
        # The ESP32 profile verifies bootstraps "on-change" with pure-Python
        # crypto: convergence takes longer than on the UNIX profile.
        # A small heap makes the pure-Python verify GC-bound: a node can be
        # busy for many seconds in a burst of verifications; give its
        # console time, and record how long answers took.
        m.wait_converged(timeout=300, progress=say, request_timeout=90)
        t0 = time.monotonic()
        end = t0 + a.minutes * 60
        next_churn = t0 + 60
        next_sample = t0
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_sample:
                next_sample = now + 15
                for n in m.names:
                    try:
                        t_q = time.monotonic()
                        s = m.request(n, "stats", timeout=90)
                        latency.append(time.monotonic() - t_q)
                        if s.get("ok") and s.get("mem_free") is not None:
                            series.setdefault(n, []).append((round(now - t0, 1), s["mem_free"]))
                    except CliError as e:
                        failures.append("%s: stats: %s" % (n, e.message))
            if now >= next_churn:
                next_churn = now + 60
                victim = rnd.choice(m.names)
                say("churn: kill -9 %s, restart" % victim)
                m.kill(victim)
                time.sleep(2)
                m.restart(victim)
                restarts.append(victim)
                started.setdefault(victim, []).append(round(time.monotonic() - t0, 1))
            a_, b_ = rnd.sample(m.names, 2)
            try:
                r = m.ping(a_, b_, timeout=90)
                pings[0] += 1
                pings[1] += 1 if r.get("received") else 0
            except CliError as e:
                failures.append("%s: ping: %s" % (a_, e.message))
            time.sleep(0.5)
        answers = {}
        for n in m.names:
            try:
                answers[n] = bool(m.request(n, "status", timeout=90).get("ok"))
            except CliError:
                answers[n] = False
        logs = {n: "\n".join(l.decode("utf-8", "replace") for l in m.nodes[n].lines) for n in m.names}
    memerr = [n for n in m.names
              if "MemoryError" in logs[n] or "out of memory" in logs[n]
              or "MemoryError" in open(os.path.join(a.out, "logs", n + ".stderr")).read()]
    trends = {}          # node -> bytes/s (its worst process), or None: not judged (too short)
    for n, pts in series.items():
        slopes = [slope(envelope(w)) for w in trend_windows(pts, started.get(n))]
        trends[n] = min(slopes) if slopes else None
    result = {
        "minutes": a.minutes, "heap": a.heap, "profile": a.profile,
        "micropython": micropython or "venv", "mpy": a.mpy,
        "pings": pings[0], "pings_ok": pings[1], "restarts": restarts,
        "memory_errors": memerr, "consoles_answering": answers,
        "mem_free_slope_bytes_per_min": {n: (round(s * 60, 1) if s is not None else None)
                                         for n, s in trends.items()},
        "mem_free_series": series, "failures": failures[:50],
        "wall_s": round(time.monotonic() - t_start, 1),
        "console_latency_s": {"max": round(max(latency), 2) if latency else None,
                              "median": round(sorted(latency)[len(latency) // 2], 2) if latency else None},
    }
    with open(os.path.join(a.out, "soak.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    say("pings %d/%d, restarts %d, MemoryError in %s, consoles answering %d/%d"
        % (pings[1], pings[0], len(restarts), memerr or "none", sum(answers.values()), len(answers)))
    for n in sorted(trends):
        pts = series[n]
        say("  %-8s mem_free first %s last %s min %s, slope %s"
            % (n, pts[0][1], pts[-1][1], min(p[1] for p in pts),
               "%+.1f B/min" % (trends[n] * 60) if trends[n] is not None
               else "not judged (no process with %d samples after %d s of warm-up)" % (MIN_POINTS, WARMUP_S)))
    # "no downward trend": a leak would lose memory steadily; allow noise of
    # 1 KB/min (a 10-minute run then loses < 10 KB)
    leaking = [n for n, s in trends.items() if s is not None and s * 60 < -1024]
    ok = not memerr and all(answers.values()) and not leaking and pings[0] > 0
    say("soak %s (%s)" % ("PASSED" if ok else "FAILED", os.path.join(a.out, "soak.json")))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CliError as e:
        print("soak: error: " + e.message, file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
