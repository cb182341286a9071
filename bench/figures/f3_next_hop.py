"""Figure 3: SNEK and tree next-hop decisions at full tables (micropython).

bench/figures/mp_router.py nexthop builds the full ESP32_GENERIC router of
figure 2a and times, in one process with time.ticks_us:
  snek  snake.next_hop(dst, ...) over 64 destinations (half with a route,
        half random keys between ours and the root's: every step scans)
  tree  tree.next_hop(coords, ...) over 64 max_hops-deep coordinates that
        share a random-length prefix with one peer's coordinates
  dict  dict.get(32-byte key) on a 64-entry dict: the baseline
  loop  the bare loop (indexing only), for reference
Each run times its calls in bursts of 64 (1-2 ms, shorter than a scheduler
time slice; the four kinds interleaved burst by burst) and keeps its fastest
burst, so preemption by other processes on a shared machine is rejected;
per run the ratio decision/dict is taken, and the median over runs is
reported (microseconds: median over runs too).
"""
import os

from figures.common import FIGS, ROOT, row, median, run_mp

TITLE = "Next-hop decision at full tables (micropython)"


def run(ctx):
    prof = os.path.join(ROOT, "boards", "ESP32_GENERIC", "profile.json")
    iters = 1000 if ctx.quick else 2000
    runs = 9 if ctx.quick else 15
    r = run_mp([os.path.join(FIGS, "mp_router.py"), "nexthop", prof, str(iters), str(runs)])
    ctx.shared["f3"] = r
    rows = []
    for k, label in (("snek", "SNEK next hop"), ("tree", "tree next hop")):
        ratios = [a / b for a, b in zip(r[k + "_us_all"], r["dict_us_all"]) if b > 0]
        ratio = median(ratios)
        alloc = (r.get("alloc_bytes_per_run") or {}).get(k)
        note = "%.3f us per dict lookup; %d x %d decisions; allocates %s B" % (
            r["dict_us"], runs, iters, alloc)
        rows.append(row("%s, us/decision" % label, round(r[k + "_us"], 2), "us", "report", None,
                        note, ratio=round(ratio, 1)))
    rows.append(row("dict lookup baseline, us", round(r["dict_us"], 4), "us", "baseline", None,
                    "64-entry dict, 32-byte bytes keys"))
    return rows
