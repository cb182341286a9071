"""Figure 6: control traffic and convergence time per shared topology.

From the simulator runs of figures/sim_sweep.py with the profile defaults
(UNIX profile, bootstrap policy "all", signature cache on): bytes every
node sends per second (all frame types except traffic: there is no
application traffic in these runs), averaged over nodes, in steady state
(60 s window after convergence + 30 s) and during convergence (from the
start until Mesh.converge() holds), and the virtual seconds to convergence.
Median over seeds.
"""
from figures.common import row
from figures import sim_sweep as S

TITLE = "Control traffic and convergence (virtual-time sim)"


def run(ctx):
    store = S.sweep(ctx, S.TOPOS_ALL, ("all",), (True,))
    rows = []
    ctx.shared["f6"] = {"sim_runs": [r for t in S.TOPOS_ALL for r in store[(t, "all", True)]]}
    for topo in S.TOPOS_ALL:
        runs = store[(topo, "all", True)]
        n = runs[0]["nodes"]
        conv = S.med(runs, "conv_s")
        st = S.med(runs, "steady", "bytes_mean")
        cv = S.med(runs, "conv", "bytes_mean")
        by = runs[len(runs) // 2]["steady"]["bytes_by_type"]
        seeds = ",".join(str(r["seed"]) for r in runs)
        rows.append(row("%s (%d nodes): convergence time" % (topo, n), conv, "s (virtual)", "report",
                        None, "seeds %s: %s s" % (seeds, ", ".join(str(r["conv_s"]) for r in runs))))
        rows.append(row("%s: control bytes/node/s, steady" % topo, round(st, 1), "B/s", "report", None,
                        "busiest node %.0f B/s; by type %s" % (
                            S.med(runs, "steady", "bytes_max"),
                            ", ".join("%s %s" % (k, by[k]) for k in S.TYPE_NAMES if by[k]))))
        rows.append(row("%s: control bytes/node/s, converging" % topo, round(cv, 1), "B/s", "report",
                        None, "busiest node %.0f B/s" % S.med(runs, "conv", "bytes_max")))
    return rows
