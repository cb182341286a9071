"""`snakemesh analyze`: telemetry JSON lines -> Parquet tables + summary.json.

The plan, in Spark jobs (docs/guides/PIPELINE.md, "How it runs"):

1. read + parse + validate every input line once and write it once, as the
   `telemetry/` Parquet table partitioned by day and kind (rejected lines
   go aside in the same pass);
2. one aggregation over that table's small columns: line counts per file,
   reason and kind, the time range, the node set, the topology records;
3. `probes/`: each probe with its shortest path and stretch (a broadcast
   join with the distances the driver computed on the topology);
4. one job for convergence (the state records shuffled once, by node),
   probe statistics and per-node activity;
5. one job for the counters (shuffled once, by node): totals, per node,
   per time bucket, steady-state control bytes, capacity.

Everything after step 1 reads columnar Parquet, not the JSON text. The
driver only collects small aggregates: counts per input file and reason,
the node list, the topology records, one row per node and topology epoch,
one row per node and counter, per time bucket changes and histogram bins.
"""
import contextlib
import glob
import json
import os
import shutil
import subprocess
import time

from host_tools.errors import CliError, EngineError, InputError, UsageError
from host_tools.pipeline import convergence, inputs, metrics, output, runinfo, topology
from host_tools.pipeline.session import cpu_seconds, driver_memory, get_session, jvm_pid, spark_log_path

SUMMARY_VERSION = 2
PARTITIONED = ("telemetry", "probes")
REJECTED = "_rejected"
DEFAULTS = {
    "bucket": 1.0,            # seconds per time-series bucket
    "max_buckets": 5000,      # the bucket grows if a run would need more
    "flap_threshold": 5,      # parent changes at or above this mark a node as flapping
    "silent_after": 30.0,     # a node silent this long before the end of the data is flagged
    "stretch_bin": 0.1,
    "steady_after": 30.0,     # control traffic is measured from snake convergence + this
}
# Tables whose `capacity` entry reaching its capacity is a warning; refusals
# grow a warning on every table in `capacity`.
CAPACITY_FULL_TABLES = ("routes", "peers", "depth")


class Options(object):
    def __init__(self, **kw):
        for k, v in DEFAULTS.items():
            val = kw.pop(k, None)
            setattr(self, k, v if val is None else val)
        if kw:
            raise TypeError("unknown options: %s" % ", ".join(sorted(kw)))


def _nice_bin(span, bins=40):
    if not span or span <= 0:
        return 1.0
    raw = span / float(bins)
    scale = 1.0
    while scale * 10 < raw:
        scale *= 10
    while scale > raw:
        scale /= 10
    for m in (1, 2, 5, 10):
        if scale * m >= raw:
            return scale * m
    return scale * 10


class JvmWatch(object):
    """What spark_errors needs to tell a dead or starved Spark JVM from any
    other Spark failure: the local JVM process (None on spark-submit), where
    its log stood when it started, the driver memory it was given and the
    input size."""

    def __init__(self, input_bytes=0, driver_memory=None):
        self.proc = None
        self.input_bytes = input_bytes
        self.driver_memory = driver_memory
        try:
            self.log_offset = os.path.getsize(spark_log_path())
        except OSError:
            self.log_offset = 0

    def started(self, spark):
        try:
            self.proc = spark.sparkContext._gateway.proc
        except AttributeError:
            self.proc = None

    def exit_code(self, wait=0.0):
        """The JVM's exit code if it is gone (waiting up to `wait` seconds
        for it to go: py4j sees the socket close a moment before the
        process can be reaped), else None."""
        if self.proc is None:
            return None
        try:
            if wait:
                return self.proc.wait(timeout=wait)
            return self.proc.poll()
        except subprocess.TimeoutExpired:
            return None
        except OSError:
            return None

    def log_says_oom(self):
        """The JVM logged an OutOfMemoryError since it started (the last MB)."""
        try:
            with open(spark_log_path(), "rb") as f:
                f.seek(0, 2)
                end = f.tell()
                f.seek(max(self.log_offset, end - (1 << 20)))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return False
        return any(m in text for m in _OOM_MARKERS)


# what a JVM's text says when it ran out of heap
_OOM_MARKERS = ("java.lang.OutOfMemoryError", "Java heap space", "GC overhead limit exceeded")
# Spark's exit code for a JVM that ran out of memory (SparkExitCode.OOM)
SPARK_EXIT_OOM = 52
# py4j's words when the JVM stopped answering mid-call
_LOST_MARKERS = ("Answer from Java side is empty", "Error while receiving", "Error while sending",
                 "Cannot call methods on a stopped SparkContext", "SparkContext was shut down")


def _error_text(e):
    """str(e) that never raises: a Py4JJavaError asks the JVM for its text,
    and a dead JVM refuses the connection."""
    try:
        return str(e)
    except Exception:
        return " ".join(a for a in getattr(e, "args", ()) if isinstance(a, str))


def _from_py4j(e):
    """The exception was raised inside py4j (a call to the JVM)."""
    tb = e.__traceback__
    while tb is not None:
        if (tb.tb_frame.f_globals.get("__name__") or "").startswith("py4j"):
            return True
        tb = tb.tb_next
    return False


def _chain(e):
    seen = []
    while e is not None and e not in seen and len(seen) < 8:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def _more_memory(current):
    """A driver memory to suggest: twice the current one."""
    cur = (current or "").strip().lower()
    units = {"k": 1.0 / (1 << 20), "m": 1.0 / 1024, "g": 1.0, "t": 1024.0}
    try:
        if cur[-1:] in units:
            gb = float(cur[:-1]) * units[cur[-1]]
        elif cur.endswith(("kb", "mb", "gb", "tb")):
            gb = float(cur[:-2]) * units[cur[-2]]
        else:
            gb = float(cur) / (1 << 30)
    except (ValueError, IndexError):
        return "8g"
    return "%dg" % max(2, int(round(gb * 2)))


def jvm_failure(e, watch):
    """One-line EngineError for `e` if Spark's JVM ran out of memory or
    died, else None."""
    if watch is None:
        return None
    chain = _chain(e)
    texts = [_error_text(x) for x in chain]
    oom = any(m in t for t in texts for m in _OOM_MARKERS)
    code = watch.exit_code()
    lost = code is not None or any(
        (isinstance(x, (ConnectionError, EOFError)) and _from_py4j(x))
        or type(x).__name__ == "Py4JNetworkError"
        or any(m in t for m in _LOST_MARKERS)
        for x, t in zip(chain, texts))
    if not (oom or lost) and any(type(x).__name__ == "Py4JError" for x in chain):
        # py4j's bare "An error occurred while calling oN.x" (no Java
        # exception): the answer was lost, usually because the JVM is going
        # away; it is a death if the process exits in the next moments
        code = watch.exit_code(wait=2.0)
        lost = code is not None
    if not (oom or lost):
        return None
    if code is None:
        code = watch.exit_code(wait=2.0)
    if not oom and (code == SPARK_EXIT_OOM or watch.log_says_oom()):
        oom = True
    size = "%.0f MB of telemetry" % (watch.input_bytes / 1e6) if watch.input_bytes else "this input"
    if oom:
        what = "Spark ran out of memory (java.lang.OutOfMemoryError) on %s" % size
    elif code is not None and code < 0:
        what = "Spark's JVM died (killed by signal %d) while analyzing %s" % (-code, size)
    elif code is not None:
        what = "Spark's JVM died (exit code %d) while analyzing %s" % (code, size)
    else:
        what = "Spark's JVM stopped answering while analyzing %s" % size
    if watch.driver_memory:
        more = "give it more memory (--conf spark.driver.memory=%s; now %s)" % (
            _more_memory(watch.driver_memory), watch.driver_memory)
    else:
        more = "give it more memory (--conf spark.driver.memory=8g)"
    return EngineError("%s: %s, analyze fewer files or days at a time, or run on a cluster "
                       "(--master spark://HOST:7077); Spark log: %s" % (what, more, spark_log_path()))


