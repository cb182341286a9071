"""Figure 11: application datagrams (issue 25) through a process mesh.

Lines of unix-port nodes (UNIX profile, loopback TCP, the firmware as .mpy
as a board runs it: the datagram layer's logic is loaded per event, and from
source every load would compile it) of 1, 3 and 6 hops:
the first node sends datagrams with an end-to-end ack to the last, one at
a time, through its console (`send KEY SERVICE 1 HEX`, 64 bytes). Measured
per hop count: the ack round trip the sending node measured (send to ack,
p50 and p95 of the node's `rtt_ms`) and acknowledged datagrams per second
one at a time (console round trip included: what a script driving a node
gets). Then the goodput of one 4096-byte datagram over 3 hops (5 fragments,
staged with `put` first; the node's send-to-ack time). And the heap a relay
allocates per forwarded datagram frame: bench/forward_alloc.py's `dgram`
case under micropython (a Router with the ESP32_GENERIC profile forwards
10,000 one-fragment datagrams), target 0 B.
"""
import os
import tempfile
import time

from figures.common import BENCH, NotAvailable, row, median, run_mp, micropython

TITLE = "Application datagrams: ack round trip, rate, 4 KB goodput, heap per forwarded frame"
HOPS = (1, 3, 6)
COUNT = 40
NAMES = "abcdefg"


def _pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else None


def _line(hops, tmp, count, ctx):
    from host_tools.procmesh.mesh import ProcessMesh
    names = NAMES[:hops + 1]
    topo = os.path.join(tmp, "line%d.txt" % hops)
    with open(topo, "w") as f:
        for a, b in zip(names, names[1:]):
            f.write("%s %s\n" % (a, b))
    m = ProcessMesh(topo, os.path.join(tmp, "out%d" % hops), seed=11, mpy=True)
    out = {}
    with m:
        m.wait_converged(timeout=120)
        src, dst = names[0], names[-1]
        m.send(src, dst, b"warm", service=1)
        rtts = []
        ok = 0
        t0 = time.monotonic()
        for i in range(count):
            r = m.send(src, dst, bytes(64), service=1)
            if r.get("state") == "delivered":
                ok += 1
                rtts.append(r["rtt_ms"])
        el = time.monotonic() - t0
        out.update(rtts=rtts, ok=ok, rate=ok / el if el > 0 else None)
        if hops == 3:
            data = os.urandom(4096)
            for off in range(0, 4096, 100):
                m.request(src, "put 4096 %d %s" % (off, data[off:off + 100].hex()))
            r = m.request(src, "send %s 1 1 @" % m.hexkey(dst), timeout=40)
            out["big"] = r
        ctx.log("%d hops: %d/%d delivered, rtt p50 %s ms" % (hops, ok, count, _pct(rtts, 0.5)))
    return out


def run(ctx):
    if micropython() is None:
        raise NotAvailable("micropython binary missing (make setup)")
    count = 15 if ctx.quick else COUNT
    rows = []
    with tempfile.TemporaryDirectory(prefix="f11_") as tmp:
        for hops in HOPS:
            r = _line(hops, tmp, count, ctx)
            note = "%d of %d acked datagrams delivered" % (r["ok"], count)
            rows.append(row("%d hop(s): ack rtt p50" % hops, _pct(r["rtts"], 0.5), "ms", None, None, note))
            rows.append(row("%d hop(s): ack rtt p95" % hops, _pct(r["rtts"], 0.95), "ms"))
            rows.append(row("%d hop(s): acked datagrams/s, one at a time" % hops,
                            round(r["rate"], 1) if r["rate"] else None, "/s", None, None,
                            "through the console"))
            if "big" in r:
                b = r["big"]
                good = (4096 / (b["rtt_ms"] / 1000.0) / 1024) if b.get("state") == "delivered" and b.get("rtt_ms") \
                    else None
                rows.append(row("4096-byte datagram over 3 hops: goodput", round(good, 1) if good else None,
                                "KiB/s", "delivered", good is not None,
                                "state %s, %s ms send to ack" % (b.get("state"), b.get("rtt_ms"))))
    per = []
    fwd = []
    for i in range(ctx.reps if ctx.reps_given else 3):
        r = run_mp([os.path.join(BENCH, "forward_alloc.py"), "10000"])
        per.append(r["dgram"]["bytes_per_frame"])
        fwd.append(r["dgram"]["forwarded"])
    v = median(per)
    rows.append(row("heap per forwarded datagram frame", v, "B", "0 B", v == 0 and min(fwd) == 10000,
                    "10000 frames x %d runs" % len(per)))
    return rows
