"""Large-mesh acceptance runs of the virtual-time simulator (issue 14).

    .venv/bin/python bench/sim_accept.py [--case NAME ...] [--quick] [--seed N]
        [--out DIR] [--profile NAME] [--hub-profile NAME] [--gateway-root] [--json]

Each case is one `snakemesh sim` run (host_tools.sim.runner, the same code
and the same figures as the CLI's truth.json) with ESP32 boards everywhere,
optionally GATEWAY hubs (--gateway-root: keys by the provisioning policy "a
gateway is the root", every GATEWAY node's key above every board's, as
`snakemesh sim --gateway-root` draws them); pings are a scripted ping-set after the deadline
the case is judged at (100 random pairs x 2, 1 s apart); the case's targets
are checked on the run's summary:

  snake_correct_ratio_final  running nodes whose descending entry is the true
                             next-lower key of their component at the end
  snake_converged_s          the descending entries were all right from this
                             time to the end (convergence.snake_held_from)
  delivery_ratio             pings answered / pings sent
  capacity_warnings          truth.json's, by analyze's rule (docs/reports/CAPACITY.md)

`run_case()` returns a dict for bench/figures/f9_sim_accept.py; --json
prints it (one object per case, one per line).
"""
import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

PINGS = "ping-set 100 count=2 interval=1 timeout=5"

# name: generator, base profile, hub profile, duration (s), ping time (s),
# targets: {"snake_ratio": min, "snake_conv_s": max, "delivery": min,
#           "capacity_warnings": True (some expected)}
CASES = {
    "rgg250": dict(generate="rgg:250", profile="ESP32_GENERIC", hub=None, duration=90.0, ping_t=62.0,
                   targets={"snake_ratio": 1.0, "snake_conv_s": 60.0, "delivery": 0.99}),
    "grid16x16": dict(generate="grid:16x16", profile="ESP32_GENERIC", hub=None, duration=90.0,
                      ping_t=62.0,
                      targets={"snake_ratio": 1.0, "snake_conv_s": 60.0, "delivery": 0.99}),
    "ba500": dict(generate="ba:500:2", profile="ESP32_GENERIC", hub="GATEWAY", duration=90.0,
                  ping_t=62.0,
                  targets={"snake_ratio": 1.0, "snake_conv_s": 60.0, "delivery": 0.99}),
    "rgg1000-gateways": dict(generate="rgg:1000", profile="ESP32_GENERIC", hub="GATEWAY",
                             duration=150.0, ping_t=122.0,
                             targets={"snake_conv_s": 120.0, "delivery": 0.99}),
    "rgg1000-overload": dict(generate="rgg:1000", profile="ESP32_GENERIC", hub=None,
                             duration=150.0, ping_t=122.0,
                             targets={"delivery": 0.99, "capacity_warnings": True}),
}
# --quick: the same shapes, small
QUICK = {
    "rgg250": dict(CASES["rgg250"], generate="rgg:60"),
    "grid16x16": dict(CASES["grid16x16"], generate="grid:6x6"),
    "ba500": dict(CASES["ba500"], generate="ba:60:2"),
    "rgg1000-gateways": dict(CASES["rgg1000-gateways"], generate="rgg:120"),
    "rgg1000-overload": dict(CASES["rgg1000-overload"], generate="rgg:120"),
}


def check(case, s):
    """[(metric, value, target text, ok)] for a case's summary `s`."""
    t = case["targets"]
    out = []
    if "snake_ratio" in t:
        v = s["snake_correct_ratio_final"]
        out.append(("snake_correct_ratio_final", v, ">= %g" % t["snake_ratio"],
                    v is not None and v >= t["snake_ratio"]))
    if "snake_conv_s" in t:
        v = s["snake_converged_s"]
        out.append(("snake converged", v, "<= %g s" % t["snake_conv_s"],
                    v is not None and v <= t["snake_conv_s"]))
    if "delivery" in t:
        v = s["delivery_ratio"]
        out.append(("ping delivery", v, ">= %g (pings at %g s)" % (t["delivery"], case["ping_t"]),
                    v is not None and v >= t["delivery"]))
    if t.get("capacity_warnings"):
        v = s["capacity_warnings"]
        out.append(("capacity_warnings", v, "present", bool(v)))
    return out


