"""Figure 5: signature verification cost, and what it means on an ESP32.

Simulator part (figures/sim_sweep.py): on each 50-node shared topology,
under each bootstrap policy (all / on-change / off), with the signature
cache (the profile's SigCache) and without it (NoCache: every signature
verified), the verifications a node computes per second in steady state
(router.counters.verify_done over a 60 s window after convergence + 30 s):
mean over nodes and the busiest node; in the details also the same during
convergence and the cache hits / policy skips.

MicroPython part (figures/mp_verify.py): pure-Python ed25519 verify time on
the unix port, default heap and a 110K heap, interleaved with a calibration
workload (figures/calib.py: 65 digits of pi, big-integer arithmetic) whose
ESP32 score MicroPython's performance suite publishes. ESP32 verify time =
unix verify time x (unix calibration score / ESP32 calibration score), both
measured under a 110K heap and under the default heap; the larger estimate
is used. CPU share of the busiest node = its verifications/s x ESP32 verify
time (the `ratio` column of the table, in %).
"""
import os

from figures.common import FIGS, row, median, run_mp
from figures import sim_sweep as S

TITLE = "Signature verification load (50-node sims) and ESP32 CPU share"

# MicroPython tests/perf_bench/bm_pidigits.py, N=100 M=100 (65 digits),
# score = digits per second, on an ESP32 (ESP32-D0WD, the ESP32_GENERIC
# board) after the esp32 port's performance work (VM and hot runtime paths in
# IRAM, -O2): 591.97 (micropython/micropython pull request #7850, 2021).
# The same suite's pystone score on ESP32 (1731.9, issue #6565) matches a
# pystone run at an explicit 240 MHz (1661 pystones/s, issue #5673), so the
# published scores are taken as 240 MHz figures.
ESP32_PIDIGITS_SCORE = 591.97
ESP32_REF = ("MicroPython perf_bench bm_pidigits on ESP32: 591.97 digits/s "
             "(micropython/micropython PR #7850)")


def esp32_translation(ctx, reps):
    """Pure-Python verify on the unix port (default and 110K heap) and its
    ESP32 equivalent. Cached in ctx.shared."""
    if "esp32" in ctx.shared:
        return ctx.shared["esp32"]
    rounds = 21 if ctx.quick else 41
    out = {}
    for heap in (None, "110K"):
        runs = []
        for _ in range(reps):
            runs.append(run_mp([os.path.join(FIGS, "mp_verify.py"), str(rounds)], heap=heap))
        key = heap or "default"
        vbest = median([r["verify_ms_best"] for r in runs])
        vmed = median([r["verify_ms_median"] for r in runs])
        score = median([r["pidigits_per_s_best"] for r in runs])
        out[key] = {"verify_ms_best": vbest, "verify_ms_median": vmed,
                    "pidigits_per_s_best": score, "runs": runs}
        ctx.log("verify %s heap: best %.2f ms, median %.2f ms; calibration %.0f digits/s" % (
            key, vbest, vmed, score))
    # two estimates: calibration and verify both under a 110K heap (garbage
    # collections as on a board with ~110 KB free), and both under the
    # default heap; the larger (the safe side) is used for CPU shares
    est = {}
    for key in ("110K", "default"):
        f = ctx.esp32_factor
        if f is None:
            f = out[key]["pidigits_per_s_best"] / ESP32_PIDIGITS_SCORE
        est[key] = {"factor": f, "verify_ms_esp32": out[key]["verify_ms_best"] * f}
    use = max(est, key=lambda k: est[k]["verify_ms_esp32"])
    if ctx.esp32_factor is not None:
        source = "given on the command line (--esp32-factor)"
    else:
        source = ("measured: unix-port calibration score / ESP32 score (%s); %s heap "
                  "(the larger estimate)" % (ESP32_REF, use))
    esp = {"factor": est[use]["factor"], "factor_source": source, "heap_used": use,
           "verify_ms_unix_110K": out["110K"]["verify_ms_best"],
           "verify_ms_unix_default": out["default"]["verify_ms_best"],
           "verify_ms_esp32": est[use]["verify_ms_esp32"],
           "estimates": est, "detail": out}
    ctx.shared["esp32"] = esp
    return esp


def run(ctx):
    store = S.sweep(ctx, S.TOPOS_50, S.POLICIES, (True, False))
    esp = esp32_translation(ctx, ctx.reps if ctx.reps_given else (2 if ctx.quick else 3))
    v_esp_s = esp["verify_ms_esp32"] / 1000.0
    ctx.shared["f5"] = {"esp32": esp, "sim_runs": [r for t in S.TOPOS_50 for p in S.POLICIES
                                                    for c in (True, False) for r in store[(t, p, c)]]}
    rows = [
        row("pure-Python verify, unix port, 110K heap (best)", round(esp["verify_ms_unix_110K"], 2),
            "ms", "report", None, "default heap: %.2f ms" % esp["verify_ms_unix_default"]),
        row("assumed ESP32 slowdown vs this machine's unix port", round(esp["factor"], 1), "x",
            "report", None, esp["factor_source"]),
        row("=> pure-Python verify on ESP32 (estimate)", round(esp["verify_ms_esp32"]), "ms",
            "report", None, "estimates: 110K heap %.0f ms (factor %.0f), default heap %.0f ms (factor %.0f)"
            % (esp["estimates"]["110K"]["verify_ms_esp32"], esp["estimates"]["110K"]["factor"],
               esp["estimates"]["default"]["verify_ms_esp32"], esp["estimates"]["default"]["factor"])),
    ]
    for topo in S.TOPOS_50:
        for policy in S.POLICIES:
            on = store[(topo, policy, True)]
            off = store[(topo, policy, False)]
            busy = S.med(on, "steady", "verify_max")
            mean = S.med(on, "steady", "verify_mean")
            busy_nc = S.med(off, "steady", "verify_max")
            mean_nc = S.med(off, "steady", "verify_mean")
            conv_busy = S.med(on, "conv", "verify_max")
            conv_busy_nc = S.med(off, "conv", "verify_max")
            share = 100.0 * busy * v_esp_s
            share_nc = 100.0 * busy_nc * v_esp_s
            note = ("mean %.3f/s; no cache: busiest %.3f/s mean %.3f/s; convergence busiest %.2f/s "
                    "(no cache %.2f/s); skipped %.2f/s; ESP32 CPU busiest %.1f%% (no cache %.1f%%)") % (
                mean, busy_nc, mean_nc, conv_busy, conv_busy_nc,
                S.med(on, "steady", "skipped_mean"), share, share_nc)
            rows.append(row("%s %s: verify/s busiest node, steady" % (topo, policy), round(busy, 3),
                            "1/s", "report", None, note, ratio=round(share, 1)))
    return rows
