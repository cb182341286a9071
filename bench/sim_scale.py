"""Virtual-time simulator at scale (a script, not a test).

    .venv/bin/python bench/sim_scale.py [--nodes 1000] [--duration 300] [--seed 1]
        [--radius R] [--profile P] [--hub-profile P] [--profile-set K=V]
        [--hop-limit N] [--out DIR] [--no-telemetry] [--json]

Generates a connected random geometric graph (mean degree ~8), runs the
shipped router core of every node for `duration` virtual seconds with full
telemetry (state every 1 s, counters every 5 s) and 20 ping pairs x 3 at
half time, and reports wall time, CPU time, peak RSS
(resource.getrusage), events, frames, telemetry size, convergence and
delivery. `run()` returns the same dict for bench/run.py.

The profile is UNIX by default (max_hops 64: a 1,000-node random geometric
graph is ~40 hops across); `--profile ESP32_GENERIC --hub-profile GATEWAY`
is the mixed mesh of figure 7's second row. Probes use each sender's
profile traffic_hop_limit unless --hop-limit is given.
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



def _dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def run(nodes=1000, duration=300.0, seed=1, radius=None, out=None, telemetry=True,
        profile="UNIX", profile_set=None, hop_limit=None, pings=20, progress=None,
        hub_profile=None):
    import host_tools  # noqa: F401
    from host_tools.sim import runner
    spec = "rgg:%d" % nodes + (":%r" % radius if radius else "")
    tmp = None
    if out is None:
        tmp = out = tempfile.mkdtemp(prefix="sim_scale_")
    t0 = time.monotonic()
    cpu0 = time.process_time()
    try:
        s = runner.run(out, duration, seed=seed, generate=spec, profile=profile,
                       profile_set=profile_set, hop_limit=hop_limit, pings=pings,
                       telemetry=telemetry, progress=progress, hub_profile=hub_profile)
        wall = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        with open(os.path.join(out, "truth.json")) as f:
            truth = json.load(f)
        out_bytes = _dir_bytes(out)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    st = truth["sim_stats"]
    from snake import crypto
    return {
        "bench": "sim_scale",
        # the CPU time depends on it: the pure-Python backend (PyNaCl
        # missing) makes signing and verifying most of the run
        "crypto_backend": crypto.BACKEND,
        "topology": spec, "seed": seed, "nodes": s["nodes"], "edges": s["edges"],
        "virtual_s": duration, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
        "virtual_per_wall": round(duration / wall, 3) if wall else None,
        "peak_rss_mb": round(rss_kb / 1024.0, 1),
        "events": s["events_run"], "frames": st["frames"], "frame_bytes": st["bytes"],
        "telemetry_records": s["telemetry_records"], "output_bytes": out_bytes,
        "first_convergence_s": s["first_convergence_s"],
        "converged_at_end": s["converged_at_end"],
        "probes": s["probes"], "probes_ok": s["probes_ok"],
        "delivery_ratio": s["delivery_ratio"],
        "router_exceptions": st.get("router_exceptions", 0),
        "profile": profile, "hub_profile": hub_profile, "profiles": s["profiles"],
        "profile_set": profile_set, "hop_limit": hop_limit,
        "snake_correct_ratio_final": s["snake_correct_ratio_final"],
        "snake_converged_s": s["snake_converged_s"],
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--duration", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--radius", type=float, default=None)
    p.add_argument("--out", default=None, help="keep the outputs here (default: a temp dir, deleted)")
    p.add_argument("--no-telemetry", action="store_true")
    p.add_argument("--profile", default="UNIX")
    p.add_argument("--hub-profile", default=None)
    p.add_argument("--profile-set", action="append", default=None, metavar="KEY=VALUE")
    p.add_argument("--hop-limit", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print one JSON object only")
    a = p.parse_args(argv)
    ps = None
    if a.profile_set is not None:
        ps = {}
        for item in a.profile_set:
            k, _, v = item.partition("=")
            try:
                ps[k] = json.loads(v)
            except ValueError:
                ps[k] = v
    r = run(a.nodes, a.duration, a.seed, a.radius, a.out, not a.no_telemetry, a.profile, ps,
            a.hop_limit, progress=None if a.json else sys.stderr, hub_profile=a.hub_profile)
    if a.json:
        print(json.dumps(r, sort_keys=True))
    else:
        for k in sorted(r):
            print("%-20s %s" % (k, r[k]))


if __name__ == "__main__":
    main()
