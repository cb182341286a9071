"""`snakemesh demo` (what `make demo` runs): a local mesh of real firmware
nodes over a mixed BLE/Wi-Fi topology, inspected through their consoles,
then the Spark pipeline over the collected telemetry and an HTML report."""
import argparse
import os
import subprocess
import sys
import time

from host_tools import REPO_ROOT
from host_tools.errors import CliError

DEMO_TOPOLOGY = os.path.join(REPO_ROOT, "host_tools", "topologies", "demo-mixed.txt")


def register(sub):
    p = sub.add_parser("demo", help="run the demo: process mesh -> telemetry -> Spark -> report",
                       description="Start a process mesh of unix-port firmware nodes over a mixed "
                                   "BLE/Wi-Fi topology, show convergence and pings live, then run "
                                   "the Spark pipeline on the telemetry and write the report.")
    p.add_argument("--out", default="demo-out", metavar="DIR", help="output folder (default demo-out)")
    p.add_argument("--topology", default=DEMO_TOPOLOGY, metavar="FILE|NAME",
                   help="topology (default: 8 nodes, Wi-Fi backbone with BLE spurs)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--duration", type=float, default=20.0, metavar="S",
                   help="seconds of telemetry after convergence (default 20)")
    p.add_argument("--pings", type=int, default=16)
    p.add_argument("--traces", type=int, default=6)
    p.set_defaults(func=run)


def say(msg):
    print("[demo %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def run(args):
    from host_tools.commands import mesh as mesh_cmd
    t0 = time.monotonic()
    mesh_dir = os.path.join(args.out, "mesh")
    analysis = os.path.join(args.out, "analysis")
    from host_tools import topofiles
    args.topology = topofiles.resolve(args.topology)
    say("starting a process mesh from %s" % os.path.relpath(args.topology))
    margs = argparse.Namespace(topology=args.topology, out=mesh_dir, seed=args.seed, profile="UNIX",
                               duration=args.duration, pings=args.pings, traces=args.traces,
                               converge_timeout=120.0, heapsize=None)
    s = mesh_cmd.run_mesh(margs, progress=say)
    say("mesh stopped: tree agreed after %.1f s, snake complete after %.1f s, pings %d/%d"
        % (s["tree_converged_s"], s["snake_converged_s"], s["pings_ok"], s["pings"]))
    tel = os.path.join(mesh_dir, "telemetry.jsonl")
    say("running the Spark pipeline on %s" % tel)
    cmd = [sys.executable, "-m", "host_tools.cli", "analyze", tel, "--out", analysis, "--report"]
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0:
        raise CliError("the analysis pipeline failed (exit %d)" % r.returncode)
    report = os.path.join(analysis, "report", "index.html")
    if not os.path.isfile(report):
        raise CliError("the pipeline ran but wrote no report at %s" % report)
    say("done in %.0f s" % (time.monotonic() - t0))
    print("report: %s" % os.path.abspath(report))
    print("summary: %s" % os.path.abspath(os.path.join(analysis, "summary.json")))
    return 0
