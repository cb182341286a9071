"""Issue 28's acceptance runs: `snakemesh plan`, then the planned mesh in the
simulator on fresh key draws (docs/reports/CAPACITY.md "Planning a mesh").

    .venv/bin/python bench/plan_accept.py --generate rgg:1000 [--seeds 1,2,3] [--out DIR]
        [--profile-set max_routes=300] [--draws K] [--routes-margin X] [--max-upgrades N|P%]
    .venv/bin/python bench/plan_accept.py --generate ba:500:2 --hub-compare

Runs one process at a time (nice them on a shared machine): the plan, then
for each seed `snakemesh sim --topology DIR/topology.txt --profile BASE
--profile-map DIR/profiles.txt --seed S` (keys drawn afresh per seed, the
root placed by the map; --profile-set goes to the plan and to every run); with --hub-compare also counts the nodes
`--hub-profile GATEWAY` would upgrade on the same graph. Prints one JSON
line per run and a last line with the verdict per target: upgrades <= 10 %
of the nodes (and fewer than the hub rule), converged within 120 s,
delivery >= 99 %.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SNAKEMESH = [sys.executable, "-m", "host_tools.cli"]


def sh(args):
    t0 = time.monotonic()
    p = subprocess.run(SNAKEMESH + args, cwd=ROOT, capture_output=True, text=True)
    return p, time.monotonic() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--generate")
    src.add_argument("--topology")
    ap.add_argument("--seed", type=int, default=1, help="generator seed")
    ap.add_argument("--seeds", default="1,2,3", help="key draws of the checking runs")
    ap.add_argument("--draws", type=int, default=None, help="the plan's key draws (default: plan's)")
    ap.add_argument("--profile", default="ESP32_GENERIC")
    ap.add_argument("--upgrade", default="ESP32_SPIRAM,GATEWAY")
    ap.add_argument("--duration", type=float, default=130.0)
    ap.add_argument("--pings", type=int, default=100)
    ap.add_argument("--out", default=None)
    ap.add_argument("--hub-compare", action="store_true")
    ap.add_argument("--profile-set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a base setting in the plan and in every checking run")
    ap.add_argument("--routes-margin", default=None, help="the plan's --routes-margin")
    ap.add_argument("--max-upgrades", default=None, help="the plan's --max-upgrades (N or P%%)")
    a = ap.parse_args(argv)
    out = a.out or os.path.join(ROOT, "out", "plan-accept")
    plan_dir = os.path.join(out, "plan")
    src = ["--generate", a.generate, "--seed", str(a.seed)] if a.generate else ["--topology", a.topology]
    extra = ["--draws", str(a.draws)] if a.draws else []
    if a.routes_margin:
        extra += ["--routes-margin", a.routes_margin]
    if a.max_upgrades:
        extra += ["--max-upgrades", a.max_upgrades]
    base_set = [x for item in a.profile_set for x in ("--profile-set", item)]
    p, wall = sh(["plan"] + src + ["--profile", a.profile, "--upgrade", a.upgrade, "--out", plan_dir, "-q"] + extra + base_set)
    if p.returncode != 0:
        print(json.dumps({"plan": "failed", "rc": p.returncode, "stderr": p.stderr.strip()[-500:]}))
        return 1
    with open(os.path.join(plan_dir, "plan.json")) as f:
        plan = json.load(f)
    n = len(plan["needs"])
    upgrades = len(plan["assignment"])
    row = {"plan": src + extra + base_set, "nodes": n, "upgrades": upgrades, "upgraded_share": round(upgrades / float(n), 4),
           "wall_s": round(wall, 1)}
    if a.hub_compare:
        from host_tools.sim import topology as T
        from host_tools.sim import profiles as PR
        topo = T.load(os.path.join(plan_dir, "topology.txt"))
        adj = topo.adjacency()
        base = PR.load(a.profile)
        row["hub_rule_upgrades"] = sum(1 for x in adj if len(adj[x]) > base.max_peers)
    print(json.dumps(row), flush=True)
    ok = row["upgraded_share"] <= 0.10 and (not a.hub_compare or upgrades < row["hub_rule_upgrades"])
    for s in [int(x) for x in a.seeds.split(",") if x]:
        run = os.path.join(out, "sim-%d" % s)
        p, wall = sh(["sim", "--topology", os.path.join(plan_dir, "topology.txt"), "--profile", a.profile,
                      "--profile-map", os.path.join(plan_dir, "profiles.txt"), "--duration", str(a.duration),
                      "--pings", str(a.pings), "--seed", str(s), "--no-telemetry", "--out", run, "-q"] + base_set)
        if p.returncode != 0:
            print(json.dumps({"seed": s, "sim": "failed", "stderr": p.stderr.strip()[-500:]}))
            ok = False
            continue
        with open(os.path.join(run, "truth.json")) as f:
            sm = json.load(f)["summary"]
        good = (sm["converged_at_end"] and sm["converged_s"] is not None and sm["converged_s"] <= 120
                and (sm["delivery_ratio"] or 0) >= 0.99)
        ok = ok and good
        print(json.dumps({"seed": s, "converged_s": sm["converged_s"], "converged_at_end": sm["converged_at_end"],
                          "snake_correct_ratio_final": sm["snake_correct_ratio_final"],
                          "delivery_ratio": sm["delivery_ratio"], "links_refused": sm.get("links_refused"),
                          "capacity_warning_nodes": sm["capacity_warning_nodes"], "wall_s": round(wall, 1),
                          "met": bool(good)}), flush=True)
    print("targets %s" % ("met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
