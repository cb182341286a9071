"""Figure 10: throughput and latency per hop of the radio links, emulated
(BLE and ESP-NOW side by side).

Two link managers of one kind in one MicroPython process
(bench/figures/mp_radio_link.py), each on its own emulated radio attached to
that kind's medium at its defaults (host_tools/blemu/medium.py: 5 ms per
packet, 1,000 kbit/s per direction, ATT MTU 247; host_tools/espnowemu/
medium.py: 2 ms, 1,000 kbit/s per sender, no loss), with the firmware's own
transport code and a profile's ring size: BLE 512 (the ESP32 boards);
ESP-NOW 256 (the ESP32 boards: one message in flight) and 2048 (UNIX).
Measured over the link itself (no router): the round trip of 64 bytes
(median of 30) and the bytes per second of a 64 KB transfer. The medium's
timing is a model, not a radio: the figures compare the transports'
protocols (chunking, acks, windows), not the air.
"""
import os
import subprocess
import sys

from figures.common import FIGS, ROOT, row, median, run_mp

TITLE = "Radio links per hop: emulated BLE vs ESP-NOW (throughput, round trip)"
CASES = (("ble", 512, "BLE, ring 512 (ESP32)"),
         ("espnow", 256, "ESP-NOW, ring 256 (ESP32)"),
         ("espnow", 2048, "ESP-NOW, ring 2048 (UNIX)"))


def _medium(kind, topo):
    mod = "host_tools.blemu.medium" if kind == "ble" else "host_tools.espnowemu.medium"
    p = subprocess.Popen([sys.executable, "-m", mod, "--topology", topo, "--port", "0"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        raise RuntimeError("%s did not start" % mod)
    return p, line.strip().rsplit(" ", 1)[1]


def run(ctx):
    import tempfile
    nbytes = 32768 if ctx.quick else 65536
    rows = []
    with tempfile.TemporaryDirectory() as d:
        topo = os.path.join(d, "t.txt")
        with open(topo, "w") as f:
            f.write("a b @ble\na b @espnow\n")
        for kind, ring, label in CASES:
            p, addr = _medium(kind, topo)
            try:
                r = run_mp([os.path.join(FIGS, "mp_radio_link.py"), ROOT, kind, addr, str(nbytes), str(ring)],
                           timeout=300)
            finally:
                p.terminate()
                p.wait(5)
            if "error" in r:
                raise RuntimeError("%s: %s" % (label, r["error"]))
            rtt = median(r["rtt_ms"])
            bps = int(r["bytes"] * 1000 / r["ms"]) if r["ms"] else None
            c = r.get("counters") or {}
            note = "%d of %d bytes" % (r["bytes"], nbytes)
            if kind == "espnow":
                note += "; retransmits %s, resumes %s" % (c.get("retransmits"), c.get("resumes"))
            rows.append(row("%s: round trip of 64 B, ms" % label, rtt, "ms", "report", None,
                            "median of %d" % len(r["rtt_ms"])))
            rows.append(row("%s: throughput, B/s" % label, bps, "B/s", "report", None, note))
    return rows