@contextlib.contextmanager
def spark_errors(watch=None):
    """Turn Spark/JVM failures into one-line CliErrors: EngineError when
    the JVM ran out of memory or died (`watch`: a JvmWatch), CliError for
    any other Spark failure."""
    try:
        yield
    except CliError:
        raise
    except Exception as e:  # pyspark / py4j errors have no common base worth importing
        engine = jvm_failure(e, watch)
        if engine is not None:
            raise engine from e
        mod = type(e).__module__ or ""
        if not (mod.startswith("pyspark") or mod.startswith("py4j")):
            raise
        text = _error_text(e)
        msg = text.strip().splitlines()
        first = ""
        for line in msg:
            line = line.strip()
            if line and not line.startswith("JVM stacktrace"):
                first = line
                break
        if "FileNotFoundException" in text or "PATH_NOT_FOUND" in text:
            raise InputError("input vanished while reading: %s" % first[:300])
        if "JAVA_GATEWAY_EXITED" in text:
            from host_tools.pipeline.session import JAVA_HINT
            raise EngineError("Spark could not start Java (`java -version` must say 17): %s; Spark log: %s"
                              % (JAVA_HINT, spark_log_path()))
        raise CliError("Spark failed: %s (%s; Spark log: %s)" % (first[:300], type(e).__name__, spark_log_path()))


SMALL_INPUT = 64 << 20
# A small input (by bytes) of at least this size gets generated code from
# its first job on: the parse is cheaper compiled, and the later jobs reuse
# the classes it compiled (a 250-node, 180 s simulator folder, 32 MB:
# 1.5-2 JVM CPU-seconds less in all; its first 30 s, 8.9 MB, gain nothing).
# Smaller inputs parse interpreted (CODEGEN_RECORDS for the jobs after).
CODEGEN_INPUT = 16 << 20
# Up to this many (topology, source, destination) distances, the probes
# join them by broadcast; beyond it (a big mesh with many topologies) by a
# shuffle, which needs no room for the whole table on the driver.
BROADCAST_DIST_ROWS = 1500000
# Below this input size a local JVM runs only its quick C1 compiler (start-up
# and the first jobs cost about half). Above it the optimising C2 compiler
# pays for itself: parsing 3M records took 100 s with C1 only, 10M 158 s
# with C2.
QUICK_JIT_INPUT = SMALL_INPUT


def input_size(files, remote):
    size = sum(os.path.getsize(f) for f in files)
    return max(size, 1 << 40) if remote else size