def mean_degree(out):
    """Mean degree of the run's topology.txt."""
    nodes = set()
    edges = 0
    with open(os.path.join(out, "topology.txt")) as f:
        for line in f:
            parts = [p for p in line.split() if not p.startswith("@")]
            nodes.update(parts)
            if len(parts) == 2:
                edges += 1
    return 2.0 * edges / len(nodes) if nodes else 0.0


def run_case(name, quick=False, seed=1, out=None, progress=None, hub=None, profile=None,
             gateway_root=False):
    """Run one case; `hub` replaces the case's hub profile (where it has
    one), `profile` its base profile (e.g. ESP32_SPIRAM); `gateway_root`
    for the cases with a hub profile: keys by the policy "a gateway is the
    root"."""
    import host_tools  # noqa: F401
    from host_tools.sim import runner
    case = dict((QUICK if quick else CASES)[name])
    if hub and case["hub"]:
        case["hub"] = hub
    if profile:
        case["profile"] = profile
    tmp = None
    if out is None:
        tmp = out = tempfile.mkdtemp(prefix="sim_accept_")
    os.makedirs(out, exist_ok=True)
    scen = os.path.join(out, "scenario.txt")
    with open(scen, "w") as f:
        f.write("%g %s\n" % (case["ping_t"], PINGS))
    t0 = time.monotonic()
    c0 = time.process_time()
    try:
        s = runner.run(out, case["duration"], seed=seed, generate=case["generate"],
                       profile=case["profile"], hub_profile=case["hub"], scenario=scen,
                       progress=progress, gateway_root=gateway_root and case["hub"] is not None)
        with open(os.path.join(out, "truth.json")) as f:
            truth = json.load(f)
        deg = mean_degree(out)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    checks = check(case, s)
    warn = truth.get("capacity_warnings") or []
    tables = {}
    for w in warn:
        tables[w["table"]] = tables.get(w["table"], 0) + 1
    return {
        "case": name, "quick": quick, "seed": seed, "generate": case["generate"],
        "profile": case["profile"], "hub_profile": case["hub"], "duration_s": case["duration"],
        "gateway_root": bool(gateway_root and case["hub"] is not None),
        "ping_t": case["ping_t"], "nodes": s["nodes"], "edges": s["edges"],
        "mean_degree": round(deg, 2), "profiles": s["profiles"],
        "summary": s, "capacity_warnings_by_table": tables,
        "checks": [{"metric": m, "value": v, "target": t, "ok": ok} for m, v, t, ok in checks],
        "ok": all(c[3] for c in checks),
        "wall_s": round(time.monotonic() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--case", action="append", choices=sorted(CASES), help="default: every case")
    p.add_argument("--quick", action="store_true", help="small versions of the cases")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="keep each case's outputs in DIR/CASE")
    p.add_argument("--hub-profile", default=None, metavar="NAME_OR_PATH",
                   help="hub profile of the cases that have one (default GATEWAY)")
    p.add_argument("--profile", default=None, metavar="NAME_OR_PATH",
                   help="base profile of every case (default ESP32_GENERIC, as the issue names it)")
    p.add_argument("--gateway-root", action="store_true",
                   help="keys by the provisioning policy 'a gateway is the root' in the cases with "
                        "GATEWAY hubs (docs/reports/CAPACITY.md)")
    p.add_argument("--json", action="store_true", help="one JSON object per case, nothing else")
    a = p.parse_args(argv)
    bad = False
    for name in a.case or list(CASES):
        out = os.path.join(a.out, name) if a.out else None
        r = run_case(name, a.quick, a.seed, out, progress=None if a.json else sys.stderr,
                     hub=a.hub_profile, profile=a.profile, gateway_root=a.gateway_root)
        bad = bad or not r["ok"]
        if a.json:
            print(json.dumps(r, sort_keys=True), flush=True)
            continue
        print("%s: %s, %d nodes (%s), mean degree %.2f, wall %.0f s, peak RSS %.0f MB" % (
            name, r["generate"], r["nodes"],
            ", ".join("%d %s" % (v, k) for k, v in sorted(r["profiles"].items())),
            r["mean_degree"], r["wall_s"], r["peak_rss_mb"]))
        for c in r["checks"]:
            print("  %-36s %-10s target %-26s %s" % (c["metric"], c["value"], c["target"],
                                                     "PASS" if c["ok"] else "FAIL"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
