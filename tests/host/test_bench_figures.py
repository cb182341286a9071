"""`make bench` runs every figure: each bench/figures/f<N>_*.py is in
bench/run.py's FIGURES and imports (a figure that cannot import fails the
whole figure at once, so this is checked without running the bench), and a
cheap entry point of each size option works. Figure 4 (relay throughput)
runs once, scaled down, in the slow tier: it needs a node process.
"""
import glob
import importlib
import json
import os
import re

import pytest

import run as bench_run   # bench/run.py (bench/ is on sys.path: tests/conftest.py)
from figures import common

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGS = os.path.join(ROOT, "bench", "figures")


def _figure_files():
    out = {}
    for p in glob.glob(os.path.join(FIGS, "f*_*.py")):
        m = re.match(r"f(\d+)_.*\.py$", os.path.basename(p))
        if m:
            out[int(m.group(1))] = os.path.basename(p)[:-3]
    return out


def test_every_figure_file_is_run():
    files = _figure_files()
    assert files, "no figure modules found in %s" % FIGS
    assert dict(bench_run.FIGURES) == files


@pytest.mark.parametrize("num,modname", bench_run.FIGURES)
def test_figure_module_imports(num, modname):
    mod = importlib.import_module("figures." + modname)
    assert isinstance(mod.TITLE, str) and mod.TITLE
    assert callable(mod.run)


def test_sizes():
    assert common.Context().size(1, 2, 3) == 2
    assert common.Context(quick=True).size(1, 2, 3) == 1
    assert common.Context(full=True).size(1, 2, 3) == 3
    with pytest.raises(ValueError):
        common.Context(quick=True, full=True)
    with pytest.raises(SystemExit):
        bench_run.main(["--quick", "--full", "--only", "1"])


def test_bad_figure_number_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        bench_run.main(["--only", "99"])
    assert "no figure 99" in str(e.value)


@pytest.mark.slow
def test_relay_figure_runs(tmp_path):
    """Figure 4 measures (it failed at import when the memory figure's
    helpers moved): one quick repetition, its rows filled in."""
    out = tmp_path / "results.json"
    bench_run.main(["--only", "4", "--quick", "--reps", "1", "--quiet", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert doc["complete"] is True
    (fig,) = doc["figures"]
    assert fig["status"] == "ok", fig.get("reason")
    values = dict((r["metric"], r["value"]) for r in fig["rows"])
    assert values["relay node frames/s (loopback, unix port)"] > 0, values


def test_results_written_after_every_figure(tmp_path, monkeypatch):
    """A run stopped part-way keeps the figures it measured."""
    out = tmp_path / "results.json"
    seen = []

    def fake_run_figure(num, modname, ctx):
        if out.exists():
            seen.append([f["figure"] for f in json.loads(out.read_text())["figures"]])
        if num == 3:
            raise KeyboardInterrupt
        return {"figure": num, "module": modname, "status": "ok", "rows": [], "seconds": 0.0}
    monkeypatch.setattr(bench_run, "run_figure", fake_run_figure)
    monkeypatch.setattr(bench_run, "host_info", lambda: {})
    with pytest.raises(KeyboardInterrupt):
        bench_run.main(["--quiet", "--out", str(out)])
    assert seen == [[1], [1, 2]]
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and [f["figure"] for f in doc["figures"]] == [1, 2]
