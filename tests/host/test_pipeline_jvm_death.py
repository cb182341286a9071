"""`snakemesh analyze` when Spark's JVM runs out of memory or dies: one line
naming what happened and what to do, EngineError's exit code, no traceback,
no output folder (docs/guides/HOST_TOOLS.md "Errors", docs/guides/PIPELINE.md).

The end-to-end test kills the real JVM under the real CLI mid-analysis; the
others feed the classifier the exceptions a dead JVM really raises (a
Py4JJavaError whose text needs the JVM, a refused py4j connection) with a
real exited process standing for the JVM."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import telemetry_synth as ts  # noqa: E402

from host_tools.errors import CliError, EngineError  # noqa: E402
from host_tools.pipeline import analysis  # noqa: E402
from host_tools.topofiles import TOPOLOGY_DIR as TOPO  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _java_child(pid):
    for c in _children(pid):
        try:
            with open("/proc/%d/cmdline" % c, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"java":
            return c
    return None


def test_cli_jvm_killed_mid_analysis(tmp_path):
    pytest.importorskip("pyspark")
    g = ts.load_topology(os.path.join(TOPO, "sim.txt"))
    recs, _ = ts.generate(g, 1, ts.Scenario(duration=40.0))
    run = tmp_path / "run.jsonl"
    ts.write_jsonl(str(run), recs)
    out = tmp_path / "out"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    p = subprocess.Popen([sys.executable, "-m", "host_tools.cli", "analyze", str(run), "--out", str(out)],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, killed = [], []

    def read_stderr():
        for line in p.stderr:
            lines.append(line.rstrip("\n"))
            # the session is up and the analysis under way: kill its JVM
            if "reading 1 file(s)" in line and not killed:
                jvm = _java_child(p.pid)
                if jvm is not None:
                    os.kill(jvm, signal.SIGKILL)
                    killed.append(jvm)

    reader = threading.Thread(target=read_stderr)
    reader.start()
    try:
        stdout = p.stdout.read()
        p.wait(timeout=240)
    finally:
        if p.poll() is None:
            p.kill()
        reader.join(timeout=10)
    assert killed, "no JVM child found after the session started:\n%s" % "\n".join(lines)
    progress = [ln for ln in lines if ln.startswith("[")]
    rest = [ln for ln in lines if not ln.startswith("[")]
    assert progress and rest and len(rest) == 1, "\n".join(lines)
    err = rest[0]
    assert err.startswith("snakemesh: error: Spark's JVM died (killed by signal 9)"), err
    for words in ("--conf spark.driver.memory=4g; now 2g", "fewer files or days", "--master spark://",
                  "Spark log: "):
        assert words in err, err
    assert "Traceback" not in "\n".join(lines) + stdout
    assert p.returncode == EngineError.exit_code == 6
    assert not out.exists()


class _Proc(object):
    """A real process that has exited with `code`, standing for the JVM."""

    def __init__(self, code):
        self.p = subprocess.Popen([sys.executable, "-c", "raise SystemExit(%d)" % code])
        self.p.wait(timeout=30)

    def poll(self):
        return self.p.poll()

    def wait(self, timeout=None):
        return self.p.wait(timeout=timeout)


def _watch(proc=None, memory="2g", size=429 << 20, log_offset=None):
    w = analysis.JvmWatch(size, memory)
    w.proc = proc
    if log_offset is not None:
        w.log_offset = log_offset
    return w


def _refused_java_error():
    """The Py4JJavaError a call to a JVM that then died leaves: its text
    needs the JVM (ConnectionRefusedError), as the 1,000-node run showed."""
    from py4j.protocol import Py4JJavaError

    class Client(object):
        def send_command(self, cmd):
            raise ConnectionRefusedError(111, "Connection refused")

    class JavaObj(object):
        _gateway_client = Client()
        _target_id = "o123"

    e = Py4JJavaError("An error occurred while calling o123.collectToPython.\n", JavaObj())
    with pytest.raises(ConnectionRefusedError):
        str(e)
    return e


def _raise_in(watch, exc):
    with pytest.raises(CliError) as ei:
        with analysis.spark_errors(watch):
            raise exc
    return ei.value


def test_java_error_after_jvm_died_of_oom_is_one_clear_line():
    pytest.importorskip("py4j")
    err = _raise_in(_watch(_Proc(analysis.SPARK_EXIT_OOM)), _refused_java_error())
    assert isinstance(err, EngineError) and err.exit_code == 6
    assert err.message.startswith("Spark ran out of memory (java.lang.OutOfMemoryError) on 450 MB of telemetry: "
                                  "give it more memory (--conf spark.driver.memory=4g; now 2g), "
                                  "analyze fewer files or days at a time, or run on a cluster "
                                  "(--master spark://HOST:7077); Spark log: "), err.message
    assert "\n" not in err.message


def test_oom_in_java_cause_while_jvm_alive():
    pytest.importorskip("py4j")
    from py4j.protocol import Py4JJavaError

    class JavaObj(object):
        class _gateway_client(object):
            @staticmethod
            def send_command(cmd):
                return "ysjava.lang.OutOfMemoryError: Java heap space"
        _target_id = "o7"

    e = Py4JJavaError("An error occurred while calling o7.collectToPython.\n", JavaObj())
    assert "OutOfMemoryError" in str(e)
    err = _raise_in(_watch(None, memory="8g", size=0), e)
    assert isinstance(err, EngineError)
    assert "Spark ran out of memory" in err.message and "spark.driver.memory=16g; now 8g" in err.message
    assert "this input" in err.message


def _closed_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_refused_connection_from_py4j_with_jvm_gone():
    pytest.importorskip("py4j")
    from py4j.clientserver import ClientServer, JavaParameters, PythonParameters

    # a py4j client whose JVM is gone: its port refuses the connection
    gw = ClientServer(java_parameters=JavaParameters(port=_closed_port()),
                      python_parameters=PythonParameters(port=0), python_server_entry_point=None)
    # the JVM exited with Spark's generic code, and its log says nothing of memory
    watch = _watch(_Proc(50), memory=None, log_offset=1 << 60)
    try:
        with pytest.raises(CliError) as ei:
            with analysis.spark_errors(watch):
                gw.jvm.java.lang.System.currentTimeMillis()
    finally:
        gw.shutdown()
    err = ei.value
    assert isinstance(err, EngineError)
    assert err.message.startswith("Spark's JVM died (exit code 50) while analyzing 450 MB of telemetry: "
                                  "give it more memory (--conf spark.driver.memory=8g)"), err.message
    # the same with no process to ask (a JVM started by spark-submit): py4j's refusal is enough
    gw = ClientServer(java_parameters=JavaParameters(port=_closed_port()),
                      python_parameters=PythonParameters(port=0), python_server_entry_point=None)
    try:
        with pytest.raises(EngineError) as ei:
            with analysis.spark_errors(_watch(None, log_offset=1 << 60)):
                gw.jvm.java.lang.System.currentTimeMillis()
    finally:
        gw.shutdown()
    assert ei.value.message.startswith("Spark's JVM stopped answering while analyzing 450 MB"), ei.value.message


def test_other_failures_unchanged():
    # a JVM that is alive and a failure that is not about memory: the generic line
    class Alive(object):
        def poll(self):
            return None

        def wait(self, timeout=None):
            raise subprocess.TimeoutExpired("java", timeout)

    class FakeSparkError(Exception):
        pass
    FakeSparkError.__module__ = "pyspark.errors"
    err = _raise_in(_watch(Alive()), FakeSparkError("[PARSE_SYNTAX_ERROR] something"))
    assert type(err) is CliError and err.message.startswith("Spark failed: [PARSE_SYNTAX_ERROR]")
    # a refused connection that py4j did not raise is not Spark's
    with pytest.raises(ConnectionRefusedError):
        with analysis.spark_errors(_watch(Alive())):
            raise ConnectionRefusedError(111, "Connection refused")
    assert analysis._more_memory("512m") == "2g" and analysis._more_memory("3g") == "6g"
    assert analysis._more_memory("bogus") == "8g"


def test_py4j_lost_connection_log_is_not_a_traceback_on_stderr():
    """py4j reports a lost JVM with the module-level logging.exception(), which
    would configure the root logger and print a traceback on stderr beside the
    CLI's one line (seen once in test_cli_jvm_killed_mid_analysis)."""
    code = ("from host_tools.pipeline import session\n"
            "session.quiet_imports()\n"
            "import logging\n"
            "try:\n"
            "    raise ConnectionRefusedError(111, 'Connection refused')\n"
            "except OSError:\n"
            "    logging.exception('Exception while sending command.')\n"
            "print('done')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "done\n", r.stderr
    assert r.stderr == "", r.stderr


def test_bare_py4j_error_from_a_jvm_that_is_exiting():
    """py4j's bare "An error occurred while calling o47.conf" (no Java
    exception) when the JVM was killed a moment earlier: a death, not
    "Spark failed" (seen once in test_cli_jvm_killed_mid_analysis)."""
    pytest.importorskip("py4j")
    from py4j.protocol import Py4JError

    class Killed(object):
        def __init__(self):
            self.p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
            threading.Timer(0.2, self.p.kill).start()   # dies while the error is being classified

        def poll(self):
            return self.p.poll()

        def wait(self, timeout=None):
            return self.p.wait(timeout=timeout)

    err = _raise_in(_watch(Killed()), Py4JError("An error occurred while calling o47.conf"))
    assert isinstance(err, EngineError), err.message
    assert err.message.startswith("Spark's JVM died (killed by signal 9)"), err.message
    # the JVM alive: an ordinary Spark failure, as before
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        err = _raise_in(_watch(alive), Py4JError("An error occurred while calling o47.conf"))
        assert not isinstance(err, EngineError) and err.message.startswith("Spark failed: "), err.message
    finally:
        alive.kill()
        alive.wait()
