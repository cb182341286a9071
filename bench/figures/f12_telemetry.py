"""Figure 12: telemetry over the mesh (issue 26) next to control traffic.

A process mesh of the demo topology (8 unix-port nodes, Wi-Fi and BLE
links, UNIX profile) where every node sends its telemetry to one node
(alpha, the sink: firmware/snake/runtime/telesink.py) every PERIOD
seconds. Measured over the run, from every node's counters (`stats`):
traffic bytes sent per node per second (here only telemetry datagrams,
relays included: what the mesh carries) and control bytes sent per node
per second (every frame type but traffic), and the payload bytes one
period sends per node (node counter `telemetry.bytes`). The telemetry
bytes per second at the profile's period (telemetry_s, 60 s on the boards)
follow from the bytes per period measured here: per period the node sends
the same records (one datagram of deltas, each record kind whole every
10th period), so the rate scales with 1/period. Target: <= 10 % of
control traffic.
"""
import os
import tempfile
import time

from figures.common import NotAvailable, row, micropython

TITLE = "Telemetry over the mesh next to control traffic (demo topology, 8 nodes)"
PERIOD = 5.0
PROFILE_PERIOD = 60.0


def _sum(stats, field, keys=None):
    d = stats.get(field) or {}
    return sum(v for k, v in d.items() if keys is None or k in keys)


def run(ctx):
    if micropython() is None:
        raise NotAvailable("micropython binary missing (make setup)")
    from host_tools.procmesh.mesh import ProcessMesh
    from host_tools.commands.demo import DEMO_TOPOLOGY
    seconds = 40.0 if ctx.quick else 110.0
    with tempfile.TemporaryDirectory(prefix="f12_") as tmp:
        m = ProcessMesh(DEMO_TOPOLOGY, os.path.join(tmp, "mesh"), seed=7)
        sink = m.hexkey(m.names[0])
        m.node_args = dict((n, ["--sink", sink, "--telemetry", "%g" % PERIOD]) for n in m.names)
        with m:
            m.wait_converged(timeout=120)
            s0 = dict((n, m.request(n, "stats")) for n in m.names)
            t0 = time.monotonic()
            time.sleep(seconds)
            s1 = dict((n, m.request(n, "stats")) for n in m.names)
            el = time.monotonic() - t0
    senders = [n for n in m.names if n != m.names[0]]
    control = traffic = payload = 0
    for n in m.names:
        a, b = s0[n], s1[n]
        ctrl_types = [k for k in (b.get("tx_bytes") or {}) if k != "traffic"]
        control += _sum(b, "tx_bytes", ctrl_types) - _sum(a, "tx_bytes", ctrl_types)
        traffic += (b.get("tx_bytes") or {}).get("traffic", 0) - (a.get("tx_bytes") or {}).get("traffic", 0)
    for n in senders:
        ta, tb = s0[n].get("telemetry") or {}, s1[n].get("telemetry") or {}
        payload += tb.get("bytes", 0) - ta.get("bytes", 0)
    N = len(m.names)
    ctrl_s = control / float(N) / el
    tel_s = traffic / float(N) / el
    per_period = traffic / float(len(senders)) / (el / PERIOD)
    at_profile = per_period / PROFILE_PERIOD * len(senders) / float(N)
    ratio = at_profile / ctrl_s if ctrl_s else None
    ctx.log("control %.1f B/s/node, telemetry %.1f B/s/node at %g s (%.0f B per period per sender)"
            % (ctrl_s, tel_s, PERIOD, per_period))
    return [
        row("control traffic per node", round(ctrl_s, 1), "B/s", None, None,
            "every frame type but traffic, %d nodes, %.0f s" % (N, el)),
        row("telemetry traffic per node, period %g s" % PERIOD, round(tel_s, 1), "B/s", None, None,
            "traffic frames sent (relays included); payload %.0f B/s per sender"
            % (payload / float(len(senders)) / el)),
        row("telemetry bytes on the wire per sender per period", round(per_period), "B", None, None,
            "one datagram of deltas, each kind whole every 10th period; relays included"),
        row("telemetry per node at the profile's %g s, share of control" % PROFILE_PERIOD,
            round(100.0 * ratio, 1) if ratio is not None else None, "%", "<= 10 %",
            ratio is not None and ratio <= 0.10,
            "%.1f B/s per node from the bytes per period measured" % at_profile),
    ]
