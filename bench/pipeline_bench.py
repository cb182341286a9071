"""Benchmark: `snakemesh analyze` on 1,000,000 telemetry records in local
mode, against a single-machine pandas baseline computing the same headline
figures with the same rules.

    .venv/bin/python bench/pipeline_bench.py [--records N] [--nodes N] [--keep DIR] [--json]
    .venv/bin/python bench/pipeline_bench.py --records 1000000 --days 10 --no-baseline

--days N writes the generated day N times, one folder per day
(YYYY-MM-DD/telemetry-K.jsonl, the clock shifted a day each time: the same
boards over N days) and analyzes the folder: N x --records records, the
fleet-days case. The peak RSS of analyze's process tree (Python driver + the
JVM) is sampled every 0.2 s and reported with the time.

The telemetry is synthetic (bench/telemetry_synth.py) with a realistic
mix: state reports every second and on every change, counters every 5 s,
peer lists every 10 s, a ping every 2 s and a traceroute every 10 s per node,
events, a partition that heals, and 0.1% malformed lines.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

HEADLINE = ("nodes", "records", "rejected_records", "tree_converged_s", "snake_converged_s",
            "snake_correct_ratio_final", "ping_delivery_ratio", "stretch_mean", "stretch_p95",
            "table_occupancy_max", "evictions")


def make_input(dirname, records, nodes, seed=11, files=4):
    import networkx as nx
    import telemetry_synth as ts
    side = int(round(nodes ** 0.5))
    g = nx.grid_2d_graph(side, max(1, nodes // side))
    g = nx.relabel_nodes(g, dict((n, "n%d_%d" % n) for n in g.nodes()))
    n = g.number_of_nodes()
    per_node_s = 1.0 + 0.2 + 0.1 + 0.5 + 0.1 + 0.15   # rough records per node-second
    duration = records / (n * per_node_s) * 1.1
    cut = ts.middle_cut(g)
    t0 = time.time()
    n_bad = records // 1000
    while True:
        sc = ts.Scenario(duration=duration, state_interval=1.0, counters_interval=5.0, peers_interval=10.0,
                         ping_interval=2.0, trace_interval=10.0, ping_loss=0.05,
                         partition=(duration * 0.4, duration * 0.6, cut))
        recs, truth = ts.generate(g, seed, sc)
        if len(recs) >= records - n_bad:
            break
        duration *= 1.02 * (records - n_bad) / float(len(recs))
    bad = []
    rng = random.Random(seed)
    while len(bad) < n_bad:
        lines, _r = ts.corrupt(recs[:5000], rng, per_kind=1)
        bad.extend(lines)
    bad = bad[:n_bad]
    recs = recs[: records - n_bad]
    outs = [open(os.path.join(dirname, "telemetry-%d.jsonl" % i), "w") for i in range(files)]
    slot = {}
    for r in recs:
        f = outs[slot.setdefault(r["node"], len(slot) % files)]
        f.write(json.dumps(r, separators=(",", ":")))
        f.write("\n")
    for i, line in enumerate(bad):
        outs[i % files].write(line + "\n")
    for f in outs:
        f.close()
    size = sum(os.path.getsize(os.path.join(dirname, x)) for x in os.listdir(dirname))
    return {"nodes": n, "duration_s": round(duration, 1), "lines": len(recs) + len(bad),
            "bytes": size, "generate_s": round(time.time() - t0, 1)}


def spread_days(dirname, days):
    """Turn the generated files into `days` daily folders: day i is the
    same telemetry with every record's `t` one day later per day (a
    malformed line is copied as it is). Returns the folder names."""
    import datetime
    files = sorted(x for x in os.listdir(dirname) if x.endswith(".jsonl"))
    t_re = re.compile(r'"t":(-?[0-9.eE+-]+)')
    names = []
    for i in range(days):
        day = (datetime.date(1970, 1, 1) + datetime.timedelta(days=i)).isoformat()
        names.append(day)
        os.makedirs(os.path.join(dirname, day))
        for name in files:
            src = os.path.join(dirname, name)
            dst = os.path.join(dirname, day, name)
            if i == 0:
                continue
            shift = 86400.0 * i
            sub = lambda m: '"t":%r' % (float(m.group(1)) + shift)  # noqa: E731
            with open(src) as fi, open(dst, "w") as fo:
                for line in fi:
                    fo.write(t_re.sub(sub, line, count=1))
    for name in files:
        os.rename(os.path.join(dirname, name), os.path.join(dirname, names[0], name))
    return names


class TreeRss(object):
    """Peak resident memory of a process (the Python driver) and of the
    largest of its descendants (the JVM), sampled from /proc every `every`
    s. (A sum over the tree is not a figure: a JVM that forks a shell
    command shows its whole RSS twice for a moment.)"""
    def __init__(self, pid, every=0.2):
        import threading
        self.pid, self.every = pid, every
        self.peak_sum = self.peak_one = self.peak_root = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _tree(self):
        parent = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open("/proc/%s/stat" % d) as f:
                        parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    pass
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo.extend(c for c, pp in parent.items() if pp == p)
        return out

    def _run(self):
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.is_set():
            total = 0
            for p in self._tree():
                try:
                    with open("/proc/%d/statm" % p) as f:
                        rss = int(f.read().split()[1]) * page
                except (OSError, ValueError, IndexError):
                    continue
                total += rss
                if p == self.pid:
                    self.peak_root = max(self.peak_root, rss)
                else:
                    self.peak_one = max(self.peak_one, rss)
            self.peak_sum = max(self.peak_sum, total)
            self._stop.wait(self.every)

    def stop(self):
        self._stop.set()
        self._t.join()
        return self


# -- pandas baseline -----------------------------------------------------------------

_KEY = re.compile(r"^[0-9a-fA-F]{64}$")


def _is_key(x):
    return isinstance(x, str) and bool(_KEY.match(x))


REQ = {"state": ("root", "root_seq"), "peers": ("peers",), "probe": ("probe", "id", "src", "dst", "ok"),
       "event": ("event",), "topology": ("edges",), "counters": ()}
NUM = (int, float)


def _valid(r):
    """The pipeline's rules, restricted to what the headline figures read."""
    if not isinstance(r, dict) or r.get("v") != 1 or isinstance(r.get("v"), bool):
        return False
    k = r.get("kind")
    if k not in REQ:
        return False
    t = r.get("t")
    if not isinstance(t, NUM) or isinstance(t, bool) or t != t:
        return False
    if k != "topology" and not _is_key(r.get("node")):
        return False
    for f in REQ[k]:
        if r.get(f) is None:
            return False
    if k == "state":
        if not isinstance(r["root_seq"], int) or "desc" not in r:
            return False
    if k == "probe" and (r["probe"] not in ("ping", "trace") or not _is_key(r["src"]) or not _is_key(r["dst"])):
        return False
    return True


