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