def tune(spark, size, conf):
    """Runtime SQL settings sized to the input and the master. Small inputs:
    2 shuffle partitions, no adaptive execution (it runs every shuffle
    stage as a job of its own), and below CODEGEN_INPUT no code generation
    (compiling generated code costs more than it saves there). Large inputs in local
    mode: as many shuffle partitions as cores x 2, whole-stage codegen. On a
    cluster: one shuffle partition per 32 MB of input (8..400) with adaptive
    execution. Explicit --conf settings win."""
    conf = conf or {}
    small = size < SMALL_INPUT
    interpreted = size < CODEGEN_INPUT
    master = spark.sparkContext.master or ""
    local = master.startswith("local")
    cores = max(1, spark.sparkContext.defaultParallelism)
    if small:
        parts = 2
    elif local:
        parts = max(2, 2 * cores)
    else:
        parts = max(8, min(400, size // (32 << 20)))
    settings = {
        "spark.sql.shuffle.partitions": str(parts),
        "spark.sql.codegen.wholeStage": "false" if interpreted else "true",
        # the smallest inputs: expressions interpreted, nothing compiled at
        # all (180 monitor records: 11 instead of 15 JVM CPU-seconds)
        "spark.sql.codegen.factoryMode": "NO_CODEGEN" if interpreted else "FALLBACK",
        "spark.sql.adaptive.enabled": "false" if (small or local) else "true",
        # bad telemetry values become nulls and counted rejects, never a failed job
        "spark.sql.ansi.enabled": "false",
        # a task writes each (day, kind) partition through its own open file
        # instead of sorting its rows by partition first
        "spark.sql.maxConcurrentOutputFileWriters": "64",
        # input splits: enough tasks to keep every core busy on a few big files
        "spark.sql.files.maxPartitionBytes": str((64 << 20) if local else (128 << 20)),
    }
    for k, v in settings.items():
        if k not in conf:
            spark.conf.set(k, v)


# An input under CODEGEN_INPUT with at least this many valid records (short
# lines) gets generated code for the jobs after the first: the counters alone explode
# into ~55 rows per record, which interpreted expressions handle several
# times slower (a 250-node, 180 s simulator folder, 57k records: counters
# 3.7 instead of 12.3 JVM CPU-seconds), while compiling costs a few seconds
# that a monitor capture of a few hundred records does not repay.
CODEGEN_RECORDS = 10000


def tune_for_records(spark, size, records, conf):
    """After the first job, when the record count is known: generated code
    for an input under CODEGEN_INPUT with many records (CODEGEN_RECORDS). Explicit --conf
    settings win."""
    conf = conf or {}
    if size >= CODEGEN_INPUT or records < CODEGEN_RECORDS:
        return
    for k, v in (("spark.sql.codegen.wholeStage", "true"), ("spark.sql.codegen.factoryMode", "FALLBACK")):
        if k not in conf:
            spark.conf.set(k, v)


def analyze(input_paths, out_dir, master=None, topology_file=None, conf=None, spark=None,
            progress=None, names=None, **options):
    """Run the pipeline; returns the summary dict (also written to
    OUT/summary.json). `names` ({hex key: name}, `analyze --names`) name
    the nodes over what the inputs say. Raises CliError subclasses for
    expected failures."""
    opts = Options(**options)
    if opts.bucket <= 0:
        raise UsageError("--bucket must be > 0")
    say = progress or (lambda msg: None)
    t0 = time.time()
    res = inputs.resolve(list(input_paths))
    for path, why in res.skipped[:20]:
        say("skipped %s: %s" % (path, why))
    if len(res.skipped) > 20:
        say("skipped %d more file(s) that are not telemetry" % (len(res.skipped) - 20))
    info = runinfo.load(res.side)
    info.forced_names = dict((k.lower(), v) for k, v in (names or {}).items())
    for note in info.notes:
        say(note)
    if topology_file:
        topology.read_topology_file(topology_file)  # fail early on a bad file
    out = output.AtomicDir(out_dir)
    size = input_size(res.files, res.remote)
    watch = JvmWatch(input_size(res.files, ()), driver_memory(master, conf))
    own_session = spark is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    try:
        with spark_errors(watch):
            t_session = None
            if spark is None:
                say("starting Spark (%s)" % (master or "local[2]"))
                t1 = time.time()
                spark = get_session(master, conf, quick_jit=size < QUICK_JIT_INPUT, small_input=size < SMALL_INPUT)
                t_session = round(time.time() - t1, 3)
            watch.started(spark)
            say("reading %d file(s)%s" % (len(res.files), (" + %d URI(s)" % len(res.remote)) if res.remote else ""))
            tune(spark, size, conf)
            summary = _run(spark, res, info, out, topology_file, opts, say,
                           on_count=lambda n: tune_for_records(spark, size, n, conf))
        if t_session is not None:
            summary["timings_s"] = dict(summary["timings_s"], session=t_session)
        summary["wall_time_s"] = round(time.time() - t0, 3)
        summary["master"] = spark.sparkContext.master
        output.write_json(out.path("summary.json"), summary)
        summary["out"] = out.commit()
        return summary
    except BaseException as e:
        out.abort()
        if isinstance(e, KeyboardInterrupt) and own_session:
            stop_jvm(watch)
        raise


def stop_jvm(watch, wait=5.0):
    """Stop the local JVM this process started (Ctrl-C: PySpark starts it
    ignoring SIGINT, so it would outlive us for as long as its shutdown
    takes): SIGTERM, then SIGKILL after `wait` seconds."""
    proc = watch.proc
    if proc is None:        # interrupted while the session was starting
        try:
            from pyspark import SparkContext
            proc = SparkContext._gateway.proc
        except AttributeError:
            proc = None
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.terminate()
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=wait)
    except (OSError, subprocess.TimeoutExpired):
        pass


def collect_sections(sections):
    """Run several small aggregations as ONE Spark job: each result row
    becomes (section, JSON text), the sections are unioned and collected
    together. Shared shuffles are computed once (Spark reuses identical
    exchanges within a query). Returns {name: [dict, ...]}."""
    parts = []
    for name, df in sections.items():
        parts.append(df.selectExpr("'%s' AS s" % name, "to_json(struct(*)) AS j"))
    u = parts[0]
    for p in parts[1:]:
        u = u.union(p)
    out = dict((name, []) for name in sections)
    for r in u.collect():
        out[r["s"]].append(json.loads(r["j"]))
    return out


def local_df(spark, columns, schema):
    """A small DataFrame from driver data ({column: [values]}) through Arrow:
    the rows reach the JVM as Arrow batches, so no executor ever starts a
    Python worker (spark.createDataFrame on a list of rows would, to
    unpickle them: on a cluster the executors need no Python at all)."""
    import warnings
    import pandas as pd
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    spark.conf.set("spark.sql.execution.arrow.pyspark.fallback.enabled", "false")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pyspark vs pandas 3 notice
        return spark.createDataFrame(pd.DataFrame(columns), schema)


def _drop_rejected_partitions(path):
    for d in glob.glob(os.path.join(path, "*", "kind=" + REJECTED)):
        shutil.rmtree(d, ignore_errors=True)
    for d in glob.glob(os.path.join(path, "day=*")):
        if os.path.isdir(d) and not os.listdir(d):
            os.rmdir(d)


def _run(spark, res, info, out, topology_file, opts, say, on_count=None):
    from pyspark import StorageLevel
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from host_tools.pipeline import ingest

    paths = res.files + res.remote
    timings = {}
    cpu = {}
    jobs = {}
    pid = jvm_pid(spark) if spark.sparkContext.master.startswith("local") else None
    tracker = spark.sparkContext.statusTracker()
    seen_jobs = set(tracker.getJobIdsForGroup())
    t_stage = [time.time(), cpu_seconds(pid) if pid else None]

    def lap(name):
        """Wall time per stage, the Spark jobs it ran, and the local JVM's
        CPU time (comparable between runs on a loaded machine, unlike wall
        time)."""
        now = time.time()
        timings[name] = round(now - t_stage[0], 3)
        c = cpu_seconds(pid) if pid else None
        if c is not None and t_stage[1] is not None:
            cpu[name] = round(c - t_stage[1], 2)
        t_stage[:] = [now, c]
        ids = set(tracker.getJobIdsForGroup())
        jobs[name] = len(ids - seen_jobs)
        seen_jobs.update(ids)

    # -- 1. one pass over the input: parse, validate, write --------------------------
    obs = Observation("ignored")
    parsed = ingest.parse(spark, paths, res.console, observation=obs)
    tele = out.path("telemetry")
    ok = F.col("reason").isNull()
    cols = ["`%s`" % c for c in parsed.columns if c not in ("kind",)]
    written = parsed.selectExpr(*cols, "%s AS day" % metrics.day_sql(),
                                "CASE WHEN reason IS NULL THEN kind ELSE '%s' END AS kind" % REJECTED)
    written.write.mode("overwrite").partitionBy("day", "kind").parquet(tele)
    ignored = dict((k, int(v or 0)) for k, v in (obs.get or {}).items() if v)
    lap("parse_write")

    # -- 2. counts per file / reason / kind, time range, nodes, topology ----------------
    # Read back with the schema it was written with (the partition columns
    # as Spark infers them from the folder names: day=yyyy-MM-dd a date):
    # no job to read the files' footers for it.
    from pyspark.sql import types as PT
    tele_schema = PT.StructType([f for f in written.schema.fields if f.name not in ("day", "kind")] + [
        PT.StructField("day", PT.DateType(), True), PT.StructField("kind", PT.StringType(), True)])
    T = spark.read.schema(tele_schema).parquet(tele)
    okv = ok & (F.col("kind") != REJECTED)
    stats = (T.groupBy("source", "reason", "kind")
             .agg(F.count("*").alias("n"), F.min("t").alias("t0"), F.max("t").alias("t1"),
                  F.collect_set(F.when(okv & (F.col("kind") != "topology"), F.col("node"))).alias("nodes"),
                  F.collect_set(F.when(okv & (F.col("kind") == "probe"),
                                       F.array("src", "dst"))).alias("pairs"),
                  F.collect_list(F.when(okv & (F.col("kind") == "topology"),
                                        F.struct("t", "edges", "names"))).alias("topo"))
             .collect())
    per_file = {}
    by_reason = {}
    by_kind = {}
    t_start = t_end = None
    for r in stats:
        src = inputs.source_path(r["source"])
        f = per_file.setdefault(src, {"lines": 0, "valid": 0, "reason": None})
        f["lines"] += r["n"]
        if r["reason"] is None:
            f["valid"] += r["n"]
            by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["n"]
            t_start = r["t0"] if t_start is None else min(t_start, r["t0"])
            t_end = r["t1"] if t_end is None else max(t_end, r["t1"])
        else:
            by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + r["n"]
            f["reason"] = f["reason"] or r["reason"]
    for src in sorted(per_file):
        f = per_file[src]
        if f["lines"] and not f["valid"]:
            raise InputError("%s: no valid telemetry records in %d line(s) (e.g. %s): truncated or not telemetry"
                             % (src, f["lines"], f["reason"]))
    records = sum(by_kind.values())
    rejected = sum(by_reason.values())
    if not records:
        raise InputError("no telemetry records in the input (files empty%s)"
                         % (" or console output without telemetry" if ignored else ""))
    if rejected:
        (T.where(F.col("kind") == REJECTED)
         .select(ingest.local_path("source").alias("source"), "reason", F.col("raw").alias("line"))
         .coalesce(1).write.mode("overwrite").json(out.path("rejects")))
        _drop_rejected_partitions(tele)
        T = spark.read.schema(tele_schema).parquet(tele)
    else:
        os.makedirs(out.path("rejects"))
    valid = T.where(F.col("kind") != REJECTED)
    if on_count is not None:
        on_count(records)
    lap("stats")
    say("%d records, %d rejected, %.1f s of telemetry" % (records, rejected, t_end - t_start))

    # -- 3. node set, topology, probes table ------------------------------------------
    record_nodes, probe_pairs, topo_rows = set(), {}, []
    for r in stats:
        if r["reason"] is None:
            record_nodes.update(r["nodes"])
            for s, d in r["pairs"]:
                probe_pairs.setdefault(s, set()).add(d)
            topo_rows.extend(r["topo"])
    epochs, names = topology.epochs_from_records(
        [(r["t"], r["edges"], r["names"]) for r in topo_rows])
    for k, v in info.names.items():
        names.setdefault(k, v)
    names.update(getattr(info, "forced_names", None) or {})
    topo_nodes = set()
    if topology_file:
        ep, topo_nodes = topology.epoch_from_file(topology_file, names)
        if not (topo_nodes & record_nodes):
            raise InputError("%s: none of its %d node names matches a node in the telemetry%s"
                             % (topology_file, len(topo_nodes),
                                "" if names else " (no `topology` record names to map them)"))
        epochs = [ep]
        topo_source = "file"
    elif epochs:
        topo_source = "telemetry"
    else:
        side = None
        if info.topology:
            try:
                side, side_nodes = topology.epoch_from_file(info.topology, names)
                if not (side_nodes & record_nodes):
                    side = None
            except InputError as e:
                say("%s: not used (%s)" % (info.topology, e.message))
                side = None
        if side is not None:
            epochs = [side]
            topo_nodes = side_nodes
            topo_source = "file beside the telemetry"
        else:
            pairs = (valid.where(F.col("kind") == "peers")
                     .select("node", F.explode("peer_list").alias("p"))
                     .select("node", F.lower(F.col("p.key")).alias("peer"), F.col("p.link").alias("link"))
                     .filter(F.col("peer").isNotNull()).distinct().collect())
            if pairs:
                epochs = [topology.epoch_from_peer_links([(r["node"], r["peer"], r["link"]) for r in pairs])]
                topo_source = "peers"
            else:
                epochs = [topology.Epoch(0, None, set())]
                topo_source = "none"
    for ep in epochs:
        for a, b in ep.edges:
            topo_nodes.add(a)
            topo_nodes.add(b)
    nodes = sorted(record_nodes | topo_nodes)
    comps = []
    expected_rows = []
    for ep in epochs:
        if topo_source == "none":
            comp = dict((n, nodes[0]) for n in nodes)
        else:
            comp = topology.components(nodes, ep.edges)
        comps.append(comp)
        exp = topology.expected_desc(comp)
        for n in nodes:
            expected_rows.append((ep.index, n, comp[n], exp[n]))
    boundaries = [ep.start for ep in epochs[1:]]
    cols = ("epoch", "node", "comp", "expected_desc")
    expected_df = local_df(spark, dict((c, [r[i] for r in expected_rows]) for i, c in enumerate(cols)),
                           "epoch int, node string, comp string, expected_desc string")
    dist_df = None
    topo_of = []     # epoch index -> index of the first epoch with the same edges
    if topo_source != "none":
        # Distances depend on the edge set only: one BFS table per distinct
        # topology (a fleet's days repeat the same few), not per epoch,
        # so the table does not grow with the number of days.
        dist_rows = {"topo": [], "src": [], "dst": [], "shortest": []}
        first_with = {}
        for ep in epochs:
            key = frozenset(ep.edges)
            if key in first_with:
                topo_of.append(first_with[key])
                continue
            first_with[key] = ep.index
            topo_of.append(ep.index)
            adj = topology.adjacency(nodes, ep.edges)
            # only the (source, destination) pairs some probe has: the
            # join needs no other row, and a mesh whose links change often
            # (a refused link is a new epoch) has dozens of topologies
            for s in sorted(probe_pairs):
                if s not in adj:
                    continue
                dsts = probe_pairs[s]
                for d, k in topology.bfs_lengths(adj, s).items():
                    if k > 0 and d in dsts:
                        dist_rows["topo"].append(ep.index)
                        dist_rows["src"].append(s)
                        dist_rows["dst"].append(d)
                        dist_rows["shortest"].append(k)
        if dist_rows["src"]:
            dist_df = local_df(spark, dist_rows, "topo int, src string, dst string, shortest int")
    say("%d nodes, topology from %s (%d epoch%s)"
        % (len(nodes), topo_source, len(epochs), "" if len(epochs) == 1 else "s"))
    epoch = convergence.epoch_col(boundaries)
    pr = metrics.probes(valid.where(F.col("kind") == "probe"), epoch, dist_df, topo_of,
                        broadcast=dist_df is not None and len(dist_rows["src"]) <= BROADCAST_DIST_ROWS)
    pr.write.mode("overwrite").partitionBy("day").parquet(out.path("probes"))
    # with the schema: a run without probes writes no Parquet file to infer it from
    pr = spark.read.schema(pr.schema).parquet(out.path("probes"))
    lap("topology_probes")

    # -- 4. convergence, probe figures, activity: one job -------------------------------
    say("computing convergence and probe figures")
    bucket = float(opts.bucket)
    nb = int((t_end - t_start) // bucket) + 1
    if nb > opts.max_buckets:
        bucket = (t_end - t_start) / float(opts.max_buckets - 1)
        nb = int((t_end - t_start) // bucket) + 1
    S = convergence.state_stream(valid.where(F.col("kind") == "state"), boundaries, expected_df)
    # the flagged rows are few: cached, so the window runs once for the three sections
    f = convergence.flags(S).persist(StorageLevel.MEMORY_AND_DISK)
    got = collect_sections({
        "node_epochs": convergence.node_epochs(f),
        "finals": convergence.finals(f),
        "deltas": convergence.bucket_deltas(f, t_start, bucket),
        "probe_stats": metrics.probe_stats(pr),
        "stretch_hist": metrics.stretch_histogram(pr, opts.stretch_bin),
        "probe_series": metrics.probe_series(pr, t_start, bucket),
        "activity": metrics.node_activity(valid.where(F.col("kind") != "topology")),
        "ports": metrics.node_ports(valid.where(F.col("kind") != "topology")),
    })
    f.unpersist()
    by_scope = convergence.scopes(got["node_epochs"], got["finals"], epochs, t_start)
    run, per_epoch, per_node, down = convergence.rollup(by_scope, nodes, epochs, comps, t_start, t_end,
                                                        has_topology=topo_source != "none")
    n_nodes = len(nodes)
    conv_rows = []
    # already converged when recording began: in every bucket with state
    # records, every node that had reported agreed (resp. was correct); a
    # capture of a settled mesh (`monitor`) has no convergence to time
    from_start = {"tree": None, "snake": None}
    for r in convergence.series_from_deltas(got["deltas"], nb):
        if r["reported"]:
            for k, v in (("tree", r["max_agree"]), ("snake", r["correct"])):
                from_start[k] = (from_start[k] is not False) and v == r["reported"]
        conv_rows.append({
            "bucket": r["bucket"], "t_s": (r["bucket"] + 1) * bucket, "t": t_start + (r["bucket"] + 1) * bucket,
            "reported": r["reported"], "tree_agree_ratio": r["max_agree"] / float(n_nodes),
            "tree_agreed": r["max_agree"] == n_nodes, "snake_correct": r["correct"],
            "snake_correct_ratio": r["correct"] / float(n_nodes),
            "snake_all_correct": r["correct"] == n_nodes,
        })
    ps = got["probe_stats"][0] if got["probe_stats"] else {}
    act = dict((r["node"], r) for r in got["activity"])
    for r in sorted(got["ports"], key=lambda r: r["t"]):
        if r["node"] in act:
            act[r["node"]]["port"] = r["port"]
    lap("convergence_probes")

    # -- 5. counters: one job ---------------------------------------------------------------
    say("computing counter figures")
    window = _steady_window(run, by_scope, nodes, down, t_start, t_end, opts)
    rtt_bin = _nice_bin(ps.get("rtt_ms_max"))
    cl = metrics.counters_long(valid.where(F.col("kind") == "counters"), t_start, bucket,
                               None if window["start_s"] is None else t_start + window["start_s"])
    rtt_hist = (pr.filter((F.col("probe") == "ping") & F.col("ok") & F.col("rtt_ms").isNotNull())
                .groupBy((F.floor(F.col("rtt_ms") / rtt_bin) * rtt_bin).alias("bin_start")).count())
    peers_t = [(n, a["peers_t"]) for n, a in act.items() if a.get("peers_t") is not None]
    sections = {"counters": metrics.counters_agg(cl), "rtt_hist": rtt_hist}
    if peers_t:
        last = local_df(spark, {"n": [n for n, _t in peers_t], "peers_t": [t for _n, t in peers_t]},
                        "n string, peers_t double")
        sections["links"] = metrics.last_links(valid.where(F.col("kind") == "peers"), last)
    got2 = collect_sections(sections)
    got2["per_node"] = [r for r in got2["counters"] if r.get("node") is not None]
    got2["series"] = [r for r in got2["counters"] if r.get("node") is None]
    for r in got2.get("links", ()):
        if r["node"] in act:
            act[r["node"]].setdefault("links", {})[r.get("link") or "unknown"] = r["count"]
    lap("counters")

    return _assemble(spark, out, opts, locals_for_assembly(locals()))


def locals_for_assembly(d):
    keep = ("records", "rejected", "by_reason", "by_kind", "per_file", "res", "ignored", "t_start", "t_end",
            "bucket", "topo_source", "epochs", "per_epoch", "run", "per_node", "down", "nodes", "names",
            "comps", "conv_rows", "from_start", "ps", "act", "got", "got2", "window", "rtt_bin", "by_scope", "info",
            "timings", "cpu", "jobs")
    return dict((k, d[k]) for k in keep)


def _steady_window(run, by_scope, nodes, down, t_start, t_end, opts):
    """The steady-state window for control traffic: from snake convergence +
    steady_after to the end of the data. If every node's descending key was
    right from its first report (the capture started on a converged mesh),
    from the start of the data. If the snake never converged, the second
    half of the data."""
    whole = by_scope.get(-1, {})
    alive = [n for n in nodes if n not in down[-1]]
    if run["snake_converged_at"] is not None:
        always = all(whole.get(n) and whole[n]["snake_since"] is not None
                     and whole[n]["snake_since"] <= whole[n]["first_t"] for n in alive)
        if always:
            start, basis = t_start, "converged_from_start"
        else:
            start, basis = run["snake_converged_at"] + opts.steady_after, "snake_converged+%gs" % opts.steady_after
    else:
        start, basis = t_start + (t_end - t_start) / 2.0, "not_converged:second_half"
    if start >= t_end:
        return {"start_s": None, "end_s": t_end - t_start, "basis": basis + ":no_data_after"}
    return {"start_s": start - t_start, "end_s": t_end - t_start, "basis": basis}


def _assemble(spark, out, opts, v):
    """Driver-side assembly of the small tables and summary.json."""
    nodes, names, run, per_node, down = v["nodes"], v["names"], v["run"], v["per_node"], v["down"]
    t_start, t_end, bucket = v["t_start"], v["t_end"], v["bucket"]
    epochs, comps, ps, act = v["epochs"], v["comps"], v["ps"], v["act"]
    got, got2 = v["got"], v["got2"]
    res, info = v["res"], v["info"]

    # counters: per node -> totals
    cn = {}
    totals = {}
    restarts = {}
    for r in got2["per_node"]:
        restarts[r["node"]] = max(restarts.get(r["node"], 0), r.get("restarts") or 0)
        cn.setdefault(r["node"], {}).setdefault(r["metric"], {})[r["key"]] = r
        t = totals.setdefault((r["metric"], r["key"]), {
            "metric": r["metric"], "key": r["key"], "total": None, "max": None, "min": None,
            "capacity": None, "max_ratio": None, "nodes": 0})
        t["nodes"] += 1
        for k, fn in (("total", lambda a, b: a + b), ("max", max), ("min", min), ("capacity", max),
                      ("max_ratio", max)):
            src = r.get(k)
            if src is not None:
                t[k] = src if t[k] is None else fn(t[k], src)
    totals = [totals[k] for k in sorted(totals)]

    def tot(metric, key=None):
        return sum((r["total"] or 0) for r in totals
                   if r["metric"] == metric and (key is None or r["key"] == key))

    drops = dict((r["key"], r["total"] or 0) for r in totals if r["metric"] == "drops")
    evictions = dict((r["key"], r["total"] or 0) for r in totals if r["metric"] == "evictions")
    defence = dict((r["key"], r["total"] or 0) for r in totals if r["metric"] == "defence")
    occ = {}
    for r in totals:
        if r["metric"] == "occupancy":
            occ[r["key"]] = {"max": r["max"], "capacity": r["capacity"], "max_ratio": r["max_ratio"]}
    ratios = [x["max_ratio"] for x in occ.values() if x["max_ratio"] is not None]
    mem = [r["min"] for r in totals if r["metric"] == "mem_free" and r["min"] is not None]

    # control traffic in the steady-state window
    window = v["window"]
    steady = {}
    for r in got2["per_node"]:
        if r["metric"] == "tx_bytes" and r.get("t_a") is not None and r.get("t_b") is not None:
            steady.setdefault(r["node"], []).append({"key": r["key"], "bytes": r.get("steady") or 0,
                                                     "t_a": r["t_a"], "t_b": r["t_b"]})
    rates = {}
    by_type_rates = {}
    for n, rows in steady.items():
        span = rows[0]["t_b"] - rows[0]["t_a"]
        if span <= 0:
            continue
        ctl = [x for x in rows if x["key"] not in metrics.CONTROL_EXCLUDE]
        rates[n] = sum(x["bytes"] for x in ctl) / span
        for x in ctl:
            by_type_rates.setdefault(x["key"], {})[n] = x["bytes"] / span
    control_mean = (sum(rates.values()) / len(rates)) if rates else None
    busiest = None
    if rates:
        b = max(sorted(rates), key=lambda n: rates[n])
        busiest = {"node": b, "name": names.get(b), "bytes_per_s": rates[b]}
    control_by_type = dict((k, sum(d.get(n, 0.0) for n in rates) / len(rates))
                           for k, d in sorted(by_type_rates.items())) if rates else {}

    # capacity warnings (contract 2): refused grew, or routes/peers/depth reached capacity
    warnings_ = []
    for n in nodes:
        cap = cn.get(n, {}).get("capacity", {})
        ref = cn.get(n, {}).get(metrics.REFUSED, {})
        for table in sorted(set(cap) | set(ref)):
            c = cap.get(table, {})
            refused = (ref.get(table) or {}).get("total") or 0
            used, capacity = c.get("max"), c.get("capacity")
            full = (table in CAPACITY_FULL_TABLES and used is not None and capacity is not None
                    and capacity > 0 and used >= capacity)
            if refused > 0 or full:
                warnings_.append({"node": n, "name": names.get(n), "table": table, "used": used,
                                  "capacity": capacity, "refused": refused})

    # -- per-node tables -------------------------------------------------------------------
    rank = dict((n, i + 1) for i, n in enumerate(nodes))
    by_scope = v["by_scope"]
    last_comp = comps[-1]
    # root agreement at the end: the most common final root among the live
    # nodes of each component of the last epoch
    comp_major = {}
    groups = {}
    for n in nodes:
        r = per_node.get(n)
        if r and n not in down[-1]:
            groups.setdefault(last_comp.get(n, n), []).append(r["final"]["value"])
    for c, vals in groups.items():
        cnt = {}
        for x in vals:
            cnt[x] = cnt.get(x, 0) + 1
        comp_major[c] = max(sorted(cnt), key=lambda x: cnt[x])
    node_table = []
    node_json = []
    anomalies = []
    wmap = {}
    for w in warnings_:
        wmap.setdefault(w["node"], []).append(w["table"])
    for n in nodes:
        r = per_node.get(n)
        a = act.get(n, {})
        fin = r["final"] if r else {}
        epoch_rows = [by_scope[e][n] for e in by_scope if e >= 0 and n in by_scope[e]]
        row = {
            "node": n, "name": names.get(n), "rank": rank[n], "component": last_comp.get(n),
            "records": a.get("records", 0), "state_records": a.get("state_records", 0),
            "first_t": a.get("first_t"), "last_t": a.get("last_t"),
            "root": fin.get("root"), "root_seq": fin.get("root_seq"), "parent": fin.get("parent"),
            "depth": fin.get("depth"), "desc": fin.get("desc"), "expected_desc": fin.get("expected_desc"),
            "profile": fin.get("profile"),
            "correct_final": bool(fin.get("correct")) if r else False,
            "tree_since_s": (r["tree_since"] - t_start) if r and r["tree_since"] is not None else None,
            "snake_since_s": (r["snake_since"] - t_start) if r and r["snake_since"] is not None else None,
            "parent_changes": r["parent_changes"] if r else 0,
            "parent_changes_epoch_max": max([x["parent_changes"] for x in epoch_rows] or [0]),
            "root_changes_epoch_max": max([x["root_changes"] for x in epoch_rows] or [0]),
            "root_changes": r["root_changes"] if r else 0,
            "desc_changes": r["desc_changes"] if r else 0,
            "sanity_fail": a.get("sanity_fail", 0),
            "down_at_end": n in down[-1],
        }
        found = []
        if n in down[-1]:
            found.append(("down_at_end", 0, "no links and no state records in the last topology epoch"))
        elif not a:
            found.append(("no_telemetry", 0, "in the topology but sent no records"))
        elif not r:
            found.append(("no_state", 0, "sent no state records"))
        else:
            if not fin.get("correct"):
                found.append(("snake_not_converged", 0, "final desc %s, expected %s"
                              % (_short(fin.get("desc")), _short(fin.get("expected_desc")))))
            # flapping: many changes within one topology epoch (a topology
            # change legitimately makes nodes re-parent)
            if row["parent_changes_epoch_max"] >= opts.flap_threshold:
                found.append(("flapping_parent", row["parent_changes_epoch_max"],
                              "%d parent changes in one topology epoch" % row["parent_changes_epoch_max"]))
            if row["root_changes_epoch_max"] >= opts.flap_threshold:
                found.append(("flapping_root", row["root_changes_epoch_max"],
                              "%d root changes in one topology epoch" % row["root_changes_epoch_max"]))
        if row["sanity_fail"]:
            found.append(("sanity_fail", row["sanity_fail"], "%d sanity_fail events" % row["sanity_fail"]))
        if a and a.get("last_t") is not None and t_end - a["last_t"] > opts.silent_after:
            found.append(("silent", t_end - a["last_t"], "no record in the last %.1f s" % (t_end - a["last_t"])))
        row["anomalies"] = ",".join(x[0] for x in found)
        node_table.append(row)
        for kind, value, detail in found:
            anomalies.append({"node": n, "name": names.get(n), "anomaly": kind, "value": float(value),
                              "detail": detail})
        node_json.append(_node_json(n, row, fin, a, cn.get(n, {}), rates.get(n), wmap.get(n, []),
                                    comp_major.get(last_comp.get(n, n)), found, t_start, t_end, names,
                                    restarts.get(n, 0)))
    # tree disagreement at the end: nodes not on the majority root
    if run["tree_converged_s"] is None:
        counts = {}
        alive = [n for n in nodes if per_node.get(n) and n not in down[-1]]
        end_comp = comps[-1] if comps else {}
        for n in alive:
            x = (end_comp.get(n, n), per_node[n]["final"]["value"])
            counts[x] = counts.get(x, 0) + 1
        majors = {}
        for (c, x) in sorted(counts):
            if c not in majors or counts[(c, x)] > counts[(c, majors[c])]:
                majors[c] = x
        if counts:
            for n in alive:
                major = majors[end_comp.get(n, n)]
                if per_node[n]["final"]["value"] != major:
                    anomalies.append({"node": n, "name": names.get(n), "anomaly": "tree_not_converged",
                                      "value": 0.0, "detail": "final root %s, most nodes on %s"
                                      % (per_node[n]["final"]["value"][:12], major[:12])})
    anomalies.sort(key=lambda x: (x["anomaly"], x["node"]))
    an_by_node = {}
    for x in anomalies:
        an_by_node.setdefault(x["node"], []).append(x["anomaly"])
    for j in node_json:
        j["anomalies"] = sorted(set(an_by_node.get(j["node"], [])))

    topo_rows_out = []
    for ep in epochs:
        for a, b in sorted(ep.edges):
            topo_rows_out.append({"epoch": ep.index, "start_s": 0.0 if ep.start is None else ep.start - t_start,
                                  "a": a, "b": b, "a_name": names.get(a), "b_name": names.get(b),
                                  "link": ep.links.get((a, b))})

    # histograms and series
    hist = []
    for r in got["stretch_hist"]:
        hist.append({"metric": "stretch", "bin_start": r["bin_start"], "bin_width": float(opts.stretch_bin),
                     "count": r["count"]})
    for r in got2["rtt_hist"]:
        hist.append({"metric": "rtt_ms", "bin_start": r["bin_start"], "bin_width": float(v["rtt_bin"]),
                     "count": r["count"]})
    hist.sort(key=lambda r: (r["metric"], r["bin_start"]))
    ser = []
    for r in got["probe_series"]:
        for k in ("pings", "pings_ok", "rtt_ms_mean"):
            ser.append({"series": k, "key": "", "bucket": r["bucket"], "value": r.get(k)})
    n_nodes = float(len(nodes))
    for r in got2["series"]:
        m = r["metric"]
        if m in ("drops", "evictions"):
            ser.append({"series": m, "key": r["key"], "bucket": r["bucket"], "value": float(r.get("total") or 0)})
        elif m == "tx_bytes":
            ser.append({"series": "bytes_per_node_s", "key": r["key"], "bucket": r["bucket"],
                        "value": float(r.get("total") or 0) / bucket / n_nodes})
        elif m == "occupancy":
            ser.append({"series": "occupancy_max_ratio", "key": r["key"], "bucket": r["bucket"],
                        "value": r.get("max_ratio")})
        elif m == "capacity":
            ser.append({"series": "capacity_max_ratio", "key": r["key"], "bucket": r["bucket"],
                        "value": r.get("max_ratio")})
    for r in ser:
        r["t_s"] = (r["bucket"] + 1) * bucket
    ser.sort(key=lambda r: (r["series"], r["key"], r["bucket"]))

    w = out.path
    output.write_table(w("nodes.parquet"), node_table, [
        ("node", "str"), ("name", "str"), ("rank", "int"), ("component", "str"), ("records", "int"),
        ("state_records", "int"), ("first_t", "float"), ("last_t", "float"), ("root", "str"),
        ("root_seq", "int"), ("parent", "str"), ("depth", "int"), ("desc", "str"),
        ("expected_desc", "str"), ("profile", "str"), ("correct_final", "bool"), ("tree_since_s", "float"),
        ("snake_since_s", "float"), ("parent_changes", "int"), ("parent_changes_epoch_max", "int"),
        ("root_changes", "int"), ("root_changes_epoch_max", "int"),
        ("desc_changes", "int"), ("sanity_fail", "int"), ("down_at_end", "bool"), ("anomalies", "str")])
    output.write_json(w("nodes.json"), {"version": 1, "t_start": t_start, "t_end": t_end, "nodes": node_json})
    output.write_table(w("convergence.parquet"), v["conv_rows"], [
        ("bucket", "int"), ("t_s", "float"), ("t", "float"), ("reported", "int"),
        ("tree_agree_ratio", "float"), ("tree_agreed", "bool"), ("snake_correct", "int"),
        ("snake_correct_ratio", "float"), ("snake_all_correct", "bool")])
    output.write_table(w("epochs.parquet"), v["per_epoch"], [
        ("epoch", "int"), ("start_s", "float"), ("end_s", "float"), ("components", "int"),
        ("links", "int"), ("nodes_down", "int"), ("tree_converged_s", "float"),
        ("snake_converged_s", "float")])
    output.write_table(w("anomalies.parquet"), anomalies, [
        ("node", "str"), ("name", "str"), ("anomaly", "str"), ("value", "float"), ("detail", "str")])
    output.write_table(w("topology.parquet"), topo_rows_out, [
        ("epoch", "int"), ("start_s", "float"), ("a", "str"), ("b", "str"), ("a_name", "str"),
        ("b_name", "str"), ("link", "str")])
    output.write_table(w("histograms.parquet"), hist, [
        ("metric", "str"), ("bin_start", "float"), ("bin_width", "float"), ("count", "int")])
    output.write_table(w("series.parquet"), ser, [
        ("series", "str"), ("key", "str"), ("bucket", "int"), ("t_s", "float"), ("value", "float")])
    output.write_table(w("counter_totals.parquet"), totals, [
        ("metric", "str"), ("key", "str"), ("total", "int"), ("max", "int"), ("min", "int"),
        ("capacity", "int"), ("max_ratio", "float"), ("nodes", "int")])

    an_counts = {}
    for x in anomalies:
        an_counts[x["anomaly"]] = an_counts.get(x["anomaly"], 0) + 1
    pings = ps.get("pings") or 0
    summary = {
        "summary_version": SUMMARY_VERSION,
        "complete": True,
        "nodes": len(nodes),
        "records": v["records"],
        "rejected_records": v["rejected"],
        "rejected_by_reason": v["by_reason"],
        "records_by_kind": v["by_kind"],
        "input_files": len(v["per_file"]),
        "console_files": len(res.console),
        "ignored_console_lines": v["ignored"],
        "skipped_files": [{"path": p, "why": why} for p, why in res.skipped[:100]],
        "t_start": t_start,
        "t_end": t_end,
        "duration_s": t_end - t_start,
        "days": _days(t_start, t_end),
        "bucket_s": bucket,
        "topology_source": v["topo_source"],
        "topology_links": len(epochs[-1].edges),
        "topology_links_configured": _links_in(info.topology),
        "components_at_end": run.get("components_at_end"),
        "profiles": _profile_counts(node_table),
        "epochs": v["per_epoch"],
        "tree_converged_s": run["tree_converged_s"],
        "snake_converged_s": run["snake_converged_s"],
        "snake_correct_final": run["snake_correct_final"],
        "tree_agreed_from_start": bool(v["from_start"]["tree"]),
        "snake_correct_from_start": bool(v["from_start"]["snake"]),
        "snake_correct_ratio_final": run["snake_correct_ratio_final"],
        "nodes_down_at_end": run["nodes_down_at_end"],
        "pings": pings,
        "pings_ok": ps.get("pings_ok") or 0,
        "ping_delivery_ratio": (float(ps["pings_ok"]) / pings) if pings else None,
        "datagrams": ps.get("datagrams") or 0,
        "datagrams_delivered": ps.get("datagrams_delivered") or 0,
        "app_delivery_ratio": (float(ps["datagrams_delivered"]) / ps["datagrams"]) if ps.get("datagrams") else None,
        "ack_latency_ms_p50": ps.get("ack_ms_p50"), "ack_latency_ms_p95": ps.get("ack_ms_p95"),
        "traces": ps.get("traces") or 0,
        "traces_ok": ps.get("traces_ok") or 0,
        "rtt_ms_mean": ps.get("rtt_ms_mean"), "rtt_ms_p50": ps.get("rtt_ms_p50"),
        "rtt_ms_p95": ps.get("rtt_ms_p95"), "rtt_ms_max": ps.get("rtt_ms_max"),
        "stretch_probes": ps.get("stretch_probes") or 0,
        "stretch_unknown": ps.get("stretch_unknown") or 0,
        "stretch_mean": ps.get("stretch_mean"), "stretch_p50": ps.get("stretch_p50"),
        "stretch_p95": ps.get("stretch_p95"), "stretch_max": ps.get("stretch_max"),
        "drops_by_reason": drops,
        "defence_by_kind": defence,
        "drops_total": sum(drops.values()),
        "verify_done": tot("verify_done"),
        "verify_skipped": tot("verify_skipped"),
        "verify_cached": tot("verify_cached"),
        "occupancy_by_table": occ,
        "table_occupancy_max": max(ratios) if ratios else None,
        "evictions_by_table": evictions,
        "evictions": sum(evictions.values()),
        "mem_free_min": min(mem) if mem else None,
        "control_bytes_per_node_s": control_mean,
        "control_bytes_busiest": busiest,
        "control_bytes_by_type": control_by_type,
        "control_bytes_window": dict(window, nodes=len(rates)),
        "capacity_warnings": warnings_,
        "anomalies": len(anomalies),
        "anomalies_by_kind": an_counts,
        "ground_truth": info.truth,
        "tables": list(PARTITIONED) + ["rejects", "nodes.parquet", "nodes.json", "convergence.parquet",
                                       "epochs.parquet", "anomalies.parquet", "topology.parquet",
                                       "histograms.parquet", "series.parquet", "counter_totals.parquet"],
        "timings_s": v["timings"],
        "jvm_cpu_s": v["cpu"] or None,
        "spark_jobs": v["jobs"],
    }
    return summary


def _profile_counts(rows):
    """{board profile: nodes} from the nodes' last state records (nodes
    whose records name none are left out)."""
    out = {}
    for r in rows:
        if r.get("profile"):
            out[r["profile"]] = out.get(r["profile"], 0) + 1
    return dict(sorted(out.items()))


def _links_in(path):
    """Number of links of a topology file (the configured graph beside
    the telemetry), None without one or when it cannot be read."""
    if not path:
        return None
    try:
        _names, edges = topology.read_topology_file(path)
    except InputError:      # reported where the file is used; here only a count
        return None
    return len(edges)


def _day(t):
    import datetime
    try:
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return None


def _days(t0, t1):
    """The UTC days the data spans (as in telemetry/day=...), at most 1000."""
    d0, d1 = _day(t0), _day(t1)
    if d0 is None or d1 is None:
        return []
    import datetime
    a = datetime.date.fromisoformat(d0)
    b = datetime.date.fromisoformat(d1)
    n = (b - a).days
    if n > 1000:
        return [d0, d1]
    return [(a + datetime.timedelta(days=i)).isoformat() for i in range(n + 1)]


def _node_json(n, row, fin, a, counters, control_rate, warn_tables, major, found, t_start, t_end, names,
               restarts):
    """One node of nodes.json (the dashboard's per-node table; schema in
    docs/guides/PIPELINE.md). Absent values are null, never NaN."""
    def g(metric):
        return counters.get(metric, {})

    drops = dict((k, r.get("total") or 0) for k, r in sorted(g("drops").items()))
    defence = dict((k, r.get("total") or 0) for k, r in sorted(g("defence").items()))

    def total(metric):
        rows = g(metric)
        return sum((r.get("total") or 0) for r in rows.values()) if rows else None
    mem = g("mem_free").get("")
    links = {}
    links.update(a.get("links") or {})
    cap = {}
    for table, r in sorted(g("capacity").items()):
        ref = (g(metrics.REFUSED).get(table) or {}).get("total") or 0
        cap[table] = {"used": r.get("last"), "capacity": r.get("last_capacity"), "max_used": r.get("max"),
                      "refused": ref}
    occ = {}
    for table, r in sorted(g("occupancy").items()):
        occ[table] = {"used": r.get("last"), "capacity": r.get("last_capacity"), "max_used": r.get("max")}
    last_t = a.get("last_t")
    value = fin.get("value") if fin else None
    return {
        "node": n,
        "name": names.get(n),
        "port": a.get("port"),
        "profile": fin.get("profile") if fin else None,
        "rank": row["rank"],
        "component": row["component"],
        "records": row["records"],
        "first_seen_s": None if a.get("first_t") is None else a["first_t"] - t_start,
        "last_seen_s": None if last_t is None else last_t - t_start,
        "silent_s": None if last_t is None else t_end - last_t,
        "down_at_end": row["down_at_end"],
        "root": row["root"],
        "root_seq": row["root_seq"],
        "root_ok": (value == major) if (value is not None and major is not None and not row["down_at_end"]) else None,
        "parent": row["parent"],
        "depth": row["depth"],
        "peers": fin.get("peers") if fin else None,
        "links": links,
        "desc": row["desc"],
        "expected_desc": row["expected_desc"],
        "snake_ok": row["correct_final"] if fin else None,
        "parent_changes": row["parent_changes"],
        "drops_total": sum(drops.values()),
        "drops": drops,
        "defence": defence,
        "rx_total": total("rx"),
        "tx_total": total("tx"),
        "tx_bytes_total": total("tx_bytes"),
        "mem_free": mem.get("last") if mem else None,
        "mem_free_min": mem.get("min") if mem else None,
        "restarts": restarts,
        "control_bytes_per_s": control_rate,
        "capacity": cap,
        "capacity_warnings": sorted(warn_tables),
        "occupancy": occ,
        "anomalies": [x[0] for x in found],
    }


def _short(k):
    return "null" if k is None else k[:12]