def baseline(paths):
    """The headline figures with pandas in one process. It implements the
    pipeline's rules except "down nodes" (the benchmark has no crashes)."""
    import numpy as np
    import pandas as pd
    t0 = time.time()
    good, rejected = [], 0
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                if line.startswith("@sm "):
                    line = line[4:]
                try:
                    r = json.loads(line)
                except ValueError:
                    rejected += 1
                    continue
                if _valid(r):
                    r["node"] = str(r.get("node")).lower()
                    r["_i"] = len(good)
                    good.append(r)
                else:
                    rejected += 1
    t_start = min(r["t"] for r in good)
    # topology epochs
    topo = {}
    names_seen = set(r["node"] for r in good if r["kind"] != "topology")
    for r in good:
        if r["kind"] == "topology":
            topo.setdefault(r["t"], set()).update((min(a, b), max(a, b)) for a, b, *_l in r["edges"])
    epochs, prev = [], None
    for t in sorted(topo):
        if topo[t] != prev:
            epochs.append((None if not epochs else t, topo[t]))
            prev = topo[t]
    nodes = sorted(names_seen | set(x for _s, es in epochs for e in es for x in e))
    starts = [s for s, _e in epochs[1:]]
    exp_rows = []
    adjs = []
    for i, (_s, es) in enumerate(epochs):
        adj = dict((n, []) for n in nodes)
        for a, b in es:
            adj[a].append(b)
            adj[b].append(a)
        adjs.append(adj)
        seen = {}
        for n in nodes:
            if n in seen:
                continue
            comp, q = [n], deque([n])
            seen[n] = 1
            while q:
                x = q.popleft()
                for y in adj[x]:
                    if y not in seen:
                        seen[y] = 1
                        comp.append(y)
                        q.append(y)
            comp.sort()
            for j, m in enumerate(comp):
                exp_rows.append((i, m, comp[j - 1] if j else None))
    exp = pd.DataFrame(exp_rows, columns=["epoch", "node", "expected"])

    st = pd.DataFrame([(r["node"], r["t"], r["_i"], "%s/%s" % (r["root"], r["root_seq"]), r["desc"])
                       for r in good if r["kind"] == "state"], columns=["node", "t", "i", "value", "desc"])
    st = st.sort_values(["node", "t", "i"])
    extra = []
    for b in starts:
        before = st[st["t"] <= b].groupby("node").tail(1).copy()
        before["t"] = b
        before["i"] = -1
        extra.append(before)
    S = pd.concat([st] + extra).sort_values(["node", "t", "i"], kind="stable").reset_index(drop=True)
    S["epoch"] = np.searchsorted(np.array(starts, dtype=float), S["t"].to_numpy(), side="right")
    S = S.merge(exp, on=["epoch", "node"], how="left")
    S["correct"] = (S["desc"].fillna("") == S["expected"].fillna(""))
    S = S.sort_values(["node", "t", "i"], kind="stable").reset_index(drop=True)
    S["pos"] = S.groupby("node").cumcount()
    g = S.groupby("node")
    final = g.tail(1).set_index("node")
    S["final_value"] = S["node"].map(final["value"])
    S["final_correct"] = S["node"].map(final["correct"])
    last_diff = S[S["value"] != S["final_value"]].groupby("node")["pos"].max()
    last_false = S[~S["correct"]].groupby("node")["pos"].max()
    S["ld"] = S["node"].map(last_diff).fillna(-1)
    S["lf"] = S["node"].map(last_false).fillna(-1)
    tree_since = S[S["pos"] > S["ld"]].groupby("node")["t"].min()
    snake_since = S[(S["pos"] > S["lf"]) & S["final_correct"]].groupby("node")["t"].min()
    all_reported = len(final) == len(nodes)
    tree = (tree_since.max() - t_start) if all_reported and final["value"].nunique() == 1 else None
    snake = (snake_since.max() - t_start) if all_reported and final["correct"].all() else None
    correct_final = int(final["correct"].sum())

    # probes
    pr = pd.DataFrame([(r["t"], r["probe"], r["src"], r["dst"], bool(r["ok"]), r.get("hops"))
                       for r in good if r["kind"] == "probe"], columns=["t", "probe", "src", "dst", "ok", "hops"])
    pings = pr[pr["probe"] == "ping"]
    pr["epoch"] = np.searchsorted(np.array(starts, dtype=float), pr["t"].to_numpy(), side="right")
    use = pr[pr["ok"] & pr["hops"].notna()]
    dist = {}
    for (e, s), grp in use.groupby(["epoch", "src"]):
        d, q = {s: 0}, deque([s])
        adj = adjs[e]
        while q:
            x = q.popleft()
            for y in adj.get(x, ()):
                if y not in d:
                    d[y] = d[x] + 1
                    q.append(y)
        for dst in grp["dst"].unique():
            dist[(e, s, dst)] = d.get(dst)
    sp = np.array([dist.get(k) or np.nan for k in zip(use["epoch"], use["src"], use["dst"])], dtype=float)
    stretch = (use["hops"].to_numpy(dtype=float) / sp)
    stretch = stretch[~np.isnan(stretch)]

    # counters (cumulative since node start; a decrease starts a new generation)
    rows = []
    occ_max = 0.0
    for r in good:
        if r["kind"] != "counters":
            continue
        for m in ("rx", "tx", "drops", "evictions"):
            for k, v in (r.get(m) or {}).items():
                rows.append((r["node"], r["t"], r["_i"], m, k, v))
        for m in ("verify_done", "verify_skipped", "verify_cached"):
            if r.get(m) is not None:
                rows.append((r["node"], r["t"], r["_i"], m, "", r[m]))
        for k, (used, cap) in (r.get("occupancy") or {}).items():
            if cap:
                occ_max = max(occ_max, used / float(cap))
    C = pd.DataFrame(rows, columns=["node", "t", "i", "metric", "key", "value"]).sort_values(["node", "t", "i"])
    C["ridx"] = C.groupby("node")["i"].rank(method="dense")
    grp = C.groupby(["node", "metric", "key"])
    C["prev"] = grp["value"].shift()
    C["prev_idx"] = grp["ridx"].shift()
    C["down"] = (C["value"] < C["prev"]) & (C["prev_idx"] == C["ridx"] - 1)
    resets = C[C["down"]][["node", "i"]].drop_duplicates()
    resets["r"] = 1
    C = C.merge(resets, on=["node", "i"], how="left")
    C["r"] = C["r"].fillna(0)
    first = C.drop_duplicates(["node", "i"]).sort_values(["node", "t", "i"])[["node", "i", "r"]].copy()
    first["gen"] = first.groupby("node")["r"].cumsum()
    C = C.merge(first[["node", "i", "gen"]], on=["node", "i"]).sort_values(["node", "t", "i"])
    C["prev2"] = C.groupby(["node", "gen", "metric", "key"])["value"].shift()
    C["inc"] = np.where(C["prev2"].isna(), C["value"], C["value"] - C["prev2"])
    evictions = int(C[C["metric"] == "evictions"]["inc"].sum())

    out = {
        "nodes": len(nodes), "records": len(good), "rejected_records": rejected,
        "tree_converged_s": None if tree is None else float(tree),
        "snake_converged_s": None if snake is None else float(snake),
        "snake_correct_ratio_final": correct_final / float(len(nodes)),
        "ping_delivery_ratio": float(pings["ok"].mean()) if len(pings) else None,
        "stretch_mean": float(stretch.mean()) if len(stretch) else None,
        "stretch_p95": float(np.percentile(stretch, 95)) if len(stretch) else None,
        "table_occupancy_max": occ_max,
        "evictions": evictions,
    }
    return out, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1000000)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--keep", metavar="DIR", help="keep input and output here")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--days", type=int, default=1, help="analyze N daily copies of the input (N x --records)")
    ap.add_argument("--no-baseline", action="store_true", help="time analyze only (no pandas baseline)")
    a = ap.parse_args()
    if a.days > 1:
        a.no_baseline = True    # the baseline holds every record in memory: one day only
    work = a.keep or tempfile.mkdtemp(prefix="snakemesh-bench-")
    inp = os.path.join(work, "input")
    out = os.path.join(work, "out")
    try:
        if os.path.isdir(inp):
            shutil.rmtree(inp)
        os.makedirs(inp)
        gen = make_input(inp, a.records, a.nodes)
        print("input: %(lines)d lines, %(nodes)d nodes, %(duration_s).0f s of telemetry, "
              "%(bytes)d bytes (generated in %(generate_s).1f s)" % gen, file=sys.stderr)
        if a.days > 1:
            t1 = time.time()
            gen["days"] = spread_days(inp, a.days)
            gen["lines"] *= a.days
            gen["bytes"] *= a.days
            print("spread over %d daily folders: %d lines, %d bytes (%.1f s)"
                  % (a.days, gen["lines"], gen["bytes"], time.time() - t1), file=sys.stderr)
        cmd = [os.path.join(os.path.dirname(sys.executable), "snakemesh"), "analyze", inp, "--out", out, "-q"]
        if not os.path.exists(cmd[0]):
            cmd = [sys.executable, "-m", "host_tools.cli"] + cmd[1:]
        load = os.getloadavg()
        t0 = time.time()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rss = TreeRss(proc.pid)
        o, e = proc.communicate()
        spark_wall = time.time() - t0
        rss.stop()
        if proc.returncode != 0:
            print(o + e, file=sys.stderr)
            return 1
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        mem = {"peak_rss_driver_python_mb": round(rss.peak_root / 1e6), "peak_rss_jvm_mb": round(rss.peak_one / 1e6)}
        if a.no_baseline:
            result = {"input": gen, "records": s.get("records"), "spark_wall_s": round(spark_wall, 1),
                      "spark_inside_s": s.get("wall_time_s"), "spark_stages_s": s.get("timings_s"),
                      "jvm_cpu_s": s.get("jvm_cpu_s"), "load_before": [round(x, 2) for x in load],
                      "load_after": [round(x, 2) for x in os.getloadavg()], **mem}
            print(json.dumps(result, indent=2))
            return 0
        files = sorted(os.path.join(inp, x) for x in os.listdir(inp))
        base, base_wall = baseline(files)
        rows = []
        ok = True
        for k in HEADLINE:
            sv, bv = s.get(k), base.get(k)
            same = (sv == bv) or (sv is not None and bv is not None and abs(sv - bv) <= 1e-9 * max(1, abs(sv)))
            ok = ok and same
            rows.append((k, sv, bv, same))
        result = {"input": gen, "spark_wall_s": round(spark_wall, 1),
                  "spark_inside_s": s.get("wall_time_s"), "spark_stages_s": s.get("timings_s"),
                  "jvm_cpu_s": s.get("jvm_cpu_s"), "pandas_wall_s": round(base_wall, 1), "figures_match": ok,
                  "load_before": [round(x, 2) for x in load], "load_after": [round(x, 2) for x in os.getloadavg()],
                  **mem,
                  "spark": dict((k, s.get(k)) for k in HEADLINE), "pandas": base}
        if a.json:
            print(json.dumps(result, indent=2))
        else:
            print("%-28s %22s %22s  %s" % ("figure", "spark", "pandas", "match"))
            for k, sv, bv, same in rows:
                print("%-28s %22s %22s  %s" % (k, sv, bv, "yes" if same else "NO"))
            print("analyze (local[2], CLI end to end incl. JVM start): %.1f s; inside analyze: %s s; stages %s"
                  % (spark_wall, s.get("wall_time_s"), s.get("timings_s")))
            print("pandas baseline (single process, same rules): %.1f s" % base_wall)
            print("analyze peak RSS: Python driver %(peak_rss_driver_python_mb)d MB, JVM %(peak_rss_jvm_mb)d MB; "
                  "load average before %(load_before)s, after %(load_after)s"
                  % dict(mem, load_before=result["load_before"], load_after=result["load_after"]))
        return 0 if ok else 2
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
