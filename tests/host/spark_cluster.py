"""A real Spark standalone cluster on this machine, from the installed PySpark:
one Master and one Worker JVM (`spark-class org.apache.spark.deploy...`),
bound to 127.0.0.1 on free ports.

    with StandaloneCluster(tmp_dir) as c:
        subprocess.run(["snakemesh", "analyze", ..., "--master", c.url])

Each daemon runs in its own process group (the Worker's executors are its
children), and leaving the block stops both groups, SIGTERM then SIGKILL,
also when the block raises or the cluster never came up: no JVM outlives it.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

from host_tools.procmesh.nodeproc import free_port


def spark_home():
    import pyspark
    return os.path.dirname(os.path.abspath(pyspark.__file__))


class ClusterError(RuntimeError):
    pass


class StandaloneCluster(object):
    def __init__(self, work_dir, cores=2, memory="1g", timeout=120.0):
        self.work_dir = os.path.abspath(work_dir)
        self.cores = cores
        self.memory = memory
        self.timeout = timeout
        self.procs = []
        self.port = free_port()
        self.ui_port = free_port()
        self.url = "spark://127.0.0.1:%d" % self.port
        self.env = dict(os.environ)
        self.env.update({
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_HOSTNAME": "localhost",
            "SPARK_DAEMON_MEMORY": "512m",
            "SPARK_LOG_DIR": os.path.join(self.work_dir, "logs"),
            "PYSPARK_PYTHON": sys.executable,
        })

    def _start(self, name, cls, *args):
        os.makedirs(os.path.join(self.work_dir, "logs"), exist_ok=True)
        log = open(os.path.join(self.work_dir, "logs", name + ".log"), "w")
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), cls] + list(args)
        p = subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        log.close()
        self.procs.append((name, p))
        return p

    def state(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/json/" % self.ui_port, timeout=5) as r:
            return json.loads(r.read().decode())

    def start(self):
        self._start("master", "org.apache.spark.deploy.master.Master",
                    "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port))
        self._start("worker", "org.apache.spark.deploy.worker.Worker", self.url,
                    "--host", "127.0.0.1", "--port", str(free_port()), "--webui-port", str(free_port()),
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", os.path.join(self.work_dir, "work"))
        deadline = time.time() + self.timeout
        last = None
        while time.time() < deadline:
            for name, p in self.procs:
                if p.poll() is not None:
                    raise ClusterError("spark %s exited with %d (log: %s)"
                                       % (name, p.returncode, os.path.join(self.work_dir, "logs", name + ".log")))
            try:
                st = self.state()
                alive = [w for w in st.get("workers", []) if w.get("state") == "ALIVE"]
                if st.get("status") == "ALIVE" and alive:
                    return self
                last = st.get("status")
            except (OSError, ValueError) as e:
                last = e
            time.sleep(0.5)
        raise ClusterError("standalone cluster not up within %g s (%s)" % (self.timeout, last))

    def pids(self):
        """Every live process in the daemons' process groups."""
        out = []
        groups = set(p.pid for _n, p in self.procs)
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) in groups:   # state, ppid, pgrp
                out.append(int(d))
        return out

    def stop(self):
        for _name, p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 20
        while time.time() < deadline and self.pids():
            time.sleep(0.2)
        for _name, p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _name, p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.time() + 10
        while time.time() < deadline and self.pids():
            time.sleep(0.2)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()
        return False
