"""Figure 6: control traffic, convergence time and first-message stretch per
shared topology, against the reference Pinecone's figures.

From the simulator runs of figures/sim_sweep.py with the profile defaults
(UNIX profile, bootstrap policy "all", signature cache on): bytes every
node sends per second (all frame types: there is no application traffic in
these runs, so all of it is control traffic), from the routers' own
counters (checked against what the simulator's links carried), averaged
over nodes, in steady state (WINDOW_S after convergence + 30 s) and during
convergence (from the start until Mesh.converge() holds); the virtual
seconds to convergence; and after the window the first-message stretch
(STRETCH_PAIRS random node pairs, each pinged once by SNEK: hops / shortest
path, mean over pairs). Median over seeds.

The reference figures were measured with the reference Pinecone on the
same graphs on the development machine (issues 14 and 15); the ratio
column is snakemesh / reference, and each row passes at <= 1.0 (control
bytes: the moonshot is <= 0.5).
"""
from figures.common import row
from figures import sim_sweep as S

TITLE = "Control traffic, convergence and stretch vs the reference (virtual-time sim)"

WINDOW_S = 120.0
STRETCH_PAIRS = 200

# reference Pinecone on the same graphs: steady-state control bytes per node
# and second, snake convergence (s), first-message stretch (median of 3 runs)
REFERENCE = {
    "sim": {"bytes": 235.0, "conv_s": 12.1, "stretch": 1.43},
    "line-0050": {"bytes": 666.0, "conv_s": 16.0, "stretch": 1.00},
    "rtree-0050": {"bytes": 261.0, "conv_s": 31.0, "stretch": 1.00},
    "grid4-0049": {"bytes": 375.0, "conv_s": 19.1, "stretch": 1.69},
}
MOONSHOT = 0.5


def _ratio(v, ref):
    if v is None or not ref:
        return None
    return round(v / ref, 3)


def run(ctx):
    store = S.sweep(ctx, S.TOPOS_ALL, ("all",), (True,), window=WINDOW_S,
                    stretch_pairs=STRETCH_PAIRS)
    rows = []
    ctx.shared["f6"] = {"sim_runs": [r for t in S.TOPOS_ALL for r in store[(t, "all", True)]],
                        "reference": REFERENCE, "window_s": WINDOW_S}
    for topo in S.TOPOS_ALL:
        runs = store[(topo, "all", True)]
        ref = REFERENCE[topo]
        n = runs[0]["nodes"]
        seeds = ",".join(str(r["seed"]) for r in runs)
        conv = S.med(runs, "conv_s")
        rc = _ratio(conv, ref["conv_s"])
        rows.append(row("%s (%d nodes): convergence time" % (topo, n), conv, "s (virtual)",
                        "<= %g s (reference)" % ref["conv_s"], rc is not None and rc <= 1.0,
                        "seeds %s: %s s" % (seeds, ", ".join(str(r["conv_s"]) for r in runs)),
                        ratio=rc))
        st = S.med(runs, "steady", "bytes_mean")
        rs = _ratio(st, ref["bytes"])
        mid = sorted(runs, key=lambda r: r["steady"]["bytes_mean"])[len(runs) // 2]
        by = mid["steady"]["bytes_by_type"]
        rows.append(row("%s: control bytes/node/s, steady" % topo, round(st, 1), "B/s",
                        "<= 1.0 x reference %g B/s (moonshot %.1f)" % (ref["bytes"], MOONSHOT),
                        rs is not None and rs <= 1.0,
                        "%s; busiest node %.0f B/s; by type %s; bootstraps %.1f/node/min; snake "
                        "wrong %s s of %g s; counters = link bytes (checked)" % (
                            "moonshot met" if rs is not None and rs <= MOONSHOT else "moonshot not met",
                            S.med(runs, "steady", "bytes_max"),
                            ", ".join("%s %s" % (k, by[k]) for k in S.TYPE_NAMES if by[k]),
                            S.med(runs, "steady", "bootstraps_per_min"),
                            "/".join(str(r["wrong_s"]) for r in runs), WINDOW_S),
                        ratio=rs))
        cv = S.med(runs, "conv", "bytes_mean")
        rows.append(row("%s: control bytes/node/s, converging" % topo, round(cv, 1), "B/s", "report",
                        None, "busiest node %.0f B/s" % S.med(runs, "conv", "bytes_max")))
        sm = S.med(runs, "stretch", "mean")
        rt = _ratio(sm, ref["stretch"])
        rows.append(row("%s: first-message stretch" % topo, None if sm is None else round(sm, 3), "",
                        "<= %.2f (reference)" % ref["stretch"], rt is not None and rt <= 1.0,
                        "mean of hops/shortest over %d pairs per seed (%s); p95 %s; delivered %s" % (
                            STRETCH_PAIRS, ", ".join("%.3f" % r["stretch"]["mean"] for r in runs
                                                      if r["stretch"]["mean"] is not None),
                            S.med(runs, "stretch", "p95"),
                            "/".join("%d" % r["stretch"]["delivered"] for r in runs)),
                        ratio=rt))
    return rows
