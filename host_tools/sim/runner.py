"""One simulation run with outputs: the code behind ``snakemesh sim``.

Writes to the output folder:
- telemetry.jsonl: telemetry records (docs/reference/INTERFACES.md), byte-identical for
  the same inputs and seed;
- topology.txt: the topology used (shared format, ``@`` options where an edge
  is not a default Wi-Fi link);
- truth.json: ground truth: node names -> keys, run parameters, every probe
  with its path, convergence times measured by the harness, sim counters.
"""
import json
import os
import sys
import time

from host_tools.sim import probes as P
from host_tools.sim import scenario as S
from host_tools.sim import telemetry as TM
from host_tools.sim import topology as T
from host_tools.sim.engine import US_PER_S
from host_tools.sim.harness import Mesh
from host_tools.sim.links import LINK_DEFAULTS


class RunError(ValueError):
    """Bad run input (message is one line for the user)."""


def run(out, duration, seed=1, topology=None, generate=None, scenario=None, profile=None,
        pings=20, state_interval=1.0, counters_interval=5.0, truth_interval_ms=250,
        crash_detect_ms=0, link_defaults=None, progress=None, telemetry=True,
        profile_set=None, hop_limit=None, hub_profile=None, node_profiles=None,
        gateway_root=False, root_node=None):
    """Run one simulation. `topology` is a path (or a Topology), `generate`
    a generator spec (grid:WxH, rgg:N[:R], ba:N:M, community:N:C); exactly one of them.
    Returns a summary dict (also the "summary" of truth.json, plus wall
    time). `progress`: a file to print progress lines to (None = quiet).
    `profile`: the base board profile (name, path or Profile);
    `profile_set`: {key: value} overrides applied to the base profile;
    `hub_profile`: profile of every node whose degree exceeds the base
    profile's max_peers; `node_profiles`: {node name: profile} (wins over
    the hub rule); `hop_limit`: hop limit of probe traffic (default: the
    sending node's profile traffic_hop_limit); `gateway_root`: node keys by
    the provisioning policy "a gateway is the root" (host_tools/sim/keys.py);
    `root_node`: the same policy with that node the only root candidate
    (a profile map's root)."""
    if (topology is None) == (generate is None):
        raise RunError("give either a topology file or a generator")
    if not duration > 0:
        raise RunError("duration must be > 0 seconds")
    wall0 = time.monotonic()
    try:
        if generate is not None:
            topo = T.generate(generate, seed)
            topo_source = "generate:" + generate
        elif isinstance(topology, T.Topology):
            topo = topology
            topo_source = "<topology>"
        else:
            topo = T.load(topology)
            topo_source = os.path.basename(topology)
    except T.TopologyError as e:
        raise RunError(str(e))
    events = []
    if scenario is not None:
        try:
            events = S.load(scenario, topo.names)
        except S.ScenarioError as e:
            raise RunError(str(e))
    if pings and not any(ev.action == "ping-set" for ev in events):
        events.append(S.Event(duration / 2.0, "ping-set", [str(int(pings))],
                              {"count": 3, "interval": 1.0, "timeout": 5.0}, 0, "--pings"))
        events.sort(key=lambda e: e.t)

    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise RunError("cannot create output folder %s: %s" % (out, e.strerror or e))
    with open(os.path.join(out, "topology.txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write(topo.to_text())

    tel_path = os.path.join(out, "telemetry.jsonl")
    tel_file = open(tel_path, "w", encoding="utf-8", newline="\n") if telemetry else None
    try:
        writer = TM.Writer(tel_file)
        from snake.profile import Profile, ProfileError
        from host_tools.sim.harness import load_profile
        try:
            prof = load_profile(profile)
            if profile_set:
                d = prof.as_dict()
                d.update(profile_set)
                prof = Profile(d)
            mesh = Mesh(topo, seed=seed, profile=prof, telemetry=writer,
                        crash_detect_ms=crash_detect_ms, link_defaults=link_defaults,
                        hop_limit=hop_limit, strict=False, hub_profile=hub_profile,
                        node_profiles=node_profiles, gateway_root=gateway_root,
                        root_node=root_node, joins=[ev.args[0] for ev in events if ev.action == "join" and ev.args])
        except ProfileError as e:
            raise RunError(str(e))
        mesh.keep_results = True
        if telemetry:
            mesh.start_sampling(state_interval, counters_interval)
        mesh.track_convergence(truth_interval_ms)
        mesh.track_capacity(counters_interval)
        S.schedule(mesh, events)
        end_us = int(round(duration * US_PER_S))
        chunk = max(US_PER_S, end_us // 20)
        t = 0
        while t < end_us:
            t = min(end_us, t + chunk)
            mesh._run(t)
            if progress is not None:
                conv = mesh.convergence
                print("sim: %6.1f/%g s virtual  %d nodes  %d events  %d probes done  "
                      "converged=%s  wall %.1f s  peak rss %d MB"
                      % (t / US_PER_S, duration, len(mesh.nodes), mesh.engine.events_run,
                         len(mesh.results), "yes" if mesh.converged() else "no",
                         time.monotonic() - wall0, peak_rss_mb()), file=progress, flush=True)
        writer.close()
    finally:
        if tel_file is not None:
            tel_file.close()

    probes = mesh.results
    ok = sum(1 for p in probes if p.ok)
    node_labels, profiles_used = _profiles_used(mesh)
    conv = mesh.convergence
    stretch, stretch_pairs, _ = P.first_message_stretch(probes)
    ratio = mesh.snake_correct_ratio()
    warnings = mesh.capacity_warnings()
    counts = {}
    for name in mesh.nodes:
        label = node_labels.get(name, mesh.profile.name)
        counts[label] = counts.get(label, 0) + 1
    summary = {
        "nodes": len(mesh.nodes),
        "edges": len(mesh.links()),
        # links that never came up: a full port table refused them; the
        # truth (and analyze) judge the mesh on the links that came up
        "links_refused": sum(1 for l in mesh.links() if l.blocked),
        "profiles": dict(sorted(counts.items())),
        "duration_s": duration,
        "first_convergence_s": conv["first"],
        "converged_s": conv["held_from"],
        "converged_at_end": mesh.converged(),
        "snake_first_s": conv["snake_first"],
        "snake_converged_s": conv["snake_held_from"],
        "snake_correct_ratio_final": round(ratio, 4) if ratio is not None else None,
        "probes": len(probes),
        "probes_ok": ok,
        "probes_unfinished": len(mesh._probes),
        "delivery_ratio": round(ok / len(probes), 4) if probes else None,
        "first_message_stretch": round(stretch, 4) if stretch is not None else None,
        "first_message_pairs": stretch_pairs,
        "capacity_warnings": len(warnings) if warnings is not None else None,
        "capacity_warning_nodes": (len(set(w["node"] for w in warnings))
                                   if warnings is not None else None),
        "datagrams": mesh.datagram_summary() if mesh._dg_pending_recs else None,
        "telemetry_records": writer.count,
        "events_run": mesh.engine.events_run,
    }
    truth = {
        "params": {
            "seed": seed, "duration_s": duration, "topology": topo_source,
            "scenario": os.path.basename(scenario) if scenario else None,
            "pings": pings, "profile": mesh.profile.as_dict(), "hop_limit": mesh.hop_limit,
            "hub_profile": _spec_name(hub_profile),
            "gateway_root": bool(gateway_root),
            "root_node": root_node,
            "node_profiles": node_labels, "profiles": profiles_used,
            "link_defaults": LINK_DEFAULTS, "link_overrides": link_defaults,
            "tick_ms": mesh.tick_us / 1000.0, "crash_detect_ms": crash_detect_ms,
            "reconnect_ms": mesh.reconnect_us / 1000.0,
            "state_interval_s": state_interval, "counters_interval_s": counters_interval,
        },
        "nodes": {n: mesh.node(n).hex for n in mesh.nodes},
        "scenario": [{"t": ev.t, "event": ev.describe()} for ev in events],
        "probes": [dict(p.as_dict(), path_keys=[k.hex() for k in p.path_keys])
                   for p in probes],
        "datagrams": [dict((k, v) for k, v in r.items() if not k.startswith("_"))
                      for r in mesh._dg_pending_recs],
        "convergence": conv,
        "sim_stats": dict(mesh.stats),
        "sim_events": [list(e) for e in mesh.events if e[2] in ("router_exception", "scenario_error")],
        "router_events": dict(sorted(mesh.router_events.items())),
        "capacity_warnings": warnings,
        "summary": summary,
    }
    with open(os.path.join(out, "truth.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump(truth, f, sort_keys=True, indent=1)
        f.write("\n")
    summary = dict(summary)
    summary["wall_s"] = round(time.monotonic() - wall0, 3)
    return summary


def _spec_name(spec):
    """A profile option as given (board name or path basename) for truth.json."""
    if spec is None or isinstance(spec, str):
        return os.path.basename(spec) if spec and os.sep in spec else spec
    return getattr(spec, "name", None) or "<profile>"


def _profiles_used(mesh):
    """({node name: profile label}, {profile label: full profile}) for the
    nodes that do not run the base profile (that one is params.profile).
    The label is the profile's name; a different profile with the same
    name gets "~2", "~3", ..."""
    labels = {}
    full = {}
    by_obj = {}
    for name in sorted(mesh.node_profiles):
        p = mesh.node_profiles[name]
        if id(p) not in by_obj:
            d = p.as_dict()
            label = p.name
            k = 1
            while label in full and full[label] != d:
                k += 1
                label = "%s~%d" % (p.name, k)
            full[label] = d
            by_obj[id(p)] = label
        labels[name] = by_obj[id(p)]
    return labels, dict(sorted(full.items()))


def peak_rss_mb():
    """Peak resident set size of this process in MB (0 where unknown)."""
    try:
        import resource
    except ImportError:
        return 0
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb // 1024 if sys.platform != "darwin" else kb // (1024 * 1024)


def summary_line(s):
    conv = ("converged at %.2f s" % s["first_convergence_s"]
            if s["first_convergence_s"] is not None else "never converged")
    if not s["converged_at_end"] and s["first_convergence_s"] is not None:
        conv += " (not converged at the end)"
    if s["delivery_ratio"] is None:
        deliv = "no probes"
    else:
        deliv = "delivery %.1f%% (%d/%d)" % (100.0 * s["delivery_ratio"], s["probes_ok"], s["probes"])
    line = ("sim: %d nodes, %g s virtual: %s, %s, wall %.1f s"
            % (s["nodes"], s["duration_s"], conv, deliv, s["wall_s"]))
    ratio = s.get("snake_correct_ratio_final")
    if ratio is not None and ratio < 1.0:
        line += "; %.1f%% of descending entries right at the end" % (100.0 * ratio)
    if s.get("links_refused"):
        line += ("; %d of %d links refused (ports full), judged on the %d that came up"
                 % (s["links_refused"], s["edges"], s["edges"] - s["links_refused"]))
    d = s.get("datagrams")
    if d:
        line += "; datagrams delivered %d, sent %d, failed %d%s, pending %d, delivered twice %d" % (
            d["delivered"], d["sent"], sum(d["failed"].values()),
            " (%s)" % ", ".join("%s %d" % kv for kv in sorted(d["failed"].items())) if d["failed"] else "",
            d["pending"], d["delivered_twice"])
    if s.get("capacity_warnings"):
        line += "; capacity warnings on %d nodes (truth.json)" % s["capacity_warning_nodes"]
    return line


def main_progress():
    return sys.stderr
