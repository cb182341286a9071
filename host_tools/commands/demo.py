"""`snakemesh demo` (what `make demo` runs): a local mesh of real firmware
nodes over a mixed BLE/Wi-Fi topology, inspected through their consoles,
then the Spark pipeline over the collected telemetry and an HTML report."""
import argparse
import json
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
    p.add_argument("--telemetry", type=float, default=2.0, metavar="S",
                   help="period of every node's telemetry to the gateway over the mesh (default 2 s)")
    p.set_defaults(func=run)


def say(msg):
    print("[demo %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def phase(n, total, what):
    say("--- %d/%d %s" % (n, total, what))


def _mesh_args(args, mesh_dir):
    """The `snakemesh mesh` options with their defaults, as its parser makes
    them (so a new mesh option never breaks the demo)."""
    from host_tools.commands import mesh as mesh_cmd
    p = argparse.ArgumentParser()
    mesh_cmd.register(p.add_subparsers())
    return p.parse_args(["mesh", "--topology", args.topology, "--out", mesh_dir, "--seed", str(args.seed),
                         "--duration", str(args.duration), "--pings", str(args.pings),
                         "--traces", str(args.traces), "--converge-timeout", "120"])


def _show(path):
    """A path as the user can use it from here: relative below the current
    folder, absolute elsewhere."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _count_lines(path):
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def run_child(cmd, env, grace=30.0):
    """subprocess.run(cmd, stdout=PIPE) that lets the child clean up on
    Ctrl-C: the terminal sent it SIGINT too, so wait for it to stop its
    Spark JVM and remove its partial output (subprocess.run would SIGKILL
    it at once, leaving both behind); then SIGINT, SIGTERM, SIGKILL."""
    import signal
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate()
    except KeyboardInterrupt:
        # a Ctrl-C at the terminal reached the child too; a SIGINT sent to
        # this process alone did not: pass it on if the child runs on
        for sig, wait in ((None, 5.0), (signal.SIGINT, grace), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            if sig is not None:
                proc.send_signal(sig)
            try:
                proc.communicate(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
            except KeyboardInterrupt:     # a second Ctrl-C: stop waiting so long
                grace = 0
                continue
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


class GatewayProc(object):
    """`snakemesh gateway` beside the demo's mesh: the node every other node
    sends its telemetry to over the mesh (it holds a gateway key, so it is
    the root and the nodes find it with no sink configured)."""

    def __init__(self, out_dir):
        from host_tools.procmesh.nodeproc import free_port
        self.dir = out_dir
        self.port = free_port()
        self.log = os.path.join(os.path.dirname(out_dir), "gateway.log")
        self.proc = None
        self.key = None

    def start(self, timeout=60.0):
        os.makedirs(self.dir, exist_ok=True)
        self.out = open(self.log, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "host_tools.cli", "gateway", "--out", self.dir,
                                      "--listen", "127.0.0.1:%d" % self.port, "--no-multicast", "-q",
                                      "--interval", "2"], stdout=self.out, stderr=subprocess.STDOUT,
                                     cwd=REPO_ROOT)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            text = open(self.log).read()
            for line in text.splitlines():
                if line.startswith("node "):
                    self.key = line.split()[1]
            if "running;" in text:
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise CliError("the gateway did not start (see %s)" % self.log)

    def stop(self):
        """Stop it (SIGINT, as Ctrl-C); its summary line."""
        import signal
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.out.close()
        lines = [l for l in open(self.log).read().splitlines() if l.startswith("gateway: ")]
        return lines[-1] if lines else None


def _probes(src, dst):
    """The demo's own pings, traces and datagrams (probe records the source
    nodes' consoles reported) from the consoles' telemetry: the report's
    delivery figures. The nodes' state, counters and peers come from the
    gateway."""
    n = 0
    with open(src) as f, open(dst, "w") as out:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("kind") == "probe":
                out.write(line)
                n += 1
    return n


def run(args):
    from host_tools.commands import mesh as mesh_cmd
    from host_tools.commands.mesh import percent
    from host_tools.procmesh.mesh import parse_topology
    from host_tools import topofiles
    t0 = time.monotonic()
    args.topology = topofiles.resolve(args.topology)
    mesh_dir = os.path.join(args.out, "mesh")
    analysis = os.path.join(args.out, "analysis")
    names, edges = parse_topology(args.topology)
    n_ble = sum(1 for e in edges if e[2] == "ble")
    n_now = sum(1 for e in edges if e[2] == "espnow")
    phase(1, 4, "process mesh: %d firmware nodes (MicroPython unix port) from %s, %d links (%d Wi-Fi over "
                "loopback TCP, %d over the emulated BLE radio%s), and a gateway node that %s joins"
          % (len(names), _show(args.topology), len(edges), len(edges) - n_ble - n_now, n_ble,
             ", %d over the emulated ESP-NOW radio" % n_now if n_now else "", names[0]))
    gw_dir = os.path.join(args.out, "gateway")
    gw = GatewayProc(gw_dir).start()
    say("gateway %s on 127.0.0.1:%d, capture in %s: every node sends its telemetry there over the mesh "
        "every %g s (as boards in the field do: no USB console needed)" % (gw.key[:16], gw.port, _show(gw_dir),
                                                                          args.telemetry))
    margs = _mesh_args(args, mesh_dir)
    margs.node_args = dict((n, ["--telemetry", "%g" % args.telemetry]) for n in names)
    margs.node_args[names[0]] += ["--connect", "127.0.0.1:%d" % gw.port]
    margs.outside_keys = [bytes.fromhex(gw.key)]
    try:
        s = mesh_cmd.run_mesh(margs, progress=say)
    finally:
        summary_line = gw.stop()
    tel = os.path.join(mesh_dir, "telemetry.jsonl")
    # beside the gateway's folder, not the mesh's: the mesh's topology.txt
    # has no gateway, so the analysis takes the topology from the peers records
    probes = os.path.join(args.out, "probes.jsonl")
    n_probes = _probes(tel, probes)
    say("mesh stopped: root agreed after %.1f s, snake complete after %.1f s, pings answered %d of %d "
        "(%s), datagrams delivered %d of %d" % (s["tree_converged_s"], s["snake_converged_s"], s["pings_ok"],
                                               s["pings"], percent(s["pings_ok"], s["pings"]),
                                               s.get("datagrams_ok", 0), s.get("datagrams", 0)))
    say(summary_line or "the gateway said nothing at its end (see %s)" % gw.log)

    phase(2, 4, "Spark pipeline (local mode): the gateway's capture (the nodes' telemetry, over the mesh) "
                "and the demo's %d probes; about 10-15 s (longer on a busy machine or the first run on it)"
          % n_probes)
    cmd = [sys.executable, "-m", "host_tools.cli", "analyze", gw_dir, probes, "--out", analysis, "--report"]
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    # its progress lines (stderr) show as they come; its summary (stdout) is
    # shown below in percentages
    r = run_child(cmd, env)
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        raise CliError("the analysis pipeline failed (exit %d)" % r.returncode)
    summary_path = os.path.join(analysis, "summary.json")
    try:
        with open(summary_path) as f:
            summary = json.load(f)
    except (OSError, ValueError) as e:
        raise CliError("the pipeline ran but wrote no readable summary at %s: %s" % (summary_path, e))

    phase(3, 4, "mesh health (from the telemetry)")
    for line in health_lines(summary):
        say(line)
    verdict = [l for l in r.stdout.splitlines()
               if l.strip() and not l.startswith("report:") and _is_verdict(l)]
    for line in verdict:
        say(line)

    phase(4, 4, "report")
    report = os.path.join(analysis, "report", "index.html")
    if not os.path.isfile(report):
        raise CliError("the pipeline ran but wrote no report at %s" % report)
    say("done in %.0f s" % (time.monotonic() - t0))
    print("report: %s" % os.path.abspath(report))
    print("summary: %s" % os.path.abspath(summary_path))
    return 0


def _is_verdict(line):
    low = line.lower()
    return any(w in low for w in ("healthy", "degraded", "broken", "verdict"))


def _pct(v):
    if not isinstance(v, (int, float)):
        return "n/a"
    from host_tools.commands.mesh import percent
    return percent(round(v * 1000), 1000)


def _sec(v):
    return "%.1f s" % v if isinstance(v, (int, float)) else "never"


def health_lines(s):
    """summary.json in words, every ratio as a percentage."""
    out = ["%s nodes, %s telemetry records (%s rejected)" % (s.get("nodes"), s.get("records"),
                                                              s.get("rejected_records", 0)),
           "tree converged after %s, snake after %s; snake neighbours right at the end: %s"
           % (_sec(s.get("tree_converged_s")), _sec(s.get("snake_converged_s")),
              _pct(s.get("snake_correct_ratio_final")))]
    line = "ping delivery %s" % _pct(s.get("ping_delivery_ratio"))
    if s.get("pings") is not None:
        line += " of %s pings" % s.get("pings")
    if isinstance(s.get("rtt_ms_p50"), (int, float)):
        line += ", rtt median %.1f ms" % s["rtt_ms_p50"]
        if isinstance(s.get("rtt_ms_p95"), (int, float)):
            line += ", p95 %.1f ms" % s["rtt_ms_p95"]
    out.append(line)
    if s.get("datagrams"):
        line = "application datagrams delivered %s of %s (acknowledged end to end)" % (
            _pct(s.get("app_delivery_ratio")), s.get("datagrams"))
        if isinstance(s.get("ack_latency_ms_p50"), (int, float)):
            line += ", ack latency median %.1f ms" % s["ack_latency_ms_p50"]
            if isinstance(s.get("ack_latency_ms_p95"), (int, float)):
                line += ", p95 %.1f ms" % s["ack_latency_ms_p95"]
        out.append(line)
    if isinstance(s.get("stretch_mean"), (int, float)):
        out.append("path stretch (hops taken / shortest) mean %.2fx, p95 %.2fx"
                   % (s["stretch_mean"], s.get("stretch_p95") or s["stretch_mean"]))
    warn = s.get("capacity_warnings")
    if isinstance(warn, list):
        out.append("tables that bound the mesh: %s" % ("no table full or refusing" if not warn else
                   "; ".join("%s %s %s/%s (%s refused)" % (w.get("name") or str(w.get("node"))[:8], w.get("table"),
                                                           w.get("used"), w.get("capacity"), w.get("refused"))
                             for w in warn[:5])))
    return out
