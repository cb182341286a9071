"""The test tiers: `make check` runs what is not marked slow, `make test`
everything. Every module tests/conftest.py names as slow exists (a rename
would otherwise move it into the fast tier unseen), and the fast tier holds
the firmware suites under both interpreters."""
import os
import subprocess
import sys

from tests import conftest

HOST = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HOST))


def test_every_slow_module_exists():
    missing = sorted(m for m in conftest.SLOW_MODULES if not os.path.isfile(os.path.join(HOST, m)))
    assert not missing, "tests/conftest.py SLOW_MODULES names no module: %s" % missing


def _collect(*args):
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
                       + list(args), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [l for l in r.stdout.splitlines() if "::" in l]


def test_fast_tier_leaves_out_the_slow_tests():
    some = ["tests/firmware/test_crypto.py", "tests/host/test_node_mesh.py",
            "tests/host/test_bench_figures.py"]
    fast = _collect("-m", "not slow", *some)
    slow = _collect("-m", "slow", *some)
    assert not set(fast) & set(slow)
    # a whole slow module, and a single slow test of a fast module
    assert slow and all(t.startswith("tests/host/test_node_mesh.py::") or
                        t == "tests/host/test_bench_figures.py::test_relay_figure_runs" for t in slow), slow
    assert "tests/host/test_bench_figures.py::test_relay_figure_runs" in slow
    assert any(t.startswith("tests/host/test_bench_figures.py::") for t in fast)
    # the firmware suites run in the fast tier, under CPython and micropython
    assert any(t.startswith("tests/firmware/") and t.endswith("[micropython]") for t in fast)
    assert any(t.startswith("tests/firmware/") and not t.endswith("[micropython]") for t in fast)
