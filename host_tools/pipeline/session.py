"""SparkSession for the pipeline: local[2] by default, any master by URL,
quiet logging, small shuffles.

No Python UDFs are used anywhere in the pipeline, so executors run only JVM
code: a cluster needs no Python packages on its workers for `analyze`.
"""
import os
import sys
import tempfile
import warnings

DEFAULT_MASTER = "local[2]"
# driver (= the whole local JVM's) heap in local mode, unless --conf says otherwise
LOCAL_DRIVER_MEMORY = "2g"

_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.parquet.name = org.apache.parquet
logger.parquet.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
"""


def _log4j_file():
    path = os.path.join(tempfile.gettempdir(), "snakemesh-spark-log4j2-%d.properties" % os.getuid())
    try:
        with open(path) as f:
            if f.read() == _LOG4J:
                return path
    except OSError:
        pass
    tmp = path + ".%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(_LOG4J)
    os.replace(tmp, path)
    return path


def spark_log_path():
    return os.path.join(tempfile.gettempdir(), "snakemesh-spark-%d.log" % os.getuid())


def _cds_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "snakemesh")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class ClassArchive(object):
    """Faster Spark start from the second run on: a class-data-sharing
    archive of the classes a Spark run loads (parsed and verified once, then
    mapped). The first run on a machine dumps it at its JVM's exit
    (-XX:ArchiveClassesAtExit, to a name of its own, holding a lock file
    with the JVM's pid); a run after that JVM is gone renames the dump into
    place, and every later run maps it (-XX:SharedArchiveFile). Runs while
    a dump is under way go without. A monitor capture's analysis: 16 instead
    of 24-28 s on the shared 2-core machine. The archive is keyed by the
    PySpark version, its install (the classpath) and the java binary; a JVM
    that cannot use it (another classpath or JVM) ignores it, and maps the
    JDK's classes only. SNAKEMESH_SPARK_CDS=0 turns this off."""

    def __init__(self):
        self.option = ""
        self.lock = None
        if os.environ.get("SNAKEMESH_SPARK_CDS", "1") == "0":
            return
        try:
            self._setup()
        except (OSError, KeyError, ImportError, ValueError):
            self.option, self.lock = "", None

    def _setup(self):
        import hashlib
        import shutil
        import pyspark
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") \
            else shutil.which("java")
        if not java:
            return
        java = os.path.realpath(java)
        st = os.stat(java)
        # the JVM maps the archive's Spark classes only for the classpath it
        # was dumped with: another install (another virtualenv) gets its own
        jars = os.path.realpath(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
        key = hashlib.sha1(("%s|%s|%d|%d|%s" % (pyspark.__version__, java, st.st_size, int(st.st_mtime), jars))
                           .encode()).hexdigest()[:12]
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "snakemesh")
        os.makedirs(d, exist_ok=True)
        final = os.path.join(d, "spark-%s-%s.jsa" % (pyspark.__version__, key))
        lock, tmp = final + ".lock", final + ".tmp"
        if not os.path.exists(final) and os.path.exists(lock):
            with open(lock) as f:
                pid = int(f.read().strip() or 0)
            if pid and _alive(pid):
                return                      # a dump is under way
            if os.path.exists(tmp) and os.path.getsize(tmp) > 0:
                os.replace(tmp, final)
            os.unlink(lock)
        if os.path.exists(final):
            self.option = "-XX:SharedArchiveFile=" + final
            return
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        self.lock = lock
        self.option = "-XX:ArchiveClassesAtExit=" + tmp

    def started(self, jvm_pid):
        """The JVM that dumps is running: the lock names it."""
        if self.lock and jvm_pid:
            with open(self.lock, "w") as f:
                f.write(str(jvm_pid))


def quiet_imports():
    """PySpark warns about pandas >= 3 on import; the pipeline does not use
    pandas inside Spark, so that warning is noise."""
    warnings.filterwarnings("ignore", message=".*pandas.*", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="pyspark")
    # PySpark logs every failed query as a JSON line on stderr; the CLI
    # reports the failure as one line of its own
    import logging
    logging.getLogger("DataFrameQueryContextLogger").setLevel(logging.CRITICAL)
    # py4j logs a lost JVM connection with the module-level logging.exception(),
    # which configures the root logger on first use and prints a traceback on
    # stderr; the CLI says what happened in one line (EngineError) instead
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


JAVA_HINT = ("install a Java 17 runtime (Debian/Ubuntu: sudo apt-get install openjdk-17-jre-headless; "
             "macOS: brew install openjdk@17) or point JAVA_HOME at one")


def check_java():
    """Spark starts a `java` (JAVA_HOME's, else the PATH's): say so in one
    line when there is none, before PySpark fails with JAVA_GATEWAY_EXITED
    (a java that is there but does not start: spark_errors)."""
    import shutil
    from host_tools.errors import EngineError
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.isfile(java):
        where = ("JAVA_HOME=%s has no bin/java" % home) if home else "no `java` on the PATH"
        raise EngineError("Java 17 not found (%s): Spark needs it; %s" % (where, JAVA_HINT))


def get_session(master=None, conf=None, app_name="snakemesh-analyze", quick_jit=False, small_input=None):
    """Return a SparkSession (reusing an active one). `master` None means
    local[2], unless running under spark-submit (then its master is kept).
    `conf` is a dict of extra Spark settings. `quick_jit` (local mode only)
    limits the JVM to its quick C1 compiler: start-up and the first jobs take
    about half as long (for small inputs only: on large ones C2's faster
    code wins, 1M records parsed in 26.7 instead of 58.5 s). `small_input` (local mode
    only; implies quick_jit) also uses the serial garbage collector: a
    small heap needs no GC threads beside the two task threads; False (a
    large input) uses the parallel collector instead of the JVM's default G1."""
    if small_input:
        quick_jit = True
    quiet_imports()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if not under_submit:
        check_java()
    b = SparkSession.builder.appName(app_name)
    if master:
        b = b.master(master)
    elif not under_submit:
        b = b.master(DEFAULT_MASTER)
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.ansi.enabled": "false",
        # lower() with plain (not ICU) case mapping: keys are ASCII hex
        "spark.sql.icu.caseMappings.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "static",
        # PySpark records the Python call site of every Column operation
        # for its error context (a stack walk and ~8 py4j round trips per
        # operation, 1-3 ms each); the CLI reports a failure in one line of
        # its own and never shows that context. Off: a 250-node simulator
        # folder's analysis makes 5.6k instead of 11.4k py4j round trips.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:" + _log4j_file(),
    }
    archive = None
    if not under_submit:   # we start the JVM ourselves
        archive = ClassArchive()
        if archive.option:
            settings["spark.driver.extraJavaOptions"] += (" -Xshare:auto -Xlog:cds=off,cds+dynamic=off "
                                                          + archive.option)
    eff_master = master or ("" if under_submit else DEFAULT_MASTER)
    if eff_master.startswith("local"):
        settings["spark.driver.memory"] = LOCAL_DRIVER_MEMORY
        if quick_jit:
            settings["spark.driver.extraJavaOptions"] += " -XX:TieredStopAtLevel=1"
        if small_input:
            settings["spark.driver.extraJavaOptions"] += " -XX:+UseSerialGC"
            if not (conf or {}).get("spark.driver.memory"):
                # The serial collector's pauses are its CPU time: a young
                # generation of 3/8 of the 2 GB heap, committed from the start,
                # collects a 250-node simulator folder (32 MB) in 10 instead of
                # 55 pauses, 1.0 instead of 2.4 CPU-s; a metaspace threshold
                # above what Spark's classes take spares a full collection.
                settings["spark.driver.extraJavaOptions"] += (" -Xms1536m -Xmn768m"
                                                              " -XX:MetaspaceSize=256m")
        elif small_input is not None:
            # a large input: the throughput (parallel) collector, not G1,
            # whose concurrent marking and barriers compete with the two task
            # threads for the cores (1M records: parse_write 41 instead of
            # 49 JVM CPU-seconds, end to end 50.6 instead of 56.9 s)
            settings["spark.driver.extraJavaOptions"] += " -XX:+UseParallelGC"
    settings.update(conf or {})
    for k, v in settings.items():
        b = b.config(k, v)
    # The JVM prints a start-up banner on stderr (e.g. "Using incubator
    # modules"); send the JVM's stderr to a log file so the CLI stays quiet.
    spark = _with_stderr_to(spark_log_path(), b.getOrCreate)
    if archive is not None:
        archive.started(jvm_pid(spark))
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def driver_memory(master=None, conf=None):
    """The driver memory get_session gives a JVM it starts (None: Spark's
    own default, or a JVM already started by spark-submit)."""
    conf = conf or {}
    if conf.get("spark.driver.memory"):
        return conf["spark.driver.memory"]
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    if (master or DEFAULT_MASTER).startswith("local"):
        return LOCAL_DRIVER_MEMORY
    return None


def _with_stderr_to(path, fn):
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        return fn()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        os.close(saved)
        return fn()
    try:
        os.dup2(fd, 2)
        return fn()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def jvm_pid(spark):
    """The local JVM's pid (local mode and client mode drivers), or None."""
    try:
        return spark.sparkContext._gateway.proc.pid
    except AttributeError:
        return None


def cpu_seconds(pid):
    """User + system CPU seconds a process has used so far (Linux /proc), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, TypeError):
        return None
