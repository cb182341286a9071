"""`snakemesh analyze` on a real Spark standalone cluster (a Master and a
Worker JVM started from the installed PySpark, bound to 127.0.0.1): the
summary equals the one from local mode on the same simulator output, the
application really ran on the cluster, and no JVM outlives the test, also
when the test fails half-way. spark-submit with the package as --py-files
(docs/guides/PIPELINE.md, "Running on a cluster") gives the same summary too."""
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spark_cluster import StandaloneCluster, spark_home  # noqa: E402

pytest.importorskip("pyspark")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPOLOGY = os.path.join(ROOT, "host_tools", "topologies", "sim.txt")
VOLATILE = ("master", "wall_time_s", "timings_s", "jvm_cpu_s", "spark_jobs", "out")


def snakemesh(*args, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "host_tools.cli"] + list(args), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def same(a, b, path="summary"):
    """Equal, floats within 1e-12 relative (the cluster may sum in another order)."""
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, path
        assert abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b)), (path, a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (path, sorted(set(a) ^ set(b)))
        for k in a:
            same(a[k], b[k], path + "." + k)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (path, i))
    else:
        assert a == b, (path, a, b)


def load(out):
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return s, dict((k, v) for k, v in s.items() if k not in VOLATILE)


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    (d / "scenario.txt").write_text("2 ping-set 10 interval=2 count=10 timeout=3\n20 partition a b e f\n30 heal\n")
    res = snakemesh("sim", "--topology", TOPOLOGY, "--duration", "50", "--seed", "3",
                    "--scenario", str(d / "scenario.txt"), "--out", str(d / "sim"), "-q", timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    res = snakemesh("analyze", str(d / "sim"), "--out", str(d / "local"), "-q")
    assert res.returncode == 0, res.stderr[-2000:]
    return d


def test_standalone_cluster_gives_the_local_summary(sim_run):
    d = sim_run
    local_s, local = load(str(d / "local"))
    assert local_s["master"] == "local[2]" and local_s["nodes"] == 26 and len(local_s["epochs"]) == 3
    cluster = StandaloneCluster(str(d / "spark"))
    with cluster as c:
        # the executors run JVM code only (no Python UDFs): a Python that does
        # not exist for them must not matter
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON="/nonexistent/python3")
        res = snakemesh("analyze", str(d / "sim"), "--out", str(d / "remote"), "--master", c.url, "-q", env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        remote_s, remote = load(str(d / "remote"))
        assert remote_s["master"] == c.url
        same(local, remote)
        # the application ran on the cluster's worker, and finished
        apps = c.state().get("completedapps", [])
        assert [a["name"] for a in apps] == ["snakemesh-analyze"], apps
        # spark-submit, the package shipped as --py-files (a wheel is a zip of it)
        pkg = d / "snakemesh-pkg.zip"
        # (host_tools and the firmware's snake package, as pyproject.toml packs them)
        with zipfile.ZipFile(str(pkg), "w") as z:
            for top, under in (("host_tools", ROOT), ("snake", os.path.join(ROOT, "firmware"))):
                for base, _dirs, files in os.walk(os.path.join(under, top)):
                    for f in files:
                        if f.endswith(".py") or f.endswith(".txt"):
                            p = os.path.join(base, f)
                            z.write(p, os.path.relpath(p, under))
        main = os.path.join(ROOT, "host_tools", "pipeline", "__main__.py")
        submit = os.path.join(spark_home(), "bin", "spark-submit")
        env = dict(c.env)
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        res = subprocess.run([submit, "--master", c.url, "--py-files", str(pkg), main, "analyze",
                              str(d / "sim"), "--out", str(d / "submitted"), "-q"],
                             cwd=str(d), env=env, capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        sub_s, sub = load(str(d / "submitted"))
        assert sub_s["master"] == c.url
        same(local, sub)
        assert cluster.pids()
    assert cluster.pids() == []


def test_cluster_is_stopped_when_the_test_fails(tmp_path):
    cluster = StandaloneCluster(str(tmp_path / "spark"))
    with pytest.raises(RuntimeError, match="half-way"):
        with cluster:
            assert len(cluster.pids()) >= 2
            raise RuntimeError("failed half-way")
    assert cluster.pids() == []
    shutil.rmtree(str(tmp_path / "spark"), ignore_errors=True)
