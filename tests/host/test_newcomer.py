"""Rough edges a new user hit (issue 30), each driven as the user did."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*argv, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "host_tools.cli"] + list(argv), capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)


@pytest.fixture
def telemetry(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"v": 1, "kind": "state", "node": "%s", "t": 1.0, "seq": 1, "root": "%s", "root_seq": 1}\n'
                 % ("ab" * 32, "ab" * 32))
    return str(p)


def test_no_java_says_java_17_not_found_and_what_to_install(tmp_path, telemetry):
    pytest.importorskip("pyspark")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable))   # python, but no java
    env.pop("JAVA_HOME", None)
    r = cli("analyze", telemetry, "--out", str(tmp_path / "out"), "-q", env=env)
    assert r.returncode != 0
    assert r.stderr.startswith("snakemesh: error: Java 17 not found (no `java` on the PATH): Spark needs it; "
                               "install a Java 17 runtime (Debian/Ubuntu: sudo apt-get install "
                               "openjdk-17-jre-headless"), r.stderr
    assert "JAVA_GATEWAY_EXITED" not in r.stderr and "Traceback" not in r.stderr


def test_a_java_that_does_not_start_is_named_not_java_gateway_exited(tmp_path, telemetry):
    pytest.importorskip("pyspark")
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'Error: could not create the Java Virtual Machine.' >&2\nexit 1\n")
    java.chmod(0o755)
    env = dict(os.environ, JAVA_HOME=str(home))
    r = cli("analyze", telemetry, "--out", str(tmp_path / "out"), "-q", env=env)
    assert r.returncode != 0
    assert r.stderr.startswith("snakemesh: error: Spark could not start Java (`java -version` must say 17): "
                               "install a Java 17 runtime"), r.stderr
    assert "Traceback" not in r.stderr


def _descendants(pid):
    """{pid: comm} of every live process below `pid` (Linux /proc)."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            kids.setdefault(int(fields[1]), []).append((int(d), comm))
    out, todo = {}, [pid]
    while todo:
        for child, comm in kids.get(todo.pop(), []):
            out[child] = comm
            todo.append(child)
    return out


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # a demo's node processes and JVM
def test_ctrl_c_in_the_demos_spark_phase_leaves_no_java_and_no_partial_folder(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) while Spark runs:
    the demo stops, its JVM is gone, and no `.analysis.partial-PID` is
    left; one that an earlier killed run left is removed."""
    pytest.importorskip("pyspark")
    import signal
    import time
    out = tmp_path / "demo-out"
    out.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = out / (".analysis.partial-%d" % dead.pid)
    stale.mkdir()
    topo = tmp_path / "two.txt"
    topo.write_text("a b\n")
    with open(tmp_path / "stderr", "w") as err:
        p = subprocess.Popen([sys.executable, "-m", "host_tools.cli", "demo", "--out", str(out), "--topology",
                              str(topo), "--duration", "1", "--pings", "1", "--traces", "0"],
                             stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, start_new_session=True)
    try:
        for line in p.stdout:
            if "2/4 Spark pipeline" in line:
                break
        else:
            pytest.fail("the demo never reached its Spark phase: %s" % open(tmp_path / "stderr").read())
        java, end = [], time.monotonic() + 120
        while not java and time.monotonic() < end:
            java = [pid for pid, comm in _descendants(p.pid).items() if comm == "java"]
            time.sleep(0.2)
        assert java, "no Spark JVM started"
        time.sleep(2)                                  # Spark is at work
        os.killpg(p.pid, signal.SIGINT)                # Ctrl-C at the terminal
        p.communicate(timeout=60)
        end = time.monotonic() + 5
        while any(_alive(j) for j in java) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(j) for j in java), "the Spark JVM outlived the interrupted demo"
        assert not [e for e in os.listdir(str(out)) if ".partial-" in e], os.listdir(str(out))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@pytest.mark.slow  # Spark (a JVM)
def test_analyze_names_and_percentages(tmp_path):
    """`analyze --names` takes names as `ping --names` does (here NAME KEY
    lines), and its summary prints ratios as the report does: percentages."""
    pytest.importorskip("pyspark")
    import json
    sim = tmp_path / "sim"
    r = cli("sim", "--generate", "grid:2x2", "--duration", "20", "--seed", "1", "--out", str(sim), timeout=300)
    assert r.returncode == 0, r.stderr
    truth = json.load(open(str(sim / "truth.json")))
    keys = sorted(truth["nodes"].values())
    names = tmp_path / "names.txt"
    names.write_text("".join("field-%d %s\n" % (i, k) for i, k in enumerate(keys)))
    out = tmp_path / "an"
    r = cli("analyze", str(sim / "telemetry.jsonl"), "--out", str(out), "--names", str(names), "-q", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "snake correct at end 100.0%" in r.stdout, r.stdout
    assert "ping delivery 100.0% (" in r.stdout or "ping delivery n/a (0 pings)" in r.stdout, r.stdout
    assert "table occupancy max " in r.stdout and "%, evictions" in r.stdout, r.stdout
    nodes = json.load(open(str(out / "nodes.json")))
    nodes = nodes["nodes"] if isinstance(nodes, dict) else nodes
    assert sorted(n["name"] for n in nodes) == ["field-%d" % i for i in range(len(keys))]
    # a names source that holds none is one line
    bad = tmp_path / "empty.txt"
    bad.write_text("# nothing\n")
    r = cli("analyze", str(sim / "telemetry.jsonl"), "--out", str(tmp_path / "an2"), "--names", str(bad), "-q")
    assert r.returncode != 0 and r.stderr.startswith("snakemesh: error: no node names in"), r.stderr
