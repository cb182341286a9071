"""Figure 1: heap allocated per forwarded traffic frame (unix port).

Runs bench/forward_alloc.py under micropython: a Router with the
ESP32_GENERIC profile forwards 10,000 traffic frames (200-byte payload)
after 200 warm-up frames, once SNEK-routed and once tree-routed, and
reports the gc.mem_alloc() delta divided by the frame count. Repeated
(each repetition is a fresh process); the median is reported.
"""
import os

from figures.common import BENCH, row, median, run_mp

TITLE = "Heap allocated per forwarded frame (unix port)"
FRAMES = 10000


def run(ctx):
    reps = ctx.reps if ctx.reps_given else 3
    per = {"snek": [], "tree": []}
    fwd = {"snek": [], "tree": []}
    for i in range(reps):
        r = run_mp([os.path.join(BENCH, "forward_alloc.py"), str(FRAMES)])
        for k in per:
            per[k].append(r[k]["bytes_per_frame"])
            fwd[k].append(r[k]["forwarded"])
        ctx.log("rep %d: snek %s B/frame, tree %s B/frame" % (i + 1, r["snek"]["bytes_per_frame"],
                                                              r["tree"]["bytes_per_frame"]))
    ctx.shared["f1"] = {"bytes_per_frame": per, "forwarded": fwd}
    rows = []
    for k, label in (("snek", "SNEK-routed"), ("tree", "tree-routed")):
        v = median(per[k])
        all_fwd = min(fwd[k]) == FRAMES
        note = "%d frames x %d runs" % (FRAMES, reps)
        if not all_fwd:
            note += "; only %d of %d frames forwarded" % (min(fwd[k]), FRAMES)
        rows.append(row("%s bytes/frame" % label, v, "B", "0 B", v == 0 and all_fwd, note))
    return rows
